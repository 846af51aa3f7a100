//! Memory sampling, whole-model walks and traces, as plain data (no egui).
