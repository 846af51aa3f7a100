//! Folded stacks: `frame;frame;frame bytes`, outermost frame first, one
//! line a stack, as flamegraph.pl and inferno read them. Several lanes:
//! each stack under a first frame naming its lane.

use std::collections::BTreeMap;
use std::io::Write;

use super::{ExportError, Lane, Weight, one_line};

/// Writes the lanes' weighted stacks folded, the heaviest first (equal
/// stacks added); returns how many lines it wrote.
///
/// # Errors
/// [`ExportError::NoStacks`] for a recording without the probe's stacks;
/// [`ExportError::Write`].
pub fn write_folded(
    lanes: &[Lane],
    weight: Weight,
    out: &mut dyn Write,
) -> Result<usize, ExportError> {
    if let Some(bare) = lanes.iter().find(|l| !l.has_stacks()) {
        return Err(ExportError::NoStacks(bare.name.clone()));
    }
    let mut folded: BTreeMap<String, u64> = BTreeMap::new();
    for lane in lanes {
        for (frames, bytes) in lane.weighted_stacks(weight) {
            let mut line = String::new();
            if lanes.len() > 1 {
                line.push_str(&frame_text(&lane.name));
                line.push(';');
            }
            let names: Vec<String> = frames.iter().map(|f| frame_text(&f.label())).collect();
            line.push_str(&names.join(";"));
            let entry = folded.entry(line).or_insert(0);
            *entry = entry.saturating_add(bytes);
        }
    }
    let mut heaviest: Vec<(String, u64)> = folded.into_iter().collect();
    heaviest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    for (stack, bytes) in &heaviest {
        writeln!(out, "{stack} {bytes}")?;
    }
    Ok(heaviest.len())
}

/// A frame as the folded format can hold it: one line, no `;` (the frame
/// separator); its last space-separated word is never taken for the
/// count because the count follows the whole stack.
fn frame_text(label: &str) -> String {
    one_line(label).replace(';', ",")
}
