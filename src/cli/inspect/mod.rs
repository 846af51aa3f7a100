//! `weightscope inspect PATH [--json]`: the header summary. `json.rs`
//! writes it as JSON (with the tensor list written by hand, fast:
//! `tensor_list.rs`), `text.rs` as text for people.

mod json;
mod tensor_list;
mod text;

pub(super) use json::JsonOpening;
pub use json::write_json;
pub use text::write_text;

use crate::checkpoint::{Checkpoint, Summary};
use crate::units::Shown;

/// What `inspect` writes: a checkpoint, its summary and, with a filter,
/// the tensors the filter keeps (the figures stay the whole checkpoint's).
#[derive(Clone, Copy)]
pub struct HeaderReport<'a> {
    /// The checkpoint.
    pub checkpoint: &'a Checkpoint,
    /// Its summary.
    pub summary: &'a Summary,
    /// The tensors listed, when a filter chose them.
    pub kept: Option<&'a Kept>,
}

/// The tensors `inspect --filter` lists: its text and, by position,
/// whether each is kept.
pub struct Kept {
    /// The filter as typed.
    pub text: String,
    /// Whether the tensor at each position is listed.
    pub keep: Vec<bool>,
}

/// Whether each tensor passes `query`: its name, stored dtype and shape,
/// bytes, and, for a packed or FP8 weight, its logical shape and mode.
pub(super) fn kept_by(
    checkpoint: &Checkpoint,
    summary: &Summary,
    query: &crate::checkpoint::query::TensorQuery,
) -> Vec<bool> {
    let tensors = checkpoint.tensors();
    let mut encoded: Vec<Option<(String, &[u64])>> = vec![None; tensors.len()];
    if let Some(q) = &summary.quantization {
        for t in &q.tensors {
            if let Some(slot) = encoded.get_mut(t.weight) {
                *slot = Some((t.params.mode.name().to_owned(), t.logical_shape.as_slice()));
            }
        }
    }
    if let Some(f) = &summary.fp8 {
        for t in &f.tensors {
            if let Some(slot) = encoded.get_mut(t.weight) {
                *slot = Some(("fp8".to_owned(), &[][..]));
            }
        }
    }
    tensors
        .iter()
        .map(|t| {
            let e = encoded.get(t.position()).and_then(Option::as_ref);
            query.matches(&crate::checkpoint::query::TensorFacts {
                names: [Some(t.name()), None],
                dtype: t.dtype().name(),
                shapes: [
                    Some(t.shape()),
                    e.map(|(_, shape)| *shape).filter(|s| !s.is_empty()),
                ],
                bytes: t.bytes(),
                mode: e.map(|(mode, _)| mode.as_str()),
            })
        })
        .collect()
}

/// What `weightscope inspect` was asked for.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct InspectArgs {
    /// A folder, one `.safetensors` or `.gguf` file, a Hub repo (`hf://ORG/REPO[@REV]`) or an `https://` address of one file.
    pub path: std::path::PathBuf,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// List only the tensors this filter keeps, as the window's table
    /// filter reads it: name words, `shape:2048x7168` (`*` any size),
    /// `dtype:bf16`, `mode:nvfp4`, `size>100M` (docs/app.md).
    #[arg(long, value_name = "QUERY")]
    pub filter: Option<String>,
}

/// `weightscope inspect`: runs it and returns the exit status.
#[must_use]
pub fn main(args: &InspectArgs) -> u8 {
    let (path, json) = (args.path.as_path(), args.json);
    let gguf_filter = || {
        super::stderr_line(format_args!(
            "--filter: {}: a GGUF file's tensors are listed whole (the filter reads safetensors checkpoints for now)",
            Shown::path(path)
        ));
        super::BAD_INPUT
    };
    if path.is_file() && crate::checkpoint::gguf::is_gguf(path) {
        if args.filter.is_some() {
            return gguf_filter();
        }
        return super::gguf::main(path, json);
    }
    let Some(checkpoint) = super::ok_or_said(super::open_checkpoint(path)) else {
        return super::BAD_INPUT;
    };
    let fatal = checkpoint.fatal_problems();
    if !fatal.is_empty() {
        for problem in fatal {
            super::stderr_line(format_args!("{problem}"));
        }
        return super::BAD_INPUT;
    }
    for problem in checkpoint.problems() {
        super::stderr_line(format_args!("warning: {problem}"));
    }
    // A GGUF file on the Hub or at a URL: the same report as a local one.
    if let Some(header) = checkpoint.gguf_header() {
        if args.filter.is_some() {
            return gguf_filter();
        }
        let place = super::gguf::Place {
            path,
            file_bytes: checkpoint.shards().first().map_or(0, |s| s.file_bytes),
            commit: checkpoint
                .remote()
                .and_then(crate::checkpoint::ByteSource::commit),
        };
        return super::gguf::report(&place, header, json);
    }
    let summary = checkpoint.summary();
    let kept = match &args.filter {
        None => None,
        Some(text) => match crate::checkpoint::query::TensorQuery::parse(text) {
            Ok(query) => Some(Kept {
                text: text.clone(),
                keep: kept_by(&checkpoint, &summary, &query),
            }),
            Err(err) => {
                super::stderr_line(format_args!("--filter: {err}"));
                return super::BAD_INPUT;
            }
        },
    };
    let mut out = super::big_output();
    let report = HeaderReport {
        checkpoint: &checkpoint,
        summary: &summary,
        kept: kept.as_ref(),
    };
    let written = if json {
        let mut shown = crate::units::ShownJson::new(&mut out);
        write_json(report, &mut shown).and_then(|()| shown.finish().map(drop))
    } else {
        let mut shown = crate::units::ShownLines::new(&mut out);
        write_text(report, &mut shown).and_then(|()| shown.finish().map(drop))
    };
    let flushed = written.and_then(|()| std::io::Write::flush(&mut out));
    super::output_status(flushed).map_or_else(|code| code, |()| 0)
}
