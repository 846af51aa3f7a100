//! The format layer alone: safetensors and GGUF headers, indexes, the
//! tensor table, written by the `safetensors` crate. This binary builds
//! with `--no-default-features` (no MLX, egui or HTTP client): `cargo test
//! --no-default-features` or `mlx-glue/dev quick`.

mod checkpoint_roundtrip;
