//! Layer numbers from tensor names, and tensors grouped by layer.

use std::collections::BTreeMap;

use super::super::Checkpoint;

/// The layer number of a tensor name: its first all-digit dot-separated
/// segment (`model.layers.12.mlp.up_proj.weight` is layer 12).
#[must_use]
pub fn layer_of(name: &str) -> Option<u64> {
    layer_and_end(name).map(|(layer, _)| layer)
}

/// [`layer_of`] and where its segment ends in `name`.
pub(super) fn layer_and_end(name: &str) -> Option<(u64, usize)> {
    // One pass over the bytes (the summary asks this of every tensor).
    let mut start = 0;
    let mut digits = true;
    for (i, b) in name.bytes().chain([b'.']).enumerate() {
        if b == b'.' {
            if digits && i > start {
                return Some((name.get(start..i)?.parse().ok()?, i));
            }
            start = i + 1;
            digits = true;
        } else if !b.is_ascii_digit() {
            digits = false;
        }
    }
    None
}

/// [`layer_of`] for names that mostly come in runs of one layer: the last
/// name's text up to and including the dot after its layer number is kept,
/// and a name that starts with it is of that layer without a scan (its
/// segments up to there are the same, the number's included).
#[derive(Default)]
pub(super) struct LayerOfRun {
    prefix: String,
    layer: u64,
}

impl LayerOfRun {
    pub(super) fn layer_of(&mut self, name: &str) -> Option<u64> {
        if !self.prefix.is_empty() && name.starts_with(self.prefix.as_str()) {
            return Some(self.layer);
        }
        let (layer, end) = layer_and_end(name)?;
        self.prefix.clear();
        // Only a number followed by a dot: `x.1` must not claim `x.12`.
        if let Some(prefix) = name.get(..=end).filter(|p| p.ends_with('.')) {
            self.prefix.push_str(prefix);
            self.layer = layer;
        }
        Some(layer)
    }
}

impl Checkpoint {
    /// Tensor positions grouped by layer number (`None`: not in a numbered
    /// layer, such as embeddings), for tree views.
    #[must_use]
    pub fn layers(&self) -> BTreeMap<Option<u64>, Vec<usize>> {
        let mut groups: BTreeMap<Option<u64>, Vec<usize>> = BTreeMap::new();
        for (i, t) in self.tensors().iter().enumerate() {
            groups.entry(layer_of(t.name())).or_default().push(i);
        }
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_numbers_come_from_the_first_numeric_segment() {
        assert_eq!(layer_of("model.layers.12.mlp.up_proj.weight"), Some(12));
        assert_eq!(layer_of("model.embed_tokens.weight"), None);
        assert_eq!(layer_of("blocks.3.experts.7.w1"), Some(3));
        assert_eq!(layer_of("x.3a.y"), None);
    }

    #[test]
    fn layers_of_a_run_of_names_are_those_of_each_name() {
        let names = [
            "model.layers.1.a",
            "model.layers.1.b.weight",
            "model.layers.12.a",
            "model.layers.1",
            "model.layers.12",
            "model.layers.1.x",
            "model.layers.1x.y",
            "model.norm.weight",
            "model.layers.1.z",
            "blocks.3.experts.7.w1",
            "blocks.3.",
            "blocks.3",
            "blocks.3.4",
            "99999999999999999999999.x",
            "99999999999999999999999.y",
            "",
            ".",
            "7.",
            "7.a",
        ];
        let mut run = LayerOfRun::default();
        for name in names {
            assert_eq!(run.layer_of(name), layer_of(name), "{name}");
        }
    }
}

#[cfg(test)]
mod runs {
    use super::super::{Encoding, Summary};
    use super::*;
    use std::fmt::Write as _;

    /// One file of `layers` layers, each with an affine-packed projection
    /// (weight, scales, biases), an nvfp4-style packed one with a global
    /// scale, an FP8 weight with its block scale, an FP8 weight without one,
    /// a stray `.scales` stored as FP8 and a plain norm: more than one run
    /// of the summary's threads.
    fn write_mixed(dir: &std::path::Path, layers: usize) -> std::path::PathBuf {
        let mut json = String::from("{");
        let mut at = 0u64;
        let mut entry = |json: &mut String, name: &str, dtype: &str, shape: &[u64], bits: u64| {
            let bytes = shape.iter().product::<u64>() * bits / 8;
            if json.len() > 1 {
                json.push(',');
            }
            let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
            let _ = write!(
                json,
                r#""{name}":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[{at},{}]}}"#,
                dims.join(","),
                at + bytes
            );
            at += bytes;
        };
        for l in 0..layers {
            let p = format!("model.layers.{l}");
            entry(&mut json, &format!("{p}.q.weight"), "U32", &[8, 8], 32);
            entry(&mut json, &format!("{p}.q.scales"), "BF16", &[8, 1], 16);
            entry(&mut json, &format!("{p}.q.biases"), "BF16", &[8, 1], 16);
            entry(&mut json, &format!("{p}.k.weight"), "U32", &[8, 8], 32);
            entry(&mut json, &format!("{p}.k.scales"), "U8", &[8, 4], 8);
            entry(&mut json, &format!("{p}.k.global_scale"), "F32", &[], 32);
            entry(
                &mut json,
                &format!("{p}.o.weight"),
                "F8_E4M3",
                &[256, 128],
                8,
            );
            entry(
                &mut json,
                &format!("{p}.o.weight_scale_inv"),
                "F32",
                &[2, 1],
                32,
            );
            entry(&mut json, &format!("{p}.v.weight"), "F8_E4M3", &[4, 4], 8);
            entry(&mut json, &format!("{p}.odd.weight"), "U32", &[4, 8], 32);
            entry(&mut json, &format!("{p}.odd.scales"), "F8_E4M3", &[4, 4], 8);
            entry(&mut json, &format!("{p}.norm"), "F16", &[8], 16);
        }
        json.push('}');
        let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(json.as_bytes());
        bytes.resize(bytes.len() + usize::try_from(at).expect("small"), 0);
        let file = dir.join("model.safetensors");
        std::fs::write(&file, bytes).expect("write");
        file
    }

    #[test]
    fn the_summary_over_runs_counts_what_each_tensors_encoding_says() {
        let dir = tempfile::tempdir().expect("tempdir");
        // 12 tensors a layer: 24k tensors, three runs of at least 8192.
        let file = write_mixed(dir.path(), 2000);
        let checkpoint = Checkpoint::open(&file).expect("open");
        assert!(
            checkpoint.problems().is_empty(),
            "{:?}",
            checkpoint.problems()
        );
        let summary = Summary::of(&checkpoint);
        let mut params = 0u64;
        let mut layers: BTreeMap<Option<u64>, (u64, u64)> = BTreeMap::new();
        let (mut packed, mut fp8) = (0, 0);
        let (mut scale_bytes, mut blocks) = (0, BTreeMap::new());
        for t in checkpoint.tensors() {
            let p = match checkpoint.encoding_at(t.position()) {
                Encoding::Plain | Encoding::Ggml(_) => t.elements(),
                Encoding::Fp8(f) => {
                    fp8 += 1;
                    scale_bytes += f.scale.map_or(0, |s| checkpoint.tensors().at(s).bytes());
                    if let Some(block) = f.block {
                        *blocks.entry(block).or_insert(0) += 1;
                    }
                    t.elements()
                }
                Encoding::Packed(q) => {
                    packed += 1;
                    q.logical_elements
                }
                Encoding::Aux { .. } => 0,
            };
            params += p;
            let figures = layers.entry(layer_of(t.name())).or_default();
            figures.0 += p;
            figures.1 += t.bytes();
        }
        assert_eq!(summary.logical_params, params);
        let theirs: BTreeMap<Option<u64>, (u64, u64)> = summary
            .layers
            .iter()
            .map(|f| (f.layer, (f.params, f.bytes)))
            .collect();
        assert_eq!(theirs, layers);
        assert_eq!(summary.quantization.map(|q| q.tensors.len()), Some(packed));
        // Both FP8 weights and the FP8 "scales" of each layer.
        let found = summary.fp8.expect("fp8");
        assert_eq!(found.tensors.len(), fp8);
        assert_eq!(found.scale_bytes, scale_bytes);
        assert_eq!(blocks, BTreeMap::from([([128, 128], 2000)]));
        assert_eq!(found.block, Some([128, 128]));
        assert_eq!(fp8, 3 * 2000);
        assert_eq!(packed, 3 * 2000);
    }
}
