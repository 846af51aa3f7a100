//! `weightscope convert PATH OUT`: PyTorch files to safetensors, without
//! Python (see `checkpoint::convert`).

use std::io::IsTerminal as _;

use crate::units::Shown;

/// What `weightscope convert` was asked for.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ConvertArgs {
    /// A PyTorch checkpoint: a `.bin`/`.pth`/`.pt` file, or a folder of sharded `.bin` files with their index.
    pub path: std::path::PathBuf,
    /// The folder the safetensors files are written to (made if absent; never inside PATH).
    pub out: std::path::PathBuf,
    /// One JSON object: the files written, tensors, tied names left out, files copied.
    #[arg(long)]
    pub json: bool,
}

/// `weightscope convert`: runs it and returns the exit status.
#[must_use]
pub fn main(args: &ConvertArgs) -> u8 {
    if let Err(err) = super::signals::watch(true, |_| {}) {
        super::stderr_line(format_args!("cannot catch termination signals: {err}"));
    }
    let Some(checkpoint) = super::ok_or_said(super::open_checkpoint(&args.path)) else {
        return super::BAD_INPUT;
    };
    if let Some(problem) = checkpoint.fatal_problems().first() {
        super::stderr_line(format_args!("{problem}"));
        return super::BAD_INPUT;
    }
    super::warn_of_imports(
        &checkpoint,
        "never called; only its tensors are converted",
        &args.path,
    );
    let terminal = std::io::stderr().is_terminal();
    let converted = crate::checkpoint::convert::to_safetensors(
        &checkpoint,
        &args.out,
        &super::signals::CUT_SHORT,
        &mut |done, total| {
            if terminal {
                let end = if done == total { "\n" } else { "" };
                eprint!("\rconvert: {done}/{total} tensors{end}");
            }
        },
    );
    let Some(report) = super::ok_or_said(converted) else {
        return super::BAD_INPUT;
    };
    let written = super::print_report(args.json.then_some(&report), |mut out| {
        write_text(&args.out, &report, &mut out)
    });
    if let Some(signal) = super::signals::received() {
        super::stderr_line(format_args!(
            "convert was cut short by {}; the files listed are whole, the rest were not written",
            super::signals::name(signal)
        ));
        return super::signals::exit_status(signal);
    }
    super::output_status(written).map_or_else(|code| code, |()| 0)
}

fn write_text(
    out_dir: &std::path::Path,
    report: &crate::checkpoint::convert::Converted,
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    writeln!(
        out,
        "wrote {} tensors to {}",
        report.tensors,
        Shown::path(out_dir)
    )?;
    for (file, bytes) in &report.files {
        writeln!(
            out,
            "  {}  {}",
            Shown::new(file),
            crate::units::human_bytes(*bytes)
        )?;
    }
    for (left, kept) in &report.tied {
        writeln!(
            out,
            "tied: {} left out, the same storage as {} (as save_pretrained does)",
            Shown::new(left),
            Shown::new(kept)
        )?;
    }
    if !report.copied.is_empty() {
        let copied: Vec<String> = report
            .copied
            .iter()
            .map(|c| Shown::new(c).to_string())
            .collect();
        writeln!(out, "copied: {}", copied.join(", "))?;
    }
    Ok(())
}
