//! Requests and chunks: what a caller asks for ([`IoRequest`]), how it is
//! cut into chunks ([`split_bytes`], [`Chunk`]), and how the chunks' outcomes
//! make the request's result ([`ReqState`]: a read's bytes up to EOF or
//! its first error, a write's contiguous prefix as pwrite reports it).
//!
//! A request `[file_offset, file_offset + size)` is cut at multiples of the
//! piece size in *file* space, so every chunk boundary is 4 KiB aligned and
//! only the first chunk's head and the last chunk's tail can be unaligned.
//! Example: 10 MiB at offset 1 MiB + 100 with 4 MiB chunks gives
//! [1M+100, 4M), [4M, 8M), [8M, 11M+100): three chunks, the middle one aligned.

use crate::error::{Error, OpError, Result};
use crate::file::File;
use crate::gpu::{MemKind, PtrInfo};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Read,
    Write,
}

/// Where the bytes of a request live (already offset to the request's start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// CPU-addressable memory (pageable, pinned or managed).
    Host(usize),
    /// Device memory, reachable through the GPU runtime only.
    Device { ptr: u64, device: i32 },
}

impl Memory {
    /// The memory `ptr` refers to, as `info` classifies it.
    pub fn from_info(ptr: u64, info: &PtrInfo) -> Memory {
        match info.kind {
            MemKind::Device { device } => Memory::Device { ptr, device },
            _ => Memory::Host(ptr as usize),
        }
    }

    pub fn offset(self, by: usize) -> Memory {
        match self {
            Memory::Host(p) => Memory::Host(p + by),
            Memory::Device { ptr, device } => Memory::Device {
                ptr: ptr + by as u64,
                device,
            },
        }
    }

    pub fn is_device(self) -> bool {
        matches!(self, Memory::Device { .. })
    }
}

/// One transfer.
#[derive(Clone, Debug)]
pub struct IoRequest {
    pub file: Arc<File>,
    pub dir: Direction,
    pub mem: Memory,
    pub size: usize,
    pub file_offset: u64,
    /// Set to skip the chunks that have not started yet (batch cancel).
    pub cancel: Option<Arc<AtomicBool>>,
    /// The caller waits for durability (sync write + fdatasync). The write
    /// still goes to the descriptor kind the caller opened (page cache
    /// unless O_DIRECT), but each finished piece starts its writeback at
    /// once, so the disk works while later pieces are copied and the final
    /// fdatasync waits only for the tail. Without that the copy into the
    /// page cache and the writeback add up: 1 GiB in 256 MiB calls on a
    /// 2-core VM, 1.2–1.8 GB/s buffered + fdatasync, 4.5–4.7 with writeback
    /// started per 4 MiB piece, 3.3–3.9 with O_DIRECT.
    pub durable: bool,
}

impl IoRequest {
    /// A request of `size` bytes at `file_offset` that nothing cancels and
    /// whose caller does not wait for durability (the engine sets that for
    /// sync writes itself).
    pub fn new(
        file: Arc<File>,
        dir: Direction,
        mem: Memory,
        size: usize,
        file_offset: u64,
    ) -> Self {
        IoRequest {
            file,
            dir,
            mem,
            size,
            file_offset,
            cancel: None,
            durable: false,
        }
    }
}

/// Blocks a synchronous caller until its request has finished.
#[derive(Default)]
pub struct Waiter {
    result: Mutex<Option<Result<usize>>>,
    cv: Condvar,
}

impl Waiter {
    pub fn wait(&self) -> Result<usize> {
        let mut g = self.result.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    pub(crate) fn set(&self, r: Result<usize>) {
        *self.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        self.cv.notify_all();
    }
}

/// What happens when a request finishes. Callbacks run on a worker thread and
/// must be short and must not block on I/O.
pub enum Completion {
    Wait(Arc<Waiter>),
    Callback(Box<dyn FnOnce(Result<usize>) + Send>),
}

impl Completion {
    pub(crate) fn fire(self, r: Result<usize>) {
        match self {
            Completion::Wait(w) => w.set(r),
            Completion::Callback(f) => f(r),
        }
    }
}

/// How one chunk of a request ended.
#[derive(Clone, Debug, PartialEq)]
struct Outcome {
    len: usize,
    /// None until the chunk has finished.
    result: Option<Result<usize>>,
    /// For a write that failed: bytes it had written, contiguous from its start.
    written: usize,
}

/// Shared state of a request in flight.
pub(crate) struct ReqState {
    remaining: AtomicUsize,
    /// Per chunk, in file order.
    chunks: Mutex<Vec<Outcome>>,
    completion: Mutex<Option<Completion>>,
    /// Keeps the file marked busy until the request has finished.
    file: Arc<File>,
    /// The file's activity when the request started ([`File::alone_since`]).
    started: crate::file::IoStart,
    dir: Direction,
    file_offset: u64,
    /// For a write: the file's size when it started (None when fstat failed).
    size_before: Option<u64>,
    cancel: Option<Arc<AtomicBool>>,
}

impl ReqState {
    /// The state of `req`, cut into chunks of `lens` bytes in file order;
    /// `done` fires once the last of them has finished. The file counts the
    /// request as in flight until then.
    pub(crate) fn new(
        req: &IoRequest,
        lens: impl Iterator<Item = usize>,
        done: Completion,
    ) -> ReqState {
        let chunks: Vec<Outcome> = lens
            .map(|len| Outcome {
                len,
                result: None,
                written: 0,
            })
            .collect();
        let started = req.file.begin_io();
        let size_before = (req.dir == Direction::Write)
            .then(|| crate::file::size_of(req.file.buffered_fd))
            .flatten();
        ReqState {
            remaining: AtomicUsize::new(chunks.len()),
            chunks: Mutex::new(chunks),
            completion: Mutex::new(Some(done)),
            file: req.file.clone(),
            started,
            dir: req.dir,
            file_offset: req.file_offset,
            size_before,
            cancel: req.cancel.clone(),
        }
    }

    /// True once the request's owner asked to skip chunks that have not started.
    pub(crate) fn canceled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Acquire))
    }

    /// Record chunk `idx`'s outcome; the last one to finish completes the request.
    pub(crate) fn chunk_done(&self, idx: usize, r: Result<usize>) {
        self.chunk_ended(idx, r, 0)
    }

    /// As [`ReqState::chunk_done`], for a chunk that had transferred
    /// `written` bytes from its start when it ended (what a failed write
    /// leaves behind).
    pub(crate) fn chunk_ended(&self, idx: usize, r: Result<usize>, written: usize) {
        {
            let mut c = self.chunks.lock().unwrap_or_else(|p| p.into_inner());
            c[idx].result = Some(r);
            c[idx].written = written;
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let total = {
                let c = self.chunks.lock().unwrap_or_else(|p| p.into_inner());
                match self.dir {
                    Direction::Read => combine(&c),
                    Direction::Write => {
                        let total = combine_write(&c);
                        if c.iter().any(|o| matches!(o.result, Some(Err(_)))) {
                            let reported = *total.as_ref().unwrap_or(&0);
                            let len: usize = c.iter().map(|o| o.len).sum();
                            self.restore_size(
                                self.file_offset + reported as u64,
                                self.file_offset + len as u64,
                            );
                        }
                        total
                    }
                }
            };
            self.file.end_io();
            let done = self
                .completion
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            if let Some(done) = done {
                done.fire(total);
            }
        }
    }

    /// A write failed after its pieces, written in parallel, may have grown
    /// the file past `reported_end` (its offset plus the bytes it reports):
    /// cut the file back to `max(size before, reported_end)`, so that it
    /// never holds more than the write reports. `request_end` is where the
    /// whole request would have ended. (Not only what the pieces report as
    /// written: a piece that fails with EFAULT can leave the file grown.)
    ///
    /// Only when the request had the registration to itself
    /// ([`File::alone_since`]: nothing else was in flight when it started,
    /// nothing has started since), and the file is no longer than this
    /// request made it: otherwise another write of this process may own the
    /// bytes past `reported_end`, and cutting them would lose its data, so the
    /// file is left as it is, with a log line. Writers outside this
    /// registration (other descriptors, other processes) are not seen.
    fn restore_size(&self, reported_end: u64, request_end: u64) {
        let Some(before) = self.size_before else {
            return;
        };
        let keep = before.max(reported_end);
        let fd = self.file.buffered_fd;
        let Some(size) = crate::file::size_of(fd).filter(|&n| n > keep) else {
            return;
        };
        if !self.file.is_regular_file || size > request_end || !self.file.alone_since(self.started)
        {
            crate::log_warn!(
                "a write to fd {} failed after part of it was written: the file is {} bytes, \
                 more than the {} the write reports, and is left so because other I/O on the \
                 file ran beside it",
                self.file.client_fd,
                size,
                keep
            );
            return;
        }
        // SAFETY: ftruncate only names a descriptor and a length.
        if unsafe { libc::ftruncate(fd, keep as i64) } != 0 {
            crate::log_warn!(
                "a failed write grew fd {} to {} bytes; cutting it back to {keep} failed: {}",
                self.file.client_fd,
                size,
                std::io::Error::last_os_error()
            );
        } else {
            crate::log_debug!(
                "a failed write grew fd {} to {} bytes; cut back to {keep}",
                self.file.client_fd,
                size
            );
        }
    }
}

/// A read's result from its chunks, in file order: bytes up to and
/// including the first short chunk (EOF), or the first error met before that.
/// A partial success is never reported as whole: an error in a chunk inside the
/// transferred range fails the request.
fn combine(chunks: &[Outcome]) -> Result<usize> {
    let mut total = 0usize;
    for o in chunks {
        match &o.result {
            Some(Ok(n)) => {
                total += *n;
                if *n < o.len {
                    break;
                }
            }
            Some(Err(e)) => return Err(e.clone()),
            None => return Err(OpError::InternalError.into()),
        }
    }
    Ok(total)
}

/// [`combine`] over (length, outcome) pairs: the stages of a stream op.
pub(crate) fn combine_results(chunks: &[(usize, Option<Result<usize>>)]) -> Result<usize> {
    let v: Vec<Outcome> = chunks
        .iter()
        .map(|(len, r)| Outcome {
            len: *len,
            result: r.clone(),
            written: 0,
        })
        .collect();
    combine(&v)
}

/// A write's result from its chunks, as pwrite reports a write that stops
/// part way: the bytes written contiguously from the start (through the
/// first failed chunk's own written prefix), or the error when that is none.
/// A canceled write (batch cancel) stays an error. Chunks after the first
/// failure may have finished too (they run in parallel): see
/// [`ReqState::restore_size`].
fn combine_write(chunks: &[Outcome]) -> Result<usize> {
    let mut total = 0usize;
    let mut first_err = None;
    for o in chunks {
        match &o.result {
            Some(Ok(n)) if *n == o.len => total += n,
            Some(Ok(n)) => {
                // A worker finishes a write chunk whole or with an error.
                total += n;
                first_err = Some(Error::Os(libc::EIO));
            }
            Some(Err(e)) => {
                total += o.written.min(o.len);
                first_err = Some(e.clone());
            }
            None => first_err = Some(OpError::InternalError.into()),
        }
        if first_err.is_some() {
            break;
        }
    }
    match first_err {
        None => Ok(total),
        Some(e @ Error::Os(libc::ECANCELED)) => Err(e),
        Some(_) if total > 0 => Ok(total),
        Some(e) => Err(e),
    }
}

/// The piece size for a request of `size` bytes spread over `workers`, each
/// taking up to `per_worker` pieces: large requests use whole chunks; smaller
/// ones are cut in 64 KiB multiples, so that up to
/// [`crate::config::SPREAD_MAX_WORKERS`] workers have a piece each, and
/// into more (`per_worker` for every worker) as long as a piece stays at
/// least [`crate::config::MIN_PIECE_BYTES`] (2 MiB).
/// Examples with 16 workers and 4 MiB chunks, two pieces per worker:
/// 1 GiB → 4 MiB pieces; 64 MiB → 2 MiB (32 pieces, not 16 of 4 MiB);
/// 16 MiB → 2 MiB (one for each of 8 workers); 4 MiB → 512 KiB;
/// 1 MiB over 12 workers → ceil(131072 / 64 KiB) = 2 → 128 KiB pieces.
pub(crate) fn split_bytes(
    size: usize,
    workers: usize,
    per_worker: usize,
    chunk_bytes: usize,
) -> usize {
    let min = crate::config::MIN_SPLIT_BYTES.min(chunk_bytes);
    let piece = |n: usize| size.div_ceil(n.max(1)).next_multiple_of(min);
    let one_each = piece(workers.min(crate::config::SPREAD_MAX_WORKERS));
    let floor = one_each.min(crate::config::MIN_PIECE_BYTES);
    piece(workers * per_worker.max(1))
        .max(floor)
        .clamp(min, chunk_bytes)
}

/// How a request of one of `callers` synchronous calls waiting together is
/// spread over an engine of `workers` (the `workers` and `per_worker` of
/// [`split_bytes`]): a lone caller's over every worker, two pieces each;
/// callers waiting together share the [`crate::config::SPREAD_MAX_WORKERS`]
/// page-cache readers that the memory rewards, one piece each, since the
/// other callers' pieces keep the rest of the workers and the link busy.
/// Page-cache-hot reads into device memory on an H100 machine, three rounds:
/// 8 threads reading 512 files × 4 MiB whole (open, register, read,
/// deregister) ran 34.4–36.7 GB/s with each read one 4 MiB piece, 31.5–32.4
/// in two pieces and 27.6–29.1 in four (in other rounds the lone caller's
/// eight: 19.0–26.3); 4 threads of sequential 16 MiB reads 42.3–43.3 in
/// four 4 MiB pieces against 39.5–39.9 in eight of 2 MiB. Cold reads of the
/// file shape moved within the rounds' spread.
pub(crate) fn share_of_workers(workers: usize, callers: usize) -> (usize, usize) {
    if callers <= 1 {
        (workers, crate::config::PIECES_PER_WORKER)
    } else {
        let readers = (crate::config::SPREAD_MAX_WORKERS / callers).max(1);
        (readers.min(workers.max(1)), 1)
    }
}

/// The pieces `[file_offset, file_offset + len)` of the request
/// `[start, start + size)` cut at multiples of `piece` in file space.
pub(crate) fn pieces(start: u64, size: usize, piece: u64) -> impl Iterator<Item = (u64, usize)> {
    let end = start + size as u64;
    let mut pos = start;
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let stop = ((pos / piece + 1) * piece).min(end);
        let cut = (pos, (stop - pos) as usize);
        pos = stop;
        Some(cut)
    })
}

/// A chunk on its way to, or inside, a worker.
pub(crate) struct Chunk {
    pub req: Arc<ReqState>,
    pub idx: usize,
    pub file: Arc<File>,
    pub dir: Direction,
    pub mem: Memory,
    pub file_offset: u64,
    pub len: usize,
    pub durable: bool,
    /// Bound for storage (an O_DIRECT read, a durable or O_DIRECT write),
    /// for the workers of `Config::cold_io_threads` only; set only while
    /// that limit is on.
    pub cold: bool,
    /// When the request was cut into chunks (stage timings).
    pub queued_at: std::time::Instant,
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunk")
            .field("idx", &self.idx)
            .field("dir", &self.dir)
            .field("mem", &self.mem)
            .field("file_offset", &self.file_offset)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_waiting_together_cut_their_requests_for_their_share() {
        let mib = 1 << 20;
        let piece = |callers| {
            let (workers, per_worker) = share_of_workers(16, callers);
            split_bytes(4 * mib, workers, per_worker, 4 * mib)
        };
        // A lone caller: one 512 KiB piece for each of eight workers.
        assert_eq!(piece(1), 512 << 10);
        // Callers waiting together share eight readers, one piece each.
        assert_eq!(piece(2), mib);
        assert_eq!(piece(3), 2 * mib);
        assert_eq!(piece(4), 2 * mib);
        // Eight loader threads: each 4 MiB read whole.
        assert_eq!(piece(8), 4 * mib);
        assert_eq!(piece(40), 4 * mib);
        // Never a share of no workers.
        assert_eq!(share_of_workers(16, 40), (1, 1));
        assert_eq!(share_of_workers(0, 3), (1, 1));
        assert_eq!(share_of_workers(16, 0), (16, 2));
        // A large request stays in whole chunks.
        let (w, p) = share_of_workers(16, 2);
        assert_eq!(split_bytes(256 * mib, w, p, 4 * mib), 4 * mib);
    }

    #[test]
    fn split_spreads_mid_size_requests() {
        let mib = 1 << 20;
        assert_eq!(split_bytes(mib, 12, 1, 4 * mib), 128 << 10);
        assert_eq!(split_bytes(4096, 12, 1, 4 * mib), 64 << 10);
        assert_eq!(split_bytes(1 << 30, 12, 1, 4 * mib), 4 * mib);
        assert_eq!(split_bytes(mib, 1, 1, 4 * mib), mib);
        assert_eq!(split_bytes(mib, 2, 1, 16 << 10), 16 << 10);
    }

    #[test]
    fn more_pieces_per_worker_stop_at_two_mib() {
        let mib = 1 << 20;
        // 64 MiB over 16 workers: 32 pieces of 2 MiB instead of 16 of 4 MiB.
        assert_eq!(split_bytes(64 * mib, 16, 1, 4 * mib), 4 * mib);
        assert_eq!(split_bytes(64 * mib, 16, 2, 4 * mib), 2 * mib);
        assert_eq!(split_bytes(64 * mib, 16, 4, 4 * mib), 2 * mib);
        // Pieces under 2 MiB: one for each of at most eight workers.
        assert_eq!(split_bytes(16 * mib, 16, 2, 4 * mib), 2 * mib);
        assert_eq!(split_bytes(4 * mib, 16, 2, 4 * mib), 512 << 10);
        assert_eq!(split_bytes(8 * mib, 16, 2, 4 * mib), mib);
        assert_eq!(split_bytes(mib, 12, 4, 4 * mib), 128 << 10);
        // Large requests keep whole chunks.
        assert_eq!(split_bytes(1 << 30, 16, 2, 4 * mib), 4 * mib);
        assert_eq!(split_bytes(256 * mib, 16, 2, 4 * mib), 4 * mib);
        // Between: 48 MiB over 16 → 3 MiB each, halves would be 1.5 MiB → 2 MiB.
        assert_eq!(split_bytes(48 * mib, 16, 2, 4 * mib), 2 * mib);
        // Chunks smaller than the floor bound every piece.
        assert_eq!(split_bytes(64 * mib, 2, 2, mib), mib);
    }

    #[test]
    fn requests_are_cut_at_piece_multiples_in_file_space() {
        let mib = 1u64 << 20;
        let cut: Vec<(u64, usize)> = pieces(mib + 100, 10 << 20, 4 * mib).collect();
        assert_eq!(
            cut,
            [
                (mib + 100, (3 * mib - 100) as usize),
                (4 * mib, 4 << 20),
                (8 * mib, (3 * mib + 100) as usize)
            ]
        );
        assert_eq!(pieces(0, 0, 4096).count(), 0);
        assert_eq!(pieces(0, 4096, 4096).collect::<Vec<_>>(), [(0, 4096)]);
    }

    fn ok(n: usize) -> Outcome {
        Outcome {
            len: 4,
            result: Some(Ok(n)),
            written: 0,
        }
    }

    fn failed(errno: i32, written: usize) -> Outcome {
        Outcome {
            len: 4,
            result: Some(Err(Error::Os(errno))),
            written,
        }
    }

    #[test]
    fn combine_stops_at_short_chunk_and_reports_errors() {
        assert_eq!(combine(&[ok(4), ok(4)]), Ok(8));
        assert_eq!(combine(&[ok(4), ok(2), ok(0)]), Ok(6));
        // An error after EOF does not matter; one before it does.
        assert_eq!(combine(&[ok(1), failed(libc::EIO, 0)]), Ok(1));
        assert_eq!(
            combine(&[ok(4), failed(libc::EIO, 0), ok(4)]),
            Err(Error::Os(libc::EIO))
        );
    }

    #[test]
    fn a_failed_write_reports_its_contiguous_prefix_as_pwrite_would() {
        let enospc = libc::ENOSPC;
        assert_eq!(combine_write(&[ok(4), ok(4)]), Ok(8));
        // The second chunk wrote 3 bytes, then failed; the third finished anyway.
        assert_eq!(combine_write(&[ok(4), failed(enospc, 3), ok(4)]), Ok(7));
        // Nothing written from the start: the error.
        assert_eq!(
            combine_write(&[failed(enospc, 0), ok(4)]),
            Err(Error::Os(enospc))
        );
        assert_eq!(
            combine_write(&[failed(libc::EFAULT, 0)]),
            Err(Error::Os(libc::EFAULT))
        );
        // A later failure does not hide an earlier one.
        assert_eq!(
            combine_write(&[ok(4), failed(libc::EIO, 0), failed(enospc, 2)]),
            Ok(4)
        );
        // A canceled write stays canceled.
        assert_eq!(
            combine_write(&[ok(4), failed(libc::ECANCELED, 0)]),
            Err(Error::Os(libc::ECANCELED))
        );
    }
}
