//! The rows of the trace's CSV form and of a journal, as both the writer
//! and the reader see them.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{FlatSample, JobInfo, MarkKind, Origin, Sample, TraceEvent, census, job_end, stacks};

pub(super) const CSV_HEADER: &str = "record,t_secs,rss_bytes,rss_anon_bytes,rss_file_bytes,mlx_active_bytes,\
mlx_cache_bytes,mlx_peak_bytes,event,target,bytes,shard,shard_resident_bytes,detail,\
peak_rss_bytes,no_mlx";
/// The header of trace CSVs written before `peak_rss_bytes` and `no_mlx`
/// (still read).
pub(super) const CSV_HEADER_V1: &str = "record,t_secs,rss_bytes,rss_anon_bytes,rss_file_bytes,mlx_active_bytes,\
mlx_cache_bytes,mlx_peak_bytes,event,target,bytes,shard,shard_resident_bytes,detail";

pub(super) fn is_csv(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
}

/// One row of the trace CSV, whatever its kind: `sample` rows fill the
/// memory columns, `event` rows the event columns, `meta` rows put their key
/// in `target` and their value in `detail`. Empty fields are `None`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct CsvRow {
    pub(super) record: String,
    pub(super) t_secs: Option<f64>,
    pub(super) rss_bytes: Option<u64>,
    pub(super) rss_anon_bytes: Option<u64>,
    pub(super) rss_file_bytes: Option<u64>,
    pub(super) mlx_active_bytes: Option<u64>,
    pub(super) mlx_cache_bytes: Option<u64>,
    pub(super) mlx_peak_bytes: Option<u64>,
    pub(super) event: Option<MarkKind>,
    pub(super) target: Option<String>,
    pub(super) bytes: Option<u64>,
    pub(super) shard: Option<String>,
    pub(super) shard_resident_bytes: Option<u64>,
    pub(super) detail: Option<String>,
    #[serde(default)]
    pub(super) peak_rss_bytes: Option<u64>,
    #[serde(default)]
    pub(super) no_mlx: Option<bool>,
}

impl CsvRow {
    /// The sample a `sample` row holds, at `t_secs`.
    pub(super) fn to_sample(&self, t_secs: f64) -> Sample {
        FlatSample {
            t_secs,
            rss_bytes: self.rss_bytes.unwrap_or(0),
            rss_anon_bytes: self.rss_anon_bytes.unwrap_or(0),
            rss_file_bytes: self.rss_file_bytes.unwrap_or(0),
            mlx_active_bytes: self.mlx_active_bytes.unwrap_or(0),
            mlx_cache_bytes: self.mlx_cache_bytes.unwrap_or(0),
            mlx_peak_bytes: self.mlx_peak_bytes.unwrap_or(0),
            peak_rss_bytes: self.peak_rss_bytes.unwrap_or(0),
            no_mlx: self.no_mlx.unwrap_or(false),
        }
        .into()
    }

    /// The row of one sample.
    pub(super) fn sample(s: FlatSample) -> Self {
        Self {
            record: "sample".into(),
            t_secs: Some(s.t_secs),
            rss_bytes: Some(s.rss_bytes),
            rss_anon_bytes: Some(s.rss_anon_bytes),
            rss_file_bytes: Some(s.rss_file_bytes),
            mlx_active_bytes: Some(s.mlx_active_bytes),
            mlx_cache_bytes: Some(s.mlx_cache_bytes),
            mlx_peak_bytes: Some(s.mlx_peak_bytes),
            peak_rss_bytes: Some(s.peak_rss_bytes),
            no_mlx: s.no_mlx.then_some(true),
            ..Self::default()
        }
    }
}

/// One line of a journal: a trace written as it happens (JSON Lines).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "kebab-case")]
pub(super) enum JournalRow {
    /// The first line: what the trace is.
    Meta {
        version: u32,
        label: String,
        #[serde(default)]
        checkpoint: String,
        #[serde(default)]
        device: String,
        #[serde(default)]
        job: Option<JobInfo>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<Origin>,
    },
    Sample(FlatSample),
    Event(TraceEvent),
    /// A frame, a stack, a probe sample or a rank (in the order the
    /// trace's `stacks` keeps them).
    Frame {
        id: u32,
        #[serde(flatten)]
        frame: stacks::Frame,
    },
    Stack {
        id: u32,
        frames: Vec<u32>,
    },
    Probe {
        sample: stacks::StackSample,
    },
    Rank {
        pid: u32,
        rank: u32,
    },
    /// A held-by walk of a probe (who held MLX memory then).
    Held {
        walk: census::Census,
    },
    /// The last line: the run ended (the job's status, when it had one, and
    /// what the recorder knew then).
    End {
        #[serde(default)]
        exit_code: Option<i32>,
        #[serde(default)]
        ended: Option<job_end::JobEnd>,
    },
}

/// The earliest and latest times a journal may hold, in seconds on its
/// clock: a year either side (a recording is hours; 10^300 is a forgery
/// that would print a 300-digit time).
pub(super) const JOURNAL_CLOCK_SECS: f64 = 366.0 * 86_400.0;
/// The latest wall clock a journal's origin may state (Unix seconds, the
/// year 2200).
pub(super) const LATEST_WALL_SECS: f64 = 7_258_118_400.0;

impl JournalRow {
    /// What is wrong with the times this row holds, if anything.
    pub(super) fn clock_problem(&self) -> Option<String> {
        let t = match self {
            Self::Sample(s) => s.t_secs,
            Self::Event(e) => e.t_secs,
            Self::Probe { sample } => sample.t,
            Self::Held { walk } => walk.t_secs,
            Self::Meta {
                origin: Some(origin),
                ..
            } => {
                let wall = origin.wall_unix_secs;
                return (!(wall.is_finite() && (0.0..=LATEST_WALL_SECS).contains(&wall))).then(
                    || format!("a wall clock of {wall:.3e} s, not a time between 1970 and 2200"),
                );
            }
            _ => return None,
        };
        (!(t.is_finite() && t.abs() <= JOURNAL_CLOCK_SECS))
            .then(|| format!("a time of {t:.3e} s, more than a year from the recording's start"))
    }
}
