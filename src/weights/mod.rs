//! The Weights core: a model directory as lazy MLX arrays, with per-tensor and
//! per-shard release and checkpoint views (built on `checkpoint` and `mlx`).
//!
//! Metadata (names, shapes, dtypes, bytes, shard) comes from the checkpoint
//! layer's own header parsing. Tensor data comes from MLX's safetensors loader:
//! every shard is opened as a lazy native map, and a tensor's bytes are read
//! into an MLX-owned buffer only when it is first evaluated. (Our own memory
//! map is never wrapped as an MLX array: GPU kernels need page-aligned
//! buffers and safetensors offsets are arbitrary.)
//!
//! The trap this module exists to make visible: the shard's map keeps every
//! evaluated array alive, so [`Weights::release`] of one tensor frees nothing
//! while its shard is open. Streaming whole-model transforms must call
//! [`Weights::release_shard`] as they leave each shard.
//!
//! `weights_core.rs` holds [`Weights`] itself; the other files its parts.

mod bands;
mod budget;
mod check;
mod decode;
pub mod demo;
mod diff;
mod native;
mod pair;
mod prefetch;
mod preview;
mod rules;
mod view;
pub use crate::checkpoint::viewfile;
mod walker;

pub use budget::{DEFAULT_PREVIEW_BUDGET, Forgotten, PreviewBudget, PreviewsHeld};
pub use check::{ValueScan, scan_values};
pub use decode::{Decoding, Values};
pub use diff::{
    Changed, Common, DiffFailure, DiffReport, KindSummary, diff, module_kind, snr_text,
};
pub use native::{MlxLoader, ShardLoader};
pub use pair::{GroupError, GroupErrors, PairDetail, WORST_GROUPS, detail as diff_detail};
pub use preview::{PreviewOptions, QuantMaps, TensorPreview};
pub use rules::{
    BUILTIN_VIEWS, CompiledView, DropRule, FixupOp, FixupRule, RenameRule, ViewChoice, ViewError,
    ViewInfo, ViewRules,
};
pub use view::{Fixup, View};
pub use walker::{
    InStep, Progress, Release, Released, Visitor, WalkProgress, Walkable, Walked, Walker,
};
mod weights_core;
pub use weights_core::{OpenStep, Weights, WeightsError};
