//! `weightscope walk`: materialize every tensor in shard order under a
//! release policy while sampling memory, then print the peaks against what
//! the headers predict, the findings, and the trace.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crate::memory::{MachineMemory, Policy};
use crate::mlx;
use crate::profile::{self, Finding, Recorded, Sampler, Trace, TraceEvent, Transform, WalkOutcome};
use crate::units::human_bytes;
use crate::weights::{MlxLoader, Weights};

/// What `weightscope walk` was asked for.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct WalkArgs {
    /// A folder, one `.safetensors` or `.gguf` file, a Hub repo (`hf://ORG/REPO[@REV]`) or an `https://` address of one file.
    pub path: PathBuf,
    /// What to release as the walk goes.
    #[arg(long, value_parser = super::policy_parser())]
    pub policy: Policy,
    /// What to do to each tensor.
    #[arg(long, value_parser = super::transform_parser(), default_value = "none")]
    pub transform: Transform,
    /// The report and the samples as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the trace as CSV here.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write the trace as JSON here.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Sampling interval in milliseconds (1 to 60000).
    #[arg(long = "interval-ms", value_name = "N", value_parser = super::interval, default_value = "50", hide_default_value = true)]
    pub interval: Duration,
    /// MLX's memory limit before anything is materialized (8G, 512M).
    #[arg(long, value_name = "SIZE", value_parser = super::positive_size)]
    pub memory_limit: Option<u64>,
    /// MLX's buffer-cache limit (1G, 0).
    #[arg(long, value_name = "SIZE", value_parser = super::size)]
    pub cache_limit: Option<u64>,
}

/// A finished walk: its outcome, the trace and the findings.
#[derive(Debug, Clone)]
pub struct WalkReport {
    /// How it ended.
    pub outcome: WalkOutcome,
    /// Samples and events.
    pub trace: Trace,
    /// What the trace shows.
    pub findings: Vec<Finding>,
    /// Samples the sampler thread took, and its mean time per sample.
    pub sampler: (u64, Duration),
    /// The sampling interval.
    pub interval: Duration,
}

/// Why a walk could not run.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    /// The checkpoint could not be opened (exit status 2).
    #[error("{0}")]
    BadInput(String),
    /// MLX or the OS failed.
    #[error("{0}")]
    Failed(String),
}

/// The checked outputs of a walk (`--csv`, `--trace`).
#[derive(Debug, Default)]
pub struct WalkOutputs {
    csv: Option<crate::files::Output>,
    trace: Option<crate::files::Output>,
}

/// Refuses output paths inside the checkpoint or over a checkpoint file,
/// before anything is read; what passes is written through the returned
/// outputs, which check again when they write.
///
/// # Errors
/// A line naming the path and why.
pub fn check_outputs(args: &WalkArgs) -> Result<WalkOutputs, crate::files::FileError> {
    let check = |path: &Option<PathBuf>| {
        path.as_deref()
            .map(|p| crate::files::check_output(p, &[&args.path]))
            .transpose()
    };
    Ok(WalkOutputs {
        csv: check(&args.csv)?,
        trace: check(&args.trace)?,
    })
}

/// Runs the walk described by `args`, reporting progress on stderr when it is
/// a terminal; `cancel` cuts it short between tensors (what was recorded
/// stays in the report).
///
/// # Errors
/// [`WalkError::BadInput`] when the checkpoint cannot be opened;
/// [`WalkError::Failed`] when the sampler or the memory limit fails.
pub fn run(args: &WalkArgs, cancel: &AtomicBool) -> Result<WalkReport, WalkError> {
    let checkpoint =
        super::open_checkpoint(&args.path).map_err(|e| WalkError::BadInput(e.to_string()))?;
    if let Some(problem) = checkpoint.fatal_problems().first() {
        return Err(WalkError::BadInput(problem.to_string()));
    }
    if let Some(limit) = args.memory_limit {
        mlx::set_memory_limit(limit).map_err(|e| WalkError::Failed(e.to_string()))?;
    }
    if let Some(limit) = args.cache_limit {
        mlx::set_cache_limit(limit).map_err(|e| WalkError::Failed(e.to_string()))?;
    }
    let mut weights = Weights::open_with(checkpoint, MlxLoader)
        .map_err(|e| WalkError::BadInput(e.to_string()))?;
    let sampler = Sampler::spawn(args.interval, || {})
        .map_err(|e| WalkError::Failed(format!("cannot start the memory sampler: {e}")))?;
    let origin = Instant::now();
    let mut trace = Trace::new(format!(
        "{} {}, {}",
        args.policy.as_str(),
        args.transform.as_str(),
        args.path.display()
    ));
    trace.checkpoint = crate::units::location_data(&args.path.to_string_lossy());
    trace.device = mlx::default_device().map_or_else(|_| "unknown".into(), |d| d.name());
    trace.policy = Some(args.policy);
    trace.transform = Some(args.transform.as_str().into());
    let progress = std::io::stderr().is_terminal();
    let mut last_progress = Instant::now();
    let outcome = profile::walk(
        &mut weights,
        args.policy,
        args.transform,
        cancel,
        &mut |recorded: Recorded| {
            while let Some(sample) = sampler.try_recv() {
                trace.push_sample(&sample.on_clock(origin));
            }
            trace.push_sample(&recorded.memory.on_clock(origin));
            trace.events.push(TraceEvent::new(
                &recorded.mark,
                recorded.memory.at,
                origin,
                &recorded.memory,
            ));
            if progress && last_progress.elapsed() >= Duration::from_millis(100) {
                last_progress = Instant::now();
                let (done, total) = recorded.progress;
                eprint!(
                    "\rwalk {}: {done}/{total} tensors, MLX active {}   ",
                    args.policy.as_str(),
                    human_bytes(recorded.memory.mlx_or_zero().active_bytes)
                );
            }
        },
    );
    if progress {
        eprintln!();
    }
    while let Some(sample) = sampler.try_recv() {
        trace.push_sample(&sample.on_clock(origin));
    }
    let sampler_figures = (sampler.samples_taken(), sampler.mean_sample_time());
    drop(sampler);
    // What the walk kept (retain) is freed before the process reports.
    drop(weights);
    trace.expected = Some(outcome.expected);
    trace.sort();
    let findings = profile::findings(&trace);
    Ok(WalkReport {
        outcome,
        trace,
        findings,
        sampler: sampler_figures,
        interval: args.interval,
    })
}

impl WalkReport {
    /// The sampler's own cost, in percent of one core.
    #[must_use]
    pub fn sampler_cost_percent(&self) -> f64 {
        100.0 * self.sampler.1.as_secs_f64() / self.interval.as_secs_f64().max(1e-6)
    }

    /// Writes the trace files that were asked for; each is written whole
    /// or not at all, and one failing does not stop the other.
    ///
    /// # Errors
    /// The errors of the files that could not be written.
    pub fn save(&self, outputs: &WalkOutputs) -> Result<(), Vec<profile::TraceError>> {
        let mut errors = Vec::new();
        if let Some(out) = &outputs.csv
            && let Err(err) = self.trace.save_as(out, true)
        {
            errors.push(err);
        }
        if let Some(out) = &outputs.trace
            && let Err(err) = self.trace.save_as(out, false)
        {
            errors.push(err);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The JSON report (the CLI contract: `policy`, `peak_mlx_active_bytes`,
    /// `peak_rss_bytes`, `expected_peak_bytes`, `samples`, `events`).
    #[must_use]
    pub fn to_json(&self) -> JsonWalk<'_> {
        let o = &self.outcome;
        let fit = profile::fit_report(
            &o.expected,
            &MachineMemory::read(),
            mlx::memory().map_or(0, |m| m.limit_bytes),
            None,
        );
        JsonWalk {
            policy: o.policy.as_str(),
            transform: o.transform.as_str(),
            checkpoint: &self.trace.checkpoint,
            device: &self.trace.device,
            tensors: o.steps_total,
            steps_done: o.steps_done,
            cancelled: o.cancelled,
            error: o.error.as_ref().map(ToString::to_string),
            peak_mlx_active_bytes: o.peak_mlx_active_bytes,
            peak_rss_bytes: o.peak_rss_bytes,
            expected_peak_bytes: o.expected_peak_bytes(),
            expected: &o.expected,
            source_bytes: o.source_bytes,
            largest_shard_bytes: o.largest_shard_bytes,
            elapsed_secs: o.elapsed_secs,
            read_wait_secs: o.read_wait_secs,
            sampler: JsonSampler {
                interval_ms: self.interval.as_secs_f64() * 1e3,
                samples: self.sampler.0,
                mean_sample_micros: self.sampler.1.as_secs_f64() * 1e6,
                cost_percent_of_one_core: self.sampler_cost_percent(),
            },
            findings: &self.findings,
            fit: fit.lines,
            samples: &self.trace.samples,
            events: &self.trace.events,
        }
    }

    /// The text report.
    ///
    /// # Errors
    /// When `out` fails.
    pub fn write_text(&self, out: &mut impl Write) -> std::io::Result<()> {
        let o = &self.outcome;
        writeln!(
            out,
            "policy:      {} (transform {})",
            o.policy.as_str(),
            o.transform.as_str()
        )?;
        writeln!(
            out,
            "checkpoint:  {}",
            crate::units::Shown::new(&self.trace.checkpoint)
        )?;
        writeln!(out, "device:      {}", self.trace.device)?;
        writeln!(
            out,
            "tensors:     {} of {} in {:.2} s{}",
            o.steps_done,
            o.steps_total,
            o.elapsed_secs,
            if o.cancelled { " (cancelled)" } else { "" }
        )?;
        writeln!(
            out,
            "peak MLX active: {} (expected {} for {}; retain {}, release-tensor {}, release-shard {})",
            human_bytes(o.peak_mlx_active_bytes),
            human_bytes(o.expected_peak_bytes()),
            o.policy.as_str(),
            human_bytes(o.expected.retain),
            human_bytes(o.expected.release_tensor),
            human_bytes(o.expected.release_shard)
        )?;
        writeln!(out, "peak RSS:    {}", human_bytes(o.peak_rss_bytes))?;
        if crate::remote::is_address(&self.trace.checkpoint) {
            writeln!(
                out,
                "reads:       by range requests, in the walk's time (no disk read ahead)"
            )?;
        } else {
            writeln!(
                out,
                "reads:       {:.2} s of the walk waiting for bytes from disk",
                o.read_wait_secs
            )?;
        }
        writeln!(
            out,
            "sampler:     {} samples every {} ms, {:.1} us each ({:.3} % of one core)",
            self.sampler.0,
            self.interval.as_millis(),
            self.sampler.1.as_secs_f64() * 1e6,
            self.sampler_cost_percent()
        )?;
        if let Some(error) = &o.error {
            writeln!(out, "error:       {error}")?;
        }
        if self.findings.is_empty() {
            writeln!(out, "findings:    none")?;
        } else {
            writeln!(out, "findings:")?;
            for finding in &self.findings {
                writeln!(out, "  - {}", finding.message)?;
            }
        }
        Ok(())
    }
}

/// `weightscope walk`: runs it and returns the exit status.
#[must_use]
pub fn main(args: &WalkArgs) -> u8 {
    let Some(outputs) = super::ok_or_said(check_outputs(args)) else {
        return super::BAD_INPUT;
    };
    // SIGINT, SIGTERM, SIGHUP: the walk stops after the tensor at hand and
    // what it recorded is written and printed.
    if let Err(err) = super::signals::watch(true, |_| {}) {
        super::stderr_line(format_args!("cannot catch termination signals: {err}"));
    }
    let report = match run(args, &super::signals::CUT_SHORT) {
        Ok(report) => report,
        Err(WalkError::BadInput(err)) => {
            super::stderr_line(format_args!("{err}"));
            return super::BAD_INPUT;
        }
        Err(WalkError::Failed(err)) => {
            super::stderr_line(format_args!("{err}"));
            return 1;
        }
    };
    // The report is printed even when a trace file could not be written.
    let saved = report.save(&outputs);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let written = if args.json {
        super::json_line(&mut out, &report.to_json())
    } else {
        let mut shown = crate::units::ShownLines::new(&mut out);
        report
            .write_text(&mut shown)
            .and_then(|()| shown.finish().map(drop))
    };
    drop(out);
    if let Err(errors) = &saved {
        for err in errors {
            super::stderr_line(format_args!("{err}"));
        }
    }
    if let Some(signal) = super::signals::received() {
        super::stderr_line(format_args!(
            "the walk was cut short by {} after {} of {} tensors; what it recorded is above{}",
            super::signals::name(signal),
            report.outcome.steps_done,
            report.outcome.steps_total,
            if args.csv.is_some() || args.trace.is_some() {
                " and in the trace"
            } else {
                ""
            }
        ));
        return super::signals::exit_status(signal);
    }
    if let Err(code) = super::output_status(written) {
        return code;
    }
    if saved.is_err() {
        return 1;
    }
    if let Some(error) = &report.outcome.error {
        super::stderr_line(format_args!("the walk stopped: {error}"));
        return 1;
    }
    0
}

/// `walk --json`: the CLI contract's keys (docs/profiler.md), with what the
/// walk measured beside them.
#[derive(serde::Serialize)]
pub struct JsonWalk<'a> {
    policy: &'static str,
    transform: &'static str,
    checkpoint: &'a str,
    device: &'a str,
    tensors: usize,
    steps_done: usize,
    cancelled: bool,
    error: Option<String>,
    peak_mlx_active_bytes: u64,
    peak_rss_bytes: u64,
    expected_peak_bytes: u64,
    expected: &'a crate::memory::ExpectedPeaks,
    source_bytes: u64,
    largest_shard_bytes: u64,
    elapsed_secs: f64,
    read_wait_secs: f64,
    sampler: JsonSampler,
    findings: &'a [Finding],
    fit: Vec<String>,
    samples: &'a [crate::memory::Sample],
    events: &'a [TraceEvent],
}

/// The memory sampler's own cost during a walk.
#[derive(serde::Serialize)]
struct JsonSampler {
    interval_ms: f64,
    samples: u64,
    mean_sample_micros: f64,
    cost_percent_of_one_core: f64,
}
