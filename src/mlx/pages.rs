//! Bulk moves of MLX's managed-memory pages to the device, on CUDA.
//!
//! MLX's CUDA backend lets the host read an array through managed memory:
//! its pages move to the host as the host touches them. When such an
//! array is dropped, its buffer goes to MLX's cache, and the next kernel
//! output of its size takes it: that kernel then faults the pages back to
//! the device one by one (for the 2 MiB of heatmap cells a summary reads,
//! a good part of a millisecond on an H200). Arrays the host wrote (a
//! kernel's parameters) start on the host the same way. A prefetch moves
//! their pages to the device in one transfer, started before they are
//! needed there and not waited for (or, for a tensor just loaded, waited
//! for before the kernel that reads it: `array_to_device_now`).
//!
//! (Moving the pages to the host in bulk before reading them was measured
//! too, 2026-12-02: no faster, since the host's faults overlap the
//! device's next kernel; see docs/gpu.md.)
//!
//! The calls go to the CUDA driver that MLX itself loaded (looked up with
//! `RTLD_NOLOAD`, never loaded here): on the CPU backend there is none and
//! every function here does nothing. They are hints: the values are the
//! same with or without them, and a refused call (memory that is not
//! managed, no context on this thread) leaves the pages where they were.
//! `WEIGHTSCOPE_PREFETCH=0` turns them off (to measure against).

#![allow(unsafe_code)]

use std::ffi::{c_int, c_uint, c_void};
use std::sync::OnceLock;

/// `CUmemLocation`: where a prefetch moves pages to.
#[repr(C)]
#[derive(Clone, Copy)]
struct Location {
    kind: c_int,
    id: c_int,
}

/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const ON_DEVICE: c_int = 1;
/// `CU_STREAM_NON_BLOCKING`: not ordered after MLX's streams (whose work
/// on these arrays has finished when they are handed over).
const NON_BLOCKING: c_uint = 1;

type Prefetch = unsafe extern "C" fn(u64, usize, Location, c_uint, *mut c_void) -> c_int;
type CurrentContext = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
type ContextDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
type CreateStream = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> c_int;
type Synchronize = unsafe extern "C" fn(*mut c_void) -> c_int;
type CopyToHost = unsafe extern "C" fn(*mut c_void, u64, usize, *mut c_void) -> c_int;

/// The driver's entry points this module uses, and its own stream.
struct Driver {
    prefetch: Prefetch,
    context: CurrentContext,
    device: ContextDevice,
    create_stream: CreateStream,
    synchronize: Synchronize,
    copy_to_host: CopyToHost,
    stream: OnceLock<Option<usize>>,
}

fn driver() -> Option<&'static Driver> {
    static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            if !crate::environment::get().prefetch {
                return None;
            }
            // SAFETY: the names are the CUDA driver's (its documented C
            // signatures, typed above); `RTLD_NOLOAD` only finds a library
            // already in the process.
            unsafe { load() }
        })
        .as_ref()
}

#[cfg(target_os = "linux")]
unsafe fn load() -> Option<Driver> {
    // SAFETY: see `driver`.
    unsafe {
        let lib = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if lib.is_null() {
            return None;
        }
        let find = |name: &std::ffi::CStr| {
            let symbol = libc::dlsym(lib, name.as_ptr());
            (!symbol.is_null()).then_some(symbol)
        };
        Some(Driver {
            prefetch: std::mem::transmute::<*mut c_void, Prefetch>(find(c"cuMemPrefetchAsync_v2")?),
            context: std::mem::transmute::<*mut c_void, CurrentContext>(find(c"cuCtxGetCurrent")?),
            device: std::mem::transmute::<*mut c_void, ContextDevice>(find(c"cuCtxGetDevice")?),
            create_stream: std::mem::transmute::<*mut c_void, CreateStream>(find(
                c"cuStreamCreate",
            )?),
            synchronize: std::mem::transmute::<*mut c_void, Synchronize>(find(
                c"cuStreamSynchronize",
            )?),
            copy_to_host: std::mem::transmute::<*mut c_void, CopyToHost>(find(
                c"cuMemcpyDtoHAsync_v2",
            )?),
            stream: OnceLock::new(),
        })
    }
}

#[cfg(not(target_os = "linux"))]
unsafe fn load() -> Option<Driver> {
    None
}

impl Driver {
    /// This thread's device and the stream for prefetches, when MLX made a
    /// CUDA context current on it.
    fn target(&self) -> Option<(c_int, *mut c_void)> {
        let mut context = std::ptr::null_mut();
        let mut device = 0;
        // SAFETY: out-pointers to locals, as the driver's API takes them.
        unsafe {
            if (self.context)(&raw mut context) != 0 || context.is_null() {
                return None;
            }
            if (self.device)(&raw mut device) != 0 {
                return None;
            }
        }
        let stream = (*self.stream.get_or_init(|| {
            let mut stream = std::ptr::null_mut();
            // SAFETY: as above; the stream lives as long as the process.
            let made = unsafe { (self.create_stream)(&raw mut stream, NON_BLOCKING) };
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
        unsafe { (self.prefetch)(values.as_ptr() as u64, bytes, to, 0, stream) == 0 }
    }

    /// Moves `values`' pages to this thread's device and waits until they
    /// are there; whether the driver took it.
    fn move_now<T>(&self, values: &[T]) -> bool {
        let Some((_, stream)) = self.target() else {
            return false;
        };
        // SAFETY: our own stream, made by the driver (see `target`).
        self.start(values) && unsafe { (self.synchronize)(stream) == 0 }
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
/// reading them in place would move them over one fault at a time (2 MiB
/// of heatmap cells took 0.7-1.5 ms on an H200), and the next kernel
/// output given the same buffer would fault them back. `None` where there
/// is no CUDA driver or it refused (read the values in place then), and
/// with `WEIGHTSCOPE_READ_BACK=fault`.
pub fn copy_to_host<T: Plain>(values: &[T]) -> Option<Vec<T>> {
    if crate::environment::get().read_back_fault {
        return None;
    }
    let driver = driver()?;
    let (_, stream) = driver.target()?;
    let bytes = std::mem::size_of_val(values);
    let mut copy: Vec<T> = Vec::with_capacity(values.len());
    // SAFETY: the copy writes `bytes` bytes into the vector's capacity, and
    // the length is set only once the stream has finished it without
    // error; the source is a live slice of managed (device-addressable)
    // memory; our own stream (see `target`).
    unsafe {
        let copied = (driver.copy_to_host)(
            copy.as_mut_ptr().cast(),
            values.as_ptr() as u64,
            bytes,
            stream,
        ) == 0
            && (driver.synchronize)(stream) == 0;
        if !copied {
            return None;
        }
        copy.set_len(values.len());
    }
    Some(copy)
}

/// Moves the pages of an evaluated `f32`, `f16` or `bf16` array to the
/// device and waits: for a tensor MLX's loader has just written through the
/// host, whose pages a kernel would otherwise fault over one by one (the
/// first summary of a freshly loaded 1 GiB tensor took 109-117 ms in its
/// statistics kernel on an H200, against 0.5 ms once the pages were there).
/// An array whose buffer was moved lately is left alone: asking again for
/// pages already there cost about 1 ms a GiB (the driver walks them).
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
fn move_once<T>(driver: &Driver, values: &[T]) {
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
pub fn to_device<T>(values: &[T]) {
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
