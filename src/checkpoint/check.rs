//! `weightscope check`'s header findings: what makes a checkpoint that
//! opens wrong, the way conversions go wrong. Every rule about quantization
//! and FP8 comes from [`Checkpoint::encoding`] and the config reader (one
//! copy of those rules); this module only compares what they say with what
//! is stored. Value findings (`--values`) live in the weights layer.

use std::collections::{BTreeMap, BTreeSet};

use super::config::QuantMode;
use super::summary::{Encoding, Fp8Format, Summary};
use super::{Checkpoint, CheckpointError, Dtype, Layout};

use crate::finding::{Finding, Severity};

/// Every finding code, with its severity (docs/check.md explains each).
pub const CODES: &[(&str, Severity)] = &[
    ("quant.missing-scales", Severity::Error),
    ("quant.missing-biases", Severity::Error),
    ("quant.unexpected-biases", Severity::Error),
    ("quant.scale-shape", Severity::Error),
    ("quant.scale-dtype", Severity::Error),
    ("quant.config-mismatch", Severity::Error),
    ("quant.no-config", Severity::Error),
    ("fp8.missing-scale", Severity::Error),
    ("fp8.scale-shape", Severity::Error),
    ("fp8.unscaled", Severity::Info),
    ("fp8.block-inferred", Severity::Warning),
    ("fp8.block-disagree", Severity::Warning),
    ("index.total-size", Severity::Error),
    ("index.total-parameters", Severity::Warning),
    ("files.stray-shard", Severity::Warning),
    ("model.missing-lm-head", Severity::Error),
    ("config.unusable", Severity::Warning),
    ("files.unreadable", Severity::Error),
    ("dtype.stray", Severity::Info),
    ("values.nan", Severity::Error),
    ("values.inf", Severity::Error),
    ("values.all-zero", Severity::Warning),
    ("values.zero-scale", Severity::Warning),
    ("values.bad-scale", Severity::Error),
    ("values.unreadable", Severity::Error),
    ("gguf.mlx-refuses", Severity::Warning),
    ("gguf.mlx-drops", Severity::Warning),
    ("gguf.mlx-expands", Severity::Info),
    ("pickle.dangerous", Severity::Error),
    ("pickle.suspicious", Severity::Error),
    ("pickle.not-listed", Severity::Info),
    ("files.not-read", Severity::Info),
];

/// The severity a code is reported with.
#[must_use]
pub fn severity_of(code: &str) -> Severity {
    CODES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(Severity::Warning, |(_, s)| *s)
}

/// A finding with the severity its code has.
#[must_use]
pub fn finding(code: &'static str, message: String) -> Finding {
    Finding::new(severity_of(code), code, message)
}

/// The findings of a GGUF file's header: what MLX's `mx.load` (0.32.2)
/// will do with it, said before anything is loaded.
#[must_use]
pub fn check_gguf(header: &super::gguf::GgufHeader) -> Vec<Finding> {
    use super::gguf::MlxLoad;
    let mut findings = Vec::new();
    if let Some(t) = header.refused_by() {
        let kind = t.type_name();
        findings.push(
            finding(
                "gguf.mlx-refuses",
                format!(
                    "mx.load (MLX 0.32.2) refuses the whole file: `{}` is {kind}",
                    crate::units::Shown::new(&t.name)
                ),
            )
            .tensor(&t.name),
        );
    }
    // One finding per type: a Q4_K_M file has hundreds of such tensors.
    let mut by_type: std::collections::BTreeMap<&str, (MlxLoad, usize, u64, u64, &str)> =
        std::collections::BTreeMap::new();
    for t in &header.tensors {
        let Some(kind) = t.ggml_type() else { continue };
        let load = kind.mlx_load();
        if matches!(load, MlxLoad::Dropped | MlxLoad::ExpandF16) {
            let entry = by_type
                .entry(kind.name)
                .or_insert((load, 0, 0, 0, t.name.as_str()));
            entry.1 += 1;
            entry.2 += t.bytes;
            entry.3 += t.values().saturating_mul(2);
        }
    }
    for (kind, (load, count, bytes, f16_bytes, first)) in by_type {
        let first = crate::units::Shown::new(first);
        let message = match load {
            MlxLoad::Dropped => format!(
                "mx.load (MLX 0.32.2) leaves the {count} {kind} tensor(s) out of what it returns, without a word (`{first}` first)"
            ),
            _ => format!(
                "mx.load (MLX 0.32.2) expands the {count} {kind} tensor(s), {}, to {} of float16",
                crate::units::human_bytes(bytes),
                crate::units::human_bytes(f16_bytes)
            ),
        };
        let code = if load == MlxLoad::Dropped {
            "gguf.mlx-drops"
        } else {
            "gguf.mlx-expands"
        };
        findings.push(finding(code, message));
    }
    findings.sort_by_key(|f| f.severity);
    findings
}

/// The findings of `checkpoint`'s headers, config and folder, most severe
/// first, in tensor order within a severity: a GGUF file's are what MLX's
/// `mx.load` will do with it ([`check_gguf`]).
#[must_use]
pub fn check_headers(checkpoint: &Checkpoint, summary: &Summary) -> Vec<Finding> {
    if let Some(header) = checkpoint.gguf_header() {
        return check_gguf(header);
    }
    let mut findings = Vec::new();
    quantization(checkpoint, &mut findings);
    fp8(checkpoint, &mut findings);
    index_totals(checkpoint, summary, &mut findings);
    stray_shards(checkpoint, &mut findings);
    lm_head(checkpoint, &mut findings);
    stray_dtypes(checkpoint, &mut findings);
    torch_pickles(checkpoint, &mut findings);
    for problem in checkpoint.problems() {
        if let CheckpointError::BadConfig { .. } = problem {
            findings.push(finding("config.unusable", problem.to_string()).file("config.json"));
        } else {
            // A shard that did not open (the window shows the rest; the CLI
            // refuses such a checkpoint before checking it).
            findings.push(finding("files.unreadable", problem.to_string()));
        }
    }
    findings.sort_by_key(|f| f.severity);
    findings
}

/// A torch file's pickle imports a callable the reader does not
/// understand: named (never called), with its class; values that could not
/// be listed; files of the folder left unread.
fn torch_pickles(checkpoint: &Checkpoint, out: &mut Vec<Finding>) {
    use super::pytorch::Safety;
    use crate::units::Shown;
    for file in checkpoint.not_read() {
        out.push(
            finding(
                "files.not-read",
                format!(
                    "`{}` is not read: the folder's safetensors files are (as transformers reads them)",
                    Shown::new(file)
                ),
            )
            .file(file),
        );
    }
    for (k, shard) in checkpoint.shards().iter().enumerate() {
        let Some(torch) = checkpoint.torch_shard(super::ShardId(k)) else {
            continue;
        };
        for g in &torch.globals {
            let code = match g.safety {
                Safety::Innocuous => continue,
                Safety::Suspicious => "pickle.suspicious",
                Safety::Dangerous => "pickle.dangerous",
            };
            out.push(
                finding(
                    code,
                    format!(
                        "the pickle imports `{}` ({}): torch.load would call it; it was not called here",
                        Shown::new(&g.global),
                        g.safety.name()
                    ),
                )
                .file(&shard.file),
            );
        }
        if let Some(first) = torch.skipped.first() {
            let more = torch.skipped.len() - 1;
            out.push(
                finding(
                    "pickle.not-listed",
                    format!(
                        "{}{}",
                        Shown::new(first),
                        if more > 0 {
                            format!(" (and {more} more values not listed)")
                        } else {
                            String::new()
                        }
                    ),
                )
                .file(&shard.file),
            );
        }
    }
}

fn shard_file(checkpoint: &Checkpoint, position: usize) -> &str {
    &checkpoint.shard_of(checkpoint.tensors().at(position)).file
}

fn quantization(checkpoint: &Checkpoint, out: &mut Vec<Finding>) {
    let tensors = checkpoint.tensors();
    let config = checkpoint.config().and_then(|c| c.quantization.as_ref());
    let find = |name: &str| checkpoint.tensor(name);
    for (i, t) in tensors.iter().enumerate() {
        let Some(module) = t.name().strip_suffix(".weight") else {
            continue;
        };
        if t.dtype() != Dtype::U32 {
            continue;
        }
        let file = shard_file(checkpoint, i);
        let Some(scales) = find(&format!("{module}.scales")) else {
            out.push(
                finding(
                    "quant.missing-scales",
                    format!(
                        "packed U32 weight `{}` has no `{module}.scales`: it cannot be dequantized",
                        t.name()
                    ),
                )
                .tensor(t.name())
                .file(file),
            );
            continue;
        };
        let biases = find(&format!("{module}.biases"));
        let Encoding::Packed(q) = checkpoint.encoding_at(i) else {
            out.push(
                finding(
                    "quant.scale-shape",
                    format!(
                        "no MLX mode, group size and bits fit packed `{}` {:?} with scales {:?} {}{}",
                        t.name(),
                        t.shape(),
                        scales.shape(),
                        scales.dtype(),
                        biases.map_or(String::new(), |b| format!(" and biases {:?}", b.shape()))
                    ),
                )
                .tensor(t.name())
                .file(file),
            );
            continue;
        };
        packed_layer(checkpoint, &q, config.is_some(), out);
    }
}

/// The checks of one packed layer whose mode, group and bits are known.
fn packed_layer(
    checkpoint: &Checkpoint,
    q: &super::QuantizedTensor,
    configured: bool,
    out: &mut Vec<Finding>,
) {
    let tensors = checkpoint.tensors();
    let t = tensors.at(q.weight);
    let module = q.module.as_str();
    let file = shard_file(checkpoint, q.weight);
    let scales = tensors.at(q.scales);
    let biases = q.biases.map(|b| tensors.at(b));
    let mode = q.params.mode;
    let lead = &t.shape()[..t.shape().len().saturating_sub(1)];
    let scales_lead = &scales.shape()[..scales.shape().len().saturating_sub(1)];
    if lead != scales_lead || biases.is_some_and(|b| b.shape() != scales.shape()) {
        out.push(
            finding(
                "quant.scale-shape",
                format!(
                    "`{}` {:?}: scales {:?}{} do not fit one scale per group of {} on each row",
                    t.name(),
                    t.shape(),
                    scales.shape(),
                    biases.map_or(String::new(), |b| format!(", biases {:?}", b.shape())),
                    q.params.group_size
                ),
            )
            .tensor(t.name())
            .file(file),
        );
    }
    let wants_u8 = mode != QuantMode::Affine;
    if wants_u8 != (scales.dtype() == Dtype::U8) {
        out.push(
            finding(
                "quant.scale-dtype",
                format!(
                    "`{module}.scales` is {} but {mode} scales are {}",
                    scales.dtype(),
                    if wants_u8 { "uint8" } else { "floats" }
                ),
            )
            .tensor(scales.name())
            .file(&checkpoint.shard_of(scales).file),
        );
    }
    match (mode.has_biases(), biases) {
        (true, None) => out.push(
            finding(
                "quant.missing-biases",
                format!("affine weight `{}` has no `{module}.biases`", t.name()),
            )
            .tensor(t.name())
            .file(file),
        ),
        (false, Some(b)) => out.push(
            finding(
                "quant.unexpected-biases",
                format!(
                    "`{}` is {mode}, which has no biases, but `{}` is stored",
                    t.name(),
                    b.name()
                ),
            )
            .tensor(b.name())
            .file(&checkpoint.shard_of(b).file),
        ),
        _ => {}
    }
    if let Some(said) = q.config_conflict {
        out.push(
            finding(
                "quant.config-mismatch",
                format!(
                    "config.json says `{module}` is {} {}-bit group {}, but its packed shapes fit {} {}-bit group {}",
                    said.mode, said.bits, said.group_size, q.params.mode, q.params.bits, q.params.group_size
                ),
            )
            .tensor(t.name())
            .file(file),
        );
    } else if !configured {
        out.push(
            finding(
                "quant.no-config",
                format!(
                    "`{}` is packed ({} {}-bit group {}, read from its shapes) but config.json has no `quantization`: mlx-lm would load it as an unquantized layer and fail",
                    t.name(), q.params.mode, q.params.bits, q.params.group_size
                ),
            )
            .tensor(t.name())
            .file(file),
        );
    }
}

fn fp8(checkpoint: &Checkpoint, out: &mut Vec<Finding>) {
    let tensors = checkpoint.tensors();
    let block_config = checkpoint
        .config()
        .and_then(|c| c.fp8.as_ref())
        .map(|f| f.block);
    let mut unscaled = 0usize;
    let mut scaled = 0usize;
    let mut first_unscaled = None;
    for (i, t) in tensors.iter().enumerate() {
        if Fp8Format::of(t.dtype()).is_none() {
            continue;
        }
        let Encoding::Fp8(f) = checkpoint.encoding_at(i) else {
            continue;
        };
        let file = shard_file(checkpoint, i);
        match (f.scale, f.block) {
            (None, _) if matches!(block_config, Some(Some(_))) => out.push(
                finding(
                    "fp8.missing-scale",
                    format!(
                        "block-scaled FP8 checkpoint, but `{}` has no `{}_scale_inv`: its values cannot be recovered",
                        t.name(), t.name()
                    ),
                )
                .tensor(t.name())
                .file(file),
            ),
            (None, _) => {
                unscaled += 1;
                first_unscaled.get_or_insert(i);
            }
            (Some(s), None) => out.push(
                finding(
                    "fp8.scale-shape",
                    format!(
                        "`{}` {:?} does not fit `{}` {:?} in any block size",
                        tensors.at(s).name(), tensors.at(s).shape(), t.name(), t.shape()
                    ),
                )
                .tensor(t.name())
                .file(file),
            ),
            (Some(s), Some(block)) => {
                scaled += 1;
                if let Some(Some(configured)) = block_config
                    && configured != block
                {
                    out.push(
                        finding(
                            "fp8.scale-shape",
                            format!(
                                "config.json says blocks of {configured:?}, but `{}` {:?} fits blocks of {block:?} for `{}` {:?}",
                                tensors.at(s).name(), tensors.at(s).shape(), t.name(), t.shape()
                            ),
                        )
                        .tensor(t.name())
                        .file(file),
                    );
                }
            }
        }
    }
    fp8_blocks(checkpoint, block_config.flatten(), scaled, out);
    if let Some(i) = first_unscaled {
        let t = tensors.at(i);
        out.push(
            finding(
                "fp8.unscaled",
                format!(
                    "{unscaled} FP8 tensor(s) without a block scale (first `{}`): shown as their FP8 values, unscaled",
                    t.name()
                ),
            )
            .tensor(t.name())
            .file(shard_file(checkpoint, i)),
        );
    }
}

/// The block size of block-scaled FP8 weights when config.json does not
/// give it: inferred from the weights whose shapes divide exactly by their
/// scales' (a warning, with the size used), and the weights that disagree.
fn fp8_blocks(
    checkpoint: &Checkpoint,
    configured: Option<[u64; 2]>,
    scaled: usize,
    out: &mut Vec<Finding>,
) {
    if scaled == 0 {
        return;
    }
    let shapes = checkpoint.fp8_shape_blocks();
    if configured.is_none() {
        let said = match shapes.block {
            Some([r, c]) => format!(
                "config.json gives no `weight_block_size`: the FP8 block {r}x{c} is inferred from the weights whose shapes divide exactly, and used for the ragged ones (add `quantization_config.weight_block_size` to be sure)"
            ),
            None => "config.json gives no `weight_block_size` and no weight's shape divides exactly by its scale's: each FP8 block is inferred from its own shapes (add `quantization_config.weight_block_size`)".to_owned(),
        };
        out.push(finding("fp8.block-inferred", said).file("config.json"));
    }
    if !shapes.disagreeing.is_empty() {
        let kinds: Vec<String> = shapes
            .disagreeing
            .iter()
            .map(|([r, c], n)| format!("{r}x{c} ({n} weights)"))
            .collect();
        out.push(finding(
            "fp8.block-disagree",
            format!(
                "FP8 weights divide exactly into different block sizes: {}",
                kinds.join(", ")
            ),
        ));
    }
}

fn index_totals(checkpoint: &Checkpoint, summary: &Summary, out: &mut Vec<Finding>) {
    let Layout::Indexed { index_path, index } = checkpoint.layout() else {
        return;
    };
    let file = index_path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    if let Some(total) = index.total_size
        && total != summary.total_bytes
    {
        out.push(
            finding(
                "index.total-size",
                format!(
                    "the index says total_size {total} but the headers hold {} bytes of tensors",
                    summary.total_bytes
                ),
            )
            .file(&file),
        );
    }
    if let Some(total) = index
        .metadata
        .get("total_parameters")
        .and_then(|v| v.parse::<u64>().ok())
        && total != summary.logical_params
    {
        out.push(
            finding(
                "index.total-parameters",
                format!(
                    "the index says total_parameters {total} but the headers hold {} parameters (as mlx-lm counts them)",
                    summary.logical_params
                ),
            )
            .file(&file),
        );
    }
}

fn stray_shards(checkpoint: &Checkpoint, out: &mut Vec<Finding>) {
    let Layout::Indexed { index, .. } = checkpoint.layout() else {
        return;
    };
    let named: BTreeSet<&str> = index.shard_files.iter().map(String::as_str).collect();
    let Ok(entries) = std::fs::read_dir(checkpoint.root()) else {
        return;
    };
    let mut stray: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".safetensors") && !named.contains(n.as_str()))
        .collect();
    stray.sort_unstable();
    for file in stray {
        out.push(
            finding(
                "files.stray-shard",
                format!("`{file}` is in the folder but the index does not name it (left from an earlier conversion?); mlx-lm loads every model*.safetensors"),
            )
            .file(&file),
        );
    }
}

fn lm_head(checkpoint: &Checkpoint, out: &mut Vec<Finding>) {
    let Some(config) = checkpoint.config() else {
        return;
    };
    if config.tie_word_embeddings != Some(false) {
        return;
    }
    let names = checkpoint.tensors();
    let has_embeddings = names.iter().any(|t| t.name().contains("embed_tokens"));
    let has_head = names.iter().any(|t| t.name().ends_with("lm_head.weight"));
    if has_embeddings && !has_head {
        out.push(finding(
            "model.missing-lm-head",
            "config.json sets tie_word_embeddings to false but there is no `lm_head.weight`: the output layer is missing".into(),
        ).file("config.json"));
    }
}

/// Float tensors whose dtype differs from the one most parameters use, when
/// they are few (one F32 tensor in a bf16 model): a conversion that missed
/// them, or a deliberate exception worth knowing.
fn stray_dtypes(checkpoint: &Checkpoint, out: &mut Vec<Finding>) {
    let floats = [Dtype::F16, Dtype::BF16, Dtype::F32, Dtype::F64];
    let tensors = checkpoint.tensors();
    let may_encode = checkpoint.may_have_encodings();
    let plain: Vec<usize> = (0..tensors.len())
        .filter(|&i| floats.contains(&tensors.at(i).dtype()))
        .filter(|&i| !may_encode || matches!(checkpoint.encoding_at(i), Encoding::Plain))
        .collect();
    let mut counts: BTreeMap<Dtype, usize> = BTreeMap::new();
    for &i in &plain {
        *counts.entry(tensors.at(i).dtype()).or_insert(0) += 1;
    }
    let Some((&main, &main_count)) = counts.iter().max_by_key(|&(_, n)| *n) else {
        return;
    };
    for (&dtype, &count) in &counts {
        // Few: at most a fifth of the main dtype's count, and at most 8.
        if dtype == main || count * 5 > main_count || count > 8 {
            continue;
        }
        for &i in plain.iter().filter(|&&i| tensors.at(i).dtype() == dtype) {
            let t = tensors.at(i);
            out.push(
                finding(
                    "dtype.stray",
                    format!("`{}` is {dtype} in a model whose other {main_count} float tensors are {main}", t.name()),
                )
                .tensor(t.name())
                .file(shard_file(checkpoint, i)),
            );
        }
    }
}
