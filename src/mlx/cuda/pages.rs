//! Bulk moves of MLX's managed-memory pages, on CUDA: a tensor just loaded
//! through the host moved to the device before our kernel reads it, an
//! output the host read moved back before MLX's cache hands its buffer to
//! the next kernel, and small outputs copied by the copy engine rather than
//! faulted over. Hints only: the values are the same without them, and a
//! refused call leaves the pages where they were. docs/gpu.md: measured.

#![allow(unsafe_code)]

use std::ffi::{c_int, c_uint, c_void};
use std::sync::OnceLock;

use super::symbols::{Driver, Location};

/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const ON_DEVICE: c_int = 1;
/// `CU_STREAM_NON_BLOCKING`: not ordered after MLX's streams (whose work
/// on these arrays has finished when they are handed over).
const NON_BLOCKING: c_uint = 1;

/// The driver, where page moves are on, and the stream for them.
struct Pages {
    driver: &'static Driver,
    stream: OnceLock<Option<usize>>,
}

fn driver() -> Option<&'static Pages> {
    static PAGES: OnceLock<Pages> = OnceLock::new();
    if let Some(pages) = PAGES.get() {
        return Some(pages);
    }
    let driver = super::symbols::driver()?;
    Some(PAGES.get_or_init(|| Pages {
        driver,
        stream: OnceLock::new(),
    }))
}

impl Pages {
    /// This thread's device and the stream for prefetches, when MLX made a
    /// CUDA context current on it.
    fn target(&self) -> Option<(c_int, *mut c_void)> {
        let mut context = std::ptr::null_mut();
        let mut device = 0;
        // SAFETY: out-pointers to locals, as the driver's API takes them.
        unsafe {
            if (self.driver.ctx_current)(&raw mut context) != 0 || context.is_null() {
                return None;
            }
            if (self.driver.ctx_device)(&raw mut device) != 0 {
                return None;
            }
        }
        let stream = (*self.stream.get_or_init(|| {
            let mut stream = std::ptr::null_mut();
            // SAFETY: as above; the stream lives as long as the process.
            let made = unsafe { (self.driver.stream_create)(&raw mut stream, NON_BLOCKING) };
            (made == 0 && !stream.is_null()).then_some(stream as usize)
        }))?;
        Some((device, stream as *mut c_void))
    }

    /// Starts moving `values`' pages to this thread's device; whether the
    /// driver took it.
    fn start<T>(&self, values: &[T]) -> bool {
        let bytes = std::mem::size_of_val(values);
        let Some((device, stream)) = self.target().filter(|_| bytes > 0) else {
            return false;
        };
        let to = Location {
            kind: ON_DEVICE,
            id: device,
        };
        // SAFETY: a live slice's address and length; the driver only moves
        // pages (refusing memory that is not managed).
        unsafe { (self.driver.prefetch)(values.as_ptr() as u64, bytes, to, 0, stream) == 0 }
    }

    /// Moves `values`' pages to this thread's device and waits until they
    /// are there; whether the driver took it.
    fn move_now<T>(&self, values: &[T]) -> bool {
        let Some((_, stream)) = self.target() else {
            return false;
        };
        // SAFETY: our own stream, made by the driver (see `target`).
        self.start(values) && unsafe { (self.driver.stream_wait)(stream) == 0 }
    }
}

/// Numbers any bytes are a value of (what [`copy_to_host`] copies).
pub trait Plain: Copy {}
impl Plain for f32 {}
impl Plain for u32 {}
impl Plain for half::f16 {}
impl Plain for half::bf16 {}

/// A copy of `values` (an evaluated array's, which the device wrote) made
/// by the device's copy engine, leaving its pages where they are: the host
/// reading them in place would move them over one fault at a time (slow
/// even for the heatmap's cells: docs/gpu.md), and the next kernel
/// output given the same buffer would fault them back. `None` where there
/// is no CUDA driver or it refused (read the values in place then).
pub fn copy_to_host<T: Plain>(values: &[T]) -> Option<Vec<T>> {
    let driver = driver()?;
    let (_, stream) = driver.target()?;
    let bytes = std::mem::size_of_val(values);
    let mut copy: Vec<T> = Vec::with_capacity(values.len());
    // SAFETY: the copy writes `bytes` bytes into the vector's capacity, and
    // the length is set only once the stream has finished it without
    // error; the source is a live slice of managed (device-addressable)
    // memory; our own stream (see `target`).
    unsafe {
        let copied = (driver.driver.copy_out)(
            copy.as_mut_ptr().cast(),
            values.as_ptr() as u64,
            bytes,
            stream,
        ) == 0
            && (driver.driver.stream_wait)(stream) == 0;
        if !copied {
            return None;
        }
        copy.set_len(values.len());
    }
    Some(copy)
}

/// Moves the pages of an evaluated `f32`, `f16` or `bf16` array to the
/// device and waits: for a tensor MLX's loader has just written through the
/// host, whose pages a kernel would otherwise fault over one by one (two
/// hundred times slower for a freshly loaded tensor: docs/gpu.md). An
/// array whose buffer was moved lately is left alone: asking again for
/// pages already there is not free (the driver walks them).
pub fn array_to_device_now(array: &mlx_rs::Array) {
    let Some(driver) = driver() else {
        return;
    };
    let _ = match array.dtype() {
        mlx_rs::Dtype::Float32 => array.try_as_slice::<f32>().map(|v| move_once(driver, v)),
        mlx_rs::Dtype::Float16 => array
            .try_as_slice::<half::f16>()
            .map(|v| move_once(driver, v)),
        mlx_rs::Dtype::Bfloat16 => array
            .try_as_slice::<half::bf16>()
            .map(|v| move_once(driver, v)),
        _ => Ok(()),
    };
}

/// How many moved buffers [`move_once`] remembers.
const MOVED_KEPT: usize = 64;

/// [`Driver::move_now`] unless `values` (address and length) were moved
/// among the last [`MOVED_KEPT`] times. A buffer MLX's cache hands to a
/// new array at the same address is then not moved: slower, never wrong.
fn move_once<T>(driver: &Pages, values: &[T]) {
    static MOVED: std::sync::Mutex<std::collections::VecDeque<(usize, usize)>> =
        std::sync::Mutex::new(std::collections::VecDeque::new());
    let key = (values.as_ptr() as usize, std::mem::size_of_val(values));
    if MOVED.lock().is_ok_and(|moved| moved.contains(&key)) {
        return;
    }
    if driver.move_now(values)
        && let Ok(mut moved) = MOVED.lock()
    {
        if moved.len() == MOVED_KEPT {
            moved.pop_front();
        }
        moved.push_back(key);
    }
}

/// Starts moving the pages of `values` back to the device (not waited
/// for): for an array the host has read and is about to drop, whose
/// buffer MLX's cache will hand to the next kernel output of its size,
/// and for an input the host has just written.
fn to_device<T>(values: &[T]) {
    if let Some(driver) = driver() {
        driver.start(values);
    }
}

/// [`to_device`] for an evaluated array of `f32`, `i32` or `u32` (the
/// dtypes of our kernels' parameters and outputs).
pub fn array_to_device(array: &mlx_rs::Array) {
    let _ = match array.dtype() {
        mlx_rs::Dtype::Float32 => array.try_as_slice::<f32>().map(to_device),
        mlx_rs::Dtype::Int32 => array.try_as_slice::<i32>().map(to_device),
        mlx_rs::Dtype::Uint32 => array.try_as_slice::<u32>().map(to_device),
        _ => Ok(()),
    };
}
