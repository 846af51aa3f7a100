//! Our CUDA kernels compiled ahead by NVRTC (the one MLX loaded) for this
//! device, kept as cubins in a folder of this user's alone
//! (`~/.cache/weightscope/kernels/ahead/`, or `WEIGHTSCOPE_KERNEL_CACHE`),
//! checked by loading them into the driver. A kernel that cannot be had
//! (no NVRTC, no headers, a compile error, a refused cubin) leaves value
//! summaries to MLX's own ops. docs/gpu.md: why ahead, and what it saved.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::CudaError;
use super::symbols::{Driver, Nvrtc, driver, nvrtc};

/// A kernel compiled ahead: the name of its `extern "C"` function and the
/// cubin that holds it.
pub(crate) struct Image {
    pub name: CString,
    pub bytes: Vec<u8>,
}

/// Which of our kernels.
#[derive(Clone, Copy)]
pub(crate) enum Which {
    Dense,
    Affine,
}

/// What a kernel is made of: the name's stem, the helpers, the body (as
/// MLX's custom-kernel interface takes it), the compile-time ints, and the
/// signature the body expects.
pub(crate) struct Parts {
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
pub(crate) fn image(which: Which, parts: impl FnOnce() -> Parts) -> Option<&'static Image> {
    static DENSE: OnceLock<Option<Image>> = OnceLock::new();
    static AFFINE: OnceLock<Option<Image>> = OnceLock::new();
    let slot = match which {
        Which::Dense => &DENSE,
        Which::Affine => &AFFINE,
    };
    slot.get_or_init(|| {
        let parts = parts();
        match prepare(&parts) {
            Ok(image) => Some(image),
            Err(why) => {
                eprintln!(
                    "weightscope: the {} summary kernel is not used in this process ({why}): \
                     MLX's own ops summarize instead",
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
pub(crate) fn settled() -> bool {
    !PREPARING.load(std::sync::atomic::Ordering::Acquire)
}

/// Compiles (or reads from the cache) every kernel `prepare` asks
/// [`image`] for, on a thread of its own: nothing there touches MLX (NVRTC
/// and the driver only, in the device's primary context, which is MLX's).
/// `false`, with nothing started, where this process has no NVRTC or CUDA
/// driver loaded or ahead compiling is off.
pub(crate) fn prepare_in_background(prepare: fn()) -> bool {
    if driver().is_none() || nvrtc().is_none() {
        return false;
    }
    PREPARING.store(true, std::sync::atomic::Ordering::Release);
    let started = std::thread::Builder::new()
        .name("kernels ahead".into())
        .spawn(move || {
            let context = driver().and_then(primary_context);
            prepare();
            if let (Some(driver), Some(device)) = (driver(), context) {
                leave_primary_context(driver, device);
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

fn prepare(parts: &Parts) -> Result<Image, CudaError> {
    let driver = driver().ok_or(CudaError::Missing("CUDA driver"))?;
    let nvrtc = nvrtc().ok_or(CudaError::Missing("NVRTC"))?;
    // The driver loads a module only in a context: on a thread that has
    // none yet (MLX binds its context lazily, at its first evaluation
    // there), the device's primary one, MLX's, for the time of the check.
    let borrowed = if has_context(driver) {
        None
    } else {
        primary_context(driver)
    };
    let prepared = prepare_in(driver, nvrtc, parts);
    if let Some(device) = borrowed {
        leave_primary_context(driver, device);
    }
    prepared
}

/// Whether this thread has a current context.
fn has_context(driver: &Driver) -> bool {
    let mut context = std::ptr::null_mut();
    // SAFETY: an out-pointer to a local.
    let code = unsafe { (driver.ctx_current)(&raw mut context) };
    code == 0 && !context.is_null()
}

fn prepare_in(driver: &Driver, nvrtc: &Nvrtc, parts: &Parts) -> Result<Image, CudaError> {
    let (major, minor) = capability(driver)?;
    let (nv_major, nv_minor) = version(nvrtc)?;
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
        if loads(driver, &bytes) {
            return Ok(Image {
                name: CString::new(name).map_err(|_| CudaError::Refused("a name with a NUL"))?,
                bytes,
            });
        }
        crate::files::remove_entry(&folder.join(&file));
    }
    let bytes = compile(nvrtc, &text, major, minor)?;
    if !loads(driver, &bytes) {
        return Err(CudaError::Refused("the driver refused the compiled kernel"));
    }
    if let Some(folder) = &folder {
        keep(folder, &file, &bytes);
    }
    Ok(Image {
        name: CString::new(name).map_err(|_| CudaError::Refused("a name with a NUL"))?,
        bytes,
    })
}

/// The cache folder, made and checked to be this user's alone; `None`
/// (compile every time) where it cannot be.
fn cache_folder() -> Option<PathBuf> {
    let folder = crate::environment::get()
        .outside
        .kernel_cache
        .clone()
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

/// This thread's device (MLX's current context), else device 0.
fn device(driver: &Driver) -> Result<c_int, CudaError> {
    let mut device = 0;
    // SAFETY: out-pointers to locals.
    unsafe {
        if (driver.ctx_device)(&raw mut device) == 0 {
            return Ok(device);
        }
        if (driver.device_get)(&raw mut device, 0) == 0 {
            return Ok(device);
        }
    }
    Err(CudaError::Missing("CUDA device"))
}

/// Makes device 0's primary context (the one MLX works in) current on this
/// thread; the device, to give it back with [`leave_primary_context`].
fn primary_context(driver: &Driver) -> Option<c_int> {
    let mut device = 0;
    let mut context = std::ptr::null_mut();
    // SAFETY: out-pointers to locals; a retained context is released by
    // `leave_primary_context`.
    unsafe {
        if (driver.device_get)(&raw mut device, 0) != 0
            || (driver.primary_retain)(&raw mut context, device) != 0
        {
            return None;
        }
        if (driver.ctx_set_current)(context) != 0 {
            (driver.primary_release)(device);
            return None;
        }
    }
    Some(device)
}

fn leave_primary_context(driver: &Driver, device: c_int) {
    // SAFETY: undoes `primary_context` on the same thread.
    unsafe {
        (driver.ctx_set_current)(std::ptr::null_mut());
        (driver.primary_release)(device);
    }
}

/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR` and `_MINOR`.
const CAPABILITY: [c_int; 2] = [75, 76];

fn capability(driver: &Driver) -> Result<(c_int, c_int), CudaError> {
    let device = device(driver)?;
    let mut values = [0; 2];
    for (value, attribute) in values.iter_mut().zip(CAPABILITY) {
        // SAFETY: an out-pointer to a local.
        let code = unsafe { (driver.device_attribute)(value, attribute, device) };
        super::symbols::checked("cuDeviceGetAttribute", code)?;
    }
    Ok((values[0], values[1]))
}

/// Whether the driver loads `image` in this thread's context (loaded and
/// unloaded at once: MLX or our launcher loads its own copy).
fn loads(driver: &Driver, image: &[u8]) -> bool {
    let mut module = std::ptr::null_mut();
    // SAFETY: `image` is a whole cubin (the driver reads its header for its
    // size); the module is unloaded here.
    unsafe {
        if (driver.module_load)(&raw mut module, image.as_ptr().cast()) != 0 || module.is_null() {
            return false;
        }
        (driver.module_unload)(module);
    }
    true
}

fn version(nvrtc: &Nvrtc) -> Result<(c_int, c_int), CudaError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: out-pointers to locals.
    let code = unsafe { (nvrtc.version)(&raw mut major, &raw mut minor) };
    super::symbols::checked("nvrtcVersion", code)?;
    Ok((major, minor))
}

/// `text` compiled to a cubin for `sm_{major}{minor}`.
fn compile(nvrtc: &Nvrtc, text: &str, major: c_int, minor: c_int) -> Result<Vec<u8>, CudaError> {
    let source = CString::new(text).map_err(|_| CudaError::Refused("a source with a NUL"))?;
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
    let count =
        c_int::try_from(pointers.len()).map_err(|_| CudaError::Refused("too many options"))?;
    let mut program = std::ptr::null_mut();
    // SAFETY: every pointer is to a live C string or local; the program is
    // destroyed below on every path.
    unsafe {
        let code = (nvrtc.create)(
            &raw mut program,
            source.as_ptr(),
            c"weightscope.cu".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        );
        super::symbols::checked("nvrtcCreateProgram", code)?;
        let result = if (nvrtc.compile)(program, count, pointers.as_ptr()) == 0 {
            let mut size = 0;
            let mut bytes = Vec::new();
            if (nvrtc.cubin_size)(program, &raw mut size) == 0 && size > 0 {
                bytes.resize(size, 0u8);
                if (nvrtc.cubin)(program, bytes.as_mut_ptr().cast()) != 0 {
                    bytes.clear();
                }
            }
            if bytes.is_empty() {
                Err(CudaError::Refused("NVRTC gave no cubin"))
            } else {
                Ok(bytes)
            }
        } else {
            Err(CudaError::Compile(first_error(nvrtc, program)))
        };
        (nvrtc.destroy)(&raw mut program);
        result
    }
}

/// The first error line of a failed compile.
fn first_error(nvrtc: &Nvrtc, program: *mut c_void) -> String {
    let mut size = 0;
    let mut log = Vec::new();
    // SAFETY: a live program; the buffer is as long as NVRTC says.
    unsafe {
        if (nvrtc.log_size)(program, &raw mut size) == 0 && size > 0 {
            log.resize(size, 0u8);
            if (nvrtc.log)(program, log.as_mut_ptr().cast()) != 0 {
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

/// Where CUDA's headers may be, as MLX looks for them (`CUDA_HOME`,
/// `CUDA_PATH`, `/usr/local/cuda`) and beside the NVRTC this process
/// loaded (NVIDIA's Python packages keep `include/` next to `lib/`): the
/// ones that hold `cuda_fp16.h`.
fn include_folders() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = crate::environment::get().outside.cuda_homes.clone();
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
    let function = nvrtc()?.version as *const c_void;
    // SAFETY: `dladdr` on a function of a live library fills a local.
    unsafe {
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
pub(crate) fn compile_for_test(
    parts: &Parts,
    major: c_int,
    minor: c_int,
) -> Result<Vec<u8>, CudaError> {
    let nvrtc = nvrtc().ok_or(CudaError::Missing("NVRTC"))?;
    compile(nvrtc, &source(parts, "test_kernel"), major, minor)
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
        assert!(driver().is_none() || nvrtc().is_none());
    }
}
