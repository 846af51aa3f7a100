//! weightscope's checkpoint layer (with `units` and `files`, the layers under it) and
//! view-file parser, compiled from the main crate's sources (all pure Rust).
#![allow(missing_docs, dead_code)]

#[path = "../../src/checkpoint/mod.rs"]
pub mod checkpoint;

// The layer below the checkpoint layer (the JSON string runs its scanner uses).
#[path = "../../src/units.rs"]
pub mod units;

// The one way work runs on several cores, which the checkpoint layer uses.
#[path = "../../src/par.rs"]
pub mod par;

// Bounded reads and atomic writes, which the checkpoint layer uses.
#[path = "../../src/files.rs"]
pub mod files;

// Hub repos and URLs, which the checkpoint layer opens.
#[path = "../../src/remote/mod.rs"]
pub mod remote;

#[path = "../../src/weights/viewfile.rs"]
pub mod viewfile;
