//! Views as rules: the built-in views (picked from `config.json`) and user
//! views from a small JSON file, compiled against a checkpoint's names into
//! the [`View`] the Weights core applies.
//!
//! A rule set has three parts, applied to every stored name in this order:
//! drops (a matching name does not exist for the graph), renames (the first
//! matching rule rewrites the name, regex captures allowed), and fix-ups
//! (every matching rule repairs the value, lazily, in order).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use regex::Regex;

use crate::checkpoint::Checkpoint;
use crate::mlx::{self, Array, MlxError};

use super::View;
use super::viewfile::ViewFile;
pub use super::viewfile::{FixupOp, ViewError};

/// Which view to install when opening a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ViewChoice {
    /// Pick from `config.json` (`model_type`) and the names (see [`ViewChoice::resolve`]).
    #[default]
    Auto,
    /// No view: canonical names are the stored names.
    Identity,
    /// A built-in view by name (`qwen3-next`).
    Builtin(String),
    /// A user view file.
    File(PathBuf),
}

impl ViewChoice {
    /// Parses a command-line value: `auto`, `identity`, a built-in name, or a path.
    #[must_use]
    pub fn parse(text: &str) -> Self {
        match text {
            "auto" => Self::Auto,
            "identity" | "none" => Self::Identity,
            name if BUILTIN_VIEWS.contains(&name) => Self::Builtin(name.to_owned()),
            path => Self::File(PathBuf::from(path)),
        }
    }

    /// The rules to install for `checkpoint` (`None`: no view).
    ///
    /// `Auto` installs the Qwen3-Next view only for a checkpoint that looks
    /// like the Hugging Face source (its `model_type` is `qwen3_next` or
    /// `qwen3_5*`, and some name still needs the view: the
    /// `model.language_model.` prefix, an `mtp.` tensor, or a conv1d weight
    /// in the source layout). An MLX-converted checkpoint already had these
    /// fixes; applying them twice would add 1 to the norms again.
    ///
    /// # Errors
    /// An unknown built-in name, or a view file that cannot be read or has
    /// a bad rule.
    pub fn resolve(&self, checkpoint: &Checkpoint) -> Result<Option<ViewRules>, ViewError> {
        match self {
            Self::Identity => Ok(None),
            Self::Builtin(name) => builtin(name, checkpoint).map(Some),
            Self::File(path) => ViewRules::load(path).map(Some),
            Self::Auto if checkpoint.is_gguf() => Ok(Some(ViewRules::llama_cpp(checkpoint))),
            Self::Auto => {
                let model_type = checkpoint
                    .config()
                    .and_then(|c| c.model_type.as_deref())
                    .unwrap_or("");
                let qwen = model_type == "qwen3_next" || model_type.starts_with("qwen3_5");
                let needs = checkpoint.tensors().iter().any(|t| {
                    t.name().starts_with("model.language_model.")
                        || t.name().starts_with("mtp.")
                        || (t.name().ends_with("conv1d.weight")
                            && t.shape().len() == 3
                            && t.shape().last().is_some_and(|&k| k != 1))
                });
                Ok((qwen && needs).then(ViewRules::qwen3_next))
            }
        }
    }
}

/// Names of the built-in views.
pub const BUILTIN_VIEWS: [&str; 2] = ["qwen3-next", "llama-cpp"];

fn builtin(name: &str, checkpoint: &Checkpoint) -> Result<ViewRules, ViewError> {
    match name {
        "qwen3-next" => Ok(ViewRules::qwen3_next()),
        "llama-cpp" => Ok(ViewRules::llama_cpp(checkpoint)),
        other => Err(ViewError::UnknownBuiltin(other.to_owned())),
    }
}

impl FixupOp {
    fn apply(&self, array: &Array) -> Result<Array, MlxError> {
        match self {
            Self::Add(value) => mlx::add_scalar(array, *value),
            Self::MoveAxis(from, to) => mlx::move_axis(array, *from, *to),
            Self::SwapAxes(a, b) => mlx::swap_axes(array, *a, *b),
            Self::Cast(dtype) => {
                let dtype = mlx::dtype_named(dtype).ok_or_else(|| MlxError::Op {
                    operation: "cast",
                    message: format!("unknown dtype `{dtype}`"),
                })?;
                mlx::cast(array, dtype)
            }
            Self::Unpermute(heads) => {
                // Stored rows (head, j, t) are the source's (head, t, j),
                // t in 0..2, j in 0..head_dim/2.
                let shape = array.shape().to_vec();
                let rows = shape.first().copied().unwrap_or(0);
                let half = rows / heads.max(&1) / 2;
                if *heads < 1 || half * heads * 2 != rows {
                    return Err(MlxError::Op {
                        operation: "unpermute",
                        message: format!("{rows} rows are not {heads} heads of an even size"),
                    });
                }
                let mut split = vec![*heads, half, 2];
                split.extend_from_slice(&shape[1..]);
                let swapped = mlx::swap_axes(&mlx::reshape(array, &split)?, 1, 2)?;
                mlx::reshape(&swapped, &shape)
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Add(v) => format!("add {v}"),
            Self::MoveAxis(a, b) => format!("move axis {a} to {b}"),
            Self::SwapAxes(a, b) => format!("swap axes {a} and {b}"),
            Self::Cast(d) => format!("cast to {d}"),
            Self::Unpermute(h) => format!("undo llama.cpp's rotary row order over {h} heads"),
        }
    }
}

/// One rename: names matching `pattern` become `to` (`$1` etc. for captures).
#[derive(Debug, Clone)]
pub struct RenameRule {
    /// What it matches (stored names).
    pub pattern: Regex,
    /// The replacement.
    pub to: String,
    /// Where it came from, for messages ("rename[0], line 3").
    pub origin: String,
}

/// One drop: stored names matching `pattern` do not exist for the graph.
#[derive(Debug, Clone)]
pub struct DropRule {
    /// What it matches (stored names).
    pub pattern: Regex,
    /// Why, in words.
    pub reason: String,
    /// Where it came from.
    pub origin: String,
}

/// One fix-up: canonical names matching `pattern` get `op`, when the guards hold.
#[derive(Debug, Clone)]
pub struct FixupRule {
    /// What it matches (canonical names).
    pub pattern: Regex,
    /// What it does.
    pub op: FixupOp,
    /// Only arrays with this many dimensions.
    pub if_ndim: Option<usize>,
    /// Not when the last dimension is this (already in the target layout).
    pub unless_last_dim: Option<i32>,
    /// Why, in words.
    pub reason: String,
    /// Where it came from.
    pub origin: String,
}

impl FixupRule {
    fn applies(&self, name: &str, array: &Array) -> bool {
        let shape = array.shape();
        self.pattern.is_match(name)
            && self.if_ndim.is_none_or(|n| shape.len() == n)
            && self
                .unless_last_dim
                .is_none_or(|d| shape.last().is_some_and(|&last| last != d))
    }

    /// One line for people.
    #[must_use]
    pub fn describe(&self) -> String {
        format!("{} ({}; {})", self.op.describe(), self.reason, self.origin)
    }
}

/// A view's rules, before they meet a checkpoint.
#[derive(Debug, Clone, Default)]
pub struct ViewRules {
    /// Its name ("qwen3-next", or the file's path).
    pub name: String,
    /// Renames, first match wins.
    pub renames: Vec<RenameRule>,
    /// Drops.
    pub drops: Vec<DropRule>,
    /// Fix-ups, every match applies in order.
    pub fixups: Vec<FixupRule>,
}

fn re(pattern: &str) -> Regex {
    // Built-in patterns are constants checked by the tests.
    Regex::new(pattern).unwrap_or_else(|_| Regex::new("$^").expect("an empty regex compiles"))
}

impl ViewRules {
    /// The Qwen3-Next / Qwen3.5 view, as mlx-lm's `sanitize()` does it for
    /// the Hugging Face checkpoints (rules and reasons: docs/views.md).
    #[must_use]
    pub fn qwen3_next() -> Self {
        let origin = |s: &str| format!("qwen3-next: {s}");
        Self {
            name: "qwen3-next".into(),
            renames: vec![RenameRule {
                pattern: re(r"^model\.language_model\.(.+)$"),
                to: "model.$1".into(),
                origin: origin("the language model's prefix"),
            }],
            drops: vec![
                DropRule {
                    pattern: re(r"^mtp\."),
                    reason: "multi-token-prediction head (mlx-lm does not load it)".into(),
                    origin: origin("drop mtp.*"),
                },
                DropRule {
                    pattern: re(r"^(model\.)?visual\.|^model\.vision_tower\.|^vision_tower\."),
                    reason: "vision tower (text-only use)".into(),
                    origin: origin("drop the vision tower"),
                },
            ],
            fixups: vec![
                FixupRule {
                    pattern: re(
                        r"(\.input_layernorm|\.post_attention_layernorm|\.q_norm|\.k_norm)\.weight$|^model\.norm\.weight$",
                    ),
                    op: FixupOp::Add(1.0),
                    if_ndim: Some(1),
                    unless_last_dim: None,
                    reason: "RMSNorm weight stored as gamma - 1".into(),
                    origin: origin("norms + 1"),
                },
                FixupRule {
                    pattern: re(r"conv1d\.weight$"),
                    op: FixupOp::MoveAxis(2, 1),
                    if_ndim: Some(3),
                    unless_last_dim: Some(1),
                    reason: "conv1d stored as [out, in/groups, k]; MLX wants [out, k, in/groups]"
                        .into(),
                    origin: origin("conv1d layout"),
                },
            ],
        }
    }

    /// llama.cpp's tensor names (GGUF files) as Hugging Face and mlx-lm
    /// name them, for the Llama and Qwen families (gguf-py's
    /// `tensor_mapping.py` read the other way; `MoE` experts as `mlx-lm`
    /// stacks them, `switch_mlp`), and for `general.architecture` `llama`
    /// the Q and K rows put back in the source's order (the permutation
    /// `convert_hf_to_gguf.py` applies; Qwen's converter applies none).
    #[must_use]
    pub fn llama_cpp(checkpoint: &Checkpoint) -> Self {
        let origin = |s: &str| format!("llama-cpp: {s}");
        let layer = |from: &str, to: &str| RenameRule {
            pattern: re(&format!(r"^blk\.(\d+)\.{from}\.(weight|bias)$")),
            to: format!("model.layers.${{1}}.{to}.${{2}}"),
            origin: origin(from),
        };
        let top = |from: &str, to: &str| RenameRule {
            pattern: re(&format!(r"^{from}\.weight$")),
            to: format!("{to}.weight"),
            origin: origin(from),
        };
        let mut renames = vec![
            top("token_embd", "model.embed_tokens"),
            top("output_norm", "model.norm"),
            top("output", "lm_head"),
            layer("attn_norm", "input_layernorm"),
            layer("attn_q", "self_attn.q_proj"),
            layer("attn_k", "self_attn.k_proj"),
            layer("attn_v", "self_attn.v_proj"),
            layer("attn_output", "self_attn.o_proj"),
            layer("attn_q_norm", "self_attn.q_norm"),
            layer("attn_k_norm", "self_attn.k_norm"),
            layer("ffn_norm", "post_attention_layernorm"),
            layer("ffn_gate_inp", "mlp.gate"),
            layer("ffn_gate_exps", "mlp.switch_mlp.gate_proj"),
            layer("ffn_up_exps", "mlp.switch_mlp.up_proj"),
            layer("ffn_down_exps", "mlp.switch_mlp.down_proj"),
            layer("ffn_gate", "mlp.gate_proj"),
            layer("ffn_up", "mlp.up_proj"),
            layer("ffn_down", "mlp.down_proj"),
        ];
        renames.shrink_to_fit();
        let metadata = checkpoint.metadata();
        let arch = metadata
            .get("general.architecture")
            .map_or("", String::as_str);
        let heads = |key: &str| {
            metadata
                .get(&format!("{arch}.attention.{key}"))
                .and_then(|v| v.parse::<i32>().ok())
        };
        let mut fixups = Vec::new();
        if arch == "llama"
            && let Some(q_heads) = heads("head_count")
        {
            let kv_heads = heads("head_count_kv").unwrap_or(q_heads);
            for (proj, count) in [("q_proj", q_heads), ("k_proj", kv_heads)] {
                fixups.push(FixupRule {
                    pattern: re(&format!(r"\.self_attn\.{proj}\.(weight|bias)$")),
                    op: FixupOp::Unpermute(count),
                    if_ndim: None,
                    unless_last_dim: None,
                    reason: format!(
                        "convert_hf_to_gguf.py reorders {proj} rows for llama.cpp's rotary embedding"
                    ),
                    origin: origin(&format!("{proj} row order")),
                });
            }
        }
        Self {
            name: "llama-cpp".into(),
            renames,
            drops: vec![DropRule {
                pattern: re(r"^rope_freqs\.weight$"),
                reason: "llama.cpp's RoPE frequency factors, computed from config.json's rope_scaling (no tensor in the source)".into(),
                origin: origin("drop rope_freqs"),
            }],
            fixups,
        }
    }

    /// Reads a user view file (JSON; see docs/views.md).
    ///
    /// # Errors
    /// The file cannot be read, is not JSON of the right shape, or a rule is
    /// bad (a regex that does not compile, an unknown fix-up): the error
    /// names the file, the line and the rule.
    pub fn load(path: &Path) -> Result<Self, ViewError> {
        let text = crate::files::read_bounded_text(
            path,
            super::viewfile::MAX_VIEW_FILE_BYTES,
            "the view file",
        )
        .map_err(|err| ViewError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(err.reason()),
        })?;
        Self::parse(path, &text)
    }

    /// Parses the text of a user view file.
    ///
    /// # Errors
    /// As [`ViewRules::load`].
    pub fn parse(path: &Path, text: &str) -> Result<Self, ViewError> {
        let file = ViewFile::parse(path, text)?;
        Ok(Self {
            name: file.name,
            renames: file
                .renames
                .into_iter()
                .map(|r| RenameRule {
                    pattern: r.pattern,
                    to: r.to,
                    origin: r.origin,
                })
                .collect(),
            drops: file
                .drops
                .into_iter()
                .map(|d| DropRule {
                    pattern: d.pattern,
                    reason: d.reason,
                    origin: d.origin,
                })
                .collect(),
            fixups: file
                .fixups
                .into_iter()
                .map(|f| FixupRule {
                    pattern: f.pattern,
                    op: f.op,
                    if_ndim: f.if_ndim,
                    unless_last_dim: None,
                    reason: f.reason,
                    origin: f.origin,
                })
                .collect(),
        })
    }

    /// The canonical name of `stored`, or why it is dropped.
    fn map_name(&self, stored: &str) -> Result<String, &DropRule> {
        if let Some(drop) = self.drops.iter().find(|d| d.pattern.is_match(stored)) {
            return Err(drop);
        }
        Ok(self
            .renames
            .iter()
            .find(|r| r.pattern.is_match(stored))
            .map_or_else(
                || stored.to_owned(),
                |r| r.pattern.replace(stored, r.to.as_str()).into_owned(),
            ))
    }

    /// Applies the rules to `checkpoint`'s names.
    ///
    /// # Errors
    /// Two stored names that become one canonical name.
    pub fn compile(&self, checkpoint: &Checkpoint) -> Result<CompiledView, ViewError> {
        let tensors = checkpoint.tensors();
        let mut names = BTreeMap::new();
        let mut canonical_of = Vec::with_capacity(tensors.len());
        let mut dropped = Vec::new();
        let mut first_source: HashMap<String, usize> = HashMap::new();
        for (i, tensor) in tensors.iter().enumerate() {
            match self.map_name(tensor.name()) {
                Err(drop) => {
                    dropped.push((i, format!("{} ({})", drop.reason, drop.origin)));
                    canonical_of.push(None);
                }
                Ok(canonical) => {
                    if let Some(&first) = first_source.get(&canonical) {
                        return Err(ViewError::Collision {
                            view: self.name.clone(),
                            canonical,
                            first: tensors.at(first).name().to_owned(),
                            second: tensor.name().to_owned(),
                        });
                    }
                    first_source.insert(canonical.clone(), i);
                    names.insert(canonical.clone(), tensor.name().to_owned());
                    canonical_of.push(Some(canonical));
                }
            }
        }
        let fixups = self.fixups.clone();
        let mut view = View { names, fixup: None };
        if !fixups.is_empty() {
            view = view.with_fixup(move |name, array| {
                let mut fixed: Option<Array> = None;
                for rule in &fixups {
                    let current = fixed.as_ref().unwrap_or(array);
                    if rule.applies(name, current) {
                        fixed = Some(rule.op.apply(current)?);
                    }
                }
                Ok(fixed)
            });
        }
        Ok(CompiledView {
            info: ViewInfo {
                name: self.name.clone(),
                canonical_of,
                dropped,
                fixup_rules: self.fixups.iter().map(FixupRule::describe).collect(),
                fixup_patterns: self.fixups.iter().map(|f| f.pattern.clone()).collect(),
            },
            view,
        })
    }
}

/// A view ready to install, with what it did to the names.
pub struct CompiledView {
    /// What the UI and the CLI show.
    pub info: ViewInfo,
    /// What the Weights core installs.
    pub view: View,
}

/// What a compiled view did to a checkpoint's names (shared with the UI).
#[derive(Debug, Clone, Default)]
pub struct ViewInfo {
    /// The view's name.
    pub name: String,
    /// Per stored tensor (by position in the checkpoint): its canonical
    /// name, or `None` when the view drops it.
    pub canonical_of: Vec<Option<String>>,
    /// Dropped stored tensors (positions) with the rule that dropped each.
    pub dropped: Vec<(usize, String)>,
    /// The fix-up rules, described.
    pub fixup_rules: Vec<String>,
    fixup_patterns: Vec<Regex>,
}

impl ViewInfo {
    /// The fix-up rules whose name pattern matches canonical `name` (the
    /// shape guards are checked when the value is read).
    #[must_use]
    pub fn fixups_for(&self, name: &str) -> Vec<&str> {
        self.fixup_patterns
            .iter()
            .zip(&self.fixup_rules)
            .filter(|(p, _)| p.is_match(name))
            .map(|(_, d)| d.as_str())
            .collect()
    }

    /// How many stored names the view renamed.
    #[must_use]
    pub fn renamed(&self, checkpoint: &Checkpoint) -> usize {
        self.canonical_of
            .iter()
            .zip(checkpoint.tensors().iter())
            .filter(|(c, t)| c.as_ref().is_some_and(|c| c != t.name()))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_patterns_compile() {
        let rules = ViewRules::qwen3_next();
        for pattern in rules
            .renames
            .iter()
            .map(|r| &r.pattern)
            .chain(rules.drops.iter().map(|d| &d.pattern))
            .chain(rules.fixups.iter().map(|f| &f.pattern))
        {
            assert_ne!(pattern.as_str(), "$^", "a built-in pattern did not compile");
        }
        assert_eq!(
            rules
                .map_name("model.language_model.layers.3.mlp.gate.weight")
                .ok(),
            Some("model.layers.3.mlp.gate.weight".to_owned())
        );
        assert!(rules.map_name("mtp.fc.weight").is_err());
        assert!(
            rules
                .map_name("model.visual.blocks.0.attn.qkv.weight")
                .is_err()
        );
        assert_eq!(
            rules.map_name("lm_head.weight").ok(),
            Some("lm_head.weight".to_owned())
        );
    }

    #[test]
    fn a_bad_rule_is_named_with_its_line() {
        let text = "{\n  \"rename\": [\n    {\"from\": \"^a\\\\.(.*)$\", \"to\": \"b.$1\"},\n    {\"from\": \"^(oops\", \"to\": \"x\"}\n  ]\n}\n";
        let err = ViewRules::parse(Path::new("v.json"), text).expect_err("a bad regex");
        let message = err.to_string();
        assert!(message.contains("line 4"), "{message}");
        assert!(message.contains("rule rename[1]"), "{message}");
        assert!(message.contains("v.json"), "{message}");

        let text = "{\"fixup\": [{\"match\": \"x\", \"add\": 1, \"cast\": \"F16\"}]}";
        let err = ViewRules::parse(Path::new("v.json"), text).expect_err("two fix-ups");
        assert!(err.to_string().contains("fixup[0]"), "{err}");

        let text = "{\"fixup\": [{\"match\": \"x\", \"cast\": \"F7\"}]}";
        let err = ViewRules::parse(Path::new("v.json"), text).expect_err("a bad dtype");
        assert!(err.to_string().contains("F7"), "{err}");

        let text = "{\n\"renames\": []\n}";
        let err = ViewRules::parse(Path::new("v.json"), text).expect_err("unknown key");
        assert!(err.to_string().contains("line 2"), "{err}");
        assert!(!err.to_string().contains("column"), "{err}");
    }

    #[test]
    fn a_view_file_renames_drops_and_fixes() {
        let text = r#"{
            "name": "mine",
            "rename": [{"from": "^old\\.(.*)$", "to": "new.$1"}],
            "drop": ["^skip\\.", {"pattern": "^aux\\.", "reason": "auxiliary head"}],
            "fixup": [{"match": "norm$", "add": 1.0, "if_ndim": 1, "reason": "offset norm"}]
        }"#;
        let rules = ViewRules::parse(Path::new("v.json"), text).expect("parses");
        assert_eq!(rules.name, "mine");
        assert_eq!(
            rules.map_name("old.layer.w").ok(),
            Some("new.layer.w".to_owned())
        );
        assert_eq!(
            rules.map_name("aux.head").map_err(|d| d.reason.clone()),
            Err("auxiliary head".to_owned())
        );
        assert!(rules.map_name("skip.this").is_err());
        assert_eq!(rules.fixups[0].op, FixupOp::Add(1.0));
        assert!(rules.fixups[0].describe().contains("offset norm"));
    }
}
