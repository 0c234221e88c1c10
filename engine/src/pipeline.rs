//! The engine: where a request goes. Small synchronous transfers run on the
//! caller's thread (`inline.rs`); the rest is cut into chunks (`request.rs`)
//! that go, in order, to one queue that every worker pulls from (`queue.rs`),
//! so all workers stream the same region of the file together and a chunk
//! starts on whichever worker can take it first.
//!
//! Workers start as work needs them: the engine opens with one, and a
//! submission whose chunks outnumber the idle workers starts more, up to
//! `Config::io_threads` ([`WorkQueue::push`] decides). Each worker maps and
//! pins its own bounce slab, so a process that issues one request at a time
//! holds one worker's threads and memory, not the maximum's: eight data
//! loader processes would otherwise hold 8 × 16 threads and 8 × 320 MiB of
//! page-locked memory from their first read.

use crate::config::{Config, ReadMode};
use crate::error::{Error, OpError, Result};
use crate::file::File;
use crate::gpu::{self, Gpu, PtrInfo};
use crate::queue::WorkQueue;
use crate::request::{pieces, share_of_workers, split_bytes, Chunk, ReqState};
use crate::stats::{Stats, StatsSnapshot};
use crate::worker::{self, WorkerHandle};
use crate::MAX_RW_COUNT;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub use crate::request::{Completion, Direction, IoRequest, Memory, Waiter};

/// Workers an engine starts when it opens; the rest start as work needs them.
const INITIAL_WORKERS: usize = 1;

struct Inner {
    cfg: Config,
    gpu: Arc<dyn Gpu>,
    stats: Arc<Stats>,
    /// The workers started so far (more start as work needs them).
    workers: Mutex<Vec<WorkerHandle>>,
    /// What a worker started later is given.
    shared: worker::Shared,
    queue: Arc<WorkQueue<Chunk>>,
    pool: Arc<worker::StreamPool>,
    /// Stream ops submitted and not finished (see [`Engine::stream_op`]).
    stream_ops: AtomicUsize,
    /// Synchronous calls now waiting on the workers (see
    /// [`Engine::submit_split`]).
    sync_callers: AtomicUsize,
    /// The fork generation the workers were started in ([`crate::fork`]).
    generation: u64,
    /// Fault plans for tests, also for the stream I/O threads.
    faults: worker::Faults,
    /// Stream-ordered I/O, made on first use.
    streams: OnceLock<crate::streamops::StreamOps>,
}

/// One synchronous call waiting on the workers, counted while it waits.
struct SyncCaller<'a> {
    counter: &'a AtomicUsize,
    /// The calls waiting when this one came, itself included.
    count: usize,
}

impl<'a> SyncCaller<'a> {
    fn enter(counter: &'a AtomicUsize) -> SyncCaller<'a> {
        let count = counter.fetch_add(1, Ordering::AcqRel) + 1;
        SyncCaller { counter, count }
    }
}

impl Drop for SyncCaller<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Which pieces of a request only the storage workers may take
/// ([`Engine::storage_bound`]).
#[derive(Clone, Copy)]
enum StorageRoute {
    /// None: any worker takes any piece.
    Open,
    /// Every piece.
    All,
    /// Those the page cache lacks part of, asked of this descriptor.
    Ask(std::os::fd::RawFd),
}

/// A write that must reach the disk before the call returns (durable, or on
/// an O_DIRECT descriptor): cut in storage pieces, and storage-bound
/// ([`Engine::storage_bound`]).
fn storage_write(req: &IoRequest) -> bool {
    req.dir == Direction::Write && (req.durable || req.file.client_direct)
}

/// The pass a write request holds while it runs ([`File::write_pass`]);
/// none for a read.
fn write_pass(req: &IoRequest) -> crate::file::WritePass {
    if req.dir != Direction::Write {
        return crate::file::WritePass::none();
    }
    let host_src = match req.mem {
        Memory::Host(p) => Some(p as u64),
        Memory::Device { .. } => None,
    };
    req.file
        .write_pass(req.file_offset, req.size.min(MAX_RW_COUNT), host_src)
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
        // took), then the prepared streams none of them used. The queue is
        // closed first, so no push reserves another worker after this.
        self.queue.close();
        self.workers
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
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
        Engine::start(cfg, gpu, None)
    }

    /// As [`Engine::with_gpu`], with a fault plan on every worker's ring.
    #[cfg(feature = "testing")]
    pub fn with_faults(
        cfg: Config,
        gpu: Arc<dyn Gpu>,
        faults: Option<worker::FaultFactory>,
    ) -> Result<Engine> {
        Engine::start(cfg, gpu, faults)
    }

    fn start(cfg: Config, gpu: Arc<dyn Gpu>, faults: worker::Faults) -> Result<Engine> {
        crate::storage::announce(cfg.io_backend);
        let stats = Arc::new(Stats::default());
        let pool = Arc::new(worker::StreamPool::default());
        let cold: fn(&Chunk) -> bool = |c| c.cold;
        let queue = Arc::new(WorkQueue::with_restriction(
            cfg.io_threads,
            cfg.cold_limit().map(|n| (cold, n)),
        ));
        let shared = worker::Shared {
            cfg: cfg.clone(),
            gpu: gpu.clone(),
            stats: stats.clone(),
            pool: pool.clone(),
            queue: queue.clone(),
            faults,
        };
        // The first worker starts now and is waited for, so a ring or slab
        // that cannot be made fails the open; the others start as work
        // needs them.
        let mut workers = Vec::with_capacity(cfg.io_threads);
        for id in queue.reserve(INITIAL_WORKERS) {
            match worker::spawn(id, shared.clone()) {
                Ok(w) => workers.push(w),
                Err(e) => {
                    // Let the workers already started exit before they are joined.
                    queue.close();
                    return Err(e);
                }
            }
        }
        // Stream ops need the copy kernel on every device; load it now, while
        // no stream can be parked by one of ours (streamops docs).
        if gpu.described_copies() && gpu.has_devices() {
            if let Err(e) = gpu.preload_described_copies() {
                crate::log_warn!(
                    "stream I/O: cannot load the copy kernel ({e}); hipFileReadAsync and \
                     hipFileWriteAsync will try again at their first call"
                );
            }
        }
        crate::log_info!(
            "engine: up to {} workers (started as work needs them), {} KiB chunks, {} slots \
             each, GPU runtime {}",
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
                workers: Mutex::new(workers),
                faults: shared.faults.clone(),
                shared,
                queue,
                pool,
                stream_ops: AtomicUsize::new(0),
                sync_callers: AtomicUsize::new(0),
                generation: crate::fork::generation(),
                streams: OnceLock::new(),
            }),
        })
    }

    /// Get ready for stream ops on `device`: every worker's stream there is
    /// made now, before the first user's stream is parked on this device
    /// (creating one while a stream is parked can stall in the driver).
    /// Cheap after the first call per device.
    pub fn prepare_stream_ops(&self, device: i32) -> Result<()> {
        // Workers not started yet take theirs when they start.
        let n = self.inner.cfg.io_threads;
        self.inner.pool.prepare(self.inner.gpu.as_ref(), device, n)
    }

    /// Worker threads running now: they start as work needs them, from one
    /// up to `Config::io_threads`, and each holds one bounce slab
    /// ([`StatsSnapshot::bounce_bytes`]).
    pub fn workers(&self) -> usize {
        self.inner.stats.workers.load(Ordering::Relaxed) as usize
    }

    /// Start the workers `ids` that a push reserved.
    fn start_workers(&self, ids: std::ops::Range<usize>) {
        if ids.is_empty() {
            return;
        }
        let mut started = self.inner.workers.lock().unwrap_or_else(|p| p.into_inner());
        for id in ids {
            match worker::spawn_lazy(id, self.inner.shared.clone()) {
                Ok(w) => started.push(w),
                Err(e) => {
                    crate::log_warn!(
                        "cannot start I/O thread hipfile-io-{id} ({e}); the {} running \
                         carry on",
                        started.len()
                    );
                    self.inner.queue.start_failed();
                }
            }
        }
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

    /// The engine's stream-ordered I/O (`crate::streamops`).
    pub fn stream_ops(&self) -> &crate::streamops::StreamOps {
        let i = &self.inner;
        i.streams.get_or_init(|| {
            crate::streamops::StreamOps::new(
                &i.cfg,
                i.gpu.clone(),
                i.faults.clone(),
                i.stats.clone(),
            )
        })
    }

    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    /// The counter of bytes moved on callers' threads ([`crate::fast`] adds
    /// to it too).
    pub(crate) fn inline_bytes(&self) -> &Arc<crate::stats::PerThread> {
        &self.inner.stats.inline_bytes
    }

    /// The storage backend the workers use: io_uring, or POSIX where
    /// io_uring is refused or `HIPFILE_IO_BACKEND=posix` asks.
    pub fn storage_backend(&self) -> crate::storage::Backend {
        crate::storage::choice(self.inner.cfg.io_backend).backend
    }

    pub fn gpu(&self) -> &Arc<dyn Gpu> {
        &self.inner.gpu
    }

    /// What the data path has done so far (which path served the bytes).
    pub fn stats(&self) -> StatsSnapshot {
        self.inner.stats.snapshot()
    }

    /// Synchronous calls now waiting on the workers (a call served on its
    /// own thread is not counted).
    pub fn sync_callers_waiting(&self) -> usize {
        self.inner.sync_callers.load(Ordering::Acquire)
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
        let pass = write_pass(&req);
        let done = if pass.holds() {
            // The pass is let go once the write has finished, on the thread
            // that finishes it.
            Completion::Callback(Box::new(move |r| {
                let flushed = pass.finish();
                done.fire(r.and_then(|n| flushed.map(|()| n)));
            }))
        } else {
            done
        };
        self.submit_split(req, done, None)
    }

    /// `spread`: the synchronous calls waiting on the workers, this one
    /// included: cut a request below workers × chunk into smaller pieces so
    /// that it uses its share of the workers (all of them for a lone caller,
    /// see [`share_of_workers`]). Where several callers wait at once (a
    /// loader's threads), their pieces keep the workers busy already, and
    /// more pieces per request would only add hand-offs, wake-ups and GPU
    /// copies of their own.
    fn submit_split(&self, req: IoRequest, done: Completion, spread: Option<usize>) {
        let size = req.size.min(MAX_RW_COUNT);
        if size == 0 {
            done.fire(Ok(0));
            return;
        }
        if let Err(e) = self.check_access(&req) {
            done.fire(Err(e));
            return;
        }
        let chunk = if storage_write(&req) {
            // Writes that must reach the disk before the call returns go in
            // pieces the disk takes best (see STORAGE_WRITE_PIECE_BYTES).
            crate::config::STORAGE_WRITE_PIECE_BYTES.min(self.inner.cfg.chunk_bytes)
        } else if let Some(callers) = spread {
            let cfg = &self.inner.cfg;
            // Cut for every worker the engine may have, not those running:
            // the pieces are what makes the push start the rest.
            let (workers, per_worker) = share_of_workers(cfg.io_threads, callers);
            split_bytes(size, workers, per_worker, cfg.chunk_bytes)
        } else {
            self.inner.cfg.chunk_bytes
        } as u64;
        // The largest bounce slot holds one chunk (a worker fails a longer
        // piece, `Worker::admit`).
        debug_assert!(chunk as usize <= self.inner.cfg.chunk_bytes);
        let start = req.file_offset;
        let state = Arc::new(ReqState::new(
            &req,
            pieces(start, size, chunk).map(|(_, len)| len),
            done,
        ));
        // The pieces `pieces` cuts: the multiples of `chunk` the range touches.
        let total = ((start + size as u64 - 1) / chunk - start / chunk + 1) as usize;
        debug_assert_eq!(total, pieces(start, size, chunk).count());
        let route = self.storage_bound(&req);
        let mut cuts = pieces(start, size, chunk).enumerate();
        // Where the page cache must be asked which pieces are cold, the
        // pieces go out in waves of 1, 1, 2, 4, ... with one `cachestat` per
        // wave: the first worker starts after one piece's question, and the
        // rest are asked about while the workers read. One question for the
        // whole range first cost 2.4 ms per GiB where the page cache holds
        // 4 KiB folios (any file on a filesystem or kernel without large
        // folios, or one written in small writes), a tenth of a hot 1 GiB
        // device read at the link's speed, spent before any worker began.
        let lacking =
            |fd, off: u64, len: u64| crate::file::fully_cached(fd, off, len) == Some(false);
        let mut sent = 0;
        loop {
            let wave = match route {
                StorageRoute::Ask(_) => sent.max(1),
                _ => usize::MAX,
            };
            let cut: Vec<(usize, (u64, usize))> = cuts.by_ref().take(wave).collect();
            let (Some(&(_, (lo, _))), Some(&(_, (last, last_len)))) = (cut.first(), cut.last())
            else {
                break;
            };
            sent += cut.len();
            let piecewise = match route {
                StorageRoute::Ask(fd) => {
                    cut.len() == 1 || lacking(fd, lo, last + last_len as u64 - lo)
                }
                _ => false,
            };
            let cold: Vec<bool> = cut
                .iter()
                .map(|&(_, (off, len))| match route {
                    StorageRoute::All => true,
                    StorageRoute::Ask(fd) => piecewise && lacking(fd, off, len as u64),
                    StorageRoute::Open => false,
                })
                .collect();
            let queued_at = std::time::Instant::now();
            let chunks: Vec<Chunk> = cut
                .into_iter()
                .zip(cold)
                .map(|((idx, (off, len)), cold)| Chunk {
                    req: state.clone(),
                    idx,
                    file: req.file.clone(),
                    dir: req.dir,
                    mem: req.mem.offset((off - start) as usize),
                    file_offset: off,
                    len,
                    durable: req.durable,
                    cold,
                    queued_at,
                })
                .collect();
            // The pieces still to come count for the workers this push
            // starts, as they would in one push of the whole request.
            match self.inner.queue.push_expecting(chunks, total - sent) {
                Ok(grow) => self.start_workers(grow),
                Err(refused) => {
                    let rest = cuts.by_ref().map(|(idx, _)| idx);
                    for idx in refused.into_iter().map(|c| c.idx).chain(rest) {
                        state.chunk_done(idx, Err(OpError::DriverClosing.into()));
                    }
                    break;
                }
            }
        }
    }

    /// While `cold_io_threads` limits storage-bound chunks to some workers:
    /// which chunks of a request go to storage. Every
    /// piece of a write on an O_DIRECT descriptor does, and every piece of a
    /// durable write through the page cache: the disk bounds those, and a
    /// buffered write holds the inode's lock exclusively (ext4 and XFS take
    /// `i_rwsem` for it), so pieces on more workers than that only spin on
    /// the lock. On an H100 machine (16 workers, 256 MiB durable writes on a
    /// buffered handle, three rounds) the four storage workers wrote 1.28,
    /// 1.29 and 1.01 × as fast as all sixteen, with 1.7–2.7 cores of system
    /// time against 2.7–6.6; on another, twenty rounds had found the two
    /// placements level (all sixteen 1.02 ×), so the lower system time is
    /// what decides. A write that need not be durable is a memory
    /// copy whose writeback is the kernel's, so its pieces go to any worker
    /// (a program writing many files at once copies into each in
    /// parallel). For a read, a descriptor
    /// opened with O_DIRECT or `HIPFILE_READ_MODE=direct` sends every chunk
    /// there; otherwise a chunk is cold when `cachestat` says the page cache
    /// lacks part of it (asked as the pieces are queued, in
    /// [`Engine::submit_split`]). Without an answer (kernel < 6.5) chunks
    /// count as hot.
    fn storage_bound(&self, req: &IoRequest) -> StorageRoute {
        if self.inner.cfg.cold_limit().is_none() {
            return StorageRoute::Open;
        }
        let cfg = &self.inner.cfg;
        match req.dir {
            Direction::Write if storage_write(req) => StorageRoute::All,
            Direction::Write => StorageRoute::Open,
            Direction::Read => {
                if req.file.direct().is_none() || cfg.read_mode == ReadMode::Buffered {
                    StorageRoute::Open
                } else if req.file.client_direct || cfg.read_mode == ReadMode::Direct {
                    StorageRoute::All
                } else {
                    StorageRoute::Ask(req.file.buffered_fd)
                }
            }
        }
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
        let mut call = crate::stats::Call::sync(&req);
        // SAFETY: the caller's promise is passed on.
        let r = unsafe { self.transfer_uncounted(req, &mut call) };
        crate::stats::record::finish(call, &r);
        r
    }

    /// # Safety
    /// As for [`Engine::transfer`].
    /// `call` (the statistics' record of this call) learns whether the
    /// call was served on the caller's thread.
    unsafe fn transfer_uncounted(
        &self,
        mut req: IoRequest,
        call: &mut Option<crate::stats::Call>,
    ) -> Result<usize> {
        let fsync_fd = (req.dir == Direction::Write && self.inner.cfg.write_sync)
            .then_some(req.file.buffered_fd);
        let pass = write_pass(&req);
        req.durable = fsync_fd.is_some();
        let auto = self.inner.cfg.read_mode == ReadMode::Auto;
        let max = self.inner.cfg.inline_max_bytes;
        let small = auto && req.size <= max.min(crate::config::INLINE_OTHER_MAX_BYTES);
        let host = matches!(req.mem, Memory::Host(_));
        let host_read = auto && host && req.dir == Direction::Read && req.size <= max;
        // A device transfer may run on this thread: there is a GPU, and no
        // stream op holds the memory's device (or its stream is ready).
        let device_inline_ok = || {
            self.inner.gpu.has_devices()
                && (self.inner.stream_ops.load(Ordering::Acquire) == 0
                    || crate::inline::ready_for(&self.inner.gpu, &req.mem))
        };
        // A page-cache-hot device read up to HOT_DEVICE_INLINE_MAX_BYTES: one
        // cachestat call decides (a cold or uncertain range goes to the
        // workers), and the inline read trusts its answer. O_DIRECT
        // descriptors read from storage, so never. The call is made last,
        // only where the read could run here.
        let hot_device_read = !small
            && auto
            && max > 0
            && !host
            && req.dir == Direction::Read
            && req.size <= crate::config::HOT_DEVICE_INLINE_MAX_BYTES
            && !req.file.client_direct
            && device_inline_ok()
            && crate::file::fully_cached(req.file.buffered_fd, req.file_offset, req.size as u64)
                == Some(true);
        // The same for a host read above the inline limit, up to
        // HOT_HOST_INLINE_MAX_BYTES: one memcpy out of the page cache on
        // this thread costs less than waking workers to split it.
        let hot_host_read = !host_read
            && auto
            && max > 0
            && host
            && req.dir == Direction::Read
            && req.size <= crate::config::HOT_HOST_INLINE_MAX_BYTES
            && !req.file.client_direct
            && crate::file::fully_cached(req.file.buffered_fd, req.file_offset, req.size as u64)
                == Some(true);
        let n = if host_read || (small && host) || hot_host_read {
            let huge = self.inner.cfg.huge_pages;
            self.serve_inline(&req, call, || {
                crate::inline::host_io(&req, &self.inner.stats, huge, hot_host_read)
            })?
        } else if hot_device_read || (small && device_inline_ok()) {
            self.serve_inline(&req, call, || {
                crate::inline::device_io(&self.inner.gpu, &req, &self.inner.stats, hot_device_read)
            })?
        } else {
            let w = Arc::new(Waiter::default());
            let callers = SyncCaller::enter(&self.inner.sync_callers);
            self.submit_split(req, Completion::Wait(w.clone()), Some(callers.count));
            w.wait()?
        };
        pass.finish()?;
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

    /// Serve `req` on the caller's thread with `io` (host memory, or device
    /// memory through the thread's bounce): counted as an inline call, with
    /// the file marked busy while it runs.
    fn serve_inline(
        &self,
        req: &IoRequest,
        call: &mut Option<crate::stats::Call>,
        io: impl FnOnce() -> Result<usize>,
    ) -> Result<usize> {
        crate::stats::Call::served_inline(call);
        self.check_access(req)?;
        let _busy = crate::file::InflightGuard::new(&req.file);
        let n = io()?;
        self.inner.stats.inline_bytes.add(n as u64);
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
            self.transfer(IoRequest::new(
                file.clone(),
                Direction::Read,
                mem,
                size,
                file_offset,
            ))
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
            self.transfer(IoRequest::new(
                file.clone(),
                Direction::Write,
                mem,
                size,
                file_offset,
            ))
        }
    }
}
