//! The one reader of the trace format: a trace file (JSON, CSV) or a
//! journal, bounded, with one-line errors naming the line.

use std::path::Path;

use super::rows::{CSV_HEADER, CSV_HEADER_V1, CsvRow, JournalRow, is_csv};
use super::{
    ExpectedPeaks, MAX_TRACE_BYTES, MAX_TRACE_STRING, Policy, TRACE_VERSION, Trace, TraceError,
    TraceEvent, job_info, stacks,
};

impl Trace {
    /// Reads a trace saved by [`Trace::save`] (CSV or JSON, by extension).
    ///
    /// # Errors
    /// When the file cannot be read or is not a trace.
    pub fn load(path: &Path) -> Result<Self, TraceError> {
        let text = crate::files::read_bounded_text(path, MAX_TRACE_BYTES, "a trace")?;
        let parsed = if is_csv(path) {
            Self::from_csv(&text).map_err(|e| e.to_string())
        } else if is_journal(path) {
            Self::from_journal(&text).map_err(|e| e.to_string())
        } else {
            serde_json::from_str::<Self>(&text).map_err(|e| e.to_string())
        };
        let trace = parsed.map_err(|problem| TraceError::Format {
            problem,
            path: path.to_path_buf(),
        })?;
        if trace.version != TRACE_VERSION {
            return Err(TraceError::Format {
                problem: format!(
                    "version {} (this build reads {TRACE_VERSION})",
                    trace.version
                ),
                path: path.to_path_buf(),
            });
        }
        let mut trace = trace;
        trace.bound_strings();
        Ok(trace)
    }

    /// Shortens the strings a trace file brings (label, checkpoint, device,
    /// job command, event targets and details) to [`MAX_TRACE_STRING`]
    /// bytes each, marked with "…": a 20 MB label would otherwise be laid
    /// out on every frame. (The window escapes them where it shows them.)
    fn bound_strings(&mut self) {
        let bound = |text: &mut String| {
            if text.len() > MAX_TRACE_STRING {
                let mut end = MAX_TRACE_STRING;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push('…');
            }
        };
        bound(&mut self.label);
        bound(&mut self.checkpoint);
        bound(&mut self.device);
        if let Some(job) = &mut self.job {
            bound(&mut job.command);
        }
        if let Some(stacks) = &mut self.stacks {
            for frame in &mut stacks.frames {
                bound(&mut frame.file);
                bound(&mut frame.function);
                bound(&mut frame.text);
            }
        }
        for event in &mut self.events {
            bound(&mut event.target);
            bound(&mut event.detail);
            if let Some(shard) = &mut event.shard {
                bound(shard);
            }
        }
    }

    /// Parses the CSV form (through the `csv` crate, old files included).
    ///
    /// # Errors
    /// A line that is not a sample, event or meta row, or a field that does
    /// not parse, with its line number.
    pub fn from_csv(text: &str) -> Result<Self, CsvError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .from_reader(text.as_bytes());
        let header_ok = reader.headers().is_ok_and(|h| {
            let header = h.iter().collect::<Vec<_>>().join(",");
            header == CSV_HEADER || header == CSV_HEADER_V1
        });
        if !header_ok {
            return Err(CsvError::at(1, "not the trace CSV header"));
        }
        let headers = reader.headers().cloned().map_err(|e| csv_error(&e))?;
        let mut trace = Self::new("");
        trace.version = 0;
        let mut expected = ExpectedPeaks::default();
        let mut has_expected = false;
        for record in reader.records() {
            let record = record.map_err(|e| csv_error(&e))?;
            let line = record.position().map_or(0, csv::Position::line);
            let row: CsvRow = record
                .deserialize(Some(&headers))
                .map_err(|e| csv_error(&e))?;
            let time = || {
                row.t_secs
                    .filter(|t| t.is_finite())
                    .ok_or_else(|| CsvError::at(line, "`t_secs` is not a time"))
            };
            match row.record.as_str() {
                "meta" => {
                    let value = row.detail.clone().unwrap_or_default();
                    let parse = |v: &str| {
                        v.parse::<u64>()
                            .map_err(|_| CsvError::at(line, format!("`{v}` is not a number")))
                    };
                    match row.target.as_deref().unwrap_or("") {
                        "version" => {
                            trace.version = u32::try_from(parse(&value)?).unwrap_or(u32::MAX);
                        }
                        "label" => trace.label = value,
                        "checkpoint" => trace.checkpoint = value,
                        "device" => trace.device = value,
                        "policy" => {
                            trace.policy = Some(Policy::parse(&value).ok_or_else(|| {
                                CsvError::at(line, format!("`{value}` is not a policy"))
                            })?);
                        }
                        "transform" => trace.transform = Some(value),
                        "expected_retain_bytes" => {
                            expected.retain = parse(&value)?;
                            has_expected = true;
                        }
                        "expected_release_tensor_bytes" => {
                            expected.release_tensor = parse(&value)?;
                            has_expected = true;
                        }
                        "expected_release_shard_bytes" => {
                            expected.release_shard = parse(&value)?;
                            has_expected = true;
                        }
                        "job_command" => job_info(&mut trace).command = value,
                        "job_exit_code" => {
                            job_info(&mut trace).exit_code = Some(value.parse().map_err(|_| {
                                CsvError::at(line, format!("`{value}` is not an exit status"))
                            })?);
                        }
                        "job_probe" => job_info(&mut trace).probe = value == "true",
                        _ => {} // newer keys: ignored
                    }
                }
                "sample" => trace.samples.push(row.to_sample(time()?)),
                "event" => trace.events.push(TraceEvent {
                    t_secs: time()?,
                    rss_bytes: row.rss_bytes.unwrap_or(0),
                    mlx_active_bytes: row.mlx_active_bytes.unwrap_or(0),
                    mlx_cache_bytes: row.mlx_cache_bytes.unwrap_or(0),
                    kind: row
                        .event
                        .ok_or_else(|| CsvError::at(line, "an event without its kind"))?,
                    target: row.target.clone().unwrap_or_default(),
                    bytes: row.bytes.unwrap_or(0),
                    shard: row.shard.clone().filter(|s| !s.is_empty()),
                    shard_resident_bytes: row.shard_resident_bytes,
                    detail: row.detail.clone().unwrap_or_default(),
                }),
                other => return Err(CsvError::at(line, format!("unknown record `{other}`"))),
            }
        }
        if has_expected {
            trace.expected = Some(expected);
        }
        Ok(trace)
    }
}

impl Trace {
    /// Reads a journal: its lines as they were written; a last line that
    /// is not whole (the writer was killed mid-line) is dropped, and a
    /// journal without its `end` line is `cut_short`.
    ///
    /// # Errors
    /// A line (other than a partial last one) that is not a journal row.
    pub fn from_journal(text: &str) -> Result<Self, CsvError> {
        use stacks::{StackUpdate, TraceStacks};
        fn stacks(trace: &mut Trace, update: StackUpdate) {
            trace
                .stacks
                .get_or_insert_with(TraceStacks::default)
                .apply(update);
        }
        let mut trace = Self::new("");
        trace.version = 0;
        trace.cut_short = true;
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        for (i, line) in lines.iter().enumerate() {
            let number = u64::try_from(i + 1).unwrap_or(u64::MAX);
            let row = match serde_json::from_str::<JournalRow>(line) {
                Ok(row) => row,
                // A last line cut mid-write is dropped; never the first
                // (a journal whose description cannot be read is not one).
                Err(_) if i > 0 && i + 1 == lines.len() && !text.ends_with('\n') => break,
                Err(err) => return Err(CsvError::at(number, err.to_string())),
            };
            if let Some(problem) = row.clock_problem() {
                return Err(CsvError::at(number, problem));
            }
            match row {
                JournalRow::Meta {
                    version,
                    label,
                    checkpoint,
                    device,
                    job,
                    origin,
                } => {
                    trace.version = version;
                    trace.label = label;
                    trace.checkpoint = checkpoint;
                    trace.device = device;
                    trace.job = job;
                    trace.origin = origin;
                }
                JournalRow::Sample(s) => trace.samples.push(s.into()),
                JournalRow::Event(e) => trace.events.push(e),
                JournalRow::Frame { id, frame } => {
                    stacks(&mut trace, StackUpdate::Frame(id, frame));
                }
                JournalRow::Stack { id, frames } => {
                    stacks(&mut trace, StackUpdate::Stack(id, frames));
                }
                JournalRow::Probe { sample } => {
                    stacks(&mut trace, StackUpdate::Sample(sample));
                }
                JournalRow::Rank { pid, rank } => {
                    stacks(&mut trace, StackUpdate::Rank { pid, rank });
                }
                JournalRow::Held { walk } => {
                    stacks(&mut trace, StackUpdate::Held(walk));
                }
                JournalRow::End { exit_code, ended } => {
                    trace.cut_short = false;
                    if let Some(job) = &mut trace.job {
                        job.exit_code = exit_code;
                        job.ended = ended;
                    }
                }
            }
        }
        if trace.cut_short {
            trace.label.push_str(" (cut short)");
        }
        Ok(trace)
    }
}

/// Whether `path` names a journal (`.jsonl`).
fn is_journal(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("jsonl"))
}

/// What is wrong in a trace's CSV form, and on which line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct CsvError {
    /// The 1-based line.
    pub line: u64,
    /// What is wrong there.
    pub problem: String,
}

impl CsvError {
    fn at(line: u64, problem: impl Into<String>) -> Self {
        Self {
            line,
            problem: problem.into(),
        }
    }
}

/// A `csv` crate error as one line starting with its line number, naming
/// the column when there is one.
fn csv_error(err: &csv::Error) -> CsvError {
    let line = err.position().map_or(0, csv::Position::line);
    match err.kind() {
        csv::ErrorKind::Deserialize { err, .. } => {
            let column = err
                .field()
                .and_then(|i| {
                    CSV_HEADER
                        .split(',')
                        .nth(usize::try_from(i).unwrap_or(usize::MAX))
                })
                .unwrap_or("a field");
            CsvError::at(line, format!("`{column}`: {}", err.kind()))
        }
        csv::ErrorKind::UnequalLengths {
            len, expected_len, ..
        } => CsvError::at(line, format!("{len} fields, expected {expected_len}")),
        _ => CsvError::at(line, err.to_string()),
    }
}
