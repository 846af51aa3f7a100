//! Puts the MLX library folder on the rpath of every binary and test this crate
//! builds, so nothing needs `LD_LIBRARY_PATH`.
//!
//! A dependency's `rustc-link-arg` never reaches the final binary, so the patched
//! mlx-sys exports the folder it linked against as links metadata
//! (`DEP_MLX_LIBDIR`) and this script turns it into an rpath. Before it comes
//! `mlx-glue/dist/current/mlx/lib`, the set-up's switch between the CPU and the
//! CUDA library of the same MLX version, and `mlx-glue/dist/current/nvidia-lib`
//! for the CUDA build's NVIDIA libraries. First of all comes
//! `$ORIGIN/../lib/weightscope/mlx/lib`, where `mlx-glue/dev install` puts the
//! library beside an installed binary. `--disable-new-dtags` writes `DT_RPATH`,
//! which (unlike `DT_RUNPATH`) also applies to `libmlx.so`'s own dependencies.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIBDIR");
    let Some(linked) = env::var_os("DEP_MLX_LIBDIR") else {
        // macOS: upstream mlx-sys links MLX statically; there is no rpath to set.
        return;
    };
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let current = manifest.join("mlx-glue/dist/current");
    // First: where `mlx-glue/dev install` puts the library beside an
    // installed binary (`PREFIX/bin/weightscope`, `PREFIX/lib/weightscope`),
    // so it runs after the clone is gone.
    println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN/../lib/weightscope/mlx/lib");
    let dirs = [
        current.join("mlx/lib"),
        current.join("nvidia-lib"),
        PathBuf::from(linked),
    ];
    println!("cargo:rustc-link-arg=-Wl,--disable-new-dtags");
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    for dir in dirs {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    }
}
