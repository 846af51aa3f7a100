//! speedscope's file format (`https://www.speedscope.app/file-format-schema.json`):
//! frames shared by every profile, one sampled profile a lane, in bytes,
//! each sample a stack (outermost frame first) weighted by its bytes: a
//! memory flame graph.

use std::collections::HashMap;
use std::io::Write;

use serde::Serialize;

use super::{ExportError, FrameName, Lane, Weight, one_line};

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    name: &'a str,
    exporter: String,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    shared: Shared,
    profiles: Vec<Profile>,
}

#[derive(Serialize)]
struct Shared {
    frames: Vec<JsonFrame>,
}

#[derive(Serialize)]
struct JsonFrame {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
}

#[derive(Serialize)]
struct Profile {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    samples: Vec<Vec<usize>>,
    weights: Vec<u64>,
}

/// Writes the lanes as one speedscope file named `name`; returns how many
/// stacks (samples) its profiles hold.
///
/// # Errors
/// [`ExportError::NoStacks`] for a recording without the probe's stacks;
/// [`ExportError::Write`].
pub fn write_speedscope(
    lanes: &[Lane],
    weight: Weight,
    name: &str,
    out: &mut dyn Write,
) -> Result<usize, ExportError> {
    if let Some(bare) = lanes.iter().find(|l| !l.has_stacks()) {
        return Err(ExportError::NoStacks(bare.name.clone()));
    }
    let mut frames: Vec<JsonFrame> = Vec::new();
    let mut index: HashMap<FrameName, usize> = HashMap::new();
    let mut profiles = Vec::with_capacity(lanes.len());
    for lane in lanes {
        let mut stacks = lane.weighted_stacks(weight);
        // The heaviest first: speedscope's "left heavy" view starts there.
        stacks.sort_by_key(|s| std::cmp::Reverse(s.1));
        let mut samples = Vec::with_capacity(stacks.len());
        let mut weights = Vec::with_capacity(stacks.len());
        for (stack, bytes) in stacks {
            let positions = stack
                .into_iter()
                .map(|frame| {
                    *index.entry(frame.clone()).or_insert_with(|| {
                        frames.push(JsonFrame {
                            name: one_line(&frame.name),
                            file: frame.file.as_deref().map(one_line),
                            line: frame.line,
                        });
                        frames.len() - 1
                    })
                })
                .collect();
            samples.push(positions);
            weights.push(bytes);
        }
        let total = weights.iter().fold(0u64, |a, &b| a.saturating_add(b));
        let what = match weight {
            Weight::HeldAtPeak => "held at the peak",
            Weight::Grew => "grew",
        };
        profiles.push(Profile {
            kind: "sampled",
            name: format!("{}: bytes {what}", one_line(&lane.name)),
            unit: "bytes",
            start_value: 0,
            end_value: total,
            samples,
            weights,
        });
    }
    let file = File {
        schema: "https://www.speedscope.app/file-format-schema.json",
        name,
        exporter: format!("weightscope {}", env!("CARGO_PKG_VERSION")),
        active_profile_index: 0,
        shared: Shared { frames },
        profiles,
    };
    let stacks = file.profiles.iter().map(|p| p.samples.len()).sum();
    serde_json::to_writer(&mut *out, &file).map_err(std::io::Error::from)?;
    out.write_all(b"\n")?;
    Ok(stacks)
}
