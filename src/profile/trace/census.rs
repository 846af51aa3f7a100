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
    /// that share a buffer (views, slices) or hold none yet (not
    /// evaluated: `mx.load`'s until used) are counted each by `nbytes`, as
    /// MLX's Python API says neither.
    #[must_use]
    pub fn counted_beyond_active_bytes(&self) -> u64 {
        self.reached_bytes.saturating_sub(self.active_bytes)
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
