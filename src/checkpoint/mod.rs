//! Safetensors checkpoints known from their headers alone: shards, tensors,
//! dtypes, byte accounting and validation. No MLX and no egui here.
