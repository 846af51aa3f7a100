//! Who held MLX memory, as a reader wants it: the census to name for the
//! peak, the sentence a finding says, two recordings' roots compared. The
//! censuses themselves are `trace::census`.

use super::compare::{Difference, differences};
use crate::profile::trace::census::Census;
use crate::units::human_bytes;

/// A held-by root as two recordings are compared by it: its name and kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RootKey {
    /// The root's name.
    pub root: String,
    /// Its kind.
    pub kind: String,
}

/// One root's bytes at the peak in two recordings.
pub type RootDifference = Difference<RootKey>;

/// Where two recordings' holders at the peak differ, root by root (the
/// same name and kind in both), most changed first; roots holding nothing
/// in either are left out.
#[must_use]
pub fn root_differences(a: Option<&Census>, b: Option<&Census>) -> Vec<RootDifference> {
    let roots = |walk: Option<&Census>| {
        walk.map_or(&[][..], |w| &w.roots)
            .iter()
            .map(|r| {
                let key = RootKey {
                    root: r.root.clone(),
                    kind: r.kind.clone(),
                };
                (key, r.bytes)
            })
            .collect::<Vec<_>>()
    };
    differences(roots(a), roots(b), |x, y| x.root.cmp(&y.root))
}

/// The finding's sentence for `walk`: the root holding most, with its
/// bytes and an example path, and, when `allocated` (the line that held
/// most at the peak) is another place, that line too.
#[must_use]
pub fn sentence(walk: &Census, allocated: Option<&str>, peak_bytes: Option<u64>) -> Option<String> {
    let top = walk.roots.first()?;
    // A walk well below the peak (the job grew faster than the walks, at
    // most one a second) says when it was.
    let when = match peak_bytes {
        Some(peak) if u128::from(walk.active_bytes) * 10 < u128::from(peak) * 9 => format!(
            "At {:.1} s, the last walk before the peak of {} (MLX active {} then)",
            walk.t_secs,
            human_bytes(peak),
            human_bytes(walk.active_bytes)
        ),
        _ => "At the peak".to_owned(),
    };
    let share = if walk.active_bytes > 0 {
        format!(
            " ({:.0} % of MLX's {})",
            100.0 * top.bytes as f64 / walk.active_bytes as f64,
            human_bytes(walk.active_bytes)
        )
    } else {
        String::new()
    };
    let advice = match top.kind.as_str() {
        "local" | "global" => "drop each entry when you are done with it (or `del` it)",
        "attribute" => "clear that attribute when its arrays are no longer needed",
        "closure" => "the function keeps its closure's arrays for as long as it lives",
        "default" => {
            "a default argument lives as long as the function: use None and make it inside"
        }
        "traceback" => {
            "a kept exception keeps its frames' locals: drop it (or `sys.last_traceback`)"
        }
        "generator" => "a suspended generator keeps its locals: finish or close it",
        _ => "drop it when done",
    };
    let mut text = format!(
        "{when}, {} of MLX memory was held by `{}` ({}; {} array{}, e.g. `{}`){share}: {advice}.",
        human_bytes(top.bytes),
        top.root,
        top.place(),
        top.arrays,
        if top.arrays == 1 { "" } else { "s" },
        top.path
    );
    if let Some(line) = allocated {
        use std::fmt::Write as _;
        let _ = write!(text, " The line that allocated it: {line}.");
    }
    if walk.partial {
        text.push_str(" (The walk stopped at its time budget: partial.)");
    }
    if let Some(beyond) = walk.counted_beyond_explained() {
        use std::fmt::Write as _;
        let _ = write!(text, " (In this walk, {beyond}.)");
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::trace::census::{HeldRoot, at_peak};

    fn root(name: &str, kind: &str, bytes: u64) -> HeldRoot {
        HeldRoot {
            root: name.into(),
            kind: kind.into(),
            function: "main".into(),
            file: "/work/fold.py".into(),
            line: 21,
            bytes,
            arrays: 2,
            path: format!("{name}[1]"),
            type_name: "list".into(),
            also: Vec::new(),
        }
    }

    #[test]
    fn the_walk_at_the_highest_memory_is_the_peaks() {
        let walk = |t, active| Census {
            t_secs: t,
            pid: 1,
            active_bytes: active,
            reached_bytes: active,
            partial: false,
            objects: 10,
            millis: 1.0,
            roots: vec![root("kept", "local", active)],
            buffers: None,
            shallow: false,
        };
        let walks = [
            walk(1.0, 100),
            walk(2.0, 300),
            walk(3.0, 200),
            walk(4.0, 296),
            walk(5.0, 250),
        ];
        assert_eq!(
            at_peak(&walks).map(|w| w.t_secs),
            Some(4.0),
            "the latest near the highest"
        );
        assert_eq!(at_peak(&[] as &[Census]), None);
    }

    #[test]
    fn two_recordings_compare_root_by_root() {
        let walk = |roots: Vec<HeldRoot>| Census {
            t_secs: 1.0,
            pid: 1,
            active_bytes: 100,
            reached_bytes: 100,
            partial: false,
            objects: 1,
            millis: 1.0,
            roots,
            buffers: None,
            shallow: false,
        };
        let a = walk(vec![
            root("kept", "local", 100),
            root("CACHE", "global", 10),
        ]);
        let b = walk(vec![root("kept", "local", 20), root("out", "local", 50)]);
        let d = root_differences(Some(&a), Some(&b));
        let names: Vec<(&str, i128)> = d
            .iter()
            .map(|d| (d.key.root.as_str(), d.change()))
            .collect();
        assert_eq!(names, [("kept", -80), ("out", 50), ("CACHE", -10)]);
        assert!(root_differences(None, None).is_empty());
    }

    #[test]
    fn the_sentence_names_the_root_its_place_and_the_allocating_line() {
        let walk = Census {
            t_secs: 1.0,
            pid: 1,
            active_bytes: 2 << 30,
            reached_bytes: 1 << 30,
            partial: false,
            objects: 10,
            millis: 1.0,
            roots: vec![root("kept", "local", 1 << 30)],
            buffers: None,
            shallow: false,
        };
        assert_eq!(walk.unreached_bytes(), 1 << 30);
        let text = sentence(&walk, Some("fold.py:12 in main"), Some(2 << 30)).expect("a sentence");
        assert!(text.starts_with("At the peak"), "{text}");
        let early = sentence(&walk, None, Some(4 << 30)).expect("a sentence");
        assert!(
            early.starts_with("At 1.0 s, the last walk before the peak of 4.00 GiB"),
            "{early}"
        );
        assert!(
            text.contains("held by `kept` (a list in main, fold.py:21; 2 arrays"),
            "{text}"
        );
        assert!(text.contains("1.00 GiB"), "{text}");
        assert!(text.contains("50 %"), "{text}");
        assert!(
            text.contains("The line that allocated it: fold.py:12 in main"),
            "{text}"
        );
    }
}
