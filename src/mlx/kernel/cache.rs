//! Where MLX keeps compiled CUDA kernels between processes: made private
//! to this user, and left out of a recorded job's environment.

/// The variable MLX reads, once, for the folder where it keeps compiled
/// CUDA kernels between processes.
const KERNEL_CACHE_VAR: &str = "MLX_PTX_CACHE_DIR";

/// Set when this process chose MLX's kernel cache folder itself.
static CHOSE_KERNEL_CACHE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// MLX's version, as the library says it.
fn mlx_version() -> String {
    let mut text = String::new();
    #[allow(unsafe_code)]
    // SAFETY: the string is made, read while alive and freed here.
    unsafe {
        let mut s = mlx_sys::mlx_string_new();
        if mlx_sys::mlx_version(&raw mut s) == 0 {
            let data = mlx_sys::mlx_string_data(s);
            if !data.is_null() {
                text = std::ffi::CStr::from_ptr(data)
                    .to_string_lossy()
                    .into_owned();
            }
        }
        mlx_sys::mlx_string_free(s);
    }
    text
}

/// Where MLX may keep compiled CUDA kernels between processes: by default
/// a shared temporary folder (`/tmp/mlx/VERSION/ptx`), where another user
/// of the machine could leave a kernel of theirs under one of our kernels'
/// names for MLX to load unchecked. Unless `MLX_PTX_CACHE_DIR` is set
/// already, it is pointed at `kernels/mlx-VERSION` in weightscope's cache
/// folder, made this user's alone, or, where that cannot be had, at a path
/// that cannot be made (no cache at all). MLX 0.32.2 writes nothing there
/// (docs/gpu.md); the folder is ready for a version that does.
///
/// # Safety
/// Sets an environment variable: call it before the process has any other
/// thread.
#[allow(unsafe_code)]
pub unsafe fn keep_kernel_cache_private() {
    if crate::environment::started_with(KERNEL_CACHE_VAR).is_some() {
        return;
    }
    let version = mlx_version();
    let own = crate::files::cache_dir()
        .map(|d| d.join("kernels").join(format!("mlx-{version}")))
        .filter(|d| !version.is_empty() && crate::files::private_dir(d).is_ok());
    let folder = own.map_or_else(
        || std::ffi::OsString::from("/dev/null/no-kernel-cache"),
        std::path::PathBuf::into_os_string,
    );
    // SAFETY: the caller runs this before any other thread exists.
    unsafe { std::env::set_var(KERNEL_CACHE_VAR, folder) };
    CHOSE_KERNEL_CACHE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Leaves weightscope's choice of kernel cache (see
/// [`keep_kernel_cache_private`]) out of a child's environment: a recorded
/// job runs with the environment it was given.
pub fn leave_kernel_cache_out(command: &mut std::process::Command) {
    if CHOSE_KERNEL_CACHE.load(std::sync::atomic::Ordering::Relaxed) {
        command.env_remove(KERNEL_CACHE_VAR);
    }
}
