//! `inspect --json`: one schema for every format (docs/inspect-schema).

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::checkpoint::{Checkpoint, Layout};

use super::HeaderReport;
use super::tensor_list::{roles, write_tensor_list};

/// The keys `inspect --json` opens with in every format: what was read,
/// where, and the model's type.
#[derive(Serialize)]
pub(in crate::cli) struct JsonOpening<'a> {
    /// `safetensors`, `pytorch` or `gguf`.
    pub format: &'static str,
    /// The folder, file or Hub address read (credentials masked).
    pub path: String,
    /// The Hub commit the files were read at (a Hub repo only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<&'a str>,
    /// `indexed`, `folder` or `file`: how the files are laid out.
    pub layout: &'static str,
    /// `config.json`'s `model_type` (GGUF: `general.architecture`).
    pub model_type: Option<&'a str>,
}

#[derive(Serialize)]
struct JsonShard<'a> {
    file: &'a str,
    bytes: u64,
    data_bytes: u64,
    header_bytes: u64,
    tensors: usize,
}

#[derive(Serialize)]
struct JsonRecipe {
    mode: &'static str,
    bits: u64,
    group_size: u64,
    tensors: usize,
}

fn json_recipe(recipe: Vec<(crate::checkpoint::QuantParams, usize)>) -> Vec<JsonRecipe> {
    recipe
        .into_iter()
        .map(|(p, n)| JsonRecipe {
            mode: p.mode.name(),
            bits: p.bits,
            group_size: p.group_size,
            tensors: n,
        })
        .collect()
}

#[derive(Serialize)]
struct JsonQuantization {
    /// Every (mode, bits, group size) with its weights, most used first.
    recipe: Vec<JsonRecipe>,
    bits: u64,
    group_size: u64,
    mode: &'static str,
    modes: BTreeMap<&'static str, usize>,
    config_key: Option<&'static str>,
    quantized_tensors: usize,
    logical_params: u64,
    stored_bytes: u64,
    bits_per_weight: f64,
    inferred: bool,
}

#[derive(Serialize)]
struct JsonFp8 {
    tensors: usize,
    scaled_tensors: usize,
    block: Option<[u64; 2]>,
    scale_bytes: u64,
}

#[derive(Serialize)]
struct JsonLayer {
    layer: Option<u64>,
    params: u64,
    bytes: u64,
    bits_per_weight: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    quantized: Vec<JsonRecipe>,
}

#[derive(Serialize)]
struct JsonInspect<'a> {
    /// `safetensors` here; `gguf` from `super::gguf` (one schema for both:
    /// `docs/inspect.schema.json`).
    #[serde(flatten)]
    opening: JsonOpening<'a>,
    shards: Vec<JsonShard<'a>>,
    tensor_count: usize,
    total_bytes: u64,
    file_bytes: u64,
    params_by_dtype: BTreeMap<&'static str, u64>,
    logical_params: u64,
    bits_per_weight: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    quantization: Option<JsonQuantization>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fp8: Option<JsonFp8>,
    layers: Vec<JsonLayer>,
    metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    index_metadata: Option<&'a BTreeMap<String, String>>,
    /// `inspect --filter`: the query and how many tensors `tensors` lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    filter: Option<JsonFilter<'a>>,
    /// What only PyTorch files have: each file's pickle and format.
    #[serde(skip_serializing_if = "Option::is_none")]
    pytorch: Option<JsonTorch<'a>>,
    /// Files of the folder not read because another format's were.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    not_read: &'a [String],
}

/// `pytorch` in the JSON.
#[derive(Serialize)]
struct JsonTorch<'a> {
    pickle: JsonPickle<'a>,
    files: Vec<JsonTorchFile<'a>>,
}

/// The pickles' verdict: the worst class of any global any file imports.
#[derive(Serialize)]
struct JsonPickle<'a> {
    verdict: crate::checkpoint::pytorch::Safety,
    /// Every global imported, each once: `module.name`.
    globals: Vec<&'a str>,
    /// The globals that are not innocuous, with their class, worst first.
    flagged: Vec<crate::checkpoint::pytorch::Imported>,
}

#[derive(Serialize)]
struct JsonTorchFile<'a> {
    file: &'a str,
    format: &'static str,
    verdict: crate::checkpoint::pytorch::Safety,
    pickle_bytes: u64,
    storages: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    skipped: &'a [String],
}

fn json_torch(checkpoint: &Checkpoint) -> Option<JsonTorch<'_>> {
    let (verdict, flagged) = checkpoint.torch_verdict()?;
    let mut globals: Vec<&str> = Vec::new();
    let mut files = Vec::new();
    for (k, shard) in checkpoint.shards().iter().enumerate() {
        let Some(torch) = checkpoint.torch_shard(crate::checkpoint::ShardId(k)) else {
            continue;
        };
        for g in &torch.globals {
            if !globals.contains(&g.global.as_str()) {
                globals.push(&g.global);
            }
        }
        files.push(JsonTorchFile {
            file: &shard.file,
            format: torch.format.name(),
            verdict: torch.verdict(),
            pickle_bytes: torch.pickle_bytes,
            storages: torch.storages.len(),
            version: torch.version.as_deref(),
            skipped: &torch.skipped,
        });
    }
    Some(JsonTorch {
        pickle: JsonPickle {
            verdict,
            globals,
            flagged,
        },
        files,
    })
}

pub(super) fn layout_name(layout: &Layout) -> &'static str {
    match layout {
        Layout::Indexed { .. } => "indexed",
        Layout::Folder => "folder",
        Layout::SingleFile => "file",
    }
}

/// The opening keys of a safetensors or PyTorch checkpoint's report.
fn opening(checkpoint: &Checkpoint) -> JsonOpening<'_> {
    JsonOpening {
        format: if checkpoint.is_torch() {
            "pytorch"
        } else {
            "safetensors"
        },
        path: crate::units::location_data(&checkpoint.root().to_string_lossy()),
        commit: checkpoint
            .remote()
            .and_then(crate::checkpoint::ByteSource::commit),
        layout: layout_name(checkpoint.layout()),
        model_type: checkpoint.config().and_then(|c| c.model_type.as_deref()),
    }
}

/// Writes the JSON summary of `checkpoint` to `out`, listing only the
/// tensors `kept` keeps when given (the figures are the whole checkpoint's),
/// with `filter` saying so.
///
/// # Errors
/// When writing fails.
pub fn write_json(report: HeaderReport<'_>, out: &mut impl Write) -> io::Result<()> {
    let HeaderReport {
        checkpoint,
        summary,
        kept,
    } = report;
    let shards = checkpoint.shards();
    let quantization = summary.quantization.as_ref().map(|q| JsonQuantization {
        recipe: json_recipe(q.recipe()),
        bits: q.default.bits,
        group_size: q.default.group_size,
        mode: q.default.mode.name(),
        modes: q.modes.iter().map(|(m, n)| (m.name(), *n)).collect(),
        config_key: checkpoint
            .config()
            .and_then(|c| c.quantization.as_ref())
            .map(|c| c.source),
        quantized_tensors: q.tensors.len(),
        logical_params: q.logical_elements,
        stored_bytes: q.stored_bytes,
        bits_per_weight: q.bits_per_weight,
        inferred: q.tensors.iter().any(|t| t.inferred),
    });
    let doc = JsonInspect {
        opening: opening(checkpoint),
        shards: shards
            .iter()
            .map(|s| JsonShard {
                file: &s.file,
                bytes: s.file_bytes,
                data_bytes: s.data_bytes,
                header_bytes: s.header_bytes,
                tensors: s.tensors.len(),
            })
            .collect(),
        tensor_count: summary.tensor_count,
        total_bytes: summary.total_bytes,
        file_bytes: summary.file_bytes,
        params_by_dtype: summary
            .params_by_dtype
            .iter()
            .map(|(d, n)| (d.name(), *n))
            .collect(),
        logical_params: summary.logical_params,
        bits_per_weight: summary.bits_per_weight,
        quantization,
        fp8: summary.fp8.as_ref().map(|f| JsonFp8 {
            tensors: f.tensors.len(),
            scaled_tensors: f.tensors.iter().filter(|t| t.scale.is_some()).count(),
            block: f.block,
            scale_bytes: f.scale_bytes,
        }),
        layers: summary
            .layers
            .iter()
            .map(|l| JsonLayer {
                layer: l.layer,
                params: l.params,
                bytes: l.bytes,
                bits_per_weight: l.bits_per_weight(),
                quantized: summary
                    .quantization
                    .as_ref()
                    .map(|q| json_recipe(q.recipe_of_layer(l.layer)))
                    .unwrap_or_default(),
            })
            .collect(),
        metadata: checkpoint.metadata(),
        index_metadata: match checkpoint.layout() {
            Layout::Indexed { index, .. } => Some(&index.metadata),
            _ => None,
        },
        filter: kept.map(|k| JsonFilter {
            query: &k.text,
            matched: k.keep.iter().filter(|&&b| b).count(),
        }),
        pytorch: json_torch(checkpoint),
        not_read: checkpoint.not_read(),
    };
    // The summary object, then `"tensors": [...]` spliced in before its
    // closing brace: the 90k-entry list is serialized on every core.
    let mut head = serde_json::to_vec(&doc)?;
    head.pop(); // the closing `}`
    out.write_all(&head)?;
    out.write_all(b",\"tensors\":[")?;
    write_tensor_list(
        checkpoint,
        summary,
        &roles(checkpoint, summary),
        kept.map(|k| k.keep.as_slice()),
        out,
    )?;
    out.write_all(b"]}\n")
}

/// `filter` in the JSON: the query and how many tensors it kept.
#[derive(Serialize)]
struct JsonFilter<'a> {
    query: &'a str,
    matched: usize,
}
