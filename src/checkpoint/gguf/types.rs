//! ggml's tensor types: each one's id, name and block (values in bytes),
//! and what MLX's own loader (`mx.load`, 0.32.2) does with it.

/// A ggml tensor type: its id in the file, its name, and how many values a
/// block holds in how many bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType {
    /// The id written in the file.
    pub id: u32,
    /// gguf-py's name (`Q4_K`, `BF16`).
    pub name: &'static str,
    /// Values per block (1 for plain types).
    pub block_values: u64,
    /// Bytes per block.
    pub block_bytes: u64,
}

/// Every type gguf-py 0.19 knows: (id, name, values per block, bytes per
/// block), from ggml's type traits.
const TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 40),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
];

impl GgmlType {
    /// The type with this id, when it is one gguf-py knows.
    #[must_use]
    pub fn from_id(id: u32) -> Option<Self> {
        TYPES
            .iter()
            .find(|t| t.0 == id)
            .map(|&(id, name, block_values, block_bytes)| Self {
                id,
                name,
                block_values,
                block_bytes,
            })
    }

    /// Every known type, by id.
    pub fn all() -> impl Iterator<Item = Self> {
        TYPES.iter().filter_map(|t| Self::from_id(t.0))
    }

    /// Bits per value, scales included (`Q4_K`: 4.5).
    #[must_use]
    pub fn bits_per_value(self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let bits = (self.block_bytes * 8) as f64 / self.block_values as f64;
        bits
    }

    /// What MLX's `mx.load` (0.32.2, measured on a file per type written by
    /// gguf-py) does with a tensor of this type.
    #[must_use]
    pub fn mlx_load(self) -> MlxLoad {
        match self.name {
            "F32" | "F16" | "I8" | "I16" | "I32" => MlxLoad::AsIs,
            "Q4_0" | "Q4_1" => MlxLoad::Affine { bits: 4 },
            "Q8_0" => MlxLoad::Affine { bits: 8 },
            "Q2_K" | "Q4_K" | "Q6_K" | "BF16" => MlxLoad::ExpandF16,
            // Types MLX's bundled gguflib does not know: left out of what
            // `mx.load` returns, without a word.
            _ if self.id > 30 => MlxLoad::Dropped,
            _ => MlxLoad::Refuses,
        }
    }
}

/// What MLX's `mx.load` does with a GGUF tensor, by its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlxLoad {
    /// Loaded with its own dtype (F32, F16, I8, I16, I32).
    AsIs,
    /// Loaded as an MLX affine quantization: `uint32` words with `float16`
    /// scales and biases, groups of 32, this many bits.
    Affine {
        /// Bits per value.
        bits: u8,
    },
    /// Dequantized to `float16` when the file is loaded (BF16 too: its
    /// range is narrowed to F16's).
    ExpandF16,
    /// The whole file fails to load (`[load_gguf] gguf_tensor_to_f16
    /// failed`).
    Refuses,
    /// Left out of what `mx.load` returns, silently.
    Dropped,
}

impl MlxLoad {
    /// In words, for the text report.
    #[must_use]
    pub fn describe(self) -> String {
        match self {
            Self::AsIs => "loaded as is".to_owned(),
            Self::Affine { bits } => format!("loaded as MLX affine {bits}-bit, group 32"),
            Self::ExpandF16 => "expanded to float16 when loaded".to_owned(),
            Self::Refuses => "mx.load refuses the whole file".to_owned(),
            Self::Dropped => "left out by mx.load, silently".to_owned(),
        }
    }

    /// The name in JSON.
    #[must_use]
    pub fn key(self) -> &'static str {
        match self {
            Self::AsIs => "as_is",
            Self::Affine { .. } => "affine",
            Self::ExpandF16 => "expand_f16",
            Self::Refuses => "refuses",
            Self::Dropped => "dropped",
        }
    }
}
