//! The `mlx` layer against real MLX (the CPU backend here) on files written by
//! the `safetensors` crate.
// Exact float equality is the point of these tests, and the narrowing casts
// build small integer fixtures from values that fit.
#![allow(clippy::float_cmp, clippy::cast_possible_truncation)]

use crate::common;

use common::{Tensor, mlx_memory_lock, write_safetensors};
use half::{bf16, f16};
use safetensors::tensor::Dtype as StDtype;
use weightscope::mlx::{self, ShardMap};

const MIB: usize = 1024 * 1024;

fn active() -> u64 {
    mlx::memory().expect("mlx memory").active_bytes
}

#[test]
fn lazy_open_then_exact_materialization_then_full_release() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("model.safetensors");
    let big: Vec<f32> = (0..MIB).map(|i| i as f32).collect(); // 4 MiB
    let small: Vec<f32> = (0..MIB / 4).map(|i| -(i as f32)).collect(); // 1 MiB
    write_safetensors(
        &path,
        &[
            Tensor::f32("big", &[1024, 1024], &big),
            Tensor::f32("small", &[MIB / 4], &small),
        ],
    );
    mlx::clear_cache().expect("clear cache");
    let before = active();

    let mut map = ShardMap::open(&path).expect("open");
    assert_eq!(map.len(), 2);
    let big_array = map.get("big").expect("read").expect("big is in the map");
    assert_eq!(big_array.shape(), &[1024, 1024]);
    assert_eq!(active(), before, "opening must read no tensor bytes");

    mlx::evaluate(&big_array).expect("evaluate");
    assert_eq!(
        active() - before,
        4 * MIB as u64,
        "evaluating adds exactly the tensor's bytes"
    );
    let values = mlx::to_f32_vec(&big_array).expect("values");
    assert_eq!(values.len(), MIB);
    assert_eq!(values[12345], 12345.0);

    // The trap: dropping the handle frees nothing while the map holds the array.
    drop(big_array);
    assert_eq!(active() - before, 4 * MIB as u64);

    drop(map);
    assert_eq!(
        active(),
        before,
        "dropping the map and the arrays frees the bytes"
    );
    mlx::clear_cache().expect("clear cache");
    assert_eq!(mlx::memory().expect("memory").cache_bytes, 0);
}

#[test]
fn half_precision_values_read_back_exactly() {
    // MLX memory counters are process-wide: no test here runs beside one that asserts on them.
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("half.safetensors");
    // Values chosen to need every bit of each format: subnormals, extremes, signs.
    let f16_values = [
        f16::from_f32(0.1),
        f16::MIN_POSITIVE_SUBNORMAL,
        f16::MAX,
        f16::MIN,
        f16::from_f32(-3.140_625),
        f16::NEG_ZERO,
    ];
    let bf16_values = [
        bf16::from_f32(0.1),
        bf16::MIN_POSITIVE_SUBNORMAL,
        bf16::MAX,
        bf16::MIN,
        bf16::from_f32(-3.140_625),
        bf16::from_f32(1e30),
    ];
    write_safetensors(
        &path,
        &[
            Tensor::new(
                "h",
                StDtype::F16,
                &[2, 3],
                f16_values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
            Tensor::new(
                "b",
                StDtype::BF16,
                &[6],
                bf16_values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
        ],
    );
    let mut map = ShardMap::open(&path).expect("open");
    let h = map.get("h").expect("read").expect("h");
    assert_eq!(h.dtype(), mlx::Dtype::Float16);
    let got = mlx::to_f32_vec(&h).expect("f16 values");
    let want: Vec<f32> = f16_values.iter().map(|v| v.to_f32()).collect();
    assert_eq!(bits(&got), bits(&want));

    let b = map.get("b").expect("read").expect("b");
    assert_eq!(b.dtype(), mlx::Dtype::Bfloat16);
    let got = mlx::to_f32_vec(&b).expect("bf16 values");
    let want: Vec<f32> = bf16_values.iter().map(|v| v.to_f32()).collect();
    assert_eq!(bits(&got), bits(&want));

    // The raw 2-byte types cross the C interface too (the x86_64 half.h patch).
    mlx::evaluate(&h).expect("eval");
    assert_eq!(h.as_slice::<f16>(), &f16_values);
    mlx::evaluate(&b).expect("eval");
    assert_eq!(b.as_slice::<bf16>(), &bf16_values);
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn every_loadable_dtype_reads_as_f32() {
    // MLX memory counters are process-wide: no test here runs beside one that asserts on them.
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dtypes.safetensors");
    let ints = [-3i64, 0, 7, 100];
    let uints = [0u64, 1, 200, 255];
    let tensors = vec![
        Tensor::f32("f32", &[4], &[1.5, -2.25, 0.0, 1e-7]),
        Tensor::new(
            "i8",
            StDtype::I8,
            &[4],
            ints.iter().flat_map(|&v| (v as i8).to_le_bytes()).collect(),
        ),
        Tensor::new(
            "i16",
            StDtype::I16,
            &[4],
            ints.iter()
                .flat_map(|&v| (v as i16).to_le_bytes())
                .collect(),
        ),
        Tensor::new(
            "i32",
            StDtype::I32,
            &[4],
            ints.iter()
                .flat_map(|&v| (v as i32).to_le_bytes())
                .collect(),
        ),
        Tensor::new(
            "i64",
            StDtype::I64,
            &[4],
            ints.iter().flat_map(|&v| v.to_le_bytes()).collect(),
        ),
        Tensor::new(
            "u8",
            StDtype::U8,
            &[4],
            uints.iter().map(|&v| v as u8).collect(),
        ),
        Tensor::new(
            "u16",
            StDtype::U16,
            &[4],
            uints
                .iter()
                .flat_map(|&v| (v as u16).to_le_bytes())
                .collect(),
        ),
        Tensor::new(
            "u32",
            StDtype::U32,
            &[4],
            uints
                .iter()
                .flat_map(|&v| (v as u32).to_le_bytes())
                .collect(),
        ),
        Tensor::new(
            "u64",
            StDtype::U64,
            &[4],
            uints.iter().flat_map(|&v| v.to_le_bytes()).collect(),
        ),
        Tensor::new("bool", StDtype::BOOL, &[4], vec![1, 0, 0, 1]),
    ];
    write_safetensors(&path, &tensors);
    let mut map = ShardMap::open(&path).expect("open");
    let mut read = |name: &str| {
        mlx::to_f32_vec(&map.get(name).expect("read").expect("tensor")).expect("values")
    };
    assert_eq!(read("f32"), [1.5, -2.25, 0.0, 1e-7]);
    // MLX's safetensors loader has no F64; arrays of f64 made in MLX still read.
    let f64_array = mlx::Array::from_slice_f64(&[1.5, -2.25, 0.0, 1e10], &[4]);
    assert_eq!(
        mlx::to_f32_vec(&f64_array).expect("f64"),
        [1.5, -2.25, 0.0, 1e10]
    );
    for name in ["i8", "i16", "i32", "i64"] {
        assert_eq!(read(name), [-3.0, 0.0, 7.0, 100.0], "{name}");
    }
    for name in ["u8", "u16", "u32", "u64"] {
        assert_eq!(read(name), [0.0, 1.0, 200.0, 255.0], "{name}");
    }
    assert_eq!(read("bool"), [1.0, 0.0, 0.0, 1.0]);
}

#[test]
fn a_file_mlx_cannot_read_is_an_error_naming_it() {
    // MLX memory counters are process-wide: no test here runs beside one that asserts on them.
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("garbage.safetensors");
    std::fs::write(&path, b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!").expect("write");
    let err = ShardMap::open(&path).expect_err("garbage must not open");
    assert!(err.to_string().contains("garbage.safetensors"), "{err}");
}

#[test]
fn f64_files_are_refused_by_mlx_with_a_clear_message() {
    // MLX memory counters are process-wide: no test here runs beside one that asserts on them.
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f64.safetensors");
    let data = [1.0f64, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    write_safetensors(&path, &[Tensor::new("x", StDtype::F64, &[2], data)]);
    let err = ShardMap::open(&path).expect_err("MLX 0.32 does not load F64");
    let text = err.to_string();
    assert!(
        text.contains("f64.safetensors") && text.contains("unsupported dtype F64"),
        "{text}"
    );
    assert!(
        !text.contains(".cpp:"),
        "source locations are stripped: {text}"
    );
}

#[test]
fn device_is_reported() {
    // MLX memory counters are process-wide: no test here runs beside one that asserts on them.
    let _lock = mlx_memory_lock();
    let device = mlx::default_device().expect("device");
    // This machine has no GPU: the CPU build must say so plainly.
    if !device.gpu_available {
        assert_eq!(device.kind, mlx::DeviceKind::Cpu);
        assert!(device.describe().contains("no GPU"));
    }
    assert!(mlx::memory().expect("memory").limit_bytes > 0);
}
