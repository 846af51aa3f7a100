//! One vocabulary for memory at a moment, below everything that records it
//! (the walker, walks, traces, recordings, the app's strip):
//!
//! - a [`Sample`] is a time plus the process's figures ([`ProcessFigures`]),
//!   plus MLX's figures ([`MlxFigures`]) and GPU figures ([`GpuFigures`])
//!   where they are known; the time is an [`Instant`] while live and seconds
//!   on a trace's clock once placed there ([`Sample::on_clock`]);
//! - a [`Mark`] is an event (what happened, to what, the bytes, what its
//!   shard holds after);
//! - a [`Policy`] is what a walk releases, [`ExpectedPeaks`] what the
//!   headers predict for each policy.
//!
//! Adding a series: a field in one of the figure structs here, its column in
//! [`FlatSample`] (the file form) and in the trace's CSV row; nothing else.

mod mark;
mod policy;
mod process;

use std::time::Instant;

use serde::{Deserialize, Serialize};

pub use mark::{Mark, MarkKind};
pub use policy::{ExpectedPeaks, Policy};
pub use process::{MachineMemory, ProcessFigures, process_rss_bytes, reset_peak_rss};

/// MLX's allocator figures, in bytes (in-process, or reported by a probe
/// inside a recorded job, summed over its processes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MlxFigures {
    /// Live arrays (`mx.get_active_memory()`; on a GPU backend, device memory).
    pub active_bytes: u64,
    /// Freed buffers MLX keeps for reuse (`mx.get_cache_memory()`).
    pub cache_bytes: u64,
    /// Highest active figure since MLX's last reset (`mx.get_peak_memory()`).
    pub peak_bytes: u64,
}

/// GPU memory as the driver (NVML) reports it, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuFigures {
    /// What the sampled processes hold on the GPUs.
    pub process_bytes: u64,
    /// What every process holds on the GPUs.
    pub device_used_bytes: u64,
}

/// Memory at one moment. `T` is the time: an [`Instant`] while live,
/// seconds since a trace's origin (`f64`, the default) once on a clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample<T = f64> {
    /// When it was taken.
    pub at: T,
    /// What the OS says the process (or tree) holds.
    pub process: ProcessFigures,
    /// MLX's figures, where known.
    pub mlx: Option<MlxFigures>,
    /// GPU figures, where a driver reports them.
    pub gpu: Option<GpuFigures>,
}

impl Sample<Instant> {
    /// This process now: the OS's figures, with MLX's as the caller read
    /// them (the mlx layer's `sample_now` reads both; this layer takes MLX's
    /// figures as plain data).
    #[must_use]
    pub fn now_with(mlx: Option<MlxFigures>) -> Self {
        let process = ProcessFigures::read();
        Self {
            at: Instant::now(),
            process,
            mlx,
            gpu: None,
        }
    }

    /// The same sample on the clock that starts at `origin`.
    #[must_use]
    pub fn on_clock(&self, origin: Instant) -> Sample {
        Sample {
            at: secs_since(origin, self.at),
            process: self.process,
            mlx: self.mlx,
            gpu: self.gpu,
        }
    }
}

impl<T> Sample<T> {
    /// MLX's figures, zeros where unknown (what a plot draws).
    #[must_use]
    pub fn mlx_or_zero(&self) -> MlxFigures {
        self.mlx.unwrap_or_default()
    }

    /// What the resident memory was, by kind, where MLX's figures are
    /// known. On MLX's CPU backend its buffers are anonymous memory, so
    /// what is left of the anonymous part is host memory that is not
    /// MLX's (Python objects, numpy, torch).
    #[must_use]
    pub fn kinds(&self) -> Option<MemoryKinds> {
        let m = self.mlx?;
        Some(MemoryKinds {
            mlx_active: m.active_bytes,
            mlx_cache: m.cache_bytes,
            host_not_mlx: self
                .process
                .anon_bytes
                .saturating_sub(m.active_bytes + m.cache_bytes),
            file_backed: self.process.file_bytes,
        })
    }
}

impl Sample {
    /// The sample as trace files keep it: time, RSS and its split, MLX's
    /// figures (0 where unknown); a trace holds exactly what it saves.
    #[must_use]
    pub fn as_stored(&self) -> Self {
        FlatSample::from(*self).into()
    }
}

/// Seconds from `origin` to `at` (0 for moments before the origin).
#[must_use]
pub fn secs_since(origin: Instant, at: Instant) -> f64 {
    at.saturating_duration_since(origin).as_secs_f64()
}

/// Resident memory by kind (see [`Sample::kinds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryKinds {
    /// MLX's arrays.
    pub mlx_active: u64,
    /// MLX's cache of freed buffers.
    pub mlx_cache: u64,
    /// Anonymous memory that is not MLX's.
    pub host_not_mlx: u64,
    /// File-backed and shared memory (mapped libraries and files).
    pub file_backed: u64,
}

/// A sample as trace files store it: one flat record, MLX figures 0 where
/// unknown (the format every trace so far was written in).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct FlatSample {
    /// Seconds since the trace's origin.
    pub t_secs: f64,
    /// Process RSS.
    pub rss_bytes: u64,
    /// Anonymous part of RSS.
    pub rss_anon_bytes: u64,
    /// File-backed part of RSS.
    pub rss_file_bytes: u64,
    /// MLX active memory.
    pub mlx_active_bytes: u64,
    /// MLX cache.
    pub mlx_cache_bytes: u64,
    /// MLX peak since its last reset.
    pub mlx_peak_bytes: u64,
    /// The highest RSS the kernel saw so far (`VmHWM`; JSON only, 0 and
    /// left out where unknown).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub peak_rss_bytes: u64,
    /// MLX's figures were unknown (a recorded job before its probe
    /// reported, or after its process was gone; JSON only, left out when
    /// false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_mlx: bool,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's signature
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl From<Sample> for FlatSample {
    fn from(sample: Sample) -> Self {
        let mlx = sample.mlx_or_zero();
        Self {
            t_secs: sample.at,
            rss_bytes: sample.process.rss_bytes,
            rss_anon_bytes: sample.process.anon_bytes,
            rss_file_bytes: sample.process.file_bytes,
            mlx_active_bytes: mlx.active_bytes,
            mlx_cache_bytes: mlx.cache_bytes,
            mlx_peak_bytes: mlx.peak_bytes,
            peak_rss_bytes: sample.process.peak_rss_bytes,
            no_mlx: sample.mlx.is_none(),
        }
    }
}

impl From<FlatSample> for Sample {
    fn from(flat: FlatSample) -> Self {
        Self {
            at: flat.t_secs,
            process: ProcessFigures {
                rss_bytes: flat.rss_bytes,
                anon_bytes: flat.rss_anon_bytes,
                file_bytes: flat.rss_file_bytes,
                peak_rss_bytes: flat.peak_rss_bytes,
                ..ProcessFigures::default()
            },
            mlx: (!flat.no_mlx).then_some(MlxFigures {
                active_bytes: flat.mlx_active_bytes,
                cache_bytes: flat.mlx_cache_bytes,
                peak_bytes: flat.mlx_peak_bytes,
            }),
            gpu: None,
        }
    }
}

impl Serialize for Sample {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        FlatSample::from(*self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Sample {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        FlatSample::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_survives_its_file_form() {
        let sample = Sample {
            at: 1.5,
            process: ProcessFigures {
                rss_bytes: 10,
                anon_bytes: 6,
                file_bytes: 4,
                ..ProcessFigures::default()
            },
            mlx: Some(MlxFigures {
                active_bytes: 3,
                cache_bytes: 2,
                peak_bytes: 5,
            }),
            gpu: None,
        };
        let json = serde_json::to_string(&sample).expect("json");
        assert_eq!(
            json,
            r#"{"t_secs":1.5,"rss_bytes":10,"rss_anon_bytes":6,"rss_file_bytes":4,"mlx_active_bytes":3,"mlx_cache_bytes":2,"mlx_peak_bytes":5}"#
        );
        let back: Sample = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, sample);
    }

    #[test]
    fn a_live_sample_reads_this_process() {
        let sample = Sample::now_with(None);
        assert!(sample.process.rss_bytes > 1 << 20);
        assert_eq!(sample.process.processes, 1);
        let later = sample.on_clock(sample.at);
        assert!(later.at.abs() < f64::EPSILON);
    }
}
