//! weightscope's checkpoint layer, compiled from the main crate's sources.
#![allow(missing_docs, dead_code)]

#[path = "../../src/checkpoint/mod.rs"]
pub mod checkpoint;
