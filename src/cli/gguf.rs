//! `weightscope inspect FILE.gguf`: a GGUF file's header as text or JSON:
//! its metadata (big arrays summarized), its tensors by ggml type with
//! parameters and bits per weight, and what MLX's `mx.load` will do with
//! each type (load, expand to float16 and at what cost, refuse the whole
//! file, or leave tensors out), so the user knows before loading.

use std::io::Write;
use std::path::Path;

use crate::checkpoint::gguf::{GgmlType, GgufHeader, MetaValue, MlxLoad};
use crate::units::{Shown, human_bytes, short_count};

/// The tensors of one type, together.
struct TypeRow {
    ggml: Option<GgmlType>,
    type_id: u32,
    tensors: usize,
    values: u64,
    bytes: u64,
}

fn by_type(header: &GgufHeader) -> Vec<TypeRow> {
    // A file has a handful of types, mostly in runs: the last row used is
    // tried first, then the others in turn (no map per tensor).
    let mut rows: Vec<TypeRow> = Vec::new();
    let mut last = 0;
    for t in &header.tensors {
        if rows.get(last).is_none_or(|r| r.type_id != t.type_id) {
            last = rows
                .iter()
                .position(|r| r.type_id == t.type_id)
                .unwrap_or(rows.len());
            if last == rows.len() {
                rows.push(TypeRow {
                    ggml: t.ggml_type(),
                    type_id: t.type_id,
                    tensors: 0,
                    values: 0,
                    bytes: 0,
                });
            }
        }
        if let Some(row) = rows.get_mut(last) {
            row.tensors += 1;
            row.values += t.values();
            row.bytes += t.bytes;
        }
    }
    // By type id, then most parameters first (ties keep the id order).
    rows.sort_by_key(|r| r.type_id);
    rows.sort_by_key(|r| std::cmp::Reverse(r.values));
    rows
}

fn type_name(row: &TypeRow) -> String {
    crate::checkpoint::gguf::type_name(row.type_id)
}

fn mlx_of(row: &TypeRow) -> Option<MlxLoad> {
    row.ggml.map(GgmlType::mlx_load)
}

/// Characters of a metadata string shown on its line.
const SHOWN_CHARS: usize = 77;

/// A metadata value in one short line: a string in quotes (escaped by
/// [`Shown::quoted`]), an array by its first elements.
fn shown(value: &MetaValue) -> String {
    match value {
        MetaValue::Int(n) => n.to_string(),
        MetaValue::F32(x) => format!("{x}"),
        MetaValue::Float(x) => format!("{x}"),
        MetaValue::Bool(b) => b.to_string(),
        MetaValue::Str(s) => {
            let (quoted, cut) = Shown::quoted(s, SHOWN_CHARS);
            if cut {
                format!("{quoted}… ({} characters)", s.chars().count())
            } else {
                quoted.into_string()
            }
        }
        MetaValue::Cut { prefix, bytes } => {
            let (quoted, _) = Shown::quoted(prefix, SHOWN_CHARS);
            format!("{quoted}… ({bytes} bytes; the first {} kept)", prefix.len())
        }
        MetaValue::Array {
            element,
            len,
            first,
        } => {
            let first: Vec<String> = first.iter().map(shown).collect();
            let more = if *len > first.len() as u64 {
                ", …"
            } else {
                ""
            };
            format!("array of {len} {element}: [{}{more}]", first.join(", "))
        }
    }
}

fn bits(bytes: u64, values: u64) -> f64 {
    if values == 0 {
        return 0.0;
    }
    #[allow(clippy::cast_precision_loss)]
    let bits = (bytes * 8) as f64 / values as f64;
    bits
}

/// The text report.
///
/// # Errors
/// When `out` fails.
pub fn write_text(path: &Path, header: &GgufHeader, out: &mut impl Write) -> std::io::Result<()> {
    let (values, bytes) = header.totals();
    writeln!(out, "{}", Shown::new(&path.display().to_string()))?;
    writeln!(
        out,
        "GGUF version {}, {} tensors, {} metadata keys, header {} (data from byte {}, aligned to {})",
        header.version,
        header.tensors.len(),
        header.metadata.len(),
        human_bytes(header.header_bytes),
        header.data_start,
        header.alignment
    )?;
    writeln!(
        out,
        "{} parameters in {}: {:.2} bits per weight",
        short_count(values),
        human_bytes(bytes),
        bits(bytes, values)
    )?;
    writeln!(out, "metadata:")?;
    for (key, value) in &header.metadata {
        writeln!(out, "  {}: {}", Shown::new(key), shown(value))?;
    }
    writeln!(out, "by type (most parameters first):")?;
    let rows = by_type(header);
    for row in &rows {
        writeln!(
            out,
            "  {:<8} {:>5} tensors  {:>9} parameters  {:>11}  {:>5.2} bits/weight  mx.load: {}",
            type_name(row),
            row.tensors,
            short_count(row.values),
            human_bytes(row.bytes),
            bits(row.bytes, row.values),
            mlx_of(row).map_or_else(
                || "unknown type: refuses the file".to_owned(),
                MlxLoad::describe
            )
        )?;
    }
    write_mlx_verdict(header, &rows, out)?;
    writeln!(
        out,
        "tensors (row-major shapes, as numpy and MLX show them):"
    )?;
    for t in &header.tensors {
        let name = t.type_name();
        writeln!(
            out,
            "  {}  {name}  {:?}  {}  at byte {}",
            Shown::new(&t.name),
            t.shape,
            human_bytes(t.bytes),
            t.offset
        )?;
    }
    Ok(())
}

/// What `mx.load` will do with the whole file, in a sentence or two.
fn write_mlx_verdict(
    header: &GgufHeader,
    rows: &[TypeRow],
    out: &mut impl Write,
) -> std::io::Result<()> {
    if let Some(t) = header.refused_by() {
        let name = t.type_name();
        writeln!(
            out,
            "mx.load (MLX 0.32.2) refuses this file: tensor `{}` is {name} (\"[load_gguf] gguf_tensor_to_f16 failed\")",
            Shown::new(&t.name)
        )?;
        return Ok(());
    }
    let expanded: u64 = rows
        .iter()
        .filter(|r| mlx_of(r) == Some(MlxLoad::ExpandF16))
        .map(|r| r.values * 2)
        .sum();
    let expanded_from: u64 = rows
        .iter()
        .filter(|r| mlx_of(r) == Some(MlxLoad::ExpandF16))
        .map(|r| r.bytes)
        .sum();
    let dropped: Vec<String> = rows
        .iter()
        .filter(|r| mlx_of(r) == Some(MlxLoad::Dropped))
        .map(|r| format!("{} {}", r.tensors, type_name(r)))
        .collect();
    let mut said = false;
    if expanded > 0 {
        writeln!(
            out,
            "mx.load (MLX 0.32.2) expands {} stored as {} to {} of float16",
            rows.iter()
                .filter(|r| mlx_of(r) == Some(MlxLoad::ExpandF16))
                .map(type_name)
                .collect::<Vec<_>>()
                .join(", "),
            human_bytes(expanded_from),
            human_bytes(expanded)
        )?;
        said = true;
    }
    if !dropped.is_empty() {
        writeln!(
            out,
            "mx.load (MLX 0.32.2) leaves out, without a word, {} tensors: {}",
            header
                .tensors
                .iter()
                .filter(|t| t
                    .ggml_type()
                    .is_some_and(|g| g.mlx_load() == MlxLoad::Dropped))
                .count(),
            dropped.join(", ")
        )?;
        said = true;
    }
    if !said {
        writeln!(
            out,
            "mx.load (MLX 0.32.2) loads every tensor as stored or as its affine quantization"
        )?;
    }
    Ok(())
}

/// A GGUF file's facts that every format has, in `inspect --json`'s one
/// schema (`docs/inspect.schema.json`; the safetensors side is
/// `inspect::write_json`): the file is a one-shard checkpoint, each
/// tensor's `dtype` its ggml type's name; what only GGUF has is under
/// `gguf` (the file's) and each tensor's `gguf` (its type id, offset and
/// what `mx.load` does with it).
#[derive(serde::Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    opening: super::inspect::JsonOpening<'a>,
    shards: [Shard<'a>; 1],
    tensor_count: usize,
    total_bytes: u64,
    file_bytes: u64,
    params_by_dtype: std::collections::BTreeMap<String, u64>,
    logical_params: u64,
    bits_per_weight: f64,
    gguf: FileFacts<'a>,
}

#[derive(serde::Serialize)]
struct Shard<'a> {
    file: &'a str,
    bytes: u64,
    data_bytes: u64,
    header_bytes: u64,
    tensors: usize,
}

/// What only a GGUF file has: `metadata` (arrays as `{element, len,
/// first}`), `by_type` (with `mlx_load`), `mlx_refused_by`.
#[derive(serde::Serialize)]
struct FileFacts<'a> {
    version: u32,
    alignment: u64,
    data_start: u64,
    metadata: serde_json::Map<String, serde_json::Value>,
    by_type: Vec<ByType>,
    mlx_refused_by: Option<&'a str>,
}

#[derive(serde::Serialize)]
struct Tensor<'a> {
    name: &'a str,
    dtype: String,
    shape: &'a [u64],
    bytes: u64,
    shard: &'a str,
    gguf: TensorFacts,
}

#[derive(serde::Serialize)]
struct TensorFacts {
    type_id: u32,
    offset: u64,
    mlx_load: &'static str,
}

fn meta_json(value: &MetaValue) -> serde_json::Value {
    match value {
        MetaValue::Int(n) => i64::try_from(*n)
            .map(serde_json::Value::from)
            .or_else(|_| u64::try_from(*n).map(serde_json::Value::from))
            .unwrap_or_else(|_| n.to_string().into()),
        MetaValue::F32(x) => f64::from(*x).into(),
        MetaValue::Float(x) => (*x).into(),
        MetaValue::Bool(b) => (*b).into(),
        MetaValue::Str(s) => s.clone().into(),
        // A string longer than what is kept: its first bytes and its
        // length, never a value that was not read.
        MetaValue::Cut { prefix, bytes } => serde_json::json!({
            "prefix": prefix, "bytes": bytes,
        }),
        MetaValue::Array {
            element,
            len,
            first,
        } => serde_json::json!({
            "element": element, "len": len, "first": first.iter().map(meta_json).collect::<Vec<_>>(),
        }),
    }
}

/// One ggml type of the file: its tensors, values and bytes, and what
/// MLX's loader does with it.
#[derive(serde::Serialize)]
struct ByType {
    #[serde(rename = "type")]
    kind: String,
    type_id: u32,
    tensors: usize,
    parameters: u64,
    bytes: u64,
    bits_per_weight: f64,
    mlx_load: &'static str,
}

/// Where a GGUF file was read: shown as the user named it, the file's own
/// name, its size, and the Hub commit (a Hub repo only).
pub struct Place<'a> {
    /// The path or address as the user gave it.
    pub path: &'a Path,
    /// The whole file's size in bytes.
    pub file_bytes: u64,
    /// The Hub commit the file was read at.
    pub commit: Option<&'a str>,
}

fn to_json<'a>(place: &Place<'a>, file: &'a str, header: &'a GgufHeader) -> Report<'a> {
    let rows = by_type(header);
    let (values, bytes) = header.totals();
    let model_type = header.metadata.iter().find_map(|(k, v)| match v {
        MetaValue::Str(s) if k == "general.architecture" => Some(s.as_str()),
        _ => None,
    });
    Report {
        opening: super::inspect::JsonOpening {
            format: "gguf",
            path: crate::units::location_data(&place.path.to_string_lossy()),
            commit: place.commit,
            layout: "file",
            model_type,
        },
        shards: [Shard {
            file,
            bytes: place.file_bytes,
            data_bytes: place.file_bytes.saturating_sub(header.data_start),
            header_bytes: header.data_start,
            tensors: header.tensors.len(),
        }],
        tensor_count: header.tensors.len(),
        total_bytes: bytes,
        file_bytes: place.file_bytes,
        params_by_dtype: rows.iter().map(|r| (type_name(r), r.values)).collect(),
        logical_params: values,
        bits_per_weight: bits(bytes, values),
        gguf: FileFacts {
            version: header.version,
            alignment: header.alignment,
            data_start: header.data_start,
            metadata: header
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), meta_json(v)))
                .collect(),
            by_type: rows
                .iter()
                .map(|r| ByType {
                    kind: type_name(r),
                    type_id: r.type_id,
                    tensors: r.tensors,
                    parameters: r.values,
                    bytes: r.bytes,
                    bits_per_weight: bits(r.bytes, r.values),
                    mlx_load: mlx_of(r).map_or("unknown", MlxLoad::key),
                })
                .collect(),
            mlx_refused_by: header.refused_by().map(|t| t.name.as_str()),
        },
    }
}

/// The `tensors` element of `t`, read from `file`.
fn tensor<'a>(t: &'a crate::checkpoint::gguf::GgufTensor, file: &'a str) -> Tensor<'a> {
    let ggml = t.ggml_type();
    Tensor {
        name: &t.name,
        dtype: t.type_name(),
        shape: &t.shape,
        bytes: t.bytes,
        shard: file,
        gguf: TensorFacts {
            type_id: t.type_id,
            offset: t.offset,
            mlx_load: ggml.map_or("unknown", |g| g.mlx_load().key()),
        },
    }
}

/// Writes the JSON report of `header`, in the schema every format's
/// `inspect --json` shares (`docs/inspect.schema.json`): the file's facts,
/// then the `tensors` list, serialized piece by piece on every core
/// (`super::pieces`, as the safetensors list is).
///
/// # Errors
/// When writing fails.
pub fn write_json(
    place: &Place<'_>,
    header: &GgufHeader,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let file = place
        .path
        .to_str()
        .and_then(|p| p.rsplit('/').next())
        .filter(|f| !f.is_empty())
        .map_or_else(
            || crate::units::location_data(&place.path.to_string_lossy()),
            str::to_owned,
        );
    let mut head = serde_json::to_vec(&to_json(place, &file, header))?;
    head.pop(); // the closing `}`: the list goes last
    out.write_all(&head)?;
    out.write_all(b",\"tensors\":[")?;
    let tensors = &header.tensors;
    let serialize = |piece: std::ops::Range<usize>, buf: &mut Vec<u8>| {
        for (i, t) in tensors.get(piece).unwrap_or_default().iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            // Writing into a Vec fails only for a value serde cannot
            // write, which these plain fields never are.
            let _ = serde_json::to_writer(&mut *buf, &tensor(t, &file));
        }
    };
    super::pieces::write_in_pieces(tensors.len(), b",", &serialize, out)?;
    out.write_all(b"]}\n")
}

/// `weightscope inspect FILE.gguf`.
#[must_use]
pub fn main(path: &Path, json: bool) -> u8 {
    let read = GgufHeader::read(path).and_then(|h| {
        let size = std::fs::metadata(path)?.len();
        Ok((h, size))
    });
    let (header, file_bytes) = match read {
        Ok(read) => read,
        Err(err) => {
            // The problem, then the file, as every other error says it.
            super::stderr_line(format_args!("{err}: {}", Shown::path(path)));
            return super::BAD_INPUT;
        }
    };
    report(
        &Place {
            path,
            file_bytes,
            commit: None,
        },
        &header,
        json,
    )
}

/// Writes the report of a GGUF file's `header` (read at `place`: a local
/// file or a remote address) and returns the exit status.
#[must_use]
pub fn report(place: &Place<'_>, header: &GgufHeader, json: bool) -> u8 {
    let mut out = super::big_output();
    let written = if json {
        let mut shown = crate::units::ShownJson::new(&mut out);
        write_json(place, header, &mut shown).and_then(|()| shown.finish().map(drop))
    } else {
        let mut shown = crate::units::ShownLines::new(&mut out);
        write_text(place.path, header, &mut shown).and_then(|()| shown.finish().map(drop))
    }
    .and_then(|()| out.flush());
    match super::output_status(written) {
        Ok(()) => 0,
        Err(code) => code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::gguf::GgufTensor;

    #[test]
    fn the_json_report_has_the_facts_every_format_has() {
        let tensors: Vec<GgufTensor> = (0..4)
            .map(|i| GgufTensor {
                name: format!("blk.{i}.w"),
                type_id: [0, 12, 4242, 0][i],
                shape: vec![256, 4].into(),
                offset: 4096 + 4096 * i as u64,
                bytes: [4096, 576, 100, 4096][i],
            })
            .collect();
        let header = GgufHeader {
            version: 3,
            metadata: vec![(
                "general.architecture".into(),
                MetaValue::Str("qwen3".into()),
            )],
            tensors,
            data_start: 4096,
            alignment: 32,
            header_bytes: 4000,
        };
        let place = Place {
            path: Path::new("hf://org/repo/model.gguf"),
            file_bytes: 20000,
            commit: Some("abc"),
        };
        let mut out = Vec::new();
        write_json(&place, &header, &mut out).expect("write");
        let v: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(v["format"], "gguf");
        assert_eq!(v["model_type"], "qwen3");
        assert_eq!(v["commit"], "abc");
        assert_eq!(v["tensor_count"], 4);
        assert_eq!(v["total_bytes"], 4096 * 2 + 576 + 100);
        assert_eq!(v["logical_params"], 4 * 1024);
        assert_eq!(v["params_by_dtype"]["F32"], 2048);
        assert_eq!(v["params_by_dtype"]["Q4_K"], 1024);
        assert_eq!(v["shards"][0]["file"], "model.gguf");
        assert_eq!(v["shards"][0]["data_bytes"], 20000 - 4096);
        assert_eq!(v["tensors"][1]["dtype"], "Q4_K");
        assert_eq!(v["tensors"][1]["shard"], "model.gguf");
        assert_eq!(v["tensors"][1]["gguf"]["mlx_load"], "expand_f16");
        assert_eq!(v["tensors"][2]["dtype"], "type 4242");
        assert_eq!(v["gguf"]["version"], 3);
        assert_eq!(v["gguf"]["mlx_refused_by"], "blk.2.w");
    }
}
