//! Requests, chunking, and the engine that spreads chunks over the workers.
//!
//! A request `[file_offset, file_offset + size)` is cut at multiples of
//! `chunk_bytes` in *file* space, so every chunk boundary is 4 KiB aligned and
//! only the first chunk's head and the last chunk's tail can be unaligned.
//! Example: 10 MiB at offset 1 MiB + 100 with 4 MiB chunks gives
//! [1M+100, 4M), [4M, 8M), [8M, 11M+100): three chunks, the middle one aligned.
//! Chunks go, in order, to one queue that every worker pulls from
//! ([`crate::queue`]), so all workers stream the same region of the file
//! together and a chunk starts on whichever worker can take it first.

use crate::config::{Config, ReadMode};
use crate::error::{Error, OpError, Result};
use crate::file::File;
use crate::gpu::{self, Gpu, MemKind, PtrInfo};
use crate::queue::WorkQueue;
use crate::stats::{Stats, StatsSnapshot};
use crate::worker::{self, WorkerHandle};
use crate::MAX_RW_COUNT;
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
    /// page cache and the writeback add up: 1 GiB in 256 MiB calls on the
    /// 2-core VM, 1.2–1.8 GB/s buffered + fdatasync, 4.5–4.7 with writeback
    /// started per 4 MiB piece, 3.3–3.9 with O_DIRECT.
    pub durable: bool,
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
    fn fire(self, r: Result<usize>) {
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
}

impl ReqState {
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

/// The number of workers that take storage-bound reads, when it is fewer
/// than all of them.
pub(crate) fn cold_limit(cfg: &Config) -> Option<usize> {
    (cfg.cold_io_threads > 0 && cfg.cold_io_threads < cfg.io_threads).then_some(cfg.cold_io_threads)
}

/// The piece size for a request of `size` bytes spread over `workers`, each
/// taking up to `per_worker` pieces: large requests use whole chunks; smaller
/// ones are cut in 64 KiB multiples, so that every worker has a piece, and
/// into `per_worker` pieces each as long as a piece stays at least
/// [`crate::config::MIN_PIECE_BYTES`] (2 MiB).
/// Examples with 16 workers and 4 MiB chunks, two pieces per worker:
/// 1 GiB → 4 MiB pieces; 64 MiB → 2 MiB (32 pieces, not 16 of 4 MiB);
/// 16 MiB → 1 MiB (one per worker: halves would be under 2 MiB);
/// 1 MiB over 12 workers → ceil(87382 / 64 KiB) = 2 → 128 KiB pieces.
pub(crate) fn split_bytes(
    size: usize,
    workers: usize,
    per_worker: usize,
    chunk_bytes: usize,
) -> usize {
    let min = crate::config::MIN_SPLIT_BYTES.min(chunk_bytes);
    let piece = |n: usize| size.div_ceil(n.max(1)).next_multiple_of(min);
    let one_each = piece(workers);
    let floor = one_each.min(crate::config::MIN_PIECE_BYTES);
    piece(workers * per_worker.max(1))
        .max(floor)
        .clamp(min, chunk_bytes)
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
    /// A read bound for storage (O_DIRECT), for the workers of
    /// `Config::cold_io_threads` only; set only while that limit is on.
    pub cold: bool,
    /// When the request was cut into chunks (stage timings).
    pub queued_at: std::time::Instant,
}

struct Inner {
    cfg: Config,
    gpu: Arc<dyn Gpu>,
    stats: Arc<Stats>,
    workers: Vec<WorkerHandle>,
    queue: Arc<WorkQueue<Chunk>>,
    pool: Arc<worker::StreamPool>,
    /// Stream ops submitted and not finished (see [`Engine::stream_op`]).
    stream_ops: AtomicUsize,
    /// The fork generation the workers were started in ([`crate::fork`]).
    generation: u64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.generation != crate::fork::generation() {
            // A child after fork(): the workers are the parent's threads and
            // the queue's lock may be held by one of them; joining or closing
            // would hang. Leave it all alone (crate::fork).
            std::mem::forget(std::mem::take(&mut self.workers));
            return;
        }
        // Workers first (they drain the queue and destroy the streams they
        // took), then the prepared streams none of them used.
        self.queue.close();
        self.workers.clear();
        self.pool.release(self.gpu.as_ref());
    }
}

/// Counts one stream op as outstanding until dropped ([`Engine::stream_op`]).
pub struct StreamOpTicket {
    inner: Arc<Inner>,
}

impl Drop for StreamOpTicket {
    fn drop(&mut self) {
        self.inner.stream_ops.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The I/O engine: worker threads, their rings and bounce slabs.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl Engine {
    /// Start an engine with the GPU runtime `cfg.gpu_runtime` names.
    pub fn new(cfg: Config) -> Result<Engine> {
        let gpu = gpu::load(cfg.gpu_runtime);
        Engine::with_gpu(cfg, gpu)
    }

    /// Start an engine over a given runtime (tests pass the test double).
    pub fn with_gpu(cfg: Config, gpu: Arc<dyn Gpu>) -> Result<Engine> {
        Engine::with_faults(cfg, gpu, None)
    }

    /// As [`Engine::with_gpu`], with a fault plan on every worker's ring (tests).
    pub fn with_faults(
        cfg: Config,
        gpu: Arc<dyn Gpu>,
        faults: Option<worker::FaultFactory>,
    ) -> Result<Engine> {
        let stats = Arc::new(Stats::default());
        let pool = Arc::new(worker::StreamPool::default());
        let cold: fn(&Chunk) -> bool = |c| c.cold;
        let queue = Arc::new(WorkQueue::with_restriction(
            cfg.io_threads,
            cold_limit(&cfg).map(|_| cold),
        ));
        let mut workers = Vec::with_capacity(cfg.io_threads);
        for id in 0..cfg.io_threads {
            match worker::spawn(
                id,
                &cfg,
                gpu.clone(),
                stats.clone(),
                pool.clone(),
                queue.clone(),
                faults.clone(),
            ) {
                Ok(w) => workers.push(w),
                Err(e) => {
                    // Let the workers already started exit before they are joined.
                    queue.close();
                    return Err(e);
                }
            }
        }
        crate::log_info!(
            "engine: {} workers, {} KiB chunks, {} slots each, GPU runtime {}",
            cfg.io_threads,
            cfg.chunk_bytes >> 10,
            cfg.slots_per_worker,
            gpu.name()
        );
        crate::stats::server::watch(&stats, &cfg);
        Ok(Engine {
            inner: Arc::new(Inner {
                cfg,
                gpu,
                stats,
                workers,
                queue,
                pool,
                stream_ops: AtomicUsize::new(0),
                generation: crate::fork::generation(),
            }),
        })
    }

    /// Get ready for stream ops on `device`: every worker's stream there is
    /// made now, before the first user's stream is parked on this device
    /// (creating one while a stream is parked can stall in the driver).
    /// Cheap after the first call per device.
    pub fn prepare_stream_ops(&self, device: i32) -> Result<()> {
        let n = self.inner.workers.len();
        self.inner.pool.prepare(self.inner.gpu.as_ref(), device, n)
    }

    /// Count a stream op as outstanding until the ticket is dropped. While any
    /// is, a small synchronous device transfer on a thread that has no stream
    /// of its own yet goes through the workers (their streams exist) instead
    /// of creating a per-thread stream.
    pub fn stream_op(&self) -> StreamOpTicket {
        self.inner.stream_ops.fetch_add(1, Ordering::AcqRel);
        StreamOpTicket {
            inner: self.inner.clone(),
        }
    }

    /// True in a child after `fork()`: this engine's workers are threads of
    /// the parent and do not exist here; make a new engine instead.
    pub fn is_from_before_fork(&self) -> bool {
        self.inner.generation != crate::fork::generation()
    }

    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    pub fn gpu(&self) -> &Arc<dyn Gpu> {
        &self.inner.gpu
    }

    /// What the data path has done so far (which path served the bytes).
    pub fn stats(&self) -> StatsSnapshot {
        self.inner.stats.snapshot()
    }

    /// Register a descriptor (see [`File::probe`]).
    pub fn open_file(&self, fd: std::os::fd::RawFd) -> Result<Arc<File>> {
        File::probe(fd).map(Arc::new)
    }

    /// Classify `ptr` and describe the memory `[ptr, ptr + len)` for a transfer.
    pub fn memory(&self, ptr: u64) -> Result<(Memory, PtrInfo)> {
        let info = self.inner.gpu.pointer_info(ptr)?;
        Ok((Memory::from_info(ptr, &info), info))
    }

    /// Start `req`; `done` fires once with the byte count or the error.
    /// Sizes above MAX_RW_COUNT are clamped, as the kernel would.
    ///
    /// # Safety
    /// `req.mem` names memory the engine may access for `req.size` bytes
    /// (written by a read, read by a write) from now until `done` has fired:
    /// host memory must stay allocated and otherwise untouched, device memory
    /// must be an allocation of that device. [`crate::api`] is the safe form.
    pub unsafe fn submit(&self, req: IoRequest, done: Completion) {
        // Batch and stream callers keep many requests in flight themselves:
        // whole chunks only, so a 1 MiB entry is one piece of work, not eight.
        let done = crate::stats::record::track_submit(&req, done);
        self.submit_split(req, done, false)
    }

    /// `spread`: cut requests below workers × chunk into smaller pieces so one
    /// synchronous caller uses every worker.
    fn submit_split(&self, req: IoRequest, done: Completion, spread: bool) {
        let size = req.size.min(MAX_RW_COUNT);
        if size == 0 {
            done.fire(Ok(0));
            return;
        }
        if let Err(e) = self.check_access(&req) {
            done.fire(Err(e));
            return;
        }
        let chunk = if spread {
            let cfg = &self.inner.cfg;
            split_bytes(
                size,
                self.inner.workers.len(),
                cfg.pieces_per_worker,
                cfg.chunk_bytes,
            )
        } else {
            self.inner.cfg.chunk_bytes
        } as u64;
        let start = req.file_offset;
        let end = start + size as u64;
        let mut bounds = Vec::new();
        let mut pos = start;
        while pos < end {
            let next = ((pos / chunk) + 1) * chunk;
            let stop = next.min(end);
            bounds.push((pos, (stop - pos) as usize));
            pos = stop;
        }
        let started = req.file.begin_io();
        let size_before = (req.dir == Direction::Write)
            .then(|| crate::file::size_of(req.file.buffered_fd))
            .flatten();
        let state = Arc::new(ReqState {
            remaining: AtomicUsize::new(bounds.len()),
            chunks: Mutex::new(
                bounds
                    .iter()
                    .map(|&(_, len)| Outcome {
                        len,
                        result: None,
                        written: 0,
                    })
                    .collect(),
            ),
            completion: Mutex::new(Some(done)),
            file: req.file.clone(),
            started,
            dir: req.dir,
            file_offset: req.file_offset,
            size_before,
            cancel: req.cancel.clone(),
        });
        let queued_at = std::time::Instant::now();
        let cold = self.cold_reads(&req, start, end);
        let mut chunks = Vec::with_capacity(bounds.len());
        for (idx, (off, len)) in bounds.into_iter().enumerate() {
            chunks.push(Chunk {
                req: state.clone(),
                idx,
                file: req.file.clone(),
                dir: req.dir,
                mem: req.mem.offset((off - start) as usize),
                file_offset: off,
                len,
                durable: req.durable,
                cold: cold.as_ref().is_some_and(|is_cold| is_cold(off, len)),
                queued_at,
            });
        }
        if let Err(refused) = self.inner.queue.push(chunks) {
            for c in refused {
                c.req.chunk_done(c.idx, Err(OpError::DriverClosing.into()));
            }
        }
    }

    /// While `cold_io_threads` limits storage reads to some workers: which
    /// chunks of a read of `start..end` will go to storage. A descriptor
    /// opened with O_DIRECT or `HIPFILE_READ_MODE=direct` sends every chunk
    /// there; otherwise a chunk is cold when `cachestat` says the page cache
    /// lacks part of it (one call for the whole request first, so a hot read
    /// costs one call). Without an answer (kernel < 6.5) chunks count as hot.
    fn cold_reads(
        &self,
        req: &IoRequest,
        start: u64,
        end: u64,
    ) -> Option<impl Fn(u64, usize) -> bool> {
        cold_limit(&self.inner.cfg)?;
        let cfg = &self.inner.cfg;
        if req.dir != Direction::Read
            || req.file.direct().is_none()
            || cfg.read_mode == ReadMode::Buffered
        {
            return None;
        }
        let all = req.file.client_direct || cfg.read_mode == ReadMode::Direct;
        let fd = req.file.buffered_fd;
        if !all && crate::file::fully_cached(fd, start, end - start) != Some(false) {
            return None;
        }
        Some(move |off: u64, len: usize| {
            all || crate::file::fully_cached(fd, off, len as u64) == Some(false)
        })
    }

    fn check_access(&self, req: &IoRequest) -> Result<()> {
        let ok = match req.dir {
            Direction::Read => req.file.readable,
            Direction::Write => req.file.writable,
        };
        if !ok {
            // What pread/pwrite return for a descriptor of the wrong access mode.
            return Err(Error::Os(libc::EBADF));
        }
        if req.dir == Direction::Write {
            req.file.check_append()?;
        }
        Ok(())
    }

    /// Synchronous transfer: returns once the bytes have landed.
    ///
    /// # Safety
    /// As for [`Engine::submit`], until this call returns.
    pub unsafe fn transfer(&self, req: IoRequest) -> Result<usize> {
        let call = crate::stats::Call::sync(&req);
        // SAFETY: the caller's promise is passed on.
        let r = unsafe { self.transfer_uncounted(req) };
        crate::stats::record::finish(call, &r);
        r
    }

    /// # Safety
    /// As for [`Engine::transfer`].
    unsafe fn transfer_uncounted(&self, mut req: IoRequest) -> Result<usize> {
        let fsync_fd = (req.dir == Direction::Write && self.inner.cfg.write_sync)
            .then_some(req.file.buffered_fd);
        req.durable = fsync_fd.is_some();
        let auto = self.inner.cfg.read_mode == ReadMode::Auto;
        let max = self.inner.cfg.inline_max_bytes;
        let small = auto && req.size <= max.min(crate::config::INLINE_OTHER_MAX_BYTES);
        let host = matches!(req.mem, Memory::Host(_));
        let host_read = auto && host && req.dir == Direction::Read && req.size <= max;
        let n = if host_read || (small && host) {
            crate::stats::served_inline();
            self.check_access(&req)?;
            let _busy = crate::file::InflightGuard::new(&req.file);
            let n = inline_host_io(&req)?;
            Stats::add(&self.inner.stats.inline_bytes, n as u64);
            n
        } else if small
            && self.inner.gpu.has_devices()
            && (self.inner.stream_ops.load(Ordering::Acquire) == 0
                || crate::inline::ready_for(&self.inner.gpu, &req.mem))
        {
            crate::stats::served_inline();
            self.check_access(&req)?;
            let _busy = crate::file::InflightGuard::new(&req.file);
            let n = crate::inline::device_io(&self.inner.gpu, &req)?;
            Stats::add(&self.inner.stats.inline_bytes, n as u64);
            n
        } else {
            let w = Arc::new(Waiter::default());
            self.submit_split(req, Completion::Wait(w.clone()), true);
            w.wait()?
        };
        if let Some(fd) = fsync_fd {
            // Durability as upstream's sync write (fdatasync per chunk there; one
            // per request here, before the call returns: the same guarantee).
            // SAFETY: fdatasync only names a descriptor.
            if n > 0 && unsafe { libc::fdatasync(fd) } != 0 {
                return Err(Error::last_os());
            }
        }
        Ok(n)
    }

    /// Synchronous read of `size` bytes at `mem`.
    ///
    /// # Safety
    /// As for [`Engine::transfer`].
    pub unsafe fn read(
        &self,
        file: &Arc<File>,
        mem: Memory,
        size: usize,
        file_offset: u64,
    ) -> Result<usize> {
        // SAFETY: the caller's promise for `mem` is passed on.
        unsafe {
            self.transfer(IoRequest {
                file: file.clone(),
                dir: Direction::Read,
                mem,
                size,
                file_offset,
                cancel: None,
                durable: false,
            })
        }
    }

    /// Synchronous write of `size` bytes at `mem`.
    ///
    /// # Safety
    /// As for [`Engine::transfer`].
    pub unsafe fn write(
        &self,
        file: &Arc<File>,
        mem: Memory,
        size: usize,
        file_offset: u64,
    ) -> Result<usize> {
        // SAFETY: the caller's promise for `mem` is passed on.
        unsafe {
            self.transfer(IoRequest {
                file: file.clone(),
                dir: Direction::Write,
                mem,
                size,
                file_offset,
                cancel: None,
                durable: false,
            })
        }
    }
}

/// A small host-memory transfer on the caller's thread: what pread/pwrite
/// would cost, without a hand-off. Reads use the page cache when the range is
/// resident (RWF_NOWAIT) and O_DIRECT when it is not and the request is
/// aligned; writes go to the descriptor kind the caller opened.
pub(crate) fn inline_host_io(req: &IoRequest) -> Result<usize> {
    let Memory::Host(p) = req.mem else {
        return Err(OpError::InternalError.into());
    };
    let f = &req.file;
    let size = req.size.min(MAX_RW_COUNT);
    let aligned = |off: u64, ptr: usize, len: usize| {
        f.direct().is_some_and(|(_, a)| {
            off % a == 0 && len as u64 % a == 0 && ptr as u64 % f.dio_mem_align.max(1) as u64 == 0
        })
    };
    let mut done = 0usize;
    let mut retries = 0u32;
    while done < size {
        let off = req.file_offset + done as u64;
        let ptr = p + done;
        let len = size - done;
        let r = match req.dir {
            Direction::Read => {
                let iov = libc::iovec {
                    iov_base: ptr as *mut libc::c_void,
                    iov_len: len,
                };
                // Large and not all in the page cache: straight to O_DIRECT.
                // A RWF_NOWAIT read that misses still starts readahead, which
                // would read the range a second time. (A small read skips the
                // question: it would cost more than the read.)
                let want_direct = aligned(off, ptr, len)
                    && (f.client_direct
                        || len > crate::config::INLINE_OTHER_MAX_BYTES
                            && crate::file::fully_cached(f.buffered_fd, off, len as u64)
                                == Some(false));
                let mut r = if want_direct {
                    -1
                } else {
                    // SAFETY: the caller's buffer covers [ptr, ptr + len) (the C contract).
                    unsafe { libc::preadv2(f.buffered_fd, &iov, 1, off as i64, libc::RWF_NOWAIT) }
                };
                let e = std::io::Error::last_os_error().raw_os_error();
                if r < 0 && (want_direct || e == Some(libc::EAGAIN) || e == Some(libc::EOPNOTSUPP))
                {
                    let fd = match f.direct() {
                        Some((dfd, _)) if aligned(off, ptr, len) => dfd,
                        _ => f.buffered_fd,
                    };
                    // SAFETY: as above.
                    r = unsafe { libc::pread(fd, ptr as *mut libc::c_void, len, off as i64) };
                }
                r
            }
            Direction::Write => {
                // O_DIRECT only on a descriptor the caller opened so: a
                // direct write beside page-cache pages of the same range
                // makes the kernel record EIO for every later fsync. (Not
                // asking `direct()` otherwise: it would open a descriptor.)
                let fd = match (f.client_direct && aligned(off, ptr, len))
                    .then(|| f.direct())
                    .flatten()
                {
                    Some((dfd, _)) => dfd,
                    None => f.buffered_fd,
                };
                let iov = libc::iovec {
                    iov_base: ptr as *mut libc::c_void,
                    iov_len: len,
                };
                let flags = crate::file::noappend_flag();
                // SAFETY: the caller's buffer covers [ptr, ptr + len).
                unsafe { libc::pwritev2(fd, &iov, 1, off as i64, flags) }
            }
        };
        if r < 0 {
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            if (e == libc::EINTR || e == libc::EAGAIN) && retries < 64 {
                retries += 1;
                continue;
            }
            if req.dir == Direction::Write && done > 0 {
                // As pwrite: what was written, contiguous from the start (and
                // nothing past it: this loop writes in order).
                return Ok(done);
            }
            return Err(Error::Os(e));
        }
        if r == 0 {
            if req.dir == Direction::Read {
                break; // EOF
            }
            return Err(Error::Os(libc::EIO));
        }
        done += r as usize;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // One piece per worker is already under 2 MiB: it stays.
        assert_eq!(split_bytes(16 * mib, 16, 2, 4 * mib), mib);
        assert_eq!(split_bytes(mib, 12, 4, 4 * mib), 128 << 10);
        // Large requests keep whole chunks.
        assert_eq!(split_bytes(1 << 30, 16, 2, 4 * mib), 4 * mib);
        assert_eq!(split_bytes(256 * mib, 16, 2, 4 * mib), 4 * mib);
        // Between: 48 MiB over 16 → 3 MiB each, halves would be 1.5 MiB → 2 MiB.
        assert_eq!(split_bytes(48 * mib, 16, 2, 4 * mib), 2 * mib);
        // Chunks smaller than the floor bound every piece.
        assert_eq!(split_bytes(64 * mib, 2, 2, mib), mib);
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
