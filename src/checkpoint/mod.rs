//! Safetensors checkpoints known from their headers alone: shards, tensors,
//! dtypes, byte accounting and validation. No MLX and no egui here, and no
//! tensor byte is ever read.
//!
//! [`Checkpoint::open`] takes a folder with an index, a folder of
//! `*.safetensors` files, or one file. A bad shard does not stop the others:
//! it is reported in [`Checkpoint::problems`] beside what did load.
//!
//! `open.rs` holds [`Checkpoint`] itself and how it is opened; the other
//! files the formats and what is read from them.
#![forbid(unsafe_code)]

pub mod check;
pub(crate) mod config;
pub mod convert;
mod dtype;
mod error;
pub mod gguf;
pub(crate) mod gguf_checkpoint;
pub(crate) mod header;
pub(crate) mod index;
pub mod pytorch;
pub mod query;
mod scan;
mod source;
mod summary;
pub(crate) mod table;
pub mod torch_checkpoint;
pub mod viewfile;

pub use config::{
    Fp8Config, ModelConfig, QuantConfig, QuantMode, QuantParams, ScaleFormat, parse_config,
    read_config,
};
pub use dtype::{Dtype, UnknownDtype};
pub use error::{CheckpointError, io_reason};
pub use header::{
    HEADER_CAP_BYTES, ShardHeader, parse_file_bytes, parse_header, read_header,
    scanner_agrees_with_serde,
};
pub use index::{Index, IndexEntries, index_scanner_agrees_with_serde, parse_index, read_index};
pub use summary::{
    AuxRole, Encoding, Fp8Format, Fp8Summary, Fp8Tensor, LayerFigures, QuantSummary,
    QuantizedTensor, Summary, layer_of,
};

pub use source::{ByteSource, ShardBytes};
pub use table::{PartnerGuess, ShardTensors, TensorInfo, TensorRef, TensorTable};
mod open;

#[cfg(feature = "remote")]
pub(crate) use open::ReadHeader;
pub use open::{Checkpoint, Layout, Shard, ShardId};
pub(crate) use open::{NameDigest, Parsed, in_index_order, parse_all, require_regular};
