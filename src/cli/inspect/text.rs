//! `inspect`'s text: the summary and tables for people.

use std::io::{self, Write};

use crate::checkpoint::{Checkpoint, Summary};
use crate::units::{Shown, grouped, human_bytes, short_count, write_human_bytes};

use super::HeaderReport;
use super::json::layout_name;

/// Writes the human summary and tables of `checkpoint` to `out`, with only
/// the tensors `kept` keeps in the table when given.
///
/// # Errors
/// When writing fails.
pub fn write_text(report: HeaderReport<'_>, out: &mut impl Write) -> io::Result<()> {
    let (checkpoint, summary) = (report.checkpoint, report.summary);
    let shards = checkpoint.shards();
    writeln!(out, "checkpoint   {}", Shown::path(checkpoint.root()))?;
    if let Some(commit) = checkpoint
        .remote()
        .and_then(crate::checkpoint::ByteSource::commit)
    {
        writeln!(out, "commit       {}", Shown::new(commit))?;
    }
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
    writeln!(
        out,
        "bits/weight  {:.3} (every stored byte over the parameters, as mlx-lm counts)",
        summary.bits_per_weight
    )?;
    write_encodings(summary, out)?;
    write_torch(checkpoint, out)?;
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
            Shown::new(&s.file),
            human_bytes(s.file_bytes),
            s.tensors.len()
        )?;
    }

    write_layers(summary, checkpoint, out)?;
    writeln!(out)?;
    if let Some(k) = report.kept {
        writeln!(
            out,
            "filter       {}: {} of {} tensors",
            Shown::new(&k.text),
            k.keep.iter().filter(|&&b| b).count(),
            k.keep.len()
        )?;
    }
    write_tensor_rows(checkpoint, report.kept.map(|k| k.keep.as_slice()), out)
}

/// Each layer's FP8 weights by format and block (`fp8 e4m3 128x128 x9`),
/// as the layer table's column says them.
fn fp8_by_layer(
    summary: &Summary,
    checkpoint: &Checkpoint,
) -> std::collections::HashMap<Option<u64>, Vec<(String, usize)>> {
    let mut by_layer: std::collections::HashMap<Option<u64>, Vec<(String, usize)>> =
        std::collections::HashMap::new();
    for t in summary.fp8.iter().flat_map(|f| &f.tensors) {
        let layer = crate::checkpoint::layer_of(checkpoint.tensors().at(t.weight).name());
        let label = match (t.scale, t.block) {
            (Some(_), Some([r, c])) => format!("fp8 {} {r}x{c}", t.format.name()),
            (Some(_), None) => format!("fp8 {} (scale does not fit)", t.format.name()),
            (None, _) => format!("fp8 {} unscaled", t.format.name()),
        };
        let labels = by_layer.entry(layer).or_default();
        match labels.iter_mut().find(|(l, _)| *l == label) {
            Some((_, n)) => *n += 1,
            None => labels.push((label, 1)),
        }
    }
    by_layer
}

/// The per-layer table: parameters, bytes, bits per weight, and how the
/// layer's weights are quantized, by MLX or as FP8 (every numbered layer,
/// then the rest).
fn write_layers(
    summary: &Summary,
    checkpoint: &Checkpoint,
    out: &mut impl Write,
) -> io::Result<()> {
    if summary.layers.len() < 2 {
        return Ok(());
    }
    let fp8 = fp8_by_layer(summary, checkpoint);
    writeln!(out)?;
    writeln!(
        out,
        "{:<8}  {:>10}  {:>12}  {:>6}  QUANTIZED",
        "LAYER", "PARAMS", "BYTES", "BITS/W"
    )?;
    for l in &summary.layers {
        let mut recipe: Vec<String> = summary.quantization.as_ref().map_or(Vec::new(), |q| {
            q.recipe_of_layer(l.layer)
                .iter()
                .map(|(p, n)| format!("{} {}-bit g{} x{n}", p.mode, p.bits, p.group_size))
                .collect()
        });
        recipe.extend(
            fp8.get(&l.layer)
                .into_iter()
                .flatten()
                .map(|(label, n)| format!("{label} x{n}")),
        );
        let quantized = recipe.join(", ");
        writeln!(
            out,
            "{:<8}  {:>10}  {:>12}  {:>6.2}  {}",
            l.layer
                .map_or_else(|| "other".to_owned(), |n| n.to_string()),
            short_count(l.params),
            human_bytes(l.bytes),
            l.bits_per_weight(),
            if quantized.is_empty() {
                "-"
            } else {
                &quantized
            }
        )?;
    }
    Ok(())
}

/// The table of every tensor: name, dtype, shape, bytes, shard.
fn write_tensor_rows(
    checkpoint: &Checkpoint,
    keep: Option<&[bool]>,
    out: &mut impl Write,
) -> io::Result<()> {
    let shards = checkpoint.shards();
    let tensors = checkpoint.tensors();
    let name_width = name_column_width(checkpoint);
    let shape_width = tensors
        .iter()
        .map(|t| shape_text_len(t.shape()))
        .max()
        .unwrap_or(0)
        .max(5);
    writeln!(
        out,
        "{:<name_width$}  {:<11}  {:<shape_width$}  {:>12}  SHARD",
        "NAME", "DTYPE", "SHAPE", "BYTES"
    )?;
    let shard_names: Vec<Shown<'_>> = shards.iter().map(|s| Shown::new(&s.file)).collect();
    // The 90k rows, as the JSON list: in pieces on every core.
    // Padded by hand, byte for byte as `{:<w$}` and `{:>w$}` pad (by
    // characters): the formatter took most of the time of 90k rows.
    let rows = |piece: std::ops::Range<usize>, buf: &mut Vec<u8>| {
        let mut shape = String::new();
        let mut bytes = String::new();
        let mut digits = itoa::Buffer::new();
        for t in tensors.iter_range(piece) {
            if keep.is_some_and(|k| !k.get(t.position()).copied().unwrap_or(false)) {
                continue;
            }
            let name = Shown::new(t.name());
            buf.extend_from_slice(name.as_bytes());
            pad(buf, name_width, name.chars().count());
            buf.extend_from_slice(b"  ");
            let dtype = t.dtype().name();
            buf.extend_from_slice(dtype.as_bytes());
            pad(buf, 11, dtype.len());
            buf.extend_from_slice(b"  ");
            shape.clear();
            shape.push('[');
            for (i, d) in t.shape().iter().enumerate() {
                if i > 0 {
                    shape.push_str(", ");
                }
                shape.push_str(digits.format(*d));
            }
            shape.push(']');
            buf.extend_from_slice(shape.as_bytes());
            pad(buf, shape_width, shape.len());
            buf.extend_from_slice(b"  ");
            bytes.clear();
            write_human_bytes(&mut bytes, t.bytes());
            pad(buf, 12, bytes.len());
            buf.extend_from_slice(bytes.as_bytes());
            buf.extend_from_slice(b"  ");
            buf.extend_from_slice(shard_names[t.shard().index()].as_bytes());
            buf.push(b'\n');
        }
    };
    crate::cli::pieces::write_in_pieces(tensors.len(), b"", &rows, out)
}

/// The NAME column's width: the longest printable name, 4 to 72 characters.
pub(super) fn name_column_width(checkpoint: &Checkpoint) -> usize {
    checkpoint
        .tensors()
        .iter()
        .map(|t| Shown::new(t.name()).chars().count())
        .max()
        .unwrap_or(0)
        .clamp(4, 72)
}

/// Spaces that bring text of `len` characters to `width`.
fn pad(buf: &mut Vec<u8>, width: usize, len: usize) {
    buf.resize(buf.len() + width.saturating_sub(len), b' ');
}

/// The length of `shape` written as `{:?}` writes it (`[7168, 2048]`).
fn shape_text_len(shape: &[u64]) -> usize {
    let digits: usize = shape
        .iter()
        .map(|&d| d.checked_ilog10().map_or(1, |l| l as usize + 1))
        .sum();
    2 + digits + 2 * shape.len().saturating_sub(1)
}

/// The quantization and FP8 lines of the text summary.
fn write_encodings(summary: &Summary, out: &mut impl Write) -> io::Result<()> {
    if let Some(q) = &summary.quantization {
        let default = if q.recipe().len() > 1 || q.default_unused() {
            format!(
                " (config.json's default, {} {}-bit g{}, {})",
                q.default.mode,
                q.default.bits,
                q.default.group_size,
                if q.default_unused() {
                    "is used by none"
                } else {
                    "is one of them"
                }
            )
        } else {
            String::new()
        };
        writeln!(
            out,
            "quantized    {} tensors: {}{default}{}: {:.2} bits per weight with {}",
            q.tensors.len(),
            q.recipe_text(),
            if q.tensors.iter().any(|t| t.inferred) {
                " (some inferred from shapes)"
            } else {
                ""
            },
            q.bits_per_weight,
            if q.modes.keys().all(|m| m.has_biases()) {
                "scales and biases"
            } else if q.modes.keys().any(|m| m.has_biases()) {
                "scales (and biases in affine layers)"
            } else {
                "scales"
            }
        )?;
    }
    if let Some(f) = &summary.fp8 {
        let scaled = f.tensors.iter().filter(|t| t.scale.is_some()).count();
        writeln!(
            out,
            "fp8          {} tensors, {} with block scales{}; scales {} (overhead, not parameters)",
            f.tensors.len(),
            scaled,
            f.block
                .map_or_else(String::new, |[r, c]| format!(" of {r}x{c}")),
            human_bytes(f.scale_bytes)
        )?;
    }
    Ok(())
}

/// The lines only PyTorch files have: the format, the pickle's verdict
/// with every global that is not innocuous, the tensors on another's
/// storage; and files of the folder that were not read.
fn write_torch(checkpoint: &Checkpoint, out: &mut impl Write) -> io::Result<()> {
    for file in checkpoint.not_read() {
        writeln!(
            out,
            "not read     {} (the safetensors files are read, as transformers reads them)",
            Shown::new(file)
        )?;
    }
    let Some((verdict, flagged)) = checkpoint.torch_verdict() else {
        return Ok(());
    };
    let formats: std::collections::BTreeSet<&str> = (0..checkpoint.shards().len())
        .filter_map(|k| checkpoint.torch_shard(crate::checkpoint::ShardId(k)))
        .map(|t| t.format.name())
        .collect();
    let formats: Vec<&str> = formats.into_iter().collect();
    writeln!(
        out,
        "format       pytorch ({}), read without running its pickle",
        formats.join(", ")
    )?;
    if flagged.is_empty() {
        writeln!(
            out,
            "pickle       {}: every global it imports is one the reader understands",
            verdict.name()
        )?;
    }
    for g in &flagged {
        writeln!(
            out,
            "pickle       {}: imports `{}` (never called here; torch.load would call it)",
            g.safety.name(),
            Shown::new(&g.global)
        )?;
    }
    // What the reader left out (undecoded storages, callables never
    // called) and what its bounds cut, each said once.
    let mut said = std::collections::BTreeSet::new();
    for k in 0..checkpoint.shards().len() {
        let Some(torch) = checkpoint.torch_shard(crate::checkpoint::ShardId(k)) else {
            continue;
        };
        for line in &torch.skipped {
            if said.len() < 20 && said.insert(line.as_str()) {
                writeln!(out, "left out     {}", Shown::new(line))?;
            }
        }
    }
    let tensors = checkpoint.tensors();
    let mut tied = 0;
    for t in tensors {
        let Some(at) = checkpoint.torch_tensor_at(t.position()) else {
            continue;
        };
        let Some(other) = at.tied_to.and_then(|i| tensors.get(i)) else {
            continue;
        };
        tied += 1;
        if tied <= 20 {
            let how = if at.same_view {
                "tied to"
            } else {
                "a view of the storage of"
            };
            writeln!(
                out,
                "shared       {} is {how} {} (counted once)",
                Shown::new(t.name()),
                Shown::new(other.name())
            )?;
        }
    }
    if tied > 20 {
        writeln!(out, "shared       and {} more", tied - 20)?;
    }
    Ok(())
}
