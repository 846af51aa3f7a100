//! `weightscope inspect FILE.gguf`: a GGUF file's header as text or JSON:
//! its metadata (big arrays summarized), its tensors by ggml type with
//! parameters and bits per weight, and what MLX's `mx.load` will do with
//! each type (load, expand to float16 and at what cost, refuse the whole
//! file, or leave tensors out), so the user knows before loading.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use crate::checkpoint::gguf::{GgmlType, GgufHeader, MetaValue, MlxLoad};
use crate::units::{human_bytes, printable, short_count};

/// The tensors of one type, together.
struct TypeRow {
    ggml: Option<GgmlType>,
    type_id: u32,
    tensors: usize,
    values: u64,
    bytes: u64,
}

fn by_type(header: &GgufHeader) -> Vec<TypeRow> {
    let mut rows: BTreeMap<u32, TypeRow> = BTreeMap::new();
    for t in &header.tensors {
        let row = rows.entry(t.type_id).or_insert(TypeRow {
            ggml: t.ggml_type(),
            type_id: t.type_id,
            tensors: 0,
            values: 0,
            bytes: 0,
        });
        row.tensors += 1;
        row.values += t.values();
        row.bytes += t.bytes;
    }
    let mut rows: Vec<TypeRow> = rows.into_values().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.values));
    rows
}

fn type_name(row: &TypeRow) -> String {
    row.ggml
        .map_or_else(|| format!("type {}", row.type_id), |g| g.name.to_owned())
}

fn mlx_of(row: &TypeRow) -> Option<MlxLoad> {
    row.ggml.map(GgmlType::mlx_load)
}

/// A metadata value in one short line.
fn shown(value: &MetaValue) -> String {
    match value {
        MetaValue::Int(n) => n.to_string(),
        MetaValue::Float(x) => format!("{x}"),
        MetaValue::Bool(b) => b.to_string(),
        MetaValue::Str(s) => {
            let s = printable(s);
            if s.chars().count() > 80 {
                format!(
                    "{:?}… ({} characters)",
                    s.chars().take(77).collect::<String>(),
                    s.chars().count()
                )
            } else {
                format!("{s:?}")
            }
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
    let values: u64 = header
        .tensors
        .iter()
        .map(crate::checkpoint::gguf::GgufTensor::values)
        .sum();
    let bytes: u64 = header.tensors.iter().map(|t| t.bytes).sum();
    writeln!(out, "{}", printable(&path.display().to_string()))?;
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
        writeln!(out, "  {}: {}", printable(key), shown(value))?;
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
        let name = t
            .ggml_type()
            .map_or_else(|| format!("type {}", t.type_id), |g| g.name.to_owned());
        writeln!(
            out,
            "  {}  {name}  {:?}  {}  at byte {}",
            printable(&t.name),
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
        let name = t
            .ggml_type()
            .map_or_else(|| format!("type {}", t.type_id), |g| g.name.to_owned());
        writeln!(
            out,
            "mx.load (MLX 0.32.2) refuses this file: tensor `{}` is {name} (\"[load_gguf] gguf_tensor_to_f16 failed\")",
            printable(&t.name)
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

/// The JSON report: `format`, `version`, `metadata` (arrays as `{element,
/// len, first}`), `by_type` (with `mlx_load`), `mlx_refused_by`, `tensors`.
/// Fields in sorted order, as `serde_json`'s maps write them; the tensors
/// borrowed from the header and written as they come (a 90k-tensor file
/// built a map per tensor first: 9.6x the time of the same layout in
/// safetensors).
#[derive(serde::Serialize)]
pub struct Report<'a> {
    alignment: u64,
    by_type: Vec<serde_json::Value>,
    bytes: u64,
    data_start: u64,
    format: &'static str,
    metadata: serde_json::Map<String, serde_json::Value>,
    mlx_refused_by: Option<&'a str>,
    parameters: u64,
    path: String,
    tensors: Vec<TensorJson<'a>>,
    version: u32,
}

/// One tensor of [`Report`] (fields in sorted order).
#[derive(serde::Serialize)]
struct TensorJson<'a> {
    bytes: u64,
    mlx_load: &'static str,
    name: &'a str,
    offset: u64,
    shape: &'a [u64],
    #[serde(rename = "type")]
    kind: Option<&'static str>,
    type_id: u32,
}

/// The JSON report of `header` (see [`Report`]).
#[must_use]
pub fn to_json<'a>(path: &Path, header: &'a GgufHeader) -> Report<'a> {
    fn meta(value: &MetaValue) -> serde_json::Value {
        match value {
            MetaValue::Int(n) => i64::try_from(*n)
                .map(serde_json::Value::from)
                .or_else(|_| u64::try_from(*n).map(serde_json::Value::from))
                .unwrap_or_else(|_| n.to_string().into()),
            MetaValue::Float(x) => (*x).into(),
            MetaValue::Bool(b) => (*b).into(),
            MetaValue::Str(s) => s.clone().into(),
            MetaValue::Array {
                element,
                len,
                first,
            } => serde_json::json!({
                "element": element, "len": len, "first": first.iter().map(meta).collect::<Vec<_>>(),
            }),
        }
    }
    let rows = by_type(header);
    Report {
        alignment: header.alignment,
        by_type: rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "type": type_name(r),
                    "type_id": r.type_id,
                    "tensors": r.tensors,
                    "parameters": r.values,
                    "bytes": r.bytes,
                    "bits_per_weight": bits(r.bytes, r.values),
                    "mlx_load": mlx_of(r).map_or("unknown", MlxLoad::key),
                })
            })
            .collect(),
        bytes: header.tensors.iter().map(|t| t.bytes).sum(),
        data_start: header.data_start,
        format: "gguf",
        metadata: header
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), meta(v)))
            .collect(),
        mlx_refused_by: header.refused_by().map(|t| t.name.as_str()),
        parameters: header
            .tensors
            .iter()
            .map(crate::checkpoint::gguf::GgufTensor::values)
            .sum(),
        path: path.display().to_string(),
        tensors: header
            .tensors
            .iter()
            .map(|t| TensorJson {
                bytes: t.bytes,
                mlx_load: t.ggml_type().map_or("unknown", |g| g.mlx_load().key()),
                name: &t.name,
                offset: t.offset,
                shape: &t.shape,
                kind: t.ggml_type().map(|g| g.name),
                type_id: t.type_id,
            })
            .collect(),
        version: header.version,
    }
}

/// `weightscope inspect FILE.gguf`.
#[must_use]
pub fn main(path: &Path, json: bool) -> u8 {
    let header = match GgufHeader::read(path) {
        Ok(h) => h,
        Err(err) => {
            super::say(format_args!(
                "{}: {err}",
                printable(&path.display().to_string())
            ));
            return super::BAD_INPUT;
        }
    };
    report(path, &header, json)
}

/// Writes the report of a GGUF file's `header` (`path` as shown: a local
/// file or a remote address) and returns the exit status.
#[must_use]
pub fn report(path: &Path, header: &GgufHeader, json: bool) -> u8 {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let written = if json {
        serde_json::to_writer(&mut out, &to_json(path, header))
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
    } else {
        write_text(path, header, &mut out)
    }
    .and_then(|()| out.flush());
    match super::output_status(written) {
        Ok(()) => 0,
        Err(code) => code,
    }
}
