//! `record`'s summary for people.

use std::io::Write;

use crate::profile::analysis::recording::Recording;
use crate::units::human_bytes;

/// The summary's peak RSS line (not known when no sample was taken).
fn peak_rss_line(r: &Recording) -> String {
    if r.samples.is_empty() {
        return "peak RSS not known: the job ended before the first sample (a shorter --interval-ms samples sooner)".to_owned();
    }
    format!(
        "peak RSS {} at {:.1} s (the whole process tree{}; VmHWM included)",
        human_bytes(r.peak_rss_bytes),
        r.peak_rss_secs,
        if r.rss_is_pss {
            ", as PSS: pages its processes share counted once"
        } else {
            ""
        }
    )
}

/// The summary for people (the CLI prints it on stderr).
///
/// # Errors
/// When writing fails.
pub fn write_summary(r: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    let ended = r.ended_explained();
    writeln!(
        out,
        "recorded `{}` (pid {}): {ended} after {:.1} s, {} samples",
        crate::units::Shown::new(&r.command),
        r.pid,
        r.duration_secs(),
        r.samples.len()
    )?;
    writeln!(out, "  {}", peak_rss_line(r))?;
    if let Some(p) = &r.probe
        && p.dropped_events + p.dropped_definitions + p.thinned_samples + p.unknown_pids > 0
    {
        writeln!(
            out,
            "  the probes sent more than is kept: {} events past the cap of {} counted, not kept; {} frames or stacks past their caps; {} samples thinned out (every new high kept); {} lines naming processes past the first {}",
            p.dropped_events,
            crate::profile::capture::MAX_PROBE_EVENTS,
            p.dropped_definitions,
            p.thinned_samples,
            p.unknown_pids,
            crate::profile::capture::MAX_PROBE_PIDS
        )?;
    }
    match (&r.probe, r.peak_mlx_active_bytes) {
        (Some(p), Some(active)) => {
            let cost = p.cost_percent().map_or(String::new(), |c| {
                format!(", probe cost {c:.2} % of a core")
            });
            writeln!(
                out,
                "  peak MLX active {} (from inside the job: {} probe{}{cost})",
                human_bytes(active),
                if p.client.is_empty() { "a" } else { &p.client },
                p.mlx_version
                    .as_deref()
                    .map_or(String::new(), |v| format!(", MLX {v}"))
            )?;
        }
        // Stacks read from outside (`record --pid`): MLX's counters are
        // not read yet (issue #72), whatever the job imported.
        (Some(p), None) if p.client == "outside" => writeln!(
            out,
            "  MLX: not read (attached: its stacks are read from outside, MLX's counters not yet)"
        )?,
        (Some(p), None) => writeln!(
            out,
            "  MLX: the {} probe reported no MLX figures (the job did not import mlx.core)",
            if p.client.is_empty() {
                "job's"
            } else {
                &p.client
            }
        )?,
        (None, _) => writeln!(
            out,
            "  MLX: no figures from inside the job (no probe reported; see docs/record.md)"
        )?,
    }
    if let (Some(gpu), Some(device)) = (r.peak_gpu_bytes, r.peak_gpu_device_used_bytes) {
        writeln!(
            out,
            "  peak GPU memory {} (NVML: the job's processes; managed memory, which MLX's CUDA allocator uses, is not in it), {} used on the GPUs by everyone",
            human_bytes(gpu),
            human_bytes(device)
        )?;
    }
    write_ledger(r, out)?;
    for rank in &r.ranks {
        writeln!(
            out,
            "  rank {} (pid {}): peak MLX active {}{}",
            rank.rank,
            rank.pid,
            human_bytes(rank.peak_mlx_active_bytes),
            if rank.peak_stack.is_empty() {
                String::new()
            } else {
                format!(
                    " at {}",
                    crate::units::Shown::new(&crate::profile::analysis::stacks::describe(
                        &rank.peak_stack
                    ))
                )
            }
        )?;
    }
    write_lines(r, out)?;
    write_phases(r, out)?;
    write_files_and_findings(r, out)
}

/// The lines that grew most between the job's marks.
fn write_phases(r: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    if r.phases.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  by phase (from each of the job's marks to the next):"
    )?;
    // A job with thousands of marks: the first and last phases, and the
    // count of those between (all are in the JSON).
    let shown = 40;
    let skip = r.phases.len().saturating_sub(shown);
    for (i, phase) in r.phases.iter().enumerate() {
        if skip > 0 && i == shown / 2 {
            writeln!(out, "    ... {skip} more phases (all in --json)")?;
        }
        if skip > 0 && (shown / 2..shown / 2 + skip).contains(&i) {
            continue;
        }
        let top = phase.lines.first().map_or(String::new(), |l| {
            format!(
                "; most at {} ({:.0} %)",
                crate::units::Shown::new(&l.frame.label()),
                l.share * 100.0
            )
        });
        writeln!(
            out,
            "    {:>6.1}-{:<6.1} s \"{}\": peak {}, grew {}{top}",
            phase.start_secs,
            phase.end_secs,
            crate::units::Shown::new(&phase.mark),
            human_bytes(phase.peak_bytes),
            human_bytes(phase.grew_bytes)
        )?;
    }
    Ok(())
}

/// What every byte was at the RSS peak.
fn write_ledger(r: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(l) = &r.ledger else { return Ok(()) };
    let process = &l.sample.process;
    let anon = match (l.sample.mlx, l.host_not_mlx()) {
        (Some(m), Some(host)) => format!(
            "anonymous {} (MLX active {}, MLX cache {}, host memory that is not MLX's: Python objects, numpy, torch, and memory freed but kept by the C allocator {})",
            human_bytes(process.anon_bytes),
            human_bytes(m.active_bytes),
            human_bytes(m.cache_bytes),
            human_bytes(host)
        ),
        _ => format!(
            "anonymous {} (heap: MLX's buffers, numpy, Python)",
            human_bytes(process.anon_bytes)
        ),
    };
    writeln!(
        out,
        "  at the highest RSS sampled ({:.1} s): RSS {} = {anon} + file-backed and shared {}",
        l.sample.at,
        human_bytes(process.rss_bytes),
        human_bytes(process.file_bytes)
    )?;
    if !l.files.is_empty() {
        let files: Vec<String> = l
            .files
            .iter()
            .take(4)
            .map(|(path, bytes)| {
                let name = path.rsplit('/').next().unwrap_or(path);
                format!("{} {}", crate::units::Shown::new(name), human_bytes(*bytes))
            })
            .collect();
        writeln!(out, "    mapped files: {}", files.join(", "))?;
    }
    if let Some(gpu) = l.sample.gpu {
        writeln!(
            out,
            "    beside RSS, GPU memory {}",
            human_bytes(gpu.process_bytes)
        )?;
    }
    Ok(())
}

/// Who held MLX memory at the peak: the probe's walk there, root by root.
fn write_held(r: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(w) = &r.held_by else {
        if r.probe.is_some()
            && let Some(none) =
                crate::profile::trace::census::not_walked_explained(r.peak_mlx_active_bytes)
        {
            writeln!(out, "  held by: {none}")?;
        }
        return Ok(());
    };
    writeln!(
        out,
        "  held by (the walk at {:.1} s, MLX active {}{}):",
        w.t_secs,
        human_bytes(w.active_bytes),
        if w.partial {
            ", partial: the walk stopped at its time budget"
        } else {
            ""
        }
    )?;
    for root in w.roots.iter().take(8) {
        let example = if root.path.is_empty() {
            String::new()
        } else {
            format!(" e.g. {}", root.path)
        };
        let also = root
            .also_reaches()
            .map_or_else(String::new, |also| format!("; {also}"));
        writeln!(
            out,
            "    {:>10}  {} ({}, {}; {} array{}{also}){example}",
            human_bytes(root.bytes),
            crate::units::Shown::new(&root.root),
            root.kind,
            crate::units::Shown::new(&root.place()),
            root.arrays,
            if root.arrays == 1 { "" } else { "s" },
        )?;
    }
    if w.unreached_bytes() > 0 {
        let (name, why) = w.unreached_explained();
        writeln!(
            out,
            "    {:>10}  {name} ({why})",
            human_bytes(w.unreached_bytes())
        )?;
    }
    if let Some(beyond) = w.counted_beyond_explained() {
        writeln!(out, "    {beyond}")?;
    }
    if let Some(buffers) = w.buffers_explained() {
        writeln!(out, "    {buffers}")?;
    }
    Ok(())
}

/// The stack at the peak and the lines that grew memory most.
fn write_lines(r: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    write_held(r, out)?;
    if r.peak_stack.is_empty() && r.lines.is_empty() {
        return Ok(());
    }
    if !r.peak_stack.is_empty() {
        writeln!(
            out,
            "  at the peak the job was at {}",
            crate::units::Shown::new(&crate::profile::analysis::stacks::describe(&r.peak_stack))
        )?;
    }
    if r.lines.is_empty() {
        // Attached after the memory was taken: where the job is, and no
        // line seen growing it.
        if r.attached {
            writeln!(
                out,
                "  lines: none grew while recorded (what it holds was there when attached)"
            )?;
        }
        return Ok(());
    }
    writeln!(out, "  lines (held at the peak, share, all they grew):")?;
    for line in r.lines.iter().take(8) {
        let code = if line.frame.text.is_empty() {
            String::new()
        } else {
            format!("  {}", line.frame.text)
        };
        writeln!(
            out,
            "    {:>10} {:>4.0} % {:>10}  {}{}",
            human_bytes(line.held_at_peak_bytes),
            line.share * 100.0,
            human_bytes(line.grew_bytes),
            crate::units::Shown::new(&line.frame.label()),
            crate::units::Shown::new(&code)
        )?;
    }
    Ok(())
}

/// The summary's lines about shard files, the checkpoint and findings.
fn write_files_and_findings(r: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    let open_bytes: u64 = r.files_open_at_peak.iter().map(|f| f.bytes).sum();
    writeln!(
        out,
        "  shard files open at the peak: {} ({}); {} used in all (held open, or loaded through the probe)",
        r.files_open_at_peak.len(),
        human_bytes(open_bytes),
        r.files_used()
    )?;
    for file in r.files_open_at_peak.iter().take(8) {
        writeln!(
            out,
            "    {} {}",
            crate::units::Shown::new(&file.path.display().to_string()),
            human_bytes(file.bytes)
        )?;
    }
    if !r.files_loaded.is_empty() {
        let held: Vec<String> = r
            .files_loaded
            .iter()
            .filter(|f| f.held)
            .map(|f| crate::units::Shown::new(f.path.rsplit('/').next().unwrap_or(&f.path)))
            .map(crate::units::Shown::into_string)
            .collect();
        let loaded = r.files_loaded.len();
        let until_exit = r.files_loaded.iter().filter(|f| f.until_exit).count();
        let said = if held.is_empty() {
            "every one released while the job ran (MLX's total fell back to where it was at each load)".to_owned()
        } else if until_exit == loaded {
            format!(
                "{} held until the job ended (MLX's total fell back to where it was at each load only as it exited)",
                if loaded == 1 { "it was" } else { "all were" }
            )
        } else {
            format!(
                "estimated not released while the job ran (MLX's total never fell back to where it was at the load): {}",
                held.join(", ")
            )
        };
        writeln!(
            out,
            "  loaded through mx.load: {loaded} file{}; {said}",
            if loaded == 1 { "" } else { "s" },
        )?;
    }
    if let Some(c) = &r.checkpoint {
        writeln!(
            out,
            "  checkpoint {}: {} in {}; a walk would peak at {} (retain), {} (release-tensor), {} (release-shard)",
            crate::units::Shown::new(&crate::units::location_data(&c.path.display().to_string())),
            human_bytes(c.total_bytes),
            crate::units::count_of(c.shards, "shard", "shards"),
            human_bytes(c.expected.retain),
            human_bytes(c.expected.release_tensor),
            human_bytes(c.expected.release_shard)
        )?;
    } else if let Some(error) = &r.checkpoint_error {
        writeln!(out, "  checkpoint: {}", crate::units::Shown::new(error))?;
    }
    if r.findings.is_empty() {
        writeln!(out, "  no findings")?;
    } else {
        writeln!(out, "  findings:")?;
        for finding in &r.findings {
            writeln!(
                out,
                "  - {}: {}",
                finding.severity.name(),
                crate::units::Shown::new(&finding.message)
            )?;
        }
    }
    Ok(())
}
