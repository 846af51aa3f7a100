//! The element types the safetensors format defines, with their sizes.

use std::fmt;
use std::str::FromStr;

/// A safetensors element type, named as in the file header.
#[allow(non_camel_case_types, missing_docs)] // the names are the format's own
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    BOOL,
    F4,
    F6_E2M3,
    F6_E3M2,
    U8,
    I8,
    F8_E5M2,
    F8_E4M3,
    F8_E8M0,
    F8_E4M3FNUZ,
    F8_E5M2FNUZ,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    C64,
    F64,
    I64,
    U64,
}

impl Dtype {
    /// Every dtype, smallest first.
    pub const ALL: [Dtype; 22] = [
        Dtype::BOOL,
        Dtype::F4,
        Dtype::F6_E2M3,
        Dtype::F6_E3M2,
        Dtype::U8,
        Dtype::I8,
        Dtype::F8_E5M2,
        Dtype::F8_E4M3,
        Dtype::F8_E8M0,
        Dtype::F8_E4M3FNUZ,
        Dtype::F8_E5M2FNUZ,
        Dtype::I16,
        Dtype::U16,
        Dtype::F16,
        Dtype::BF16,
        Dtype::I32,
        Dtype::U32,
        Dtype::F32,
        Dtype::C64,
        Dtype::F64,
        Dtype::I64,
        Dtype::U64,
    ];

    /// Bits per element (sub-byte kinds pack several elements in a byte).
    #[must_use]
    pub fn bits(self) -> u64 {
        match self {
            Dtype::F4 => 4,
            Dtype::F6_E2M3 | Dtype::F6_E3M2 => 6,
            Dtype::BOOL
            | Dtype::U8
            | Dtype::I8
            | Dtype::F8_E5M2
            | Dtype::F8_E4M3
            | Dtype::F8_E8M0
            | Dtype::F8_E4M3FNUZ
            | Dtype::F8_E5M2FNUZ => 8,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 16,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 32,
            Dtype::C64 | Dtype::F64 | Dtype::I64 | Dtype::U64 => 64,
        }
    }

    /// The name used in headers (`"BF16"`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Dtype::BOOL => "BOOL",
            Dtype::F4 => "F4",
            Dtype::F6_E2M3 => "F6_E2M3",
            Dtype::F6_E3M2 => "F6_E3M2",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::F8_E5M2 => "F8_E5M2",
            Dtype::F8_E4M3 => "F8_E4M3",
            Dtype::F8_E8M0 => "F8_E8M0",
            Dtype::F8_E4M3FNUZ => "F8_E4M3FNUZ",
            Dtype::F8_E5M2FNUZ => "F8_E5M2FNUZ",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::F32 => "F32",
            Dtype::C64 => "C64",
            Dtype::F64 => "F64",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A header named a dtype the format does not define.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownDtype(pub String);

impl FromStr for Dtype {
    type Err = UnknownDtype;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // A `match` on the text (dispatched on length first), not a search:
        // it runs once per tensor of a 90k-tensor checkpoint.
        Ok(match s {
            "BOOL" => Dtype::BOOL,
            "F4" => Dtype::F4,
            "F6_E2M3" => Dtype::F6_E2M3,
            "F6_E3M2" => Dtype::F6_E3M2,
            "U8" => Dtype::U8,
            "I8" => Dtype::I8,
            "F8_E5M2" => Dtype::F8_E5M2,
            "F8_E4M3" => Dtype::F8_E4M3,
            "F8_E8M0" => Dtype::F8_E8M0,
            "F8_E4M3FNUZ" => Dtype::F8_E4M3FNUZ,
            "F8_E5M2FNUZ" => Dtype::F8_E5M2FNUZ,
            "I16" => Dtype::I16,
            "U16" => Dtype::U16,
            "F16" => Dtype::F16,
            "BF16" => Dtype::BF16,
            "I32" => Dtype::I32,
            "U32" => Dtype::U32,
            "F32" => Dtype::F32,
            "C64" => Dtype::C64,
            "F64" => Dtype::F64,
            "I64" => Dtype::I64,
            "U64" => Dtype::U64,
            _ => return Err(UnknownDtype(s.to_owned())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sizes_match_the_format() {
        for dtype in Dtype::ALL {
            assert_eq!(dtype.name().parse::<Dtype>(), Ok(dtype));
        }
        assert_eq!(Dtype::F4.bits(), 4);
        assert_eq!(Dtype::F6_E3M2.bits(), 6);
        assert_eq!(Dtype::F8_E4M3.bits(), 8);
        assert_eq!(Dtype::BF16.bits(), 16);
        assert_eq!(Dtype::U32.bits(), 32);
        assert_eq!(Dtype::F64.bits(), 64);
        assert_eq!("bf16".parse::<Dtype>(), Err(UnknownDtype("bf16".into())));
    }

    #[test]
    fn the_safetensors_crate_agrees_on_every_size() {
        for dtype in Dtype::ALL {
            let theirs: safetensors::Dtype =
                serde_json::from_value(serde_json::json!(dtype.name()))
                    .expect("known to the crate");
            assert_eq!(theirs.bitsize() as u64, dtype.bits(), "{dtype}");
        }
    }
}
