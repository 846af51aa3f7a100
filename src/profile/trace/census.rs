//! Who holds MLX memory: the probe's walks from the roots the job's code
//! wrote (a function's local, a module's global, an attribute, a closure, a
//! default argument, a kept traceback, a suspended generator) down to the
//! live `mx.array` objects, each root with the bytes of the arrays it
//! reaches first. A walk is made at a new high of MLX active memory, at most
//! once a second; the recording keeps them all (bounded) and names the
//! walk nearest the peak, and the last one when the job was killed.

use serde::{Deserialize, Serialize};

/// One root and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldRoot {
    /// How the job's code names it: `kept`, `CACHE`, `folder.cache`,
    /// `load (closure over cache)`, `f (default seen)`, `sys.last_traceback`.
    pub root: String,
    /// `local`, `global`, `attribute`, `closure`, `default`, `traceback`,
    /// `generator`.
    pub kind: String,
    /// The function whose local it is (`<module>` for a global).
    #[serde(default)]
    pub function: String,
    /// Its file.
    #[serde(default)]
    pub file: String,
    /// The line that function was executing (0 for a global).
    #[serde(default)]
    pub line: u32,
    /// Bytes of the arrays it reaches first (`nbytes` of each array once).
    pub bytes: u64,
    /// How many arrays.
    pub arrays: u64,
    /// One path from the root to one of them: `kept[3][1]['w']`.
    #[serde(default)]
    pub path: String,
    /// The Python type of the root's value (`list`, `dict`, `Folder`).
    #[serde(default, rename = "type")]
    pub type_name: String,
    /// Earlier roots whose arrays this one reaches too (counted there, once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
}

impl HeldRoot {
    /// Where the root lives, in words: "a list in main, fold.py:21", "a
    /// global dict of fold.py".
    #[must_use]
    pub fn place(&self) -> String {
        let file = self.file.rsplit(['/', '\\']).next().unwrap_or(&self.file);
        let what = if self.type_name.is_empty() {
            "a value".to_owned()
        } else {
            format!("{} {}", article(&self.type_name), self.type_name)
        };
        match self.kind.as_str() {
            "global" if file.is_empty() => format!("a module global ({what})"),
            "global" => format!("a global of {file} ({what})"),
            _ if self.function.is_empty() => what,
            _ => format!("{what} in {}, {file}:{}", self.function, self.line),
        }
    }

    /// "also reaches what `x`, `y` hold (counted there)", when it does.
    #[must_use]
    pub fn also_reaches(&self) -> Option<String> {
        (!self.also.is_empty()).then(|| {
            format!(
                "also reaches what {} holds (counted there)",
                self.also.join(", ")
            )
        })
    }
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u', 'A', 'E', 'I', 'O', 'U']) {
        "an"
    } else {
        "a"
    }
}

/// Under this much MLX memory the probe does not walk (and a walk does not
/// enter big containers or the libraries' globals for less unaccounted
/// for): the probe's `_LOOK_FURTHER_LEAST`.
pub const WALK_LEAST_BYTES: u64 = 16 << 20;

/// Why a recording of a Python job has no walk, when its MLX memory stayed
/// under [`WALK_LEAST_BYTES`]; `None` otherwise.
#[must_use]
pub fn not_walked_explained(peak_mlx_active_bytes: Option<u64>) -> Option<String> {
    let peak = peak_mlx_active_bytes?;
    (peak < WALK_LEAST_BYTES).then(|| {
        format!(
            "no walk: MLX active stayed under {} (at most {}), too little to be worth one",
            crate::units::human_bytes(WALK_LEAST_BYTES),
            crate::units::human_bytes(peak)
        )
    })
}

/// One walk of the probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Census {
    /// When it arrived, on the recording's clock.
    pub t_secs: f64,
    /// The process walked.
    pub pid: u32,
    /// That process's MLX active memory when it walked.
    pub active_bytes: u64,
    /// The bytes every root reached together.
    pub reached_bytes: u64,
    /// Whether it stopped at its time budget before every root was walked.
    #[serde(default)]
    pub partial: bool,
    /// Python objects visited.
    #[serde(default)]
    pub objects: u64,
    /// How long it held the job (milliseconds).
    #[serde(default)]
    pub millis: f64,
    /// The roots, most bytes first (at most a dozen).
    pub roots: Vec<HeldRoot>,
    /// How the bytes were counted, when the roots' arrays added up to more
    /// than MLX held (absent: each array by its `nbytes`, which was not
    /// more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffers: Option<BufferCount>,
    /// Whether it left the big containers and the libraries' globals
    /// unwalked because less than 16 MiB was not accounted for.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shallow: bool,
}

/// What the walk counted: arrays by `nbytes`, or buffers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CountedBy {
    /// Views of one buffer counted once, arrays not evaluated yet as
    /// holding nothing.
    Buffer,
    /// Each array by its `nbytes`: the walk could not read MLX's graph
    /// safely (the job had other threads, or the walk ran beside its main
    /// thread).
    #[default]
    #[serde(other)]
    Array,
}

/// Why a count by buffer stopped before every array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CountStopped {
    /// An array not evaluated yet had a graph of more than about 250
    /// nodes (MLX prints it whole to tell).
    Graph,
    /// The walk's 50 ms ran out.
    #[serde(other)]
    Time,
}

impl CountStopped {
    fn because(self) -> &'static str {
        match self {
            Self::Time => "the walk's time ran out",
            Self::Graph => "it met an array not evaluated yet with a large graph",
        }
    }
}

/// Why a walk counted by array: reading MLX's graph was not safe, or not
/// possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ByArrayWhy {
    /// Another thread of the job was running (it may evaluate the arrays).
    Threads,
    /// The walk ran beside the job's main thread, which waited in C.
    Beside,
    /// The job's MLX has no `export_to_dot` or `__dlpack__`.
    Mlx,
    /// MLX runs on a GPU other than Metal (CUDA): asking for an array's
    /// data pointer there may move its buffer.
    Device,
    /// Counting by buffer failed.
    #[serde(other)]
    Failed,
}

/// How a walk counted its arrays' bytes when, by `nbytes`, they added up to
/// more than MLX held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferCount {
    /// Buffers, or arrays.
    #[serde(default)]
    pub by: CountedBy,
    /// Why by arrays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<ByArrayWhy>,
    /// Arrays counted by buffer (those of 64 KiB or more, largest first).
    #[serde(default)]
    pub arrays: u64,
    /// Arrays left counted by `nbytes`.
    #[serde(default)]
    pub left: u64,
    /// Why some were left: the walk's time ran out, or an unevaluated
    /// array's graph was too big to print again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<CountStopped>,
    /// Bytes of views whose buffer an earlier array counted.
    #[serde(default)]
    pub shared: u64,
    /// Arrays not evaluated yet: they hold no buffer.
    #[serde(default)]
    pub unevaluated: u64,
    /// Their `nbytes`, counted as none.
    #[serde(default)]
    pub unevaluated_bytes: u64,
}

impl Census {
    /// MLX memory no root reached: held by MLX's graph (arrays not yet
    /// evaluated, or kept by other arrays' computations), or by objects the
    /// walk does not enter (C extensions).
    #[must_use]
    pub fn unreached_bytes(&self) -> u64 {
        self.active_bytes.saturating_sub(self.reached_bytes)
    }

    /// What the roots' arrays add up to beyond MLX active memory: arrays
    /// the walk counted by `nbytes` that share a buffer (views, slices) or
    /// hold none yet (not evaluated: `mx.load`'s until used); see
    /// [`Census::buffers`].
    #[must_use]
    pub fn counted_beyond_active_bytes(&self) -> u64 {
        self.reached_bytes.saturating_sub(self.active_bytes)
    }

    /// What no root reached, in words: a short name (`not reached from
    /// Python`, or `not looked for` in a shallow walk) and why.
    #[must_use]
    pub fn unreached_explained(&self) -> (&'static str, String) {
        if self.shallow {
            (
                "not looked for",
                format!(
                    "under {} was not accounted for: the walk enters big containers and \
                     libraries' globals only for more",
                    crate::units::human_bytes(WALK_LEAST_BYTES)
                ),
            )
        } else {
            (
                "not reached from Python",
                "held by MLX's graph (arrays not yet evaluated, or kept by other \
                 computations), or by objects the walk does not enter"
                    .to_owned(),
            )
        }
    }

    /// Why the roots add up to more than MLX held, in words; `None` when
    /// they do not.
    #[must_use]
    pub fn counted_beyond_explained(&self) -> Option<String> {
        let beyond = self.counted_beyond_active_bytes();
        if beyond == 0 {
            return None;
        }
        let why = match &self.buffers {
            Some(b) if b.by == CountedBy::Buffer && b.left > 0 => format!(
                "{} array{} counted by buffer before {}, {} others each by their size",
                b.arrays,
                if b.arrays == 1 { " was" } else { "s were" },
                b.stopped.unwrap_or(CountStopped::Time).because(),
                b.left
            ),
            Some(b) if b.by == CountedBy::Buffer => {
                "arrays under 64 KiB are counted by their size, views of them each".to_owned()
            }
            b => format!(
                "arrays that share a buffer (views, slices) or hold none yet (not evaluated) are \
                 counted each by their size: {}",
                match b.as_ref().and_then(|b| b.why) {
                    Some(ByArrayWhy::Threads) => {
                        "the job had other threads running, where reading MLX's graph is not safe"
                    }
                    Some(ByArrayWhy::Beside) => {
                        "the walk ran while the job's main thread waited in MLX, where reading \
                         MLX's graph is not safe"
                    }
                    Some(ByArrayWhy::Mlx) => {
                        "this MLX has no export_to_dot or __dlpack__ to tell them apart"
                    }
                    Some(ByArrayWhy::Device) => {
                        "on this GPU, asking MLX for an array's data pointer may move its buffer \
                         (CUDA: from device to unified memory), so the walk does not ask"
                    }
                    Some(ByArrayWhy::Failed) => "counting by buffer failed",
                    None => "the walk did not count by buffer",
                }
            ),
        };
        Some(format!(
            "the roots' arrays add up to {} more than MLX held: {why}",
            crate::units::human_bytes(beyond)
        ))
    }

    /// What counting by buffer found, in words: views counted once, arrays
    /// not evaluated yet counted as holding nothing; `None` when it found
    /// neither or did not run.
    #[must_use]
    pub fn buffers_explained(&self) -> Option<String> {
        let b = self
            .buffers
            .as_ref()
            .filter(|b| b.by == CountedBy::Buffer)?;
        let mut parts = Vec::new();
        if b.shared > 0 {
            parts.push(format!(
                "views of one buffer counted once ({} shared)",
                crate::units::human_bytes(b.shared)
            ));
        }
        if b.unevaluated > 0 {
            parts.push(format!(
                "{} array{} not evaluated yet ({} by their size) counted as holding nothing",
                b.unevaluated,
                if b.unevaluated == 1 { "" } else { "s" },
                crate::units::human_bytes(b.unevaluated_bytes)
            ));
        }
        (!parts.is_empty()).then(|| format!("counted by buffer: {}", parts.join("; ")))
    }
}

/// The walks a recording keeps: the last [`KEPT_WALKS`] and the one at the
/// highest MLX active memory.
pub const KEPT_WALKS: usize = 600;

/// The walk to name for the peak: the latest of those made within 5 % of
/// the highest MLX active memory a walk saw (the probe walks at a new high
/// and once more a second later, when the arrays have left the locals of
/// the function that made them for where they are kept).
#[must_use]
pub fn at_peak<'a, I>(walks: I) -> Option<&'a Census>
where
    I: IntoIterator<Item = &'a Census>,
    I::IntoIter: Clone,
{
    let walks = walks.into_iter();
    let highest = walks.clone().map(|w| w.active_bytes).max()?;
    walks
        .filter(|w| u128::from(w.active_bytes) * 20 >= u128::from(highest) * 19)
        .max_by(|a, b| a.t_secs.total_cmp(&b.t_secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn walk(reached_bytes: u64, buffers: Option<BufferCount>) -> Census {
        Census {
            t_secs: 1.0,
            pid: 7,
            active_bytes: 64 * MIB,
            reached_bytes,
            partial: false,
            objects: 10,
            millis: 1.0,
            roots: Vec::new(),
            buffers,
            shallow: false,
        }
    }

    fn by(by: CountedBy, arrays: u64, left: u64) -> BufferCount {
        BufferCount {
            by,
            arrays,
            left,
            ..BufferCount::default()
        }
    }

    #[test]
    fn the_bytes_beyond_mlx_active_say_why_they_were_counted_each() {
        assert_eq!(walk(64 * MIB, None).counted_beyond_explained(), None);
        let said = |b| walk(128 * MIB, b).counted_beyond_explained().expect("said");
        assert!(said(None).contains("64.00 MiB more than MLX held"));
        assert!(said(None).contains("the walk did not count by buffer"));
        let why = |why| {
            said(Some(BufferCount {
                why: Some(why),
                ..BufferCount::default()
            }))
        };
        assert!(why(ByArrayWhy::Threads).contains("the job had other threads running"));
        assert!(why(ByArrayWhy::Beside).contains("main thread waited in MLX"));
        assert!(why(ByArrayWhy::Mlx).contains("no export_to_dot"));
        assert!(why(ByArrayWhy::Device).contains("may move its buffer"));
        assert!(why(ByArrayWhy::Failed).contains("counting by buffer failed"));
        assert!(
            said(Some(by(CountedBy::Buffer, 0, 9))).contains(
                "0 arrays were counted by buffer before the walk's time ran out, 9 others"
            )
        );
        let graph = said(Some(BufferCount {
            stopped: Some(CountStopped::Graph),
            ..by(CountedBy::Buffer, 1, 9)
        }));
        assert!(
            graph.contains("1 array was counted by buffer before it met an array not evaluated"),
            "{graph}"
        );
        assert!(said(Some(by(CountedBy::Buffer, 3, 0))).contains("under 64 KiB"));
    }

    #[test]
    fn counting_by_buffer_says_what_it_found() {
        assert_eq!(
            walk(0, Some(by(CountedBy::Buffer, 3, 0))).buffers_explained(),
            None
        );
        assert_eq!(
            walk(0, Some(by(CountedBy::Array, 3, 0))).buffers_explained(),
            None
        );
        let found = walk(
            0,
            Some(BufferCount {
                by: CountedBy::Buffer,
                arrays: 17,
                shared: 64 * MIB,
                unevaluated: 1,
                unevaluated_bytes: 4 * MIB,
                ..BufferCount::default()
            }),
        )
        .buffers_explained()
        .expect("said");
        assert_eq!(
            found,
            "counted by buffer: views of one buffer counted once (64.00 MiB shared); 1 array not \
             evaluated yet (4.00 MiB by their size) counted as holding nothing"
        );
    }

    #[test]
    fn a_probe_line_with_an_unknown_count_is_read_as_counted_by_array() {
        let b: BufferCount = serde_json::from_str(r#"{"by":"pixie"}"#).expect("parses");
        assert_eq!(b.by, CountedBy::Array);
    }
}
