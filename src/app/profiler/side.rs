//! The profiler's side column: findings of the last run, the fit of the
//! open checkpoint in memory, what was resident at the selected moment, and
//! the events table.

use crate::profile::analysis::recording::Recording;
use crate::profile::analysis::stacks;
use crate::profile::{self, Timeline, Trace, TraceEvent, WalkOutcome};
use crate::units::human_bytes;

use super::{AppCommand, CommandSender, ProfilerInputs, ProfilerPanel, Run, shown};

impl ProfilerPanel {
    pub(super) fn profiler_side_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        egui::ScrollArea::vertical()
            .id_salt("profiler-side-scroll")
            .show(ui, |ui| {
                self.merged_ui(ui, inputs.commands);
                self.findings_ui(ui);
                ui.separator();
                self.lines_ui(ui);
                self.held_ui(ui);
                self.recordings_ui(ui);
                ui.separator();
                self.fit_ui(ui, inputs);
                ui.separator();
                self.resident_ui(ui, inputs);
                ui.separator();
                self.events_table_ui(ui, inputs);
            });
    }

    /// Journals of several hosts merged: the report, what the job did first
    /// (the alignment, the highest rank, the total, the straggler, a rank
    /// killed), then each rank's line; and which rank is shown whole.
    fn merged_ui(&self, ui: &mut egui::Ui, commands: &CommandSender) {
        if self.merged_report.is_empty() {
            return;
        }
        ui.heading("Merged view: the job across its hosts");
        if let Some(choice) = &self.merged_choice {
            ui.horizontal(|ui| {
                let label = ui.label("Shown whole");
                let mut picked = choice.shown;
                egui::ComboBox::from_id_salt("merged-shown")
                    .selected_text(choice.names.get(choice.shown).map_or("", String::as_str))
                    .show_ui(ui, |ui| {
                        for (i, name) in choice.names.iter().enumerate() {
                            ui.selectable_value(&mut picked, i, name);
                        }
                    })
                    .response
                    .labelled_by(label.id)
                    .on_hover_text(
                        "The rank whose findings, lines and held-by are shown (the one whose memory peaked highest at first); the others are overlaid and banded below",
                    );
                if picked != choice.shown {
                    commands.send(AppCommand::ShowMergedLane {
                        paths: choice.paths.clone(),
                        lane: picked,
                    });
                }
            });
        }
        let ranks = self.merged_lanes.len();
        let report = &self.merged_report;
        let (head, rest) = report.split_at(report.len().min(1));
        let (each, summary) = rest.split_at(rest.len().min(ranks));
        // Hosts and lines come from the journals' files: shown escaped.
        for line in head.iter().chain(summary).chain(each) {
            ui.label(crate::units::Shown::new(line).into_string());
        }
        ui.separator();
    }

    fn findings_ui(&mut self, ui: &mut egui::Ui) {
        ui.heading("Findings");
        let Some(last) = &self.last else {
            ui.label("Run a walk or record a job: findings appear when it ends.");
            return;
        };
        match &last.run {
            Run::Walk(o) => walk_summary_ui(ui, o),
            Run::Record(r) => record_summary_ui(ui, r),
        }
        if last.findings.is_empty() {
            ui.label(match last.run {
                Run::Walk(_) => "No findings: memory behaved as the headers predict.",
                Run::Record(_) => "No findings: nothing in this job's memory calls for a change.",
            });
        }
        let mut select = None;
        for finding in &last.findings {
            let color = match finding.severity {
                crate::finding::Severity::Error => ui.visuals().error_fg_color,
                _ => ui.visuals().warn_fg_color,
            };
            let text = egui::RichText::new(crate::units::Shown::new(&finding.message)).color(color);
            let response = ui.add(egui::Label::new(text).sense(egui::Sense::click()));
            let response = response.on_hover_text("Click to select this moment");
            if let (true, Some(t)) = (response.clicked(), finding.subject.t_secs) {
                select = Some(last.start_secs + t);
            }
        }
        if select.is_some() {
            self.selected_secs = select;
        }
    }

    /// A recorded job's lines: the stack at its peak, and its lines by what
    /// they held at the peak (from inside the job: its probe's stacks).
    fn lines_ui(&self, ui: &mut egui::Ui) {
        let Some((r, _)) = self.last_recording() else {
            return;
        };
        if r.lines.is_empty() && r.peak_stack.is_empty() {
            return;
        }
        ui.heading("Lines");
        if !r.peak_stack.is_empty() {
            ui.label(format!(
                "At the peak: {}",
                crate::units::Shown::new(&stacks::describe(&r.peak_stack))
            ));
        }
        if r.lines.is_empty() {
            // Attached after the memory was taken.
            ui.label("No line grew it while recorded: what it holds was there when attached.");
            ui.separator();
            return;
        }
        crate::app::widgets::titled_grid(
            ui,
            "record-lines",
            &["held at peak", "share", "grew", "line"],
            |ui| {
                for line in r.lines.iter().take(12) {
                    ui.label(human_bytes(line.held_at_peak_bytes));
                    ui.label(format!("{:.0} %", line.share * 100.0));
                    ui.label(human_bytes(line.grew_bytes));
                    let label = ui.add(
                        egui::Label::new(crate::units::Shown::new(&line.frame.label())).truncate(),
                    );
                    if !line.frame.text.is_empty() {
                        label.on_hover_text(crate::units::Shown::new(&line.frame.text));
                    }
                    ui.end_row();
                }
            },
        );
        ui.separator();
    }

    /// Who held the recorded job's MLX memory at its peak: the probe's
    /// walk there, root by root (each expandable to one path to an array).
    fn held_ui(&self, ui: &mut egui::Ui) {
        let Some((r, _)) = self.last_recording() else {
            return;
        };
        let Some(walk) = &r.held_by else {
            if r.probe.is_some()
                && let Some(none) =
                    crate::profile::trace::census::not_walked_explained(r.peak_mlx_active_bytes)
            {
                ui.heading("Held by");
                ui.label(none);
                ui.separator();
            }
            return;
        };
        ui.heading("Held by");
        ui.label(format!(
            "The job's objects at {:.2} s, as the probe walked them (MLX active {}){}",
            walk.t_secs,
            human_bytes(walk.active_bytes),
            if walk.partial { ", partial" } else { "" }
        ));
        held_roots_ui(ui, walk, "record-held");
        ui.separator();
    }

    fn fit_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        ui.heading("Fit");
        let Some(expected) = self.expected_now() else {
            return;
        };
        ui.horizontal(|ui| {
            crate::app::widgets::labelled_field(
                ui,
                "Budget",
                &mut self.budget_input,
                "e.g. 24G",
                80.0,
            );
        });
        let budget = crate::units::parse_size(&self.budget_input).filter(|b| *b > 0);
        let report =
            profile::fit_report(&expected, &self.machine, inputs.memory.limit_bytes, budget);
        ui.label(format!(
            "Largest shard: {} (transform {})",
            human_bytes(self.largest_shard_bytes),
            self.transform.as_str()
        ));
        for line in &report.lines {
            ui.label(line);
        }
    }

    fn resident_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        ui.heading("Resident at the selected moment");
        let Some(t) = self.selected_secs else {
            ui.label("Click the graph or an event to select a moment.");
            return;
        };
        // The run shown, on its own clock (the plot's); a recorded job's
        // "shards" are the files it held open.
        let run = shown(self.recording.as_ref(), self.last.as_ref(), self.walk_view);
        let recorded = run.filter(|(trace, _)| trace.job.is_some());
        let events = EventList::new(run.map(|(t, _)| t), inputs.timeline);
        let key = (events.len(), t.to_bits(), run.is_some(), self.runs);
        if self.resident.as_ref().is_none_or(|(k, _)| *k != key) {
            let shards = match run {
                Some((trace, start)) => profile::resident_at(&trace.events, t - start),
                None => profile::resident_at(inputs.timeline.events(), t),
            };
            self.resident = Some((key, shards));
        }
        let Some((_, shards)) = &self.resident else {
            return;
        };
        let total: u64 = shards.iter().map(|s| s.bytes).sum();
        // On the clock of what is shown: the recording's own when it is one.
        let shown_t = run.map_or(t, |(_, start)| t - start);
        let what = if recorded.is_some() {
            "shard files open"
        } else {
            "shards"
        };
        ui.label(format!(
            "at {shown_t:.2} s: {} in {} {what}",
            human_bytes(total),
            shards.len()
        ));
        if let Some((trace, _)) = recorded {
            recorded_moment_ui(ui, trace, shown_t);
        }
        for shard in shards.iter().take(50) {
            if recorded.is_some() {
                // A file the job holds: its path and size, nothing inside.
                ui.label(format!(
                    "{} {}",
                    crate::units::Shown::new(&shard.shard),
                    human_bytes(shard.bytes)
                ));
                continue;
            }
            egui::CollapsingHeader::new(format!(
                "{}: {} ({} tensors)",
                shard.shard,
                human_bytes(shard.bytes),
                shard.tensors.len()
            ))
            .id_salt(("resident", &shard.shard))
            .show(ui, |ui| {
                for tensor in shard.tensors.iter().take(200) {
                    let note = if tensor.released {
                        " (released, still held by the shard map)"
                    } else {
                        ""
                    };
                    ui.label(format!(
                        "{} {}{note}",
                        tensor.name,
                        human_bytes(tensor.bytes)
                    ));
                }
            });
        }
    }

    fn events_table_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        ui.heading("Events");
        // A recording's own events (its loads, marks, files) when one is
        // shown, on its clock; else the session's.
        // The run shown (a walk's or a recording's own events) on its own
        // clock, the plot's; else the session's.
        let run = shown(self.recording.as_ref(), self.last.as_ref(), self.walk_view);
        let offset = run.map_or(0.0, |(_, start)| start);
        let events = EventList::new(run.map(|(t, _)| t), inputs.timeline);
        ui.label(format!(
            "{} events{}; click one to select its moment",
            events.len(),
            match run {
                Some((trace, _)) if trace.job.is_some() => " of the job",
                Some(_) => " of the run shown",
                None => "",
            }
        ));
        // A selectable label's own height (show_rows adds the spacing):
        // a guess off by a point or two made the list, stuck to its
        // bottom, move a row every frame.
        let row_height = (ui.text_style_height(&egui::TextStyle::Body)
            + 2.0 * ui.spacing().button_padding.y)
            .max(ui.spacing().interact_size.y);
        let mut select = None;
        ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Truncate);
        egui::ScrollArea::vertical()
            .id_salt("events-scroll")
            .max_height(320.0)
            .stick_to_bottom(true)
            .show_rows(ui, row_height, events.len(), |ui, rows| {
                for i in rows {
                    let Some(event) = events.get(i) else { continue };
                    let text = format!(
                        "{:>8.2} s  {}  active {}",
                        event.t_secs,
                        crate::units::Shown::new(&event.label()),
                        human_bytes(event.mlx_active_bytes)
                    );
                    let at = event.t_secs + offset;
                    let chosen = self.selected_secs.is_some_and(|t| (t - at).abs() < 1e-9);
                    if ui.selectable_label(chosen, text).clicked() {
                        select = Some(at);
                    }
                }
            });
        if select.is_some() {
            self.selected_secs = select;
        }
    }
}

/// Events by position: a recording's, or the session's.
enum EventList<'a> {
    Trace(&'a [TraceEvent]),
    Session(&'a std::collections::VecDeque<TraceEvent>),
}

impl<'a> EventList<'a> {
    fn new(trace: Option<&'a Trace>, timeline: &'a Timeline) -> Self {
        match trace {
            Some(trace) => Self::Trace(&trace.events),
            None => Self::Session(timeline.events()),
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Trace(events) => events.len(),
            Self::Session(events) => events.len(),
        }
    }

    fn get(&self, i: usize) -> Option<&'a TraceEvent> {
        match self {
            Self::Trace(events) => events.get(i),
            Self::Session(events) => events.get(i),
        }
    }
}

/// The last walk in two lines.
/// What a recording says of one moment beyond the files held open: the
/// files the job had loaded by then (MLX closes each after reading its
/// header, so they are not "open"), and the job's stack then.
fn recorded_moment_ui(ui: &mut egui::Ui, trace: &Trace, t: f64) {
    let loaded: Vec<&str> = trace
        .events
        .iter()
        .take_while(|e| e.t_secs <= t)
        .filter(|e| e.kind == crate::memory::MarkKind::Load)
        .map(|e| e.target.as_str())
        .collect();
    if !loaded.is_empty() {
        ui.label(format!(
            "{} file{} loaded by then (mx.load), the last: {}",
            loaded.len(),
            if loaded.len() == 1 { "" } else { "s" },
            crate::units::Shown::new(loaded[loaded.len() - 1])
        ));
    }
    let Some(stacks) = trace.stacks.as_ref() else {
        return;
    };
    // The held-by walk made last by then, when the probe made one.
    if let Some(walk) = stacks.held.iter().rev().find(|w| w.t_secs <= t) {
        crate::app::widgets::open_section(
            ui,
            format!(
                "Held by, the walk at {:.2} s (MLX active {})",
                walk.t_secs,
                human_bytes(walk.active_bytes)
            ),
            "record-held-moment",
            |ui| held_roots_ui(ui, walk, "record-held-moment-grid"),
        );
    }
    let Some(stack) = stacks.at(t) else {
        return;
    };
    ui.label("The job's working stack then (innermost first):");
    frames_ui(ui, &stack);
    // The other threads, when the job had more than one.
    let threads = stacks.threads_at(t);
    if threads.len() > 1 {
        egui::CollapsingHeader::new(format!("All {} threads then", threads.len()))
            .id_salt("record-threads")
            .show(ui, |ui| {
                for (i, stack) in threads.iter().enumerate() {
                    ui.label(if i == 0 { "main thread:" } else { "thread:" });
                    frames_ui(ui, stack);
                }
            });
    }
}

/// A held-by walk's roots: bytes, share of MLX active, root, kind and
/// where; each root's example path on hover; what no root reached.
fn held_roots_ui(ui: &mut egui::Ui, walk: &crate::profile::trace::census::Census, id: &str) {
    // A grid's cell has no width of its own to cut to: the root column
    // gets two fifths of the panel.
    let root_chars = crate::app::widgets::monospace_chars(ui, ui.available_width() * 0.4);
    crate::app::widgets::titled_grid(ui, id, &["bytes", "share", "root", "kind, where"], |ui| {
        for root in walk.roots.iter().take(12) {
            ui.label(human_bytes(root.bytes));
            let share = if walk.active_bytes > 0 {
                100.0 * root.bytes as f64 / walk.active_bytes as f64
            } else {
                0.0
            };
            ui.label(format!("{share:.0} %"));
            let also = root
                .also_reaches()
                .map_or_else(String::new, |also| format!("\n{also}"));
            let hover = format!(
                "{}: {} array(s), e.g. {}{also}",
                root.root, root.arrays, root.path
            );
            // Cut in the middle (`conv.con…` told nothing): the end
            // of a long name stays.
            crate::app::widgets::name_label_in(ui, &root.root, true, root_chars)
                .on_hover_text(crate::units::Shown::new(&hover));
            ui.add(
                egui::Label::new(format!(
                    "{}, {}",
                    root.kind,
                    crate::units::Shown::new(&root.place())
                ))
                .truncate(),
            );
            ui.end_row();
        }
        if walk.unreached_bytes() > 0 {
            let (name, why) = walk.unreached_explained();
            ui.label(human_bytes(walk.unreached_bytes()));
            ui.label("");
            ui.label(name);
            ui.add(egui::Label::new(why).truncate());
            ui.end_row();
        }
        if let Some(beyond) = walk.counted_beyond_explained() {
            ui.label(format!(
                "-{}",
                human_bytes(walk.counted_beyond_active_bytes())
            ));
            ui.label("");
            ui.label("counted twice").on_hover_text(&beyond);
            ui.add(egui::Label::new(beyond).truncate());
            ui.end_row();
        }
        if let Some(buffers) = walk.buffers_explained() {
            ui.label("");
            ui.label("");
            ui.label("by buffer");
            ui.add(egui::Label::new(buffers).truncate());
            ui.end_row();
        }
    });
    // Each root expands to one path from it to one of its arrays.
    egui::CollapsingHeader::new("Paths to the arrays")
        .id_salt(format!("{id}-paths"))
        .show(ui, |ui| {
            for root in walk.roots.iter().take(12).filter(|r| !r.path.is_empty()) {
                ui.label(
                    egui::RichText::new(format!(
                        "{}: {} ({} array{})",
                        crate::units::Shown::new(&root.root),
                        crate::units::Shown::new(&root.path),
                        root.arrays,
                        if root.arrays == 1 { "" } else { "s" }
                    ))
                    .monospace(),
                );
            }
        });
}

/// A stack's frames, the job's own in bold, libraries' weak.
fn frames_ui(ui: &mut egui::Ui, stack: &[&crate::profile::trace::stacks::Frame]) {
    for frame in stack.iter().take(12) {
        let text = egui::RichText::new(crate::units::Shown::new(&frame.label())).monospace();
        let label = ui.label(if frame.is_library() {
            text.weak()
        } else {
            text.strong()
        });
        if !frame.text.is_empty() {
            label.on_hover_text(crate::units::Shown::new(&frame.text));
        }
    }
}

fn walk_summary_ui(ui: &mut egui::Ui, o: &WalkOutcome) {
    ui.label(format!(
        "{} {}: {} of {} tensors in {:.2} s{}",
        o.policy.as_str(),
        o.transform.as_str(),
        o.steps_done,
        o.steps_total,
        o.elapsed_secs,
        if o.cancelled { " (cancelled)" } else { "" }
    ));
    ui.label(format!(
        "peak MLX active {} (expected {}), peak RSS {}",
        human_bytes(o.peak_mlx_active_bytes),
        human_bytes(o.expected_peak_bytes()),
        human_bytes(o.peak_rss_bytes)
    ));
    // Only where it says something: a walk from the page cache waits
    // milliseconds.
    if o.read_wait_secs >= 0.5 {
        ui.label(format!(
            "waited {:.1} s of {:.1} s for bytes from disk",
            o.read_wait_secs, o.elapsed_secs
        ));
    }
    if let Some(error) = &o.error {
        ui.colored_label(ui.visuals().error_fg_color, error.to_string());
    }
}

/// The last recording in a few lines: how it ended, its peaks, the files
/// open at the peak.
fn record_summary_ui(ui: &mut egui::Ui, r: &Recording) {
    let ended = r.ended_explained();
    ui.label(format!(
        "`{}`: {ended} after {:.1} s",
        crate::units::Shown::new(&super::typed_name(&r.command)),
        r.duration_secs()
    ));
    let outside = r.probe.as_ref().is_some_and(|p| p.client == "outside");
    let mlx = r.peak_mlx_active_bytes.map_or_else(
        || {
            if outside {
                "MLX not read (attached: stacks read from outside, MLX's counters not yet)"
                    .to_owned()
            } else {
                "no MLX figures from inside (no probe reported)".to_owned()
            }
        },
        |b| format!("peak MLX active {}", human_bytes(b)),
    );
    ui.label(if r.samples.is_empty() {
        format!("peak RSS not known: the job ended before the first sample; {mlx}")
    } else {
        format!(
            "peak RSS {} at {:.1} s; {mlx}",
            human_bytes(r.peak_rss_bytes),
            r.peak_rss_secs
        )
    });
    let open: u64 = r.files_open_at_peak.iter().map(|f| f.bytes).sum();
    ui.label(format!(
        "{} shard files open at the peak ({}); {} used in all",
        r.files_open_at_peak.len(),
        human_bytes(open),
        r.files_used()
    ));
    if let Some(c) = &r.checkpoint {
        ui.label(format!(
            "checkpoint {}: {}; a release-shard walk would peak at {}",
            crate::units::Shown::new(&c.path.display().to_string()),
            human_bytes(c.total_bytes),
            human_bytes(c.expected.release_shard)
        ));
    }
}
