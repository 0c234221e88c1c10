//! A per-core submission thread: one io_uring, one bounce slab, one GPU stream
//! per device (created lazily), and the table of chunks in flight.
//!
//! A chunk moves through phases; a bounce slot is owned by exactly one phase at
//! a time: the kernel's (a read or write SQE in flight) or the GPU's (a copy
//! not yet ended by a completed event: the worker records one event per
//! stream after the copies it queued in a pass, which ends them all). Only
//! when neither holds it is it freed.
//!
//! Read into device memory:  [NOWAIT buffered read | O_DIRECT read] → slot → H2D copy → done
//! Read into host memory:    NOWAIT buffered read straight into the buffer; what
//!                           the page cache lacks comes by O_DIRECT, straight into the
//!                           buffer when aligned, else through a slot and a memcpy
//! Write from device memory: D2H copy → slot → [O_DIRECT | buffered] write → done
//! Write from host memory:   straight from the buffer
//!
//! Errno handling, once each: EINTR and EAGAIN retry (bounded); a short transfer
//! resubmits the rest; 0 on a read is EOF; EINVAL on O_DIRECT is an alignment
//! the filesystem did not announce, so the chunk falls back to the page cache;
//! anything else fails the chunk with that errno.

use crate::bounce::{self, Slab};
use crate::config::{Config, ReadMode};
use crate::error::{Error, OpError, Result};
use crate::gpu::{Event, Gpu, GpuError, HtodCopy, Stream};
use crate::pipeline::{Chunk, Direction, Memory};
use crate::queue::WorkQueue;
use crate::ring::{Cqe, FaultPlan, Op, Ring};
use crate::stats::{Stage, Stats};
use crate::{log::Level, log_once};
use std::collections::{HashMap, VecDeque};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// Longest a worker waits for the kernel while it has GPU copies in flight or
/// room for more work (a 1 MiB copy takes about 20 µs on the H200's link).
const WAIT_SLICE: std::time::Duration = std::time::Duration::from_micros(100);

/// Retries for EINTR/EAGAIN/no-progress on one chunk before it fails.
const MAX_RETRIES: u32 = 64;

pub(crate) struct WorkerHandle {
    join: Option<JoinHandle<()>>,
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        // The engine closed the queue first: the worker drains and exits.
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// Worker streams made ahead of time, one per worker and device.
///
/// Creating a stream while a user's stream is parked by a stream op can stall
/// inside the driver: on the H200 `cuStreamCreate` spun forever once the
/// context held many streams (two leaked per seed by the stream fault test),
/// and the op it was meant to serve never finished. So the stream path calls
/// [`StreamPool::prepare`] for a device before it parks the first stream on it,
/// and a worker takes its prepared stream instead of creating one then.
#[derive(Default)]
pub(crate) struct StreamPool {
    /// device -> the stream of each worker, until the worker takes it.
    ready: Mutex<HashMap<i32, Vec<Option<Stream>>>>,
}

impl StreamPool {
    /// Make one stream per worker on `device`, unless that was done already.
    pub(crate) fn prepare(&self, gpu: &dyn Gpu, device: i32, workers: usize) -> Result<()> {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        if ready.contains_key(&device) {
            return Ok(());
        }
        let mut made = Vec::with_capacity(workers);
        for _ in 0..workers {
            match gpu.stream_create(device) {
                Ok(s) => made.push(Some(s)),
                Err(e) => {
                    for s in made.into_iter().flatten() {
                        gpu.stream_destroy(s);
                    }
                    crate::log_error!("cannot create worker streams on device {device}: {e}");
                    return Err(Error::Gpu(e));
                }
            }
        }
        ready.insert(device, made);
        Ok(())
    }

    fn take(&self, device: i32, worker: usize) -> Option<Stream> {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        ready.get_mut(&device)?.get_mut(worker)?.take()
    }

    /// Destroy the streams no worker took (after the workers have exited).
    pub(crate) fn release(&self, gpu: &dyn Gpu) {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        for (_, v) in ready.drain() {
            for s in v.into_iter().flatten() {
                gpu.stream_destroy(s);
            }
        }
    }
}

/// Hook for tests: installs a fault plan on every ring an engine creates.
pub type FaultFactory = Arc<dyn Fn(usize) -> Option<Box<dyn FaultPlan>> + Send + Sync>;

pub(crate) fn spawn(
    id: usize,
    cfg: &Config,
    gpu: Arc<dyn Gpu>,
    stats: Arc<Stats>,
    pool: Arc<StreamPool>,
    queue: Arc<WorkQueue<Chunk>>,
    faults: Option<FaultFactory>,
) -> Result<WorkerHandle> {
    let (init_tx, init_rx) = mpsc::sync_channel::<Result<()>>(1);
    let cfg = cfg.clone();
    let join = std::thread::Builder::new()
        .name(format!("hipfile-io-{id}"))
        .spawn(move || {
            // The ring is created on this thread: it is the ring's single issuer.
            match Worker::new(id, &cfg, gpu, stats, pool, queue, faults) {
                Ok(w) => {
                    let _ = init_tx.send(Ok(()));
                    w.run();
                }
                Err(e) => {
                    let _ = init_tx.send(Err(e));
                }
            }
        })
        .map_err(|e| Error::Os(e.raw_os_error().unwrap_or(libc::EAGAIN)))?;
    match init_rx.recv() {
        Ok(Ok(())) => Ok(WorkerHandle { join: Some(join) }),
        Ok(Err(e)) => {
            let _ = join.join();
            Err(e)
        }
        Err(_) => {
            let _ = join.join();
            Err(OpError::InternalError.into())
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for a bounce slot.
    NeedSlot,
    /// Buffered read with RWF_NOWAIT in the kernel (page-cache probe).
    NowaitRead,
    /// Buffered (blocking) read in the kernel.
    BufferedRead,
    /// O_DIRECT read in the kernel.
    DirectRead,
    /// H2D copy slot → device in flight on the GPU.
    ToDevice,
    /// D2H copy device → slot in flight on the GPU.
    FromDevice,
    /// Write in the kernel.
    Write,
}

struct Active {
    chunk: Chunk,
    slot: Option<usize>,
    /// Bytes of the chunk finished, contiguous from its start.
    done: usize,
    /// For reads into host memory through a slot: chunk offset where slot data begins.
    slot_from: usize,
    phase: Phase,
    /// File offset where the O_DIRECT read in flight starts (aligned down).
    io_start: u64,
    /// Use only the page cache from now on (O_DIRECT refused with EINVAL).
    buffered_only: bool,
    /// The page-cache probe missed: read the rest with O_DIRECT.
    want_direct: bool,
    /// The write in flight uses the O_DIRECT descriptor.
    write_direct: bool,
    /// A completion event was recorded after this chunk's GPU copy. A copy
    /// without one completes with the next event on its stream.
    has_event: bool,
    retries: u32,
    /// The stage being timed, and since when.
    open: Stage,
    since: Instant,
}

struct Worker {
    id: usize,
    /// Streams prepared for this engine's workers (see [`StreamPool`]).
    pool: Arc<StreamPool>,
    cfg: Config,
    gpu: Arc<dyn Gpu>,
    stats: Arc<Stats>,
    ring: Ring,
    slab: Slab,
    fixed: bool,
    /// Free slot indices per size class (smallest class first).
    free: Vec<Vec<usize>>,
    table: Vec<Option<Active>>,
    free_ids: Vec<usize>,
    need_slot: VecDeque<usize>,
    /// Chunks with a GPU copy in flight, in the order the copies were queued.
    copying: VecDeque<usize>,
    /// Chunks whose copies were queued since the last `flush_copies`.
    unflushed: Vec<usize>,
    /// Host-to-device copies of this pass, not yet given to the GPU runtime:
    /// `flush_copies` submits each device's as one batch (chunk, copy).
    pending_htod: Vec<(usize, HtodCopy)>,
    streams: HashMap<i32, Stream>,
    events: HashMap<(usize, i32), Event>,
    cqes: Vec<Cqe>,
    /// `grant_slots` stopped at its page-cache read limit: the run loop grants again.
    withheld: bool,
    /// Page-cache reads granted since the ring was last entered (one pass).
    cached_this_pass: usize,
    /// Bytes of the host-memory chunks this worker holds (it takes more from
    /// the queue only up to `slots_per_worker` chunks' worth; a device chunk
    /// is bounded by the slots themselves).
    host_bytes: usize,
    queue: Arc<WorkQueue<Chunk>>,
}

/// Copy `len` bytes from a bounce slot into the caller's host buffer at `dst`.
///
/// The caller's pointer is not something the library can vouch for (an
/// unregistered host pointer has no known extent), and a bad one must give
/// EFAULT, as a read straight into it would, not crash a worker thread. So
/// the kernel does the copy (process_vm_writev on our own process checks the
/// destination); where that call is refused (seccomp), a plain copy is used.
fn copy_to_caller(src: *const u8, dst: usize, len: usize) -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    static REFUSED: AtomicBool = AtomicBool::new(false);
    if !REFUSED.load(Ordering::Relaxed) {
        let mut done = 0usize;
        while done < len {
            let local = libc::iovec {
                // SAFETY: done < len, inside the slot.
                iov_base: unsafe { src.add(done) } as *mut libc::c_void,
                iov_len: len - done,
            };
            let remote = libc::iovec {
                iov_base: (dst + done) as *mut libc::c_void,
                iov_len: len - done,
            };
            // SAFETY: `local` names slot memory we own; the kernel validates `remote`.
            let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
            if n > 0 {
                done += n as usize;
                continue;
            }
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            match e {
                libc::EFAULT => return Err(Error::Os(libc::EFAULT)),
                libc::EINTR => continue,
                _ if done == 0 => {
                    REFUSED.store(true, Ordering::Relaxed);
                    break;
                }
                _ => return Err(Error::Os(e)),
            }
        }
        if done == len {
            return Ok(());
        }
    }
    // SAFETY: the slot holds `len` valid bytes at `src`; the caller promised a
    // buffer covering the request (the C contract) — the checked path above is
    // unavailable on this system.
    unsafe { std::ptr::copy_nonoverlapping(src, dst as *mut u8, len) };
    Ok(())
}

/// File offset rounded down to the 4 KiB unit that slot layouts start at.
fn slot_base(off: u64) -> u64 {
    off & !(crate::file::MAX_DIO_ALIGN as u64 - 1)
}

fn align_down(x: u64, a: u64) -> u64 {
    x & !(a - 1)
}

fn align_up(x: u64, a: u64) -> u64 {
    (x + a - 1) & !(a - 1)
}

impl Worker {
    fn new(
        id: usize,
        cfg: &Config,
        gpu: Arc<dyn Gpu>,
        stats: Arc<Stats>,
        pool: Arc<StreamPool>,
        queue: Arc<WorkQueue<Chunk>>,
        faults: Option<FaultFactory>,
    ) -> Result<Worker> {
        let mut ring = Ring::new(cfg.ring_entries).map_err(|e| {
            crate::log_error!(
                "io_uring setup failed: {e}; is io_uring disabled (kernel.io_uring_disabled)?"
            );
            Error::Op(OpError::DriverSetupError)
        })?;
        if let Some(f) = faults {
            ring.set_fault_plan(f(id));
        }
        let slab = Slab::with_pages(&cfg.slot_classes(), &gpu, cfg.pin_buffers, cfg.huge_pages)
            .map_err(|e| {
                crate::log_error!(
                    "cannot map {} bytes of bounce memory: {e}",
                    cfg.slot_bytes()
                );
                Error::Op(OpError::DriverSetupError)
            })?;
        let mut fixed = false;
        if cfg.register_buffers {
            // SAFETY: the slab outlives the ring: both live in this Worker and the
            // ring is declared (and so dropped) before the slab.
            match unsafe { ring.register_buffers(&slab.iovecs()) } {
                Ok(()) => fixed = true,
                Err(e) => bounce::log_registration_failure(cfg.bounce_bytes(), &e),
            }
        }
        let cap =
            (cfg.slots_per_worker * 2 + cfg.small_slots_per_worker + cfg.mid_slots_per_worker)
                .max(8);
        Ok(Worker {
            id,
            pool,
            cfg: cfg.clone(),
            gpu,
            stats,
            ring,
            free: (0..slab.classes())
                .map(|k| slab.class_range(k).rev().collect())
                .collect(),
            slab,
            fixed,
            table: (0..cap).map(|_| None).collect(),
            free_ids: (0..cap).rev().collect(),
            need_slot: VecDeque::new(),
            copying: VecDeque::new(),
            unflushed: Vec::new(),
            pending_htod: Vec::new(),
            streams: HashMap::new(),
            events: HashMap::new(),
            cqes: Vec::new(),
            withheld: false,
            cached_this_pass: 0,
            host_bytes: 0,
            queue,
        })
    }

    fn idle(&self) -> bool {
        self.free_ids.len() == self.table.len()
    }

    fn run(mut self) {
        let queue = self.queue.clone();
        loop {
            if self.idle() {
                // Nothing in hand: sleep until there is work (any chunk fits).
                match queue.pop_wait_for(self.takes_cold()) {
                    Some(c) => self.admit(c),
                    None => break,
                }
            }
            let fair = queue.fair_share();
            while let Some(c) = queue.try_pop(|c| self.can_start(c, fair)) {
                self.admit(c);
            }
            if self.withheld {
                // The last pass stopped at its page-cache read limit.
                self.grant_slots();
            }
            self.progress();
        }
        self.teardown();
    }

    /// Whether to take `c` from the queue now: this worker can start it at
    /// once (a free slot it fits, or room in the host budget), nothing it
    /// holds is still waiting for a slot, and it holds fewer than its `fair`
    /// share of the engine's chunks ([`WorkQueue::fair_share`]). Otherwise
    /// another worker may be able to start it sooner, or has less to do:
    /// without the share, the first worker to wake took up to 32 small reads
    /// of a batch while others slept, and one worker polled all their copies
    /// (run 9: 4 KiB random reads at QD128 fell from 0.95 to 0.77 of raw).
    fn can_start(&self, c: &Chunk, fair: usize) -> bool {
        if !self.may_take(c) {
            return false;
        }
        let fair = match crate::pipeline::cold_limit(&self.cfg) {
            Some(n) if c.cold => self.queue.fair_share_among(n),
            _ => fair,
        };
        let held = self.table.len() - self.free_ids.len();
        if self.free_ids.is_empty() || !self.need_slot.is_empty() || held >= fair {
            return false;
        }
        if c.mem.is_device() {
            self.fitting_class(c.len).is_some()
        } else {
            let budget = self.cfg.slots_per_worker * self.cfg.chunk_bytes;
            self.host_bytes == 0 || self.host_bytes + c.len <= budget
        }
    }

    /// Storage-bound reads go only to the first `cold_io_threads` workers
    /// (when that is fewer than all of them).
    fn may_take(&self, c: &Chunk) -> bool {
        !c.cold || self.takes_cold()
    }

    fn takes_cold(&self) -> bool {
        crate::pipeline::cold_limit(&self.cfg).is_none_or(|n| self.id < n)
    }

    /// A table entry and some slot free: a chunk from the queue could start.
    fn has_room(&self) -> bool {
        !self.free_ids.is_empty() && self.free.iter().any(|f| !f.is_empty())
    }

    /// The smallest slot class with a free slot that holds `len` bytes of data.
    fn fitting_class(&self, len: usize) -> Option<usize> {
        let pad = 2 * crate::file::MAX_DIO_ALIGN;
        (0..self.free.len())
            .find(|&k| self.slab.class_bytes(k) >= len + pad && !self.free[k].is_empty())
    }

    /// Wait for something to finish and act on it.
    fn progress(&mut self) {
        self.flush_copies();
        if self.ring.in_flight() > 0 {
            // A GPU copy to notice, or room for work from the queue: wait for
            // the kernel only a little at a time. Cold 1 MiB batch entries held
            // their slots 13 ms on average after their copy had finished, while
            // the worker slept on O_DIRECT reads (run 10).
            let r = if !self.copying.is_empty() || self.has_room() {
                self.ring.submit_and_wait_for(1, WAIT_SLICE)
            } else {
                self.ring.submit_and_wait(1)
            };
            if let Err(e) = r {
                log_once!(Level::Error, "io_uring_enter failed: {e}");
            }
            self.cached_this_pass = 0;
            let mut cqes = std::mem::take(&mut self.cqes);
            self.ring.reap(&mut cqes);
            for c in cqes.drain(..) {
                self.on_cqe(c);
            }
            self.cqes = cqes;
            self.flush_copies();
        } else if !self.copying.is_empty() {
            // Nothing in the kernel: the oldest GPU copy is what we wait for
            // (through the first event recorded after it).
            if let Some((id, ev)) = self
                .copying
                .iter()
                .find_map(|&id| Some((id, self.event_of(id)?)))
            {
                crate::log_debug!(
                    "hipfile-io-{}: waiting for the GPU copy of table entry {id}",
                    self.id
                );
                if self.cfg.poll_copies {
                    // Until the copy is done (or fails: poll_copies reports it),
                    // or work arrives that a free slot could start.
                    while self.gpu.event_query(ev) == Ok(false)
                        && !(self.queue.pending() && self.has_room())
                    {
                        std::hint::spin_loop();
                    }
                } else {
                    let _ = self.gpu.event_synchronize(ev);
                }
            }
        }
        self.poll_copies();
        if let Err(e) = self.ring.submit() {
            log_once!(Level::Error, "io_uring submit failed: {e}");
        }
        self.cached_this_pass = 0;
    }

    fn admit(&mut self, chunk: Chunk) {
        if chunk.req.canceled() {
            chunk
                .req
                .chunk_done(chunk.idx, Err(Error::Os(libc::ECANCELED)));
            return;
        }
        let Some(id) = self.free_ids.pop() else {
            // Cannot happen: admit is only called with a free entry.
            chunk
                .req
                .chunk_done(chunk.idx, Err(OpError::InternalError.into()));
            return;
        };
        self.queue.started();
        let needs_slot = chunk.mem.is_device();
        if !needs_slot {
            self.host_bytes += chunk.len;
        }
        let queued_at = chunk.queued_at;
        self.table[id] = Some(Active {
            chunk,
            slot: None,
            done: 0,
            slot_from: 0,
            phase: Phase::NeedSlot,
            io_start: 0,
            buffered_only: false,
            want_direct: false,
            write_direct: false,
            has_event: false,
            retries: 0,
            open: Stage::Queue,
            since: queued_at,
        });
        if needs_slot {
            self.enter(id, Stage::Slot);
            self.need_slot.push_back(id);
            self.grant_slots();
        } else {
            self.enter(id, Stage::Storage);
            self.step(id);
        }
    }

    /// Hand free slots to waiting chunks in arrival order; a chunk takes the
    /// smallest free slot its data fits in, so small I/O keeps flowing while
    /// large slots are busy.
    ///
    /// Page-cache reads are limited per pass ([`Worker::cached_limit`]): the
    /// kernel copies a cached read inline, inside the next `io_uring_enter`,
    /// so reads queued together are all copied before the first of their GPU
    /// copies can start.
    fn grant_slots(&mut self) {
        self.withheld = false;
        let mut i = 0;
        while i < self.need_slot.len() && self.free.iter().any(|f| !f.is_empty()) {
            if self.cached_this_pass >= self.cached_limit() {
                self.withheld = true;
                break;
            }
            let id = self.need_slot[i];
            let len = self.table[id].as_ref().map_or(0, |a| a.chunk.len);
            let Some(slot) = self.fitting_class(len).and_then(|k| self.free[k].pop()) else {
                i += 1;
                continue;
            };
            self.need_slot.remove(i);
            if let Some(a) = self.table[id].as_mut() {
                a.slot = Some(slot);
                a.slot_from = a.done;
            }
            Stats::add(&self.stats.bounced_chunks, 1);
            self.enter(id, Stage::Storage);
            self.step(id);
            let cached_read = self.table[id]
                .as_ref()
                .is_some_and(|a| matches!(a.phase, Phase::NowaitRead | Phase::BufferedRead));
            if cached_read {
                self.cached_this_pass += 1;
            }
        }
    }

    /// Page-cache reads one pass may start: `cached_reads_per_pass` when set,
    /// else no limit, except with `first_read_alone` while no GPU copy is on
    /// its way: then the link waits for this worker's first read, and a
    /// second read queued with it would double that wait. Each request of a
    /// synchronous 1 GiB read starts that way on every worker: two 4 MiB
    /// page-cache copies (2 × 1.2 ms on the H200) pass before its first byte
    /// can reach the GPU.
    fn cached_limit(&self) -> usize {
        match self.cfg.cached_reads_per_pass {
            0 if self.cfg.first_read_alone
                && self.copying.is_empty()
                && self.unflushed.is_empty() =>
            {
                1
            }
            0 => usize::MAX,
            n => n,
        }
    }

    /// Close the stage chunk `id` is timed in and open `next`.
    fn enter(&mut self, id: usize, next: Stage) {
        if let Some(a) = self.table[id].as_mut() {
            if a.open != next {
                let now = Instant::now();
                self.stats.stage(a.open, now - a.since);
                a.open = next;
                a.since = now;
            }
        }
    }

    fn act(&mut self, id: usize) -> &mut Active {
        self.table[id].as_mut().expect("active entry")
    }

    /// Start the next operation of chunk `id` after a state change.
    fn step(&mut self, id: usize) {
        let a = self.act(id);
        match a.chunk.dir {
            Direction::Read => self.next_read(id),
            Direction::Write => {
                if a.chunk.mem.is_device() && a.done == 0 && a.phase == Phase::NeedSlot {
                    self.copy_from_device(id);
                } else {
                    self.next_write(id);
                }
            }
        }
    }

    /// Where the bytes at chunk offset `at` go (reads) or come from (writes).
    fn buf_at(&self, a: &Active, at: usize) -> *mut u8 {
        match (a.slot, a.chunk.mem) {
            (Some(s), _) => {
                let pos = a.chunk.file_offset + at as u64;
                // SAFETY: pos - base < slot_bytes by the slot sizing rule (Config::slot_bytes).
                unsafe {
                    self.slab
                        .slot(s)
                        .add((pos - slot_base(a.chunk.file_offset)) as usize)
                }
            }
            (None, Memory::Host(p)) => (p + at) as *mut u8,
            (None, Memory::Device { .. }) => std::ptr::null_mut(),
        }
    }

    fn fixed_index(&self, a: &Active) -> Option<u16> {
        if self.fixed {
            a.slot.map(|s| s as u16)
        } else {
            None
        }
    }

    fn direct_for(&self, a: &Active) -> Option<(i32, u64)> {
        if a.buffered_only
            || self.cfg.read_mode == ReadMode::Buffered && a.chunk.dir == Direction::Read
        {
            return None;
        }
        a.chunk.file.direct()
    }

    fn next_read(&mut self, id: usize) {
        let (op, phase, io_start) = {
            let a = self.table[id].as_ref().expect("active entry");
            let cur = a.chunk.file_offset + a.done as u64;
            let end = a.chunk.file_offset + a.chunk.len as u64;
            let direct = self.direct_for(a);
            // A descriptor opened with O_DIRECT says "bypass the page cache": no probe.
            let mut probe_cache = direct.is_some()
                && self.cfg.read_mode == ReadMode::Auto
                && !a.chunk.file.client_direct
                && !a.want_direct;
            if probe_cache {
                // Ask the page cache first when the kernel can say (no I/O).
                match crate::file::fully_cached(a.chunk.file.buffered_fd, cur, end - cur) {
                    Some(true) | None => {}
                    Some(false) => {
                        probe_cache = false;
                        Stats::add(&self.stats.cache_misses, 1);
                    }
                }
            }
            match direct {
                Some((dfd, align)) if !probe_cache => {
                    let start = align_down(cur, align);
                    let stop = align_up(end, align);
                    let host_aligned = match a.chunk.mem {
                        Memory::Host(p) => {
                            start == cur
                                && stop == end
                                && (p + a.done) as u64 % a.chunk.file.dio_mem_align.max(1) as u64
                                    == 0
                        }
                        Memory::Device { .. } => false,
                    };
                    // An aligned host range of 4 KiB pages that the block
                    // layer would split (more pages than the disk takes
                    // segments) reads faster through a huge-page slot: one
                    // request, which its neighbours can merge with (1 MiB
                    // cold reads on the 2-core VM: bench/RESULTS.md).
                    let split = host_aligned
                        && self.slab.huge()
                        && a.chunk.file.splits_on_small_pages((stop - start) as usize);
                    if a.slot.is_none() && (!host_aligned || split) {
                        // Unaligned (or splitting) host range: read through a bounce slot.
                        self.enter(id, Stage::Slot);
                        self.act(id).phase = Phase::NeedSlot;
                        self.need_slot.push_back(id);
                        self.grant_slots();
                        return;
                    }
                    let buf = if a.slot.is_some() {
                        let delta = (cur - start) as usize;
                        // SAFETY: start >= slot_base(file_offset) since both are aligned
                        // down and start >= file_offset rounded down; stays in the slot.
                        unsafe { self.buf_at(a, a.done).sub(delta) }
                    } else {
                        self.buf_at(a, a.done)
                    };
                    let op = Op::Read {
                        fd: dfd,
                        buf,
                        len: (stop - start) as u32,
                        offset: start,
                        fixed: self.fixed_index(a),
                        nowait: false,
                    };
                    (op, Phase::DirectRead, start)
                }
                _ => {
                    let op = Op::Read {
                        fd: a.chunk.file.buffered_fd,
                        buf: self.buf_at(a, a.done),
                        len: (end - cur) as u32,
                        offset: cur,
                        fixed: self.fixed_index(a),
                        nowait: probe_cache,
                    };
                    let phase = if probe_cache {
                        Phase::NowaitRead
                    } else {
                        Phase::BufferedRead
                    };
                    (op, phase, cur)
                }
            }
        };
        let a = self.act(id);
        a.phase = phase;
        a.io_start = io_start;
        self.push(id, op);
    }

    fn next_write(&mut self, id: usize) {
        let op = {
            let a = self.table[id].as_ref().expect("active entry");
            let cur = a.chunk.file_offset + a.done as u64;
            let rem = (a.chunk.len - a.done) as u64;
            let src = self.buf_at(a, a.done);
            // O_DIRECT only where the caller asked for it: a direct write
            // beside page-cache writes to the same pages (ours, the
            // application's, another process's) fails the kernel's
            // invalidation, which records EIO for every later fsync.
            let direct = if a.chunk.file.client_direct {
                self.direct_for(a)
            } else {
                None
            };
            let fd = match direct {
                Some((dfd, align))
                    if cur % align == 0
                        && rem % align == 0
                        && src as u64 % a.chunk.file.dio_mem_align.max(1) as u64 == 0 =>
                {
                    dfd
                }
                _ => a.chunk.file.buffered_fd,
            };
            let op = Op::Write {
                fd,
                buf: src,
                len: rem as u32,
                offset: cur,
                fixed: self.fixed_index(a),
            };
            (op, fd != a.chunk.file.buffered_fd)
        };
        let (op, direct) = op;
        let a = self.act(id);
        a.phase = Phase::Write;
        a.write_direct = direct;
        self.push(id, op);
    }

    fn push(&mut self, id: usize, op: Op) {
        // SAFETY: the op's memory is a bounce slot this chunk owns until its CQE
        // (slots are freed only in `finish`), or the caller's buffer, which the
        // request keeps alive until it completes (the C contract for sync, async
        // and batch I/O alike).
        if let Err(e) = unsafe { self.ring.push(op, id as u64) } {
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            self.finish(id, Err(Error::Os(errno)));
        }
    }

    fn retry_or_fail(&mut self, id: usize, errno: i32) {
        Stats::add(&self.stats.retries, 1);
        let a = self.act(id);
        a.retries += 1;
        if a.retries > MAX_RETRIES {
            self.finish(id, Err(Error::Os(errno)));
        } else {
            self.resubmit(id);
        }
    }

    /// Issue the same kind of operation again for what remains.
    fn resubmit(&mut self, id: usize) {
        match self.act(id).phase {
            Phase::NowaitRead | Phase::BufferedRead | Phase::DirectRead => self.next_read(id),
            Phase::Write => self.next_write(id),
            _ => self.finish(id, Err(OpError::InternalError.into())),
        }
    }

    fn on_cqe(&mut self, c: Cqe) {
        let id = c.user_data as usize;
        let Some(a) = self.table.get(id).and_then(|a| a.as_ref()) else {
            return;
        };
        let res = c.result;
        match a.phase {
            Phase::NowaitRead | Phase::BufferedRead => self.on_buffered_read(id, res),
            Phase::DirectRead => self.on_direct_read(id, res),
            Phase::Write => self.on_write(id, res),
            _ => {}
        }
    }

    fn on_buffered_read(&mut self, id: usize, res: i32) {
        let a = self.act(id);
        let nowait = a.phase == Phase::NowaitRead;
        if res == -libc::EAGAIN && nowait {
            // Not (all) in the page cache: what is missing comes by O_DIRECT.
            Stats::add(&self.stats.cache_misses, 1);
            let a = self.act(id);
            a.want_direct = true;
            a.retries = 0;
            self.next_read(id);
        } else if nowait && (res == -libc::EOPNOTSUPP || res == -libc::EINVAL) {
            // The filesystem cannot do RWF_NOWAIT (tmpfs, some FUSE): plain reads.
            log_once!(
                Level::Info,
                "RWF_NOWAIT refused ({}); reading through the page cache",
                -res
            );
            let a = self.act(id);
            a.buffered_only = true;
            self.next_read(id);
        } else if res == -libc::EINTR || res == -libc::EAGAIN {
            self.retry_or_fail(id, -res);
        } else if res < 0 {
            self.finish(id, Err(Error::Os(-res)));
        } else if res == 0 {
            self.read_complete(id);
        } else {
            let counter = if nowait {
                &self.stats.cache_hit_bytes
            } else {
                &self.stats.buffered_read_bytes
            };
            Stats::add(counter, res as u64);
            let a = self.act(id);
            a.done += res as usize;
            a.retries = 0;
            if a.done >= a.chunk.len {
                self.read_complete(id);
            } else {
                // Short: partly cached (probe again from where the cache stopped),
                // or EOF, which the next read reports as 0.
                self.next_read(id);
            }
        }
    }

    fn on_direct_read(&mut self, id: usize, res: i32) {
        if res == -libc::EINTR || res == -libc::EAGAIN {
            self.retry_or_fail(id, -res);
            return;
        }
        if res == -libc::EINVAL {
            log_once!(
                Level::Warn,
                "an O_DIRECT read was refused with EINVAL although it met the announced \
                 alignment; falling back to the page cache for such reads"
            );
            let a = self.act(id);
            a.buffered_only = true;
            self.next_read(id);
            return;
        }
        if res < 0 {
            self.finish(id, Err(Error::Os(-res)));
            return;
        }
        Stats::add(&self.stats.direct_read_bytes, res as u64);
        let a = self.act(id);
        let Some((_, align)) = a.chunk.file.direct() else {
            self.finish(id, Err(OpError::InternalError.into()));
            return;
        };
        let start = a.chunk.file_offset;
        let end = start + a.chunk.len as u64;
        let valid_end = a.io_start + res as u64;
        let cur = start + a.done as u64;
        if valid_end > cur {
            a.done = (valid_end.min(end) - start) as usize;
        }
        if res == 0 || a.done >= a.chunk.len || res as u64 % align != 0 {
            // Complete, or EOF (nothing more, or a partial last block).
            self.read_complete(id);
        } else {
            a.retries += 1;
            if a.retries > MAX_RETRIES {
                self.finish(id, Err(Error::Os(libc::EIO)));
            } else {
                self.next_read(id);
            }
        }
    }

    /// All bytes of a read chunk (or all there are, at EOF) are in place.
    fn read_complete(&mut self, id: usize) {
        let a = self.table[id].as_ref().expect("active entry");
        let done = a.done;
        match (a.slot, a.chunk.mem) {
            (Some(_), Memory::Device { ptr, .. }) if done > 0 => {
                let src = self.buf_at(a, 0) as *const u8;
                self.copy_to_device(id, ptr, src, done);
            }
            (Some(_), Memory::Host(p)) if done > a.slot_from => {
                let from = a.slot_from;
                let src = self.buf_at(a, from) as *const u8;
                let r = copy_to_caller(src, p + from, done - from).map(|()| done);
                self.finish(id, r);
            }
            _ => self.finish(id, Ok(done)),
        }
    }

    fn stream_for(&mut self, device: i32) -> std::result::Result<Stream, GpuError> {
        if let Some(s) = self.streams.get(&device) {
            return Ok(*s);
        }
        let s = match self.pool.take(device, self.id) {
            Some(s) => s,
            None => {
                // No stream op has used this device yet: no stream can be parked on it.
                self.gpu.bind_thread(device)?;
                crate::log_debug!("hipfile-io-{}: new stream on device {device}", self.id);
                self.gpu.stream_create(device)?
            }
        };
        self.streams.insert(device, s);
        Ok(s)
    }

    fn event_for(&mut self, slot: usize, device: i32) -> std::result::Result<Event, GpuError> {
        if let Some(e) = self.events.get(&(slot, device)) {
            return Ok(*e);
        }
        self.gpu.bind_thread(device)?;
        let e = self.gpu.event_create()?;
        self.events.insert((slot, device), e);
        Ok(e)
    }

    /// The event recorded after chunk `id`'s copy, if one was.
    fn event_of(&self, id: usize) -> Option<Event> {
        let a = self.table[id].as_ref()?;
        if !a.has_event {
            return None;
        }
        self.events.get(&(a.slot?, self.device_of(id)?)).copied()
    }

    fn device_of(&self, id: usize) -> Option<i32> {
        match self.table[id].as_ref()?.chunk.mem {
            Memory::Device { device, .. } => Some(device),
            Memory::Host(_) => None,
        }
    }

    /// Queue chunk `id`'s copy on the worker's stream for `device`. Its
    /// completion event is recorded by the next [`Worker::flush_copies`].
    fn enqueue_copy(
        &mut self,
        id: usize,
        device: i32,
        copy: impl FnOnce(&dyn Gpu, Stream) -> std::result::Result<(), GpuError>,
    ) -> std::result::Result<(), GpuError> {
        if self.table[id].as_ref().and_then(|a| a.slot).is_none() {
            return Err(GpuError::InvalidValue("no slot"));
        }
        let stream = self.stream_for(device)?;
        self.gpu.bind_thread(device)?;
        copy(self.gpu.as_ref(), stream)?;
        Stats::add(&self.stats.gpu_copies, 1);
        self.act(id).has_event = false;
        self.copying.push_back(id);
        self.unflushed.push(id);
        Ok(())
    }

    /// Record one completion event per device after the copies queued since
    /// the last call. A stream runs its copies in order, so that event ends
    /// them all: a worker that queued several copies in one pass (the reads
    /// of a batch that completed together) records, polls and waits on one
    /// event, not one per copy. On the H200, an event after every 1 MiB copy
    /// carried 44–45 GB/s; one after every four, 47–48 (copy_shape, run 13).
    fn flush_copies(&mut self) {
        if self.unflushed.is_empty() {
            return;
        }
        let ids = std::mem::take(&mut self.unflushed);
        let pending = std::mem::take(&mut self.pending_htod);
        let mut devices: Vec<i32> = ids.iter().filter_map(|&id| self.device_of(id)).collect();
        devices.sort_unstable();
        devices.dedup();
        for device in devices {
            let (ids_here, batch): (Vec<usize>, Vec<HtodCopy>) = pending
                .iter()
                .filter(|(id, _)| self.device_of(*id) == Some(device))
                .copied()
                .unzip();
            if let Err(e) = self.submit_htod(device, &batch) {
                // The stream is synchronised before any of these slots is reused.
                for id in ids_here {
                    self.finish_after_gpu_error(id, e.clone());
                }
            }
            let Some(&last) = ids
                .iter()
                .rev()
                .find(|&&id| self.device_of(id) == Some(device) && self.copying.contains(&id))
            else {
                continue;
            };
            if let Err(e) = self.record_event(last, device) {
                let on_device: Vec<usize> = ids
                    .iter()
                    .copied()
                    .filter(|&id| self.device_of(id) == Some(device))
                    .collect();
                for id in on_device {
                    self.finish_after_gpu_error(id, e.clone());
                }
            } else {
                self.act(last).has_event = true;
            }
        }
    }

    /// Give this pass's host-to-device copies to `device` to the runtime,
    /// as one batch on the worker's stream there.
    fn submit_htod(
        &mut self,
        device: i32,
        batch: &[HtodCopy],
    ) -> std::result::Result<(), GpuError> {
        if batch.is_empty() {
            return Ok(());
        }
        let stream = self.stream_for(device)?;
        self.gpu.bind_thread(device)?;
        // SAFETY: each source lies in its chunk's slot, which stays untouched
        // until the copy's event completes (the slot is freed in `finish`
        // only); each destination is the chunk's device range.
        unsafe {
            if self.cfg.batch_copies {
                self.gpu.copy_htod_batch_async(batch, stream)?;
            } else {
                crate::gpu::copy_htod_each(self.gpu.as_ref(), batch, stream)?;
            }
        }
        Stats::add(&self.stats.gpu_copies, batch.len() as u64);
        if self.cfg.batch_copies && batch.len() > 1 {
            Stats::add(&self.stats.gpu_copy_batches, 1);
        }
        Ok(())
    }

    /// Record chunk `id`'s slot event on the worker's stream for `device`.
    fn record_event(&mut self, id: usize, device: i32) -> std::result::Result<(), GpuError> {
        let slot = self.table[id]
            .as_ref()
            .and_then(|a| a.slot)
            .ok_or(GpuError::InvalidValue("no slot"))?;
        let stream = self.stream_for(device)?;
        let ev = self.event_for(slot, device)?;
        self.gpu.bind_thread(device)?;
        self.gpu.event_record(ev, stream)?;
        Stats::add(&self.stats.gpu_events, 1);
        Ok(())
    }

    /// Queue chunk `id`'s host-to-device copy for this pass's batch: it is
    /// given to the runtime, with the pass's other copies to the chunk's
    /// device, by the next [`Worker::flush_copies`] (later in the same pass).
    fn copy_to_device(&mut self, id: usize, dst: u64, src: *const u8, len: usize) {
        self.enter(id, Stage::Gpu);
        self.act(id).phase = Phase::ToDevice;
        if self.table[id].as_ref().and_then(|a| a.slot).is_none() {
            self.finish_after_gpu_error(id, GpuError::InvalidValue("no slot"));
            return;
        }
        self.act(id).has_event = false;
        self.pending_htod.push((id, HtodCopy { dst, src, len }));
        self.copying.push_back(id);
        self.unflushed.push(id);
    }

    fn copy_from_device(&mut self, id: usize) {
        let a = self.table[id].as_ref().expect("active entry");
        let Memory::Device { ptr, device } = a.chunk.mem else {
            self.next_write(id);
            return;
        };
        let dst = self.buf_at(a, 0);
        let len = a.chunk.len;
        self.enter(id, Stage::Gpu);
        self.act(id).phase = Phase::FromDevice;
        // SAFETY: `dst..dst+len` is this chunk's slot, untouched until the event completes.
        let r = self.enqueue_copy(id, device, |g, s| unsafe {
            g.copy_dtoh_async(dst, ptr, len, s)
        });
        if let Err(e) = r {
            self.finish_after_gpu_error(id, e);
        }
    }

    fn finish_after_gpu_error(&mut self, id: usize, e: GpuError) {
        // The copy may have been queued before the failure: make sure the GPU is
        // done with the slot before it is reused.
        if let Some(Memory::Device { device, .. }) = self.table[id].as_ref().map(|a| a.chunk.mem) {
            if let Some(s) = self.streams.get(&device) {
                let _ = self.gpu.stream_synchronize(*s);
            }
        }
        self.copying.retain(|&c| c != id);
        self.finish(id, Err(Error::Gpu(e)));
    }

    /// Finish the chunks whose copies have completed: an event that has
    /// completed ends its own chunk's copy and every earlier one on its device.
    fn poll_copies(&mut self) {
        let mut i = 0;
        while i < self.copying.len() {
            let id = self.copying[i];
            let Some(device) = self.device_of(id) else {
                self.copying.remove(i);
                self.finish(id, Err(OpError::InternalError.into()));
                continue;
            };
            let Some(ev) = self.event_of(id) else {
                // Covered by the next event on its stream.
                i += 1;
                continue;
            };
            let r = self.gpu.event_query(ev);
            if matches!(r, Ok(false)) {
                i += 1;
                continue;
            }
            let ended: Vec<usize> = self
                .copying
                .iter()
                .take(i + 1)
                .copied()
                .filter(|&c| self.device_of(c) == Some(device))
                .collect();
            self.copying.retain(|c| !ended.contains(c));
            // Every removed chunk stood at or before position i.
            i = i + 1 - ended.len();
            for c in ended {
                match &r {
                    Ok(_) => self.copy_done(c),
                    Err(e) => self.finish_after_gpu_error(c, e.clone()),
                }
            }
        }
    }

    fn copy_done(&mut self, id: usize) {
        let a = self.act(id);
        match a.phase {
            Phase::ToDevice => {
                let done = a.done;
                self.finish(id, Ok(done));
            }
            Phase::FromDevice => {
                self.enter(id, Stage::Storage);
                self.next_write(id)
            }
            _ => self.finish(id, Err(OpError::InternalError.into())),
        }
    }

    fn on_write(&mut self, id: usize, res: i32) {
        if res == -libc::EINTR || res == -libc::EAGAIN {
            self.retry_or_fail(id, -res);
            return;
        }
        if res == -libc::EINVAL {
            let a = self.act(id);
            if !a.buffered_only && a.chunk.file.client_direct {
                log_once!(Level::Warn, "an O_DIRECT write was refused with EINVAL; using the page cache for such writes");
                a.buffered_only = true;
                self.next_write(id);
                return;
            }
        }
        if res < 0 {
            self.finish(id, Err(Error::Os(-res)));
            return;
        }
        if res == 0 {
            self.retry_or_fail(id, libc::EIO);
            return;
        }
        let a = self.act(id);
        let counter = if a.write_direct {
            &self.stats.direct_write_bytes
        } else {
            &self.stats.buffered_write_bytes
        };
        Stats::add(counter, res as u64);
        let a = self.act(id);
        a.done += res as usize;
        if a.done >= a.chunk.len {
            let done = a.chunk.len;
            if a.chunk.durable && !a.write_direct {
                crate::file::start_writeback(&a.chunk.file, a.chunk.file_offset, done);
            }
            self.finish(id, Ok(done));
        } else {
            a.retries = 0;
            self.next_write(id);
        }
    }

    /// The chunk is finished: report it and free its slot and table entry.
    fn finish(&mut self, id: usize, r: Result<usize>) {
        let Some(a) = self.table[id].take() else {
            return;
        };
        let now = Instant::now();
        self.stats.stage(a.open, now - a.since);
        self.stats.chunk(now - a.chunk.queued_at);
        if crate::log::enabled(Level::Debug) {
            crate::log_debug!(
                "hipfile-io-{}: {:?} chunk {} of [{}, +{}) {:?} after phase {:?}: {:?}",
                self.id,
                a.chunk.dir,
                a.chunk.idx,
                a.chunk.file_offset,
                a.chunk.len,
                a.chunk.mem,
                a.phase,
                r
            );
        }
        self.need_slot.retain(|&x| x != id);
        if !a.chunk.mem.is_device() {
            self.host_bytes -= a.chunk.len;
        }
        if let Some(s) = a.slot {
            let k = self.slab.class_of(s);
            self.free[k].push(s);
        }
        self.free_ids.push(id);
        self.queue.finished();
        a.chunk.req.chunk_ended(a.chunk.idx, r, a.done);
        self.grant_slots();
    }

    fn teardown(&mut self) {
        for (_, s) in self.streams.drain() {
            let _ = self.gpu.stream_synchronize(s);
            self.gpu.stream_destroy(s);
        }
        for (_, e) in self.events.drain() {
            self.gpu.event_destroy(e);
        }
    }
}
