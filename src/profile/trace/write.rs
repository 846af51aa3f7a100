//! The one writer of the trace format: a trace saved whole (JSON or CSV)
//! and a journal written as a recording happens (JSON Lines).

use std::path::Path;

use super::rows::{CsvRow, JournalRow, is_csv};
use super::{FlatSample, JobInfo, Sample, TRACE_VERSION, Trace, TraceError, TraceEvent, stacks};

impl Trace {
    /// The trace as pretty JSON.
    ///
    /// # Errors
    /// When serde cannot serialize it (never for a trace built by this
    /// crate; said rather than written as an empty file).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self).map(crate::units::json_shown)
    }

    /// The trace as CSV: one row per sample and per event, plus `meta` rows
    /// (the `csv` crate writes them from [`CsvRow`] records).
    #[must_use]
    pub fn to_csv(&self) -> String {
        let meta = |key: &str, value: String| CsvRow {
            record: "meta".into(),
            target: Some(key.to_owned()),
            detail: Some(value),
            ..CsvRow::default()
        };
        let mut rows = vec![
            meta("version", self.version.to_string()),
            meta("label", self.label.clone()),
            meta("checkpoint", self.checkpoint.clone()),
            meta("device", self.device.clone()),
        ];
        if let Some(policy) = self.policy {
            rows.push(meta("policy", policy.as_str().to_owned()));
        }
        if let Some(transform) = &self.transform {
            rows.push(meta("transform", transform.clone()));
        }
        if let Some(e) = self.expected {
            rows.push(meta("expected_retain_bytes", e.retain.to_string()));
            rows.push(meta(
                "expected_release_tensor_bytes",
                e.release_tensor.to_string(),
            ));
            rows.push(meta(
                "expected_release_shard_bytes",
                e.release_shard.to_string(),
            ));
        }
        if let Some(job) = &self.job {
            rows.push(meta("job_command", job.command.clone()));
            if let Some(code) = job.exit_code {
                rows.push(meta("job_exit_code", code.to_string()));
            }
            rows.push(meta("job_probe", job.probe.to_string()));
        }
        rows.extend(self.samples.iter().map(|&s| CsvRow::sample(s.into())));
        rows.extend(self.events.iter().map(|e| CsvRow {
            record: "event".into(),
            t_secs: Some(e.t_secs),
            rss_bytes: Some(e.rss_bytes),
            mlx_active_bytes: Some(e.mlx_active_bytes),
            mlx_cache_bytes: Some(e.mlx_cache_bytes),
            event: Some(e.kind),
            target: Some(e.target.clone()),
            bytes: Some(e.bytes),
            shard: e.shard.clone(),
            shard_resident_bytes: e.shard_resident_bytes,
            detail: Some(e.detail.clone()),
            ..CsvRow::default()
        }));
        let mut writer = csv::Writer::from_writer(Vec::new());
        for row in &mut rows {
            // Names and labels as shown: no escape sequence or line break
            // reaches a terminal from `--csv /dev/stdout`.
            for field in [&mut row.target, &mut row.detail, &mut row.shard]
                .into_iter()
                .flatten()
            {
                if let std::borrow::Cow::Owned(shown) = crate::units::csv_field(field) {
                    *field = shown;
                }
            }
            // Into memory, from plain records: nothing here can fail.
            let _ = writer.serialize(row);
        }
        let bytes = writer.into_inner().unwrap_or_default();
        String::from_utf8(bytes).unwrap_or_default()
    }

    /// Writes the trace to the checked output `out`: CSV when its name ends
    /// in `.csv`, else JSON.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn save(&self, out: &crate::files::Output) -> Result<(), TraceError> {
        self.save_as(out, is_csv(out.path()))
    }

    /// Writes the trace to the checked output `out` as CSV (`csv`) or JSON,
    /// whatever its name.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn save_as(&self, out: &crate::files::Output, csv: bool) -> Result<(), TraceError> {
        let path = out.path();
        let text = if csv {
            self.to_csv()
        } else {
            self.to_json().map_err(|e| TraceError::Format {
                problem: format!("cannot serialize the trace: {e}"),
                path: path.to_path_buf(),
            })?
        };
        out.write(text.as_bytes()).map_err(TraceError::File)
    }
}

/// A trace written as it happens, one JSON object a line, each written
/// whole with one `write` and never rewritten: a recording whose recorder
/// is killed (by the OOM killer, a power cut) still opens, and says it was
/// cut short (no `end` line). A failed write turns it off; the recording
/// goes on.
#[derive(Debug)]
pub struct Journal {
    /// The journal, open (and locked) to the end even when a write fails:
    /// its lock keeps another recording off it, and it tells whether the
    /// file at the path is still this one.
    file: std::fs::File,
    /// A write failed: nothing more is written.
    failed: bool,
    /// Why the first write failed, until [`Journal::take_failure`] takes it.
    failure: Option<String>,
    /// Where it is, for the failure's line.
    path: std::path::PathBuf,
}

impl Journal {
    /// Creates `path` for this recording alone ([`crate::files::open_journal`]:
    /// never through a link, never a FIFO or device, never a journal
    /// another recording is writing) and writes `trace`'s description
    /// (label, checkpoint, device, job) as its first line.
    ///
    /// # Errors
    /// When the file cannot be created or written.
    pub fn create(path: &Path, trace: &Trace) -> Result<Self, TraceError> {
        let file = crate::files::open_journal(path).map_err(TraceError::File)?;
        let mut journal = Self {
            file,
            failed: false,
            failure: None,
            path: path.to_path_buf(),
        };
        journal.write(&JournalRow::Meta {
            version: TRACE_VERSION,
            label: trace.label.clone(),
            checkpoint: trace.checkpoint.clone(),
            device: trace.device.clone(),
            job: trace.job.clone(),
            origin: trace.origin.clone(),
        });
        if journal.failed {
            return Err(TraceError::Format {
                problem: "cannot write the journal".into(),
                path: path.to_path_buf(),
            });
        }
        Ok(journal)
    }

    fn write(&mut self, row: &JournalRow) {
        if self.failed {
            return;
        }
        let Ok(line) = serde_json::to_string(row) else {
            return;
        };
        let mut line = crate::units::json_shown(line).into_bytes();
        line.push(b'\n');
        if let Err(err) = std::io::Write::write_all(&mut self.file, &line) {
            self.failed = true;
            self.failure = Some(format!(
                "cannot write the journal {}: {}; it keeps what was written before, and the recording goes on without it",
                crate::units::Shown::path(&self.path),
                crate::files::io_reason(&err)
            ));
        }
    }

    /// The line that says why the journal stopped, once, as soon as a
    /// write failed (a full disk): the caller says it at once.
    pub fn take_failure(&mut self) -> Option<String> {
        self.failure.take()
    }

    /// Whether a write failed (the recording's exit status says so).
    #[must_use]
    pub fn failed(&self) -> bool {
        self.failed
    }

    /// A sample, as trace files keep it.
    pub fn sample(&mut self, sample: &Sample) {
        self.write(&JournalRow::Sample(FlatSample::from(*sample)));
    }

    /// An event.
    pub fn event(&mut self, event: &TraceEvent) {
        self.write(&JournalRow::Event(event.clone()));
    }

    /// A frame, stack, probe sample or rank from the job's probes.
    pub fn stacks(&mut self, update: &stacks::StackUpdate) {
        use stacks::StackUpdate;
        let row = match update.clone() {
            StackUpdate::Frame(id, frame) => JournalRow::Frame { id, frame },
            StackUpdate::Stack(id, frames) => JournalRow::Stack { id, frames },
            StackUpdate::Sample(sample) => JournalRow::Probe { sample },
            StackUpdate::Rank { pid, rank } => JournalRow::Rank { pid, rank },
            StackUpdate::Held(walk) => JournalRow::Held { walk },
        };
        self.write(&row);
    }

    /// The last line: the run ended; `job` says how (its status and what
    /// the recorder knew then). Returns the journal's open file (its lock
    /// held), to remove the journal later only if it is still this file,
    /// whether any write failed, and the failure's line if the last write
    /// is the one that failed (not said yet).
    #[must_use]
    pub fn end(mut self, job: Option<&JobInfo>) -> JournalEnded {
        self.write(&JournalRow::End {
            exit_code: job.and_then(|j| j.exit_code),
            ended: job.and_then(|j| j.ended.clone()),
        });
        JournalEnded {
            file: self.file,
            failed: self.failed,
            unsaid: self.failure.take(),
        }
    }
}

/// A journal after its last line ([`Journal::end`]).
#[derive(Debug)]
pub struct JournalEnded {
    /// The journal's open file (its lock held).
    pub file: std::fs::File,
    /// Whether a write failed (what was written before stays).
    pub failed: bool,
    /// The failure's line, when the last write failed and it is not said yet.
    pub unsaid: Option<String>,
}
