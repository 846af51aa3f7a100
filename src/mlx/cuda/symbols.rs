//! The one symbol table of the CUDA driver and of NVRTC: every entry point
//! weightscope calls, looked up once in the libraries MLX's CUDA backend
//! loaded (`RTLD_NOLOAD`: never loaded here, so on the CPU backend there is
//! no table and nothing in `mlx::cuda` runs).

#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use libloading::os::unix::Library;

/// A driver object (context, module, function, stream, event).
pub(super) type Handle = *mut c_void;

/// `CUmemLocation`: where a prefetch moves pages to.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Location {
    pub kind: c_int,
    pub id: c_int,
}

/// A table of C functions that all return a status (`0`: success), each
/// field the symbol of the same row, typed by its documented signature.
macro_rules! table {
    ($(#[$doc:meta])* $table:ident { $($field:ident = $symbol:literal ($($arg:ty),*);)* }) => {
        $(#[$doc])*
        pub(super) struct $table {
            $(pub $field: unsafe extern "C" fn($($arg),*) -> c_int,)*
            /// Keeps the library's reference for as long as the table.
            _library: Library,
        }

        impl $table {
            /// The table from `library`, `None` when a symbol is missing.
            ///
            /// # Safety
            /// The library must be the one whose documented signatures
            /// the rows give.
            unsafe fn from(library: Library) -> Option<Self> {
                // SAFETY: as the caller says; each symbol is copied out as
                // a plain function pointer while the library is alive, and
                // the table keeps the library.
                unsafe {
                    Some(Self {
                        $($field: *library
                            .get::<unsafe extern "C" fn($($arg),*) -> c_int>($symbol)
                            .ok()?,)*
                        _library: library,
                    })
                }
            }
        }
    };
}

table! {
    /// The CUDA driver's entry points.
    Driver {
        ctx_current = b"cuCtxGetCurrent\0" (*mut Handle);
        ctx_device = b"cuCtxGetDevice\0" (*mut c_int);
        ctx_set_current = b"cuCtxSetCurrent\0" (Handle);
        device_get = b"cuDeviceGet\0" (*mut c_int, c_int);
        device_attribute = b"cuDeviceGetAttribute\0" (*mut c_int, c_int, c_int);
        primary_retain = b"cuDevicePrimaryCtxRetain\0" (*mut Handle, c_int);
        primary_release = b"cuDevicePrimaryCtxRelease_v2\0" (c_int);
        module_load = b"cuModuleLoadData\0" (*mut Handle, *const c_void);
        module_unload = b"cuModuleUnload\0" (Handle);
        module_function = b"cuModuleGetFunction\0" (*mut Handle, Handle, *const c_char);
        launch = b"cuLaunchKernel\0" (
            Handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle,
            *mut *mut c_void, *mut *mut c_void
        );
        alloc = b"cuMemAlloc_v2\0" (*mut u64, usize);
        free = b"cuMemFree_v2\0" (u64);
        host_alloc = b"cuMemAllocHost_v2\0" (*mut *mut c_void, usize);
        host_free = b"cuMemFreeHost\0" (*mut c_void);
        copy_in = b"cuMemcpyHtoDAsync_v2\0" (u64, *const c_void, usize, Handle);
        copy_out = b"cuMemcpyDtoHAsync_v2\0" (*mut c_void, u64, usize, Handle);
        memset = b"cuMemsetD32Async\0" (u64, c_uint, usize, Handle);
        prefetch = b"cuMemPrefetchAsync_v2\0" (u64, usize, Location, c_uint, Handle);
        stream_create = b"cuStreamCreate\0" (*mut Handle, c_uint);
        stream_wait = b"cuStreamSynchronize\0" (Handle);
        event_create = b"cuEventCreate\0" (*mut Handle, c_uint);
        event_record = b"cuEventRecord\0" (Handle, Handle);
        event_wait = b"cuEventSynchronize\0" (Handle);
    }
}

table! {
    /// NVRTC's entry points.
    Nvrtc {
        version = b"nvrtcVersion\0" (*mut c_int, *mut c_int);
        create = b"nvrtcCreateProgram\0" (
            *mut Handle, *const c_char, *const c_char, c_int,
            *const *const c_char, *const *const c_char
        );
        compile = b"nvrtcCompileProgram\0" (Handle, c_int, *const *const c_char);
        log_size = b"nvrtcGetProgramLogSize\0" (Handle, *mut usize);
        log = b"nvrtcGetProgramLog\0" (Handle, *mut c_char);
        cubin_size = b"nvrtcGetCUBINSize\0" (Handle, *mut usize);
        cubin = b"nvrtcGetCUBIN\0" (Handle, *mut c_char);
        destroy = b"nvrtcDestroyProgram\0" (*mut Handle);
    }
}

/// The first of `names` already loaded in this process.
fn loaded(names: &[&str]) -> Option<Library> {
    names.iter().find_map(|name| {
        // SAFETY: `RTLD_NOLOAD` only finds a library already in the
        // process: no initializer runs.
        unsafe { Library::open(Some(name), libc::RTLD_NOW | libc::RTLD_NOLOAD) }.ok()
    })
}

/// The table of `T`, made the first time its library is found loaded and
/// kept for the process (a process that has not loaded it yet is asked
/// again next time: MLX may load it late).
fn kept<T>(
    cell: &'static OnceLock<T>,
    names: &[&str],
    from: unsafe fn(Library) -> Option<T>,
) -> Option<&'static T> {
    if let Some(table) = cell.get() {
        return Some(table);
    }
    // SAFETY: `names` are the library whose signatures `T` gives (the
    // callers below pair them).
    let table = unsafe { from(loaded(names)?) }?;
    Some(cell.get_or_init(|| table))
}

/// The CUDA driver MLX loaded, where it did.
pub(super) fn driver() -> Option<&'static Driver> {
    static DRIVER: OnceLock<Driver> = OnceLock::new();
    kept(&DRIVER, &["libcuda.so.1", "libcuda.so"], Driver::from)
}

/// The NVRTC MLX loaded (or a test did), where one was.
pub(super) fn nvrtc() -> Option<&'static Nvrtc> {
    static NVRTC: OnceLock<Nvrtc> = OnceLock::new();
    kept(
        &NVRTC,
        &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
        Nvrtc::from,
    )
}

/// A driver call's status as a result.
///
/// # Errors
/// [`super::CudaError::Call`] for any status but success.
pub(super) fn checked(call: &'static str, code: c_int) -> Result<(), super::CudaError> {
    if code == 0 {
        Ok(())
    } else {
        Err(super::CudaError::Call { call, code })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn on_the_cpu_backend_no_table_is_made() {
        // A CPU process has loaded no CUDA driver.
        assert!(super::driver().is_none());
        assert!(super::checked("cuInit", 0).is_ok());
        assert_eq!(
            super::checked("cuInit", 100)
                .expect_err("a failed status")
                .to_string(),
            "cuInit failed (CUDA error 100)"
        );
    }
}
