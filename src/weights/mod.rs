//! The Weights core: a model directory as lazy MLX arrays, with per-tensor and
//! per-shard release and checkpoint views (built on `checkpoint` and `mlx`).
