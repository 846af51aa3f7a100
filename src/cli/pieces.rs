//! Output written in order from pieces serialized on every core: the one
//! mechanism `inspect --json` uses for the tensor list of every format
//! (safetensors and GGUF), built on `par`.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

/// Tensors per piece of the streamed list (about 150 KB of JSON).
pub const TENSORS_PER_PIECE: usize = 1024;

/// Writes items `0..count` to `out` in order, `separator` between pieces of
/// [`TENSORS_PER_PIECE`]: each piece is serialized by `serialize(range, buf)`
/// (appending to an empty `buf`) on every core and written as the pieces
/// come in order, through a few reused buffers: never whole in memory, where
/// its fresh pages alone would cost more than writing it.
///
/// # Errors
/// When writing to `out` fails (the workers stop).
pub fn write_in_pieces(
    count: usize,
    separator: &[u8],
    serialize: &(dyn Fn(std::ops::Range<usize>, &mut Vec<u8>) + Sync),
    out: &mut impl Write,
) -> io::Result<()> {
    let pieces: Vec<std::ops::Range<usize>> = (0..count)
        .step_by(TENSORS_PER_PIECE)
        .map(|start| start..(start + TENSORS_PER_PIECE).min(count))
        .collect();
    let workers = crate::par::cores().min(pieces.len());
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let spare: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
    // Pieces written so far: a worker starts piece `i` only below `written +
    // window`, so a main thread that gets little of the cores never has more
    // than `window` pieces (about 200 KB each) waiting in memory. The piece
    // to write next is always inside the window: no wait can block it.
    let window = 2 * workers;
    let written_so_far = (Mutex::new(0usize), std::sync::Condvar::new());
    // A piece, or `None`: a worker is done (sent as it ends, even by a
    // panic, so that the writer below never waits for a worker gone).
    let (done, arrived) = mpsc::channel::<Option<(usize, Vec<u8>)>>();
    let serialize_pieces = |_k: usize| {
        let done = done.clone();
        let _last_word = Finished(done.clone());
        while !stop.load(Ordering::Relaxed) {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(piece) = pieces.get(i) else { break };
            wait_for_turn(&written_so_far, i, window, &stop);
            let mut buf = spare
                .lock()
                .ok()
                .and_then(|mut s| s.pop())
                .unwrap_or_else(|| Vec::with_capacity(TENSORS_PER_PIECE * 192));
            buf.clear();
            serialize(piece.clone(), &mut buf);
            if done.send(Some((i, buf))).is_err() {
                break;
            }
        }
    };
    let write_in_order = |started: usize| -> io::Result<(usize, bool)> {
        let mut waiting = BTreeMap::new();
        let mut written = 0;
        let mut ended = 0;
        // A piece may be empty (every tensor of it filtered out): no
        // separator before or after it.
        let mut any = false;
        while ended < started {
            let Ok(message) = arrived.recv() else { break };
            let Some((i, buf)) = message else {
                ended += 1;
                continue;
            };
            waiting.insert(i, buf);
            while let Some(buf) = waiting.remove(&written) {
                let result = if buf.is_empty() {
                    Ok(())
                } else if any {
                    out.write_all(separator).and_then(|()| out.write_all(&buf))
                } else {
                    out.write_all(&buf)
                };
                any |= !buf.is_empty();
                if let Err(err) = result {
                    stop.store(true, Ordering::Relaxed);
                    written_so_far.1.notify_all();
                    return Err(err);
                }
                if let Ok(mut spare) = spare.lock() {
                    spare.push(buf);
                }
                written += 1;
                publish(&written_so_far, written);
            }
        }
        Ok((written, any))
    };
    let (_, written) =
        crate::par::on_workers(workers, "list-out", &serialize_pieces, write_in_order);
    let (written, mut any) = written?;
    // What no worker wrote (none could start): here, in order.
    let mut buf = Vec::new();
    for piece in pieces.iter().skip(written) {
        buf.clear();
        serialize(piece.clone(), &mut buf);
        if buf.is_empty() {
            continue;
        }
        if any {
            out.write_all(separator)?;
        }
        out.write_all(&buf)?;
        any = true;
    }
    Ok(())
}

/// Tells the writer a `list-out` worker ended, however it ends.
struct Finished(mpsc::Sender<Option<(usize, Vec<u8>)>>);

impl Drop for Finished {
    fn drop(&mut self) {
        let _ = self.0.send(None);
    }
}

/// Blocks until piece `i` is within `window` of the pieces written (or the
/// writing stopped).
fn wait_for_turn(
    (lock, turn): &(Mutex<usize>, std::sync::Condvar),
    i: usize,
    window: usize,
    stop: &AtomicBool,
) {
    if let Ok(mut written) = lock.lock() {
        while i >= *written + window && !stop.load(Ordering::Relaxed) {
            match turn.wait(written) {
                Ok(w) => written = w,
                Err(_) => break,
            }
        }
    }
}

/// Records that `written` pieces are out and wakes the waiting workers.
fn publish((lock, turn): &(Mutex<usize>, std::sync::Condvar), written: usize) {
    if let Ok(mut so_far) = lock.lock() {
        *so_far = written;
    }
    turn.notify_all();
}
