//! The dense summary's launches made by us through the CUDA driver, past
//! MLX's evaluation: the kernel compiled ahead, loaded once into MLX's
//! context, run on two streams of our own (the centre and statistics, then
//! the bins as soon as the figures are read) with the blocks and
//! parameters `kernel::DenseJob` gives, outputs copied into pinned memory
//! of ours and waited for only when the host needs them. The tensor is an
//! evaluated MLX array in managed memory. docs/gpu.md has the timings.

#![allow(unsafe_code)]

use std::ffi::{c_uint, c_void};
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::CudaError;
use super::symbols::{Driver, Handle, checked};
use crate::mlx::kernel::{BLOCK_THREADS, DenseJob};

/// This thread's current context.
fn context(driver: &Driver) -> Option<usize> {
    let mut context = std::ptr::null_mut();
    // SAFETY: an out-pointer to a local.
    let found = unsafe { (driver.ctx_current)(&raw mut context) } == 0;
    (found && !context.is_null()).then_some(context as usize)
}

/// `CU_STREAM_NON_BLOCKING`: not ordered after MLX's streams.
const NON_BLOCKING: c_uint = 1;
/// `CU_EVENT_DISABLE_TIMING`.
const NO_TIMING: c_uint = 2;

/// The kernel loaded into MLX's context, our streams and events, and the
/// buffers, made once a process.
struct Engine {
    api: &'static Driver,
    context: usize,
    function: usize,
    /// The centre, the statistics and their copies.
    main: usize,
    /// The bins.
    side: usize,
    /// Recorded after the figures' copy and after the cells' copy.
    figures: usize,
    cells: usize,
    arena: Mutex<Arena>,
}

/// Our device buffer and its pinned host twin (the same offsets in both).
struct Arena {
    device: u64,
    host: *mut u8,
    bytes: usize,
}

// SAFETY: the host pointer is pinned memory of ours, only touched with the
// mutex held.
unsafe impl Send for Arena {}

fn engine() -> Option<&'static Engine> {
    static ENGINE: OnceLock<Option<Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let image = crate::mlx::kernel::dense_image()?;
            let api = super::symbols::driver()?;
            let context = context(api)?;
            match Engine::new(api, context, image) {
                Ok(engine) => Some(engine),
                Err(why) => {
                    eprintln!("weightscope: dense summaries are launched by MLX ({why})");
                    None
                }
            }
        })
        .as_ref()
}

impl Engine {
    fn new(
        api: &'static Driver,
        context: usize,
        image: &super::ahead::Image,
    ) -> Result<Self, CudaError> {
        let mut module = std::ptr::null_mut();
        let mut function = std::ptr::null_mut();
        let mut handles = [std::ptr::null_mut(); 4];
        // SAFETY: the image is a whole cubin checked by the driver when it
        // was made; out-pointers to locals; the module, streams and events
        // live as long as the process.
        unsafe {
            checked(
                "cuModuleLoadData",
                (api.module_load)(&raw mut module, image.bytes.as_ptr().cast()),
            )?;
            checked(
                "cuModuleGetFunction",
                (api.module_function)(&raw mut function, module, image.name.as_ptr()),
            )?;
            let [main, side, figures, cells] = &mut handles;
            checked("cuStreamCreate", (api.stream_create)(main, NON_BLOCKING))?;
            checked("cuStreamCreate", (api.stream_create)(side, NON_BLOCKING))?;
            checked("cuEventCreate", (api.event_create)(figures, NO_TIMING))?;
            checked("cuEventCreate", (api.event_create)(cells, NO_TIMING))?;
        }
        let [main, side, figures, cells] = handles.map(|h| h as usize);
        Ok(Self {
            api,
            context,
            function: function as usize,
            main,
            side,
            figures,
            cells,
            arena: Mutex::new(Arena {
                device: 0,
                host: std::ptr::null_mut(),
                bytes: 0,
            }),
        })
    }

    /// The arena, at least `bytes` long.
    fn arena(&self, bytes: usize) -> Result<MutexGuard<'_, Arena>, CudaError> {
        // A summary that panicked still waited for its streams (`Run`'s
        // drop), so the arena it leaves is idle.
        let mut arena = self
            .arena
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if arena.bytes < bytes {
            let grown = bytes.next_power_of_two().max(1 << 20);
            // SAFETY: the old buffers are ours and idle (every run waits
            // for its streams before it lets the arena go); out-pointers
            // to the arena's fields, set together.
            unsafe {
                if arena.bytes > 0 {
                    (self.api.free)(arena.device);
                    (self.api.host_free)(arena.host.cast());
                    arena.bytes = 0;
                }
                let mut device = 0;
                let mut host = std::ptr::null_mut();
                checked("cuMemAlloc", (self.api.alloc)(&raw mut device, grown))?;
                if let Err(e) = checked(
                    "cuMemAllocHost",
                    (self.api.host_alloc)(&raw mut host, grown),
                ) {
                    (self.api.free)(device);
                    return Err(e);
                }
                *arena = Arena {
                    device,
                    host: host.cast(),
                    bytes: grown,
                };
            }
        }
        Ok(arena)
    }

    /// Launches `job` on `stream` with the kernel's five pointers.
    fn launch(&self, job: &DenseJob, stream: usize, pointers: [u64; 5]) -> Result<(), CudaError> {
        let blocks =
            c_uint::try_from(job.blocks).map_err(|_| CudaError::Refused("too many blocks"))?;
        let threads = c_uint::try_from(BLOCK_THREADS).unwrap_or(256);
        let mut values = pointers;
        let mut params: [*mut c_void; 5] = std::array::from_fn(|i| (&raw mut values[i]).cast());
        // SAFETY: the function takes five pointers (x, fp, ip, fout, uout),
        // each into live device-addressable memory of the lengths `job`
        // says; `params` points at them for the call (the driver copies
        // the values at launch).
        let code = unsafe {
            (self.api.launch)(
                self.function as Handle,
                blocks,
                1,
                1,
                threads,
                1,
                1,
                0,
                stream as Handle,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        checked("cuLaunchKernel", code)
    }
}

/// Loads the kernel and makes the streams and buffers now (on the thread
/// MLX works on, after a first evaluation), so that the first summary does
/// not.
pub(crate) fn warm_up() {
    if let Some(engine) = engine() {
        drop(engine.arena(1 << 20));
    }
}

/// Where a run keeps each thing, in both buffers.
#[derive(Clone, Copy)]
struct Places {
    /// The centre's and the statistics' ints, then `[0, 0, 0]` (the
    /// centre job's `fp`).
    params: usize,
    /// The bins' ints, then `[0, lo, scale]`.
    bin_params: usize,
    /// The centre job's outputs: three floats, then one uint.
    centre: usize,
    floats: usize,
    counts: usize,
    bin_float: usize,
    slots: usize,
    first: usize,
    end: usize,
}

/// Ints and floats of the launch parameters: 32 words each block.
const PARAM_WORDS: usize = 32;

impl Places {
    fn new(stats: &DenseJob, first_bytes: usize) -> Self {
        let mut end = 0;
        let mut place = |bytes: usize| {
            let at = end;
            end = (end + bytes).next_multiple_of(256);
            at
        };
        let words = |n: i32| usize::try_from(n).unwrap_or(0) * 4;
        let params = place(PARAM_WORDS * 4);
        let bin_params = place(PARAM_WORDS * 4);
        let centre = place(16);
        let floats = place(words(stats.lengths[0]));
        let counts = place(words(stats.lengths[1]));
        let bin_float = place(4);
        let slots = place(crate::mlx::kernel::MAX_SLOTS * 4);
        let first = place(first_bytes);
        Self {
            params,
            bin_params,
            centre,
            floats,
            counts,
            bin_float,
            slots,
            first,
            end,
        }
    }
}

/// A dense summary's launches in flight; waits for its streams when
/// dropped, so the arena is idle again for the next.
pub(crate) struct Run {
    engine: &'static Engine,
    arena: MutexGuard<'static, Arena>,
    places: Places,
    x: u64,
    /// Blocks of the statistics job, and its outputs' lengths.
    blocks: usize,
    lengths: [usize; 2],
    first_bytes: usize,
    /// Slots of the bins started (0: none).
    slots: usize,
}

/// Set once a start failed: MLX launches the kernel from then on.
static START_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Starts a dense summary of the tensor at device address `x` (an
/// evaluated MLX array's): the `centre` and `stats` jobs (as
/// `kernel::DenseValues` makes them) and the copies of their outputs and
/// of the tensor's first `first_bytes` bytes. `None` where this process
/// launches nothing itself (see the module's notes), and from the first
/// start that failed (our buffers could not be had, say) on, said once on
/// stderr: MLX then launches the kernel, as before.
pub(crate) fn start(
    x: u64,
    first_bytes: usize,
    centre: &DenseJob,
    stats: &DenseJob,
) -> Option<Run> {
    use std::sync::atomic::Ordering;
    let engine = engine()?;
    if START_FAILED.load(Ordering::Relaxed) || context(engine.api) != Some(engine.context) {
        return None;
    }
    // A run that fails here has waited for whatever it enqueued (its
    // drop), so MLX may take over at once.
    match Run::start(engine, x, first_bytes, centre, stats) {
        Ok(run) => Some(run),
        Err(why) => {
            if !START_FAILED.swap(true, Ordering::Relaxed) {
                eprintln!("weightscope: dense summaries are launched by MLX from now on ({why})");
            }
            None
        }
    }
}

impl Run {
    fn start(
        engine: &'static Engine,
        x: u64,
        first_bytes: usize,
        centre: &DenseJob,
        stats: &DenseJob,
    ) -> Result<Self, CudaError> {
        let places = Places::new(stats, first_bytes);
        let arena = engine.arena(places.end)?;
        let lengths = stats.lengths.map(|n| usize::try_from(n).unwrap_or(0));
        let blocks = usize::try_from(stats.blocks).map_err(|_| CudaError::Refused("blocks"))?;
        if lengths[0] < blocks * 6 || lengths[1] < blocks * 2 {
            return Err(CudaError::Refused("short outputs"));
        }
        let mut run = Self {
            engine,
            arena,
            places,
            x,
            blocks,
            lengths,
            first_bytes,
            slots: 0,
        };
        run.enqueue(centre, stats)?;
        Ok(run)
    }

    /// A host place as a slice of `len` `T`s.
    fn host<T: Copy>(&self, at: usize, len: usize) -> &[T] {
        // SAFETY: `at + len * size_of::<T>()` is within the arena (see
        // `Places`), aligned to 256, and no copy into it is in flight
        // (callers wait for its event first).
        unsafe { std::slice::from_raw_parts(self.arena.host.add(at).cast::<T>(), len) }
    }

    fn write_host<T: Copy>(&mut self, at: usize, values: &[T]) {
        // SAFETY: as `host`; nothing reads it until the copy made after.
        unsafe {
            std::ptr::copy_nonoverlapping(
                values.as_ptr(),
                self.arena.host.add(at).cast::<T>(),
                values.len(),
            );
        }
    }

    fn device(&self, at: usize) -> u64 {
        self.arena.device + at as u64
    }

    fn copy_in(&self, at: usize, bytes: usize, stream: usize) -> Result<(), CudaError> {
        // SAFETY: both places lie within our arena's two buffers.
        let code = unsafe {
            (self.engine.api.copy_in)(
                self.device(at),
                self.arena.host.add(at).cast(),
                bytes,
                stream as Handle,
            )
        };
        checked("cuMemcpyHtoDAsync", code)
    }

    fn copy_out(&self, at: usize, from: u64, bytes: usize, stream: usize) -> Result<(), CudaError> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: `at + bytes` lies within our pinned buffer; `from` is
        // device-addressable memory of at least `bytes` (ours, or the
        // tensor's first bytes).
        let code = unsafe {
            (self.engine.api.copy_out)(
                self.arena.host.add(at).cast(),
                from,
                bytes,
                stream as Handle,
            )
        };
        checked("cuMemcpyDtoHAsync", code)
    }

    fn zero(&self, at: usize, words: usize, stream: usize) -> Result<(), CudaError> {
        // SAFETY: `at + 4 * words` lies within our device buffer.
        let code = unsafe { (self.engine.api.memset)(self.device(at), 0, words, stream as Handle) };
        checked("cuMemsetD32Async", code)
    }

    fn record(&self, event: usize, stream: usize) -> Result<(), CudaError> {
        // SAFETY: our event and stream.
        checked("cuEventRecord", unsafe {
            (self.engine.api.event_record)(event as Handle, stream as Handle)
        })
    }

    fn wait_event(&self, event: usize) -> Result<(), CudaError> {
        // SAFETY: our event, recorded on one of our streams.
        checked("cuEventSynchronize", unsafe {
            (self.engine.api.event_wait)(event as Handle)
        })
    }

    fn enqueue(&mut self, centre: &DenseJob, stats: &DenseJob) -> Result<(), CudaError> {
        let p = self.places;
        let main = self.engine.main;
        let mut params = [0i32; PARAM_WORDS];
        params[..11].copy_from_slice(&centre.ip);
        params[12..23].copy_from_slice(&stats.ip);
        // [24..27]: the centre job's `fp`, zero.
        self.write_host(p.params, &params);
        self.copy_in(p.params, PARAM_WORDS * 4, main)?;
        self.copy_out(p.first, self.x, self.first_bytes, main)?;
        let ip = |word: usize| self.device(p.params + word * 4);
        self.engine.launch(
            centre,
            main,
            [
                self.x,
                ip(24),
                ip(0),
                self.device(p.centre),
                self.device(p.centre + 12),
            ],
        )?;
        if stats.zeroed {
            self.zero(p.floats, self.lengths[0], main)?;
            self.zero(p.counts, self.lengths[1], main)?;
        }
        self.engine.launch(
            stats,
            main,
            [
                self.x,
                self.device(p.centre),
                ip(12),
                self.device(p.floats),
                self.device(p.counts),
            ],
        )?;
        let (block_floats, block_counts) = (self.blocks * 6 * 4, self.blocks * 2 * 4);
        self.copy_out(p.centre, self.device(p.centre), 16, main)?;
        self.copy_out(p.floats, self.device(p.floats), block_floats, main)?;
        self.copy_out(p.counts, self.device(p.counts), block_counts, main)?;
        self.record(self.engine.figures, main)?;
        self.copy_out(
            p.floats + block_floats,
            self.device(p.floats + block_floats),
            self.lengths[0] * 4 - block_floats,
            main,
        )?;
        self.copy_out(
            p.counts + block_counts,
            self.device(p.counts + block_counts),
            self.lengths[1] * 4 - block_counts,
            main,
        )?;
        self.record(self.engine.cells, main)
    }

    /// Waits for the centre, the per-block figures and the first bytes:
    /// `(centre, first bytes, blocks x 6 floats, blocks x 2 counts)`.
    pub(crate) fn figures(&self) -> Result<Figures<'_>, CudaError> {
        self.wait_event(self.engine.figures)?;
        let p = self.places;
        Ok(Figures {
            centre: self.host::<f32>(p.centre, 1)[0],
            first: self.host::<u8>(p.first, self.first_bytes),
            floats: self.host::<f32>(p.floats, self.blocks * 6),
            counts: self.host::<u32>(p.counts, self.blocks * 2),
        })
    }

    /// Starts `job` (the bins: `slots` of them, as `kernel::DenseValues`
    /// makes it) over `[lo, scale]` on the side stream.
    pub(crate) fn count_bins(
        &mut self,
        job: &DenseJob,
        lo: f32,
        scale: f32,
    ) -> Result<(), CudaError> {
        let p = self.places;
        let slots = usize::try_from(job.lengths[1]).unwrap_or(0);
        if slots > crate::mlx::kernel::MAX_SLOTS {
            return Err(CudaError::Refused("too many bins"));
        }
        let side = self.engine.side;
        let mut params = [0i32; PARAM_WORDS];
        params[..11].copy_from_slice(&job.ip);
        self.write_host(p.bin_params, &params);
        self.write_host(p.bin_params + 12 * 4, &[0.0f32, lo, scale]);
        self.copy_in(p.bin_params, PARAM_WORDS * 4, side)?;
        self.zero(p.slots, slots, side)?;
        self.engine.launch(
            job,
            side,
            [
                self.x,
                self.device(p.bin_params + 12 * 4),
                self.device(p.bin_params),
                self.device(p.bin_float),
                self.device(p.slots),
            ],
        )?;
        self.copy_out(p.slots, self.device(p.slots), slots * 4, side)?;
        self.slots = slots;
        Ok(())
    }

    /// Waits for the cells: their sums and their largest |values| as
    /// `f32` bits.
    pub(crate) fn cells(&self) -> Result<(&[f32], &[u32]), CudaError> {
        self.wait_event(self.engine.cells)?;
        let p = self.places;
        let (f, c) = (self.blocks * 6, self.blocks * 2);
        Ok((
            &self.host::<f32>(p.floats, self.lengths[0])[f..],
            &self.host::<u32>(p.counts, self.lengths[1])[c..],
        ))
    }

    /// Waits for the bins' slot counts (none if none were started).
    pub(crate) fn slots(&self) -> Result<&[u32], CudaError> {
        if self.slots == 0 {
            return Ok(&[]);
        }
        // SAFETY: our stream.
        checked("cuStreamSynchronize", unsafe {
            (self.engine.api.stream_wait)(self.engine.side as Handle)
        })?;
        Ok(self.host::<u32>(self.places.slots, self.slots))
    }
}

/// What [`Run::figures`] reads.
pub(crate) struct Figures<'a> {
    pub centre: f32,
    pub first: &'a [u8],
    pub floats: &'a [f32],
    pub counts: &'a [u32],
}

impl Drop for Run {
    fn drop(&mut self) {
        // The arena is handed on only once nothing is in flight into it.
        // SAFETY: our streams.
        unsafe {
            (self.engine.api.stream_wait)(self.engine.main as Handle);
            (self.engine.api.stream_wait)(self.engine.side as Handle);
        }
    }
}
