//! Our CUDA kernels compiled ahead of MLX and kept on disk between
//! processes.
//!
//! MLX 0.32.2 compiles a custom kernel from its source with NVRTC in every
//! process (1.3-2.4 s for each of our two on an H200, behind MLX's own
//! headers) and keeps none on disk, so a fresh window's first click waited
//! seconds. Here each kernel is compiled once by NVRTC itself (our source
//! alone, against CUDA's `cuda_fp16.h` and `cuda_bf16.h`) for this device's
//! architecture, kept as a cubin in a folder of this user's alone
//! (`~/.cache/weightscope/kernels/ahead/`, or `WEIGHTSCOPE_KERNEL_CACHE`),
//! checked by loading it into the driver, and handed to MLX through
//! `mlx_fast_cuda_kernel_precompiled_apply` (our patch to mlx-c, wrapping
//! MLX's `fast::precompiled_cuda_kernel`): MLX then launches it as it does
//! the source-compiled one, in its own graph and stream.
//!
//! NVRTC and the CUDA driver are the ones MLX already loaded (looked up
//! with `RTLD_NOLOAD`, never loaded here): on the CPU backend there are
//! none and nothing here runs. Anything that fails (no NVRTC, no headers,
//! a compile error, a cubin the driver refuses) leaves the kernel to MLX's
//! own compile, as before; `WEIGHTSCOPE_KERNELS_AHEAD=0` does that always.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A kernel compiled ahead: the name of its `extern "C"` function and the
/// cubin that holds it.
pub(super) struct Image {
    pub name: CString,
    pub bytes: Vec<u8>,
}

/// Which of our kernels.
#[derive(Clone, Copy)]
pub(super) enum Which {
    Dense,
    Affine,
}

/// What a kernel is made of: the name's stem, the helpers, the body (as
/// MLX's custom-kernel interface takes it), the compile-time ints, and the
/// signature the body expects.
pub(super) struct Parts {
    pub base: &'static str,
    pub header: &'static str,
    pub body: &'static str,
    pub constants: &'static [(&'static CStr, i32)],
    /// The parameter list (the inputs' and outputs' pointers, then the
    /// ints MLX passes as scalars) and the lines that give the body the
    /// names MLX would (`w_shape` and the like).
    pub signature: &'static str,
    pub prologue: &'static str,
}

/// The cubin of `which` for this process's device, compiled or read from
/// the cache the first time it is asked for; `None` where that failed (the
/// kernel is then MLX's to compile).
pub(super) fn image(which: Which, parts: impl FnOnce() -> Parts) -> Option<&'static Image> {
    static DENSE: OnceLock<Option<Image>> = OnceLock::new();
    static AFFINE: OnceLock<Option<Image>> = OnceLock::new();
    let slot = match which {
        Which::Dense => &DENSE,
        Which::Affine => &AFFINE,
    };
    slot.get_or_init(|| {
        if !crate::environment::get().kernels_ahead {
            return None;
        }
        let parts = parts();
        match prepare(&parts) {
            Ok(image) => Some(image),
            Err(why) => {
                eprintln!(
                    "weightscope: the {} summary kernel is left to MLX to compile ({why})",
                    parts.base
                );
                None
            }
        }
    })
    .as_ref()
}

/// Set while [`prepare_in_background`]'s thread runs.
static PREPARING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether no kernel is being prepared off this thread: while one is,
/// summaries use MLX's own ops rather than wait for it.
pub(super) fn settled() -> bool {
    !PREPARING.load(std::sync::atomic::Ordering::Acquire)
}

/// Compiles (or reads from the cache) every kernel `prepare` asks
/// [`image`] for, on a thread of its own: nothing there touches MLX (NVRTC
/// and the driver only, in the device's primary context, which is MLX's).
/// `false`, with nothing started, where this process has no NVRTC or CUDA
/// driver loaded or ahead compiling is off.
pub(super) fn prepare_in_background(prepare: fn()) -> bool {
    if !crate::environment::get().kernels_ahead || Driver::get().is_none() || Nvrtc::get().is_none()
    {
        return false;
    }
    PREPARING.store(true, std::sync::atomic::Ordering::Release);
    let started = std::thread::Builder::new()
        .name("kernels ahead".into())
        .spawn(move || {
            let context = Driver::get().and_then(|d| d.primary_context());
            prepare();
            if let (Some(driver), Some(device)) = (Driver::get(), context) {
                driver.leave_primary_context(device);
            }
            PREPARING.store(false, std::sync::atomic::Ordering::Release);
        });
    if started.is_err() {
        PREPARING.store(false, std::sync::atomic::Ordering::Release);
        return false;
    }
    true
}

/// The full source of a kernel compiled ahead, its function named `name`.
fn source(parts: &Parts, name: &str) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    s.push_str(parts.header);
    // The body's tests of floats, by their bits (exact; no math header
    // needed for them).
    s.push_str(
        "\n#define isfinite(v) ((__float_as_uint(v) & 0x7f800000u) != 0x7f800000u)\n\
         #define isnan(v) ((__float_as_uint(v) & 0x7fffffffu) > 0x7f800000u)\n",
    );
    let _ = write!(
        s,
        "extern \"C\" __global__ void {name}(\n{}) {{\n",
        parts.signature
    );
    for (constant, value) in parts.constants {
        let _ = writeln!(
            s,
            "  constexpr int {} = {value};",
            constant.to_string_lossy()
        );
    }
    s.push_str(parts.prologue);
    s.push_str(parts.body);
    s.push_str("\n}\n");
    s
}

/// FNV-1a, 64 bits, of `text`: stable across builds and platforms.
fn hash(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Largest cubin read back from the cache.
const MOST_BYTES: u64 = 16 << 20;

fn prepare(parts: &Parts) -> Result<Image, String> {
    let driver = Driver::get().ok_or("no CUDA driver in this process")?;
    let nvrtc = Nvrtc::get().ok_or("no NVRTC in this process")?;
    let (major, minor) = driver.capability()?;
    let (nv_major, nv_minor) = nvrtc.version()?;
    // The name says the source (so a changed kernel never runs under an
    // old name, in MLX's module table or on disk); the file also says what
    // it was compiled for and by.
    let stem = source(parts, "KERNEL");
    let name = format!("{}_ahead_{:016x}", parts.base, hash(&stem));
    let text = source(parts, &name);
    let file = format!("{name}-sm{major}{minor}-nvrtc{nv_major}.{nv_minor}.cubin");
    let folder = cache_folder();
    if let Some(folder) = &folder
        && let Some(bytes) = read_kept(&folder.join(&file))
    {
        if driver.loads(&bytes) {
            return Ok(Image {
                name: CString::new(name).map_err(|_| "a name with a NUL")?,
                bytes,
            });
        }
        crate::files::remove_entry(&folder.join(&file));
    }
    let bytes = nvrtc.compile(&text, major, minor)?;
    if !driver.loads(&bytes) {
        return Err("the driver refused the compiled kernel".into());
    }
    if let Some(folder) = &folder {
        keep(folder, &file, &bytes);
    }
    Ok(Image {
        name: CString::new(name).map_err(|_| "a name with a NUL")?,
        bytes,
    })
}

/// The cache folder, made and checked to be this user's alone; `None`
/// (compile every time) where it cannot be.
fn cache_folder() -> Option<PathBuf> {
    let folder = std::env::var_os("WEIGHTSCOPE_KERNEL_CACHE")
        .map(PathBuf::from)
        .or_else(|| crate::files::cache_dir().map(|d| d.join("kernels").join("ahead")))?;
    crate::files::private_dir(&folder).ok()?;
    Some(folder)
}

/// A kept cubin: a regular file of this user's, not a link, at most
/// [`MOST_BYTES`].
fn read_kept(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::MetadataExt as _;
    let mut file = crate::files::open_entry(path).ok()?;
    let meta = file.metadata().ok()?;
    let me = std::fs::metadata("/proc/self").ok()?.uid();
    if !meta.is_file() || meta.uid() != me || meta.len() > MOST_BYTES || meta.len() == 0 {
        return None;
    }
    let mut bytes = Vec::new();
    file.by_ref()
        .take(MOST_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}

/// Keeps `bytes` as `folder/file` through a new file of our own renamed
/// into place (a link at the name is replaced, never written through).
/// Failing to keep it only means compiling again next time.
fn keep(folder: &Path, file: &str, bytes: &[u8]) {
    let _ = crate::files::replace_entry(folder, std::ffi::OsStr::new(file), bytes);
}

/// A library MLX already loaded, under the first of `names` found.
pub(super) fn loaded(names: &[&CStr]) -> Option<*mut c_void> {
    names.iter().find_map(|name| {
        // SAFETY: `RTLD_NOLOAD` only finds a library already in the process.
        let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        (!lib.is_null()).then_some(lib)
    })
}

/// A function of `lib` as the type `T` (a C function pointer).
///
/// # Safety
/// `T` must be the symbol's C signature.
pub(super) unsafe fn symbol<T: Copy>(lib: *mut c_void, name: &CStr) -> Option<T> {
    // SAFETY: as the caller says; `dlsym` on a live handle.
    unsafe {
        let found = libc::dlsym(lib, name.as_ptr());
        (!found.is_null()).then(|| std::mem::transmute_copy::<*mut c_void, T>(&found))
    }
}

type CtxGetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
type DeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type DeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type ModuleLoadData = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> c_int;
type ModuleUnload = unsafe extern "C" fn(*mut c_void) -> c_int;
type PrimaryRetain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
type PrimaryRelease = unsafe extern "C" fn(c_int) -> c_int;
type SetCurrent = unsafe extern "C" fn(*mut c_void) -> c_int;

/// The CUDA driver's entry points used here.
struct Driver {
    ctx_device: CtxGetDevice,
    device_get: DeviceGet,
    attribute: DeviceGetAttribute,
    load: ModuleLoadData,
    unload: ModuleUnload,
    retain: PrimaryRetain,
    release: PrimaryRelease,
    set_current: SetCurrent,
}

/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR` and `_MINOR`.
const CAPABILITY: [c_int; 2] = [75, 76];

impl Driver {
    fn get() -> Option<Self> {
        let lib = loaded(&[c"libcuda.so.1", c"libcuda.so"])?;
        // SAFETY: the driver's documented C signatures, typed above.
        unsafe {
            Some(Self {
                ctx_device: symbol(lib, c"cuCtxGetDevice")?,
                device_get: symbol(lib, c"cuDeviceGet")?,
                attribute: symbol(lib, c"cuDeviceGetAttribute")?,
                load: symbol(lib, c"cuModuleLoadData")?,
                unload: symbol(lib, c"cuModuleUnload")?,
                retain: symbol(lib, c"cuDevicePrimaryCtxRetain")?,
                release: symbol(lib, c"cuDevicePrimaryCtxRelease_v2")?,
                set_current: symbol(lib, c"cuCtxSetCurrent")?,
            })
        }
    }

    /// This thread's device (MLX's current context), else device 0.
    fn device(&self) -> Result<c_int, String> {
        let mut device = 0;
        // SAFETY: out-pointers to locals.
        unsafe {
            if (self.ctx_device)(&raw mut device) == 0 {
                return Ok(device);
            }
            if (self.device_get)(&raw mut device, 0) == 0 {
                return Ok(device);
            }
        }
        Err("no CUDA device".into())
    }

    /// Makes device 0's primary context (the one MLX works in) current on
    /// this thread; the device, to give it back with
    /// [`Self::leave_primary_context`].
    fn primary_context(&self) -> Option<c_int> {
        let mut device = 0;
        let mut context = std::ptr::null_mut();
        // SAFETY: out-pointers to locals; a retained context is released
        // by `leave_primary_context`.
        unsafe {
            if (self.device_get)(&raw mut device, 0) != 0
                || (self.retain)(&raw mut context, device) != 0
            {
                return None;
            }
            if (self.set_current)(context) != 0 {
                (self.release)(device);
                return None;
            }
        }
        Some(device)
    }

    fn leave_primary_context(&self, device: c_int) {
        // SAFETY: undoes `primary_context` on the same thread.
        unsafe {
            (self.set_current)(std::ptr::null_mut());
            (self.release)(device);
        }
    }

    fn capability(&self) -> Result<(c_int, c_int), String> {
        let device = self.device()?;
        let mut values = [0; 2];
        for (value, attribute) in values.iter_mut().zip(CAPABILITY) {
            // SAFETY: an out-pointer to a local.
            if unsafe { (self.attribute)(value, attribute, device) } != 0 {
                return Err("the device's compute capability is not known".into());
            }
        }
        Ok((values[0], values[1]))
    }

    /// Whether the driver loads `image` in this thread's context (loaded
    /// and unloaded at once: MLX loads its own copy).
    fn loads(&self, image: &[u8]) -> bool {
        let mut module = std::ptr::null_mut();
        // SAFETY: `image` is a whole cubin (the driver reads its header for
        // its size); the module is unloaded here.
        unsafe {
            if (self.load)(&raw mut module, image.as_ptr().cast()) != 0 || module.is_null() {
                return false;
            }
            (self.unload)(module);
        }
        true
    }
}

type Version = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
type CreateProgram = unsafe extern "C" fn(
    *mut *mut c_void,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> c_int;
type CompileProgram = unsafe extern "C" fn(*mut c_void, c_int, *const *const c_char) -> c_int;
type GetSize = unsafe extern "C" fn(*mut c_void, *mut usize) -> c_int;
type GetBytes = unsafe extern "C" fn(*mut c_void, *mut c_char) -> c_int;
type DestroyProgram = unsafe extern "C" fn(*mut *mut c_void) -> c_int;

/// NVRTC's entry points used here.
struct Nvrtc {
    version: Version,
    create: CreateProgram,
    compile: CompileProgram,
    log_size: GetSize,
    log: GetBytes,
    cubin_size: GetSize,
    cubin: GetBytes,
    destroy: DestroyProgram,
}

impl Nvrtc {
    fn get() -> Option<Self> {
        let lib = loaded(&[c"libnvrtc.so.13", c"libnvrtc.so.12", c"libnvrtc.so"])?;
        // SAFETY: NVRTC's documented C signatures, typed above.
        unsafe {
            Some(Self {
                version: symbol(lib, c"nvrtcVersion")?,
                create: symbol(lib, c"nvrtcCreateProgram")?,
                compile: symbol(lib, c"nvrtcCompileProgram")?,
                log_size: symbol(lib, c"nvrtcGetProgramLogSize")?,
                log: symbol(lib, c"nvrtcGetProgramLog")?,
                cubin_size: symbol(lib, c"nvrtcGetCUBINSize")?,
                cubin: symbol(lib, c"nvrtcGetCUBIN")?,
                destroy: symbol(lib, c"nvrtcDestroyProgram")?,
            })
        }
    }

    fn version(&self) -> Result<(c_int, c_int), String> {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: out-pointers to locals.
        if unsafe { (self.version)(&raw mut major, &raw mut minor) } != 0 {
            return Err("NVRTC did not say its version".into());
        }
        Ok((major, minor))
    }

    /// `text` compiled to a cubin for `sm_{major}{minor}`.
    fn compile(&self, text: &str, major: c_int, minor: c_int) -> Result<Vec<u8>, String> {
        let source = CString::new(text).map_err(|_| "a source with a NUL")?;
        let mut options = vec![
            format!("--gpu-architecture=sm_{major}{minor}"),
            "--std=c++17".to_owned(),
        ];
        options.extend(
            include_folders()
                .iter()
                .map(|d| format!("--include-path={}", d.display())),
        );
        let options: Vec<CString> = options
            .into_iter()
            .filter_map(|o| CString::new(o).ok())
            .collect();
        let pointers: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let count = c_int::try_from(pointers.len()).map_err(|_| "too many options")?;
        let mut program = std::ptr::null_mut();
        // SAFETY: every pointer is to a live C string or local; the program
        // is destroyed below on every path.
        unsafe {
            if (self.create)(
                &raw mut program,
                source.as_ptr(),
                c"weightscope.cu".as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            ) != 0
            {
                return Err("NVRTC could not make a program".into());
            }
            let result = if (self.compile)(program, count, pointers.as_ptr()) == 0 {
                let mut size = 0;
                let mut bytes = Vec::new();
                if (self.cubin_size)(program, &raw mut size) == 0 && size > 0 {
                    bytes.resize(size, 0u8);
                    if (self.cubin)(program, bytes.as_mut_ptr().cast()) != 0 {
                        bytes.clear();
                    }
                }
                if bytes.is_empty() {
                    Err("NVRTC gave no cubin".to_owned())
                } else {
                    Ok(bytes)
                }
            } else {
                Err(format!("NVRTC: {}", self.first_error(program)))
            };
            (self.destroy)(&raw mut program);
            result
        }
    }

    /// The first error line of a failed compile.
    fn first_error(&self, program: *mut c_void) -> String {
        let mut size = 0;
        let mut log = Vec::new();
        // SAFETY: a live program; the buffer is as long as NVRTC says.
        unsafe {
            if (self.log_size)(program, &raw mut size) == 0 && size > 0 {
                log.resize(size, 0u8);
                if (self.log)(program, log.as_mut_ptr().cast()) != 0 {
                    log.clear();
                }
            }
        }
        let text = String::from_utf8_lossy(&log);
        text.lines()
            .find(|l| l.contains("error"))
            .or_else(|| text.lines().next())
            .unwrap_or("the compile failed")
            .trim()
            .chars()
            .take(200)
            .collect()
    }
}

/// Where CUDA's headers may be, as MLX looks for them (`CUDA_HOME`,
/// `CUDA_PATH`, `/usr/local/cuda`) and beside the NVRTC this process
/// loaded (NVIDIA's Python packages keep `include/` next to `lib/`): the
/// ones that hold `cuda_fp16.h`.
fn include_folders() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    if let Some(lib) = nvrtc_folder()
        && let Some(up) = lib.parent()
    {
        roots.push(up.to_path_buf());
        if let Some(packages) = up.parent() {
            roots.push(packages.join("cuda_runtime"));
            roots.push(packages.join("cu13"));
            roots.push(packages.join("cu12"));
        }
    }
    let mut folders: Vec<PathBuf> = Vec::new();
    for root in roots {
        let include = root.join("include");
        if include.join("cuda_fp16.h").is_file() && !folders.contains(&include) {
            folders.push(include);
        }
    }
    folders
}

/// The folder of the NVRTC library this process loaded.
fn nvrtc_folder() -> Option<PathBuf> {
    let lib = loaded(&[c"libnvrtc.so.13", c"libnvrtc.so.12", c"libnvrtc.so"])?;
    // SAFETY: `dladdr` on a symbol of a live handle fills a local.
    unsafe {
        let function = libc::dlsym(lib, c"nvrtcVersion".as_ptr());
        if function.is_null() {
            return None;
        }
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(function, &raw mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        let path = CStr::from_ptr(info.dli_fname).to_str().ok()?;
        let path = std::fs::canonicalize(path).ok()?;
        path.parent().map(Path::to_path_buf)
    }
}

/// `parts` compiled for `sm_{major}{minor}` by the NVRTC in this process
/// (for the test that compiles our kernels without a GPU).
#[cfg(test)]
pub(super) fn compile_for_test(
    parts: &Parts,
    major: c_int,
    minor: c_int,
) -> Result<Vec<u8>, String> {
    let nvrtc = Nvrtc::get().ok_or("no NVRTC in this process")?;
    nvrtc.compile(&source(parts, "test_kernel"), major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARTS: Parts = Parts {
        base: "test",
        header: "#include <cuda_fp16.h>\n",
        body: "    out[0] = isfinite(x[0]) ? 1u : 0u;",
        constants: &[(c"THREADS", 256)],
        signature: "    const float* x,\n    unsigned int* out",
        prologue: "",
    };

    #[test]
    fn the_source_names_its_function_and_sizes_and_tests_floats_by_their_bits() {
        let text = source(&PARTS, "test_ahead_0");
        assert!(text.contains("extern \"C\" __global__ void test_ahead_0(\n    const float* x,"));
        assert!(text.contains("  constexpr int THREADS = 256;\n"));
        assert!(text.contains("#define isfinite(v)"));
        // The hash changes with the body.
        let other = Parts {
            body: "    out[0] = 2u;",
            ..PARTS
        };
        assert_ne!(hash(&source(&PARTS, "K")), hash(&source(&other, "K")));
    }

    #[test]
    fn a_kept_cubin_is_read_only_from_a_plain_file_of_ours() {
        let dir = tempfile::tempdir().expect("tempdir");
        keep(dir.path(), "k.cubin", b"cubin bytes");
        assert_eq!(
            read_kept(&dir.path().join("k.cubin")).expect("kept"),
            b"cubin bytes"
        );
        // A link is never followed, even to a file of ours.
        std::os::unix::fs::symlink(dir.path().join("k.cubin"), dir.path().join("l.cubin"))
            .expect("link");
        assert!(read_kept(&dir.path().join("l.cubin")).is_none());
        // Keeping again over a kept file replaces it whole.
        keep(dir.path(), "k.cubin", b"new");
        assert_eq!(
            read_kept(&dir.path().join("k.cubin")).expect("kept"),
            b"new"
        );
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 2);
    }

    #[test]
    fn on_the_cpu_backend_there_is_nothing_to_compile_with() {
        // No CUDA driver or NVRTC is loaded in a CPU process.
        assert!(Driver::get().is_none() || Nvrtc::get().is_none());
    }
}
