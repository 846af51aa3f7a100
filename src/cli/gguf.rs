//! `weightscope inspect FILE.gguf`: a GGUF file's header as text or JSON:
//! its metadata (big arrays summarized), its tensors by ggml type with
//! parameters and bits per weight, and what MLX's `mx.load` will do with
//! each type (load, expand to float16 and at what cost, refuse the whole
//! file, or leave tensors out), so the user knows before loading.

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

/// The JSON report less its `tensors` and `version` (see [`write_json`]):
/// `format`, `metadata` (arrays as `{element, len, first}`), `by_type`
/// (with `mlx_load`), `mlx_refused_by`. Fields in sorted order, as
/// `serde_json`'s maps write them.
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
}

/// Writes the JSON report of `header`: [`Report`], then `tensors` (each
/// `{bytes, mlx_load, name, offset, shape, type, type_id}`) and `version`.
/// The 90k-entry list of a large file is written by hand, byte for byte as
/// `serde_json` writes it, on every core (see
/// [`super::inspect::write_in_pieces`]): through `serde_json` it took 1.8x
/// the time of the same layout as safetensors shards.
///
/// # Errors
/// When writing fails.
pub fn write_json(path: &Path, header: &GgufHeader, out: &mut impl Write) -> std::io::Result<()> {
    let mut head = serde_json::to_vec(&to_json(path, header))?;
    head.pop(); // the closing `}`
    out.write_all(&head)?;
    out.write_all(b",\"tensors\":[")?;
    let tensors = &header.tensors;
    let serialize = |piece: std::ops::Range<usize>, buf: &mut Vec<u8>| {
        let mut recent = RecentFields::default();
        for (i, t) in tensors.get(piece).unwrap_or_default().iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            push_tensor(buf, t, &mut recent);
        }
    };
    super::inspect::write_in_pieces(tensors.len(), b",", &serialize, out)?;
    let mut digits = itoa::Buffer::new();
    out.write_all(b"],\"version\":")?;
    out.write_all(digits.format(header.version).as_bytes())?;
    out.write_all(b"}\n")
}

/// `name` as a JSON string, for the type names and load keys of this
/// module: identifiers with nothing to escape (a test checks every one).
fn push_identifier(buf: &mut Vec<u8>, name: &str) {
    buf.push(b'"');
    buf.extend_from_slice(name.as_bytes());
    buf.push(b'"');
}

/// The text written lately before and after a tensor's name and offset
/// (see [`super::inspect::Recent`]): its bytes and load key, keyed by
/// bytes and type; its shape and type, keyed by shape and type.
#[derive(Default)]
struct RecentFields<'a> {
    head: super::inspect::Recent<(u64, u32)>,
    tail: super::inspect::Recent<(&'a [u64], u32)>,
}

/// One element of the `tensors` list, as `serde_json` writes a struct of
/// these fields in this order.
fn push_tensor<'a>(
    buf: &mut Vec<u8>,
    t: &'a crate::checkpoint::gguf::GgufTensor,
    recent: &mut RecentFields<'a>,
) {
    use super::inspect::push_json_str;
    let ggml = t.ggml_type();
    recent.head.write(buf, (t.bytes, t.type_id), |buf| {
        buf.extend_from_slice(b"{\"bytes\":");
        buf.extend_from_slice(itoa::Buffer::new().format(t.bytes).as_bytes());
        buf.extend_from_slice(b",\"mlx_load\":");
        push_identifier(buf, ggml.map_or("unknown", |g| g.mlx_load().key()));
    });
    buf.extend_from_slice(b",\"name\":");
    push_json_str(buf, &t.name);
    buf.extend_from_slice(b",\"offset\":");
    buf.extend_from_slice(itoa::Buffer::new().format(t.offset).as_bytes());
    recent.tail.write(buf, (&t.shape, t.type_id), |buf| {
        buf.extend_from_slice(b",\"shape\":");
        super::inspect::push_naturals(buf, &t.shape);
        buf.extend_from_slice(b",\"type\":");
        match ggml {
            Some(g) => push_identifier(buf, g.name),
            None => buf.extend_from_slice(b"null"),
        }
        buf.extend_from_slice(b",\"type_id\":");
        buf.extend_from_slice(itoa::Buffer::new().format(t.type_id).as_bytes());
        buf.push(b'}');
    });
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
    let status = report(path, &header, json);
    // The process ends here: freeing 90k names one by one would only add
    // time the OS spends better reclaiming the pages at once.
    std::mem::forget(header);
    status
}

/// Writes the report of a GGUF file's `header` (`path` as shown: a local
/// file or a remote address) and returns the exit status.
#[must_use]
pub fn report(path: &Path, header: &GgufHeader, json: bool) -> u8 {
    let mut out = super::big_output();
    let written = if json {
        write_json(path, header, &mut out)
    } else {
        write_text(path, header, &mut out)
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

    /// The tensor list as `serde_json` writes it, for the comparison.
    #[derive(serde::Serialize)]
    struct Serde<'a> {
        bytes: u64,
        mlx_load: &'static str,
        name: &'a str,
        offset: u64,
        shape: &'a [u64],
        #[serde(rename = "type")]
        kind: Option<&'static str>,
        type_id: u32,
    }

    #[test]
    fn type_names_and_load_keys_need_no_escape() {
        let plain = |s: &str| crate::units::json_plain_run(s.as_bytes()) == s.len();
        assert!(plain("unknown"));
        for g in crate::checkpoint::gguf::GgmlType::all() {
            assert!(plain(g.name) && plain(g.mlx_load().key()), "{}", g.name);
        }
    }

    #[test]
    fn the_json_report_is_what_serde_json_writes() {
        let names = [
            "blk.0.attn_q.weight",
            "q\"uote\\back\nline\t\u{1}\u{7f}",
            "ünïcode 名前 \u{1F600}",
            "\u{fffd}",
            "",
        ];
        // Known types (F32, Q4_K, BF16), and one no reader knows.
        let tensors: Vec<GgufTensor> = (0..3000)
            .map(|i| GgufTensor {
                name: format!("{}{i}", names[i % names.len()]),
                type_id: [0, 12, 30, 4242][i % 4],
                shape: [vec![], vec![7], vec![u64::MAX, 0, 1]][i % 3]
                    .clone()
                    .into(),
                offset: 32 * i as u64,
                bytes: (1 << 40) + i as u64,
            })
            .collect();
        let header = GgufHeader {
            version: 3,
            metadata: vec![("general.name".into(), MetaValue::Str("x\"y".into()))],
            tensors,
            data_start: 4096,
            alignment: 32,
            header_bytes: 4000,
        };
        let path = Path::new("/m/model.gguf");
        let mut ours = Vec::new();
        write_json(path, &header, &mut ours).expect("write");
        let mut theirs = serde_json::to_value(to_json(path, &header)).expect("head");
        let list: Vec<Serde<'_>> = header
            .tensors
            .iter()
            .map(|t| Serde {
                bytes: t.bytes,
                mlx_load: t.ggml_type().map_or("unknown", |g| g.mlx_load().key()),
                name: &t.name,
                offset: t.offset,
                shape: &t.shape,
                kind: t.ggml_type().map(|g| g.name),
                type_id: t.type_id,
            })
            .collect();
        theirs["tensors"] = serde_json::to_value(list).expect("list");
        theirs["version"] = 3.into();
        let mut theirs = serde_json::to_vec(&theirs).expect("serialize");
        theirs.push(b'\n');
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs)
        );
    }
}
