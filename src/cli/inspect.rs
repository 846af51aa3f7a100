//! `weightscope inspect PATH [--json]`: the header summary.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::checkpoint::{Checkpoint, CheckpointError, Layout, Summary};
use crate::units::{grouped, human_bytes, printable, short_count};

/// Problems that make `inspect` fail (exit 2, nothing on stdout). A bad
/// `config.json` only loses the quantization settings: a warning.
#[must_use]
pub fn fatal_problems(checkpoint: &Checkpoint) -> Vec<&CheckpointError> {
    checkpoint
        .problems()
        .iter()
        .filter(|p| !matches!(p, CheckpointError::BadConfig { .. }))
        .collect()
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
struct JsonTensor<'a> {
    name: &'a str,
    dtype: &'static str,
    shape: &'a [u64],
    bytes: u64,
    shard: &'a str,
}

#[derive(Serialize)]
struct JsonQuantization {
    bits: u64,
    group_size: u64,
    mode: Option<String>,
    quantized_tensors: usize,
    logical_params: u64,
    stored_bytes: u64,
    bits_per_weight: f64,
    inferred: bool,
}

#[derive(Serialize)]
struct JsonInspect<'a> {
    path: String,
    layout: &'static str,
    model_type: Option<&'a str>,
    shards: Vec<JsonShard<'a>>,
    tensor_count: usize,
    total_bytes: u64,
    file_bytes: u64,
    params_by_dtype: BTreeMap<&'static str, u64>,
    logical_params: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    quantization: Option<JsonQuantization>,
    metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    index_metadata: Option<&'a BTreeMap<String, String>>,
}

fn layout_name(layout: &Layout) -> &'static str {
    match layout {
        Layout::Indexed { .. } => "indexed",
        Layout::Folder => "folder",
        Layout::SingleFile => "file",
    }
}

/// Writes the JSON summary of `checkpoint` to `out`.
///
/// # Errors
/// When writing fails.
pub fn write_json(
    checkpoint: &Checkpoint,
    summary: &Summary,
    out: &mut impl Write,
) -> io::Result<()> {
    let shards = checkpoint.shards();
    let quantization = summary.quantization.as_ref().map(|q| JsonQuantization {
        bits: q.default.bits,
        group_size: q.default.group_size,
        mode: checkpoint
            .config()
            .and_then(|c| c.quantization.as_ref())
            .and_then(|c| c.mode.clone()),
        quantized_tensors: q.tensors.len(),
        logical_params: q.logical_elements,
        stored_bytes: q.stored_bytes,
        bits_per_weight: q.bits_per_weight,
        inferred: q.tensors.iter().any(|t| t.inferred),
    });
    let doc = JsonInspect {
        path: checkpoint.root().display().to_string(),
        layout: layout_name(checkpoint.layout()),
        model_type: checkpoint.config().and_then(|c| c.model_type.as_deref()),
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
        quantization,
        metadata: checkpoint.metadata(),
        index_metadata: match checkpoint.layout() {
            Layout::Indexed { index, .. } => Some(&index.metadata),
            _ => None,
        },
    };
    // The summary object, then `"tensors": [...]` spliced in before its
    // closing brace: the 90k-entry list is serialized on every core.
    let mut head = serde_json::to_vec(&doc)?;
    head.pop(); // the closing `}`
    out.write_all(&head)?;
    out.write_all(b",\"tensors\":[")?;
    for (i, part) in tensor_list_parts(checkpoint).iter().enumerate() {
        if i > 0 && !part.is_empty() {
            out.write_all(b",")?;
        }
        out.write_all(part)?;
    }
    out.write_all(b"]}\n")
}

/// The `tensors` array's elements as JSON, in order, cut into one part per core.
fn tensor_list_parts(checkpoint: &Checkpoint) -> Vec<Vec<u8>> {
    let tensors = checkpoint.tensors();
    let shards = checkpoint.shards();
    let serialize = |part: &[crate::checkpoint::TensorInfo]| {
        let mut buf = Vec::with_capacity(part.len() * 160);
        for (i, t) in part.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            let entry = JsonTensor {
                name: &t.name,
                dtype: t.dtype.name(),
                shape: &t.shape,
                bytes: t.bytes(),
                shard: &shards[t.shard].file,
            };
            // Writing into a Vec cannot fail, and these types always serialize.
            let _ = serde_json::to_writer(&mut buf, &entry);
        }
        buf
    };
    let workers = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let chunk = tensors.len().div_ceil(workers).max(4096);
    std::thread::scope(|scope| {
        let handles: Vec<_> = tensors
            .chunks(chunk)
            .map(|part| {
                std::thread::Builder::new()
                    .name("json-out".into())
                    .spawn_scoped(scope, move || serialize(part))
                    .map_err(|_| part)
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| match handle {
                Ok(handle) => handle.join().unwrap_or_default(),
                // No thread to be had: serialize here instead.
                Err(part) => serialize(part),
            })
            .collect()
    })
}

/// Writes the human summary and tables of `checkpoint` to `out`.
///
/// # Errors
/// When writing fails.
pub fn write_text(
    checkpoint: &Checkpoint,
    summary: &Summary,
    out: &mut impl Write,
) -> io::Result<()> {
    let shards = checkpoint.shards();
    writeln!(out, "checkpoint   {}", checkpoint.root().display())?;
    writeln!(
        out,
        "layout       {} ({} shard{})",
        layout_name(checkpoint.layout()),
        shards.len(),
        if shards.len() == 1 { "" } else { "s" }
    )?;
    if let Some(model_type) = checkpoint.config().and_then(|c| c.model_type.as_deref()) {
        writeln!(out, "model type   {model_type}")?;
    }
    writeln!(
        out,
        "tensors      {} holding {} ({} on disk)",
        grouped(summary.tensor_count as u64),
        human_bytes(summary.total_bytes),
        human_bytes(summary.file_bytes)
    )?;
    writeln!(
        out,
        "parameters   {} ({})",
        short_count(summary.logical_params),
        grouped(summary.logical_params)
    )?;
    let by_dtype: Vec<String> = summary
        .params_by_dtype
        .iter()
        .map(|(d, n)| format!("{d} {}", grouped(*n)))
        .collect();
    writeln!(out, "by dtype     {}", by_dtype.join(", "))?;
    if let Some(q) = &summary.quantization {
        writeln!(
            out,
            "quantized    {} tensors, {}-bit, group {}{}: {:.2} bits per weight with scales and biases",
            q.tensors.len(),
            q.default.bits,
            q.default.group_size,
            if q.tensors.iter().any(|t| t.inferred) {
                " (inferred from shapes)"
            } else {
                ""
            },
            q.bits_per_weight
        )?;
    }
    for (key, value) in checkpoint.metadata() {
        writeln!(out, "metadata     {key} = {value}")?;
    }

    writeln!(out)?;
    let file_width = shards
        .iter()
        .map(|s| s.file.len())
        .max()
        .unwrap_or(0)
        .max(5);
    writeln!(
        out,
        "{:<file_width$}  {:>12}  {:>8}",
        "SHARD", "BYTES", "TENSORS"
    )?;
    for s in shards {
        writeln!(
            out,
            "{:<file_width$}  {:>12}  {:>8}",
            printable(&s.file),
            human_bytes(s.file_bytes),
            s.tensors.len()
        )?;
    }

    writeln!(out)?;
    let tensors = checkpoint.tensors();
    let name_width = tensors
        .iter()
        .map(|t| printable(&t.name).chars().count())
        .max()
        .unwrap_or(0)
        .clamp(4, 72);
    let shapes: Vec<String> = tensors.iter().map(|t| format!("{:?}", t.shape)).collect();
    let shape_width = shapes.iter().map(String::len).max().unwrap_or(0).max(5);
    writeln!(
        out,
        "{:<name_width$}  {:<11}  {:<shape_width$}  {:>12}  SHARD",
        "NAME", "DTYPE", "SHAPE", "BYTES"
    )?;
    for (t, shape) in tensors.iter().zip(&shapes) {
        writeln!(
            out,
            "{:<name_width$}  {:<11}  {:<shape_width$}  {:>12}  {}",
            printable(&t.name),
            t.dtype.name(),
            shape,
            human_bytes(t.bytes()),
            printable(&shards[t.shard].file)
        )?;
    }
    Ok(())
}
