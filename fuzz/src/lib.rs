//! weightscope's checkpoint layer and view-file parser, compiled from the
//! main crate's sources (both pure Rust).
#![allow(missing_docs, dead_code)]

#[path = "../../src/checkpoint/mod.rs"]
pub mod checkpoint;

#[path = "../../src/weights/viewfile.rs"]
pub mod viewfile;
