//! A worker: one thread with one storage queue (io_uring, or the POSIX
//! backend where io_uring is refused: `crate::storage`), one bounce slab, one
//! GPU stream per device (created lazily), and the chunks it holds.
//!
//! The worker is a loop around the chunk's typed life (`chunk.rs`): it takes
//! chunks from the engine's queue (`admission.rs`), hands them free bounce
//! slots (`slots.rs`), submits their ops and delivers the completions
//! (`storage.rs`), queues their GPU copies and waits for the copies' events
//! (`copies.rs`), and reports each finished chunk to its request. Where a
//! chunk is tells its phase: in the slot line, in the ring's table, or in
//! the list of copies.
//!
//! A bounce slot is owned by exactly one phase at a time: the kernel's (a
//! read or write op in flight) or the GPU's (a copy not yet ended by a
//! completed event). Only when neither holds it does it go back to the free
//! list.

mod admission;
mod chunk;
mod copies;
mod slots;
mod storage;

pub(crate) use copies::StreamPool;

use crate::bounce::{self, Slab};
use crate::config::Config;
use crate::error::{Error, OpError, Result};
use crate::gpu::{Gpu, GpuError, GpuResult};
use crate::log::Level;
use crate::queue::WorkQueue;
use crate::request::Chunk;
use crate::ring::Cqe;
use crate::stats::Stats;
use crate::storage::Ring;
use chunk::{AwaitSlot, Ctx, Finished, InKernel, Next, OnGpu};
use copies::Copies;
use slots::Slots;
use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

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

/// Hook for tests: installs a fault plan on every ring an engine creates.
#[cfg(feature = "testing")]
pub type FaultFactory = Arc<dyn Fn(usize) -> Option<Box<dyn crate::ring::FaultPlan>> + Send + Sync>;

/// What an engine gives each worker for its ring: a fault plan factory with
/// the `testing` feature; without it, always `None`.
#[cfg(feature = "testing")]
pub(crate) type Faults = Option<FaultFactory>;
#[cfg(not(feature = "testing"))]
pub(crate) type Faults = Option<NoFaults>;

/// No fault plan can be made without the `testing` feature.
#[cfg(not(feature = "testing"))]
#[derive(Clone)]
pub(crate) enum NoFaults {}

/// What the workers of one engine share.
#[derive(Clone)]
pub(crate) struct Shared {
    pub cfg: Config,
    pub gpu: Arc<dyn Gpu>,
    pub stats: Arc<Stats>,
    /// Streams prepared for stream ops (see [`StreamPool`]).
    pub pool: Arc<StreamPool>,
    pub queue: Arc<WorkQueue<Chunk>>,
    pub faults: Faults,
}

/// Start worker `id`; returns once its ring and slab exist (or could not be made).
pub(crate) fn spawn(id: usize, shared: Shared) -> Result<WorkerHandle> {
    let (init_tx, init_rx) = mpsc::sync_channel::<Result<()>>(1);
    let join = start_thread(id, shared, move |r| {
        let _ = init_tx.send(r);
    })?;
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

/// Start worker `id` without waiting for its ring and slab: an engine that
/// grows does so on a caller's submission, which should not wait the tens of
/// milliseconds a slab takes to map and pin. A worker that cannot start logs
/// why (in `Worker::new`) and tells the queue, whose other workers carry on.
pub(crate) fn spawn_lazy(id: usize, shared: Shared) -> Result<WorkerHandle> {
    let queue = shared.queue.clone();
    let join = start_thread(id, shared, move |r| {
        if r.is_err() {
            queue.start_failed();
        }
    })?;
    Ok(WorkerHandle { join: Some(join) })
}

/// The worker's thread: make the worker there (its ring's single issuer),
/// report how that went to `started`, then run it.
fn start_thread(
    id: usize,
    shared: Shared,
    started: impl FnOnce(Result<()>) + Send + 'static,
) -> Result<JoinHandle<()>> {
    // A fork waits until the worker is set up (crate::fork's notes).
    let starting = crate::fork::Starting::begin();
    std::thread::Builder::new()
        .name(format!("hipfile-io-{id}"))
        .spawn(move || {
            if shared.cfg.bind_io_threads {
                bind_to_own_cpu(id, shared.cfg.io_threads);
            }
            let made = Worker::new(id, shared);
            drop(starting);
            match made {
                Ok(w) => {
                    started(Ok(()));
                    w.run();
                }
                Err(e) => started(Err(e)),
            }
        })
        .map_err(|e| Error::Os(e.raw_os_error().unwrap_or(libc::EAGAIN)))
}

/// Bind worker `id` of `workers` to a CPU of its own when the workers are
/// as many as the CPUs this thread may run on and those are few
/// ([`BIND_MAX_CPUS`]), the `id`-th of them.
///
/// A disk with one completion queue (virtio-blk, most virtual disks) raises
/// its interrupt on one CPU, and the wake-ups of every worker whose read
/// ended there place them on that CPU when it is idle: their copies out of
/// the bounce run one after another while the other CPUs idle, and the disk
/// waits for them. A worker bound to its own CPU wakes there, so the copies
/// run side by side. With more CPUs than workers the workers stay free (the
/// scheduler has idle CPUs to spread them over, and the application's
/// threads room to move); a worker whose CPU the application's mask lacks
/// (a later `sched_setaffinity`, a cpuset) stays free too.
fn bind_to_own_cpu(id: usize, workers: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `allowed` is a cpu_set_t of `size` bytes.
    if unsafe { libc::sched_getaffinity(0, size, &mut allowed) } != 0 {
        return;
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: c < CPU_SETSIZE, inside the set.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &allowed) })
        .collect();
    let Some(cpu) = own_cpu(id, workers, &cpus) else {
        return;
    };
    // SAFETY: as above.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu < CPU_SETSIZE (it came from the set).
    unsafe { libc::CPU_SET(cpu, &mut one) };
    // SAFETY: `one` is a cpu_set_t of `size` bytes; 0 is this thread.
    if unsafe { libc::sched_setaffinity(0, size, &one) } != 0 {
        crate::log_debug!(
            "hipfile-io-{id}: cannot bind to CPU {cpu} ({}); it runs unbound",
            std::io::Error::last_os_error()
        );
    }
}

/// The most CPUs a process may run on for its workers to be bound. On the
/// 2-core VM the interrupt's CPU is half the machine, and binding lifted
/// cold 4 MiB sync reads from 2.43-2.81 to 2.99-3.11 GB/s (fio psync
/// 3.03-3.06). On the 16-core H200 host, 16 bound workers lost to 16 free
/// ones in both paired rounds of hot 1 MiB batches (42.65 and 46.30 against
/// 44.83 and 50.47 GB/s) and hot 1 GiB sync reads (47.15 and 46.35 against
/// 48.44 and 47.09): there the page-cache copies of many workers, and the
/// caller's own threads, need the scheduler's freedom more than the copies
/// need to leave the interrupt's CPU. Between 2 and 16 nothing was measured;
/// 4 keeps the binding to machines where one CPU is a quarter or more.
pub const BIND_MAX_CPUS: usize = 4;

/// The CPU worker `id` of `workers` binds to, of the `allowed` ones: the
/// `id`-th, when every allowed CPU gets one worker and they are at most
/// [`BIND_MAX_CPUS`].
fn own_cpu(id: usize, workers: usize, allowed: &[usize]) -> Option<usize> {
    (workers > 1 && workers == allowed.len() && allowed.len() <= BIND_MAX_CPUS)
        .then(|| allowed.get(id).copied())
        .flatten()
}

struct Worker {
    id: usize,
    cfg: Config,
    stats: Arc<Stats>,
    /// Declared before the slab, so it is dropped first: the kernel may
    /// write into registered slots until the ring is gone.
    ring: Ring,
    slab: Slab,
    /// The slab's slots are registered with the ring (fixed-buffer ops).
    fixed: bool,
    slots: Slots,
    /// Chunks waiting for a bounce slot, in arrival order.
    slot_line: VecDeque<AwaitSlot>,
    /// Chunks with an op in the ring, by the op's tag (its index here).
    table: Vec<Option<InKernel>>,
    free_ids: Vec<usize>,
    /// Chunks with a GPU copy in flight, and the streams and events.
    copies: Copies,
    /// Chunks this worker holds (in any phase), and the most it may.
    held: usize,
    cap: usize,
    /// Bytes of the host-memory chunks this worker holds (it takes more from
    /// the queue only up to `slots_per_worker` chunks' worth; a device chunk
    /// is bounded by the slots themselves).
    host_bytes: usize,
    /// Page-cache reads granted since the ring was last entered (one pass).
    cached_this_pass: usize,
    /// Reused by every pass: no allocation per pass.
    cqes: Vec<Cqe>,
    ended: Vec<(OnGpu, GpuResult<()>)>,
    failed: Vec<(OnGpu, GpuError)>,
    queue: Arc<WorkQueue<Chunk>>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stats
            .worker_stopped(self.slab.bytes(), self.slab.pinned() || self.fixed);
    }
}

impl Worker {
    fn new(id: usize, shared: Shared) -> Result<Worker> {
        let Shared {
            cfg,
            gpu,
            stats,
            pool,
            queue,
            faults,
        } = shared;
        let mut ring = Ring::new(cfg.io_backend, cfg.ring_entries).map_err(|e| {
            crate::log_error!(
                "io_uring setup failed: {e}; is io_uring disabled (kernel.io_uring_disabled)?"
            );
            Error::Op(OpError::DriverSetupError)
        })?;
        if let Some(f) = faults {
            #[cfg(feature = "testing")]
            ring.set_fault_plan(f(id));
            #[cfg(not(feature = "testing"))]
            match f {}
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
        // Every chunk holds at most one slot, and host chunks a share of the
        // host budget: twice the chunk slots, plus the small and mid-size ones.
        let cap =
            (cfg.slots_per_worker * 2 + cfg.small_slots_per_worker + cfg.mid_slots_per_worker)
                .max(8);
        stats.worker_started(slab.bytes(), slab.pinned() || fixed);
        Ok(Worker {
            id,
            cfg,
            copies: Copies::new(id, gpu, stats.clone(), pool, cap),
            stats,
            ring,
            slots: Slots::new(&slab),
            slab,
            fixed,
            slot_line: VecDeque::with_capacity(cap),
            table: (0..cap).map(|_| None).collect(),
            free_ids: (0..cap).rev().collect(),
            held: 0,
            cap,
            host_bytes: 0,
            cached_this_pass: 0,
            cqes: Vec::with_capacity(cap),
            ended: Vec::with_capacity(cap),
            failed: Vec::with_capacity(cap),
            queue,
        })
    }

    /// What the chunk transitions need from this worker.
    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            read_mode: self.cfg.read_mode,
            slab: &self.slab,
            fixed: self.fixed,
            stats: &self.stats,
            cached: crate::file::fully_cached,
        }
    }

    fn run(mut self) {
        let queue = self.queue.clone();
        loop {
            if self.held == 0 {
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
            // Slots a finished chunk freed, or a pass's page-cache limit withheld.
            self.grant_slots();
            self.pass();
        }
        self.copies.teardown();
    }

    /// One pass: give the queued copies to the GPU, enter the ring (or wait
    /// for a copy when the ring is idle), act on what completed.
    fn pass(&mut self) {
        self.flush_copies();
        if self.ring.in_flight() > 0 {
            self.wait_for_storage();
            self.cached_this_pass = 0;
            self.complete_storage();
            self.grant_slots();
            self.flush_copies();
        } else if !self.copies.is_empty() {
            // Nothing in the kernel: the oldest GPU copy is what we wait for.
            self.copies.wait_oldest(self.cfg.copy_spin);
        }
        self.poll_copies();
        self.grant_slots();
        self.submit_storage();
        self.cached_this_pass = 0;
    }

    /// Do what a transition asked for.
    fn apply(&mut self, next: Next) {
        match next {
            Next::Kernel(chunk, op) => self.submit(chunk, op),
            Next::Slot(chunk) => self.slot_line.push_back(chunk),
            Next::Gpu(chunk, copy) => {
                self.copies.queue(chunk, copy, &mut self.failed);
                self.finish_failed();
            }
            Next::Done(f) => self.finish(f),
        }
    }

    /// Give the pass's copies to the GPU; fail the chunks it refused.
    fn flush_copies(&mut self) {
        if self.copies.has_unflushed() {
            self.copies.flush(&mut self.failed);
            self.finish_failed();
        }
    }

    /// Fail the chunks whose copies the GPU refused.
    fn finish_failed(&mut self) {
        while let Some((chunk, e)) = self.failed.pop() {
            self.finish(chunk.failed(e));
        }
    }

    /// Move the chunks whose copies have ended to their next phase, in the
    /// order the copies were queued.
    fn poll_copies(&mut self) {
        if self.copies.is_empty() {
            return;
        }
        self.copies.poll(&mut self.ended);
        self.ended.reverse();
        while let Some((chunk, r)) = self.ended.pop() {
            let next = match r {
                Ok(()) => chunk.copied(&self.ctx()),
                Err(e) => Next::Done(chunk.failed(e)),
            };
            self.apply(next);
        }
    }

    /// The chunk is finished: report it and give back its slot.
    fn finish(&mut self, f: Finished) {
        let Finished {
            io,
            slot,
            result,
            writeback,
        } = f;
        let now = Instant::now();
        let (stage, since) = io.stage();
        self.stats.stage(stage, now - since);
        self.stats.chunk(now - io.chunk.queued_at);
        let chunk = &io.chunk;
        if crate::log::enabled(Level::Debug) {
            crate::log_debug!(
                "hipfile-io-{}: {:?} chunk {} of [{}, +{}) {:?} after stage {stage:?}: {result:?}",
                self.id,
                chunk.dir,
                chunk.idx,
                chunk.file_offset,
                chunk.len,
                chunk.mem,
            );
        }
        if !chunk.mem.is_device() {
            self.host_bytes -= chunk.len;
        }
        if let Some(s) = slot {
            self.slots.give_back(s);
        }
        self.held -= 1;
        self.queue.finished();
        if self.held == 0 {
            // Before the request hears of it (see WorkQueue::idle).
            self.queue.idle();
        }
        if writeback {
            crate::file::start_writeback(&chunk.file, chunk.file_offset, chunk.len);
        }
        chunk.req.chunk_ended(chunk.idx, result, io.done());
    }
}

#[cfg(test)]
mod cpu_tests {
    use super::own_cpu;

    #[test]
    fn a_worker_binds_only_when_the_workers_are_as_many_as_the_cpus() {
        assert_eq!(own_cpu(0, 2, &[0, 1]), Some(0));
        assert_eq!(own_cpu(1, 2, &[0, 1]), Some(1));
        // The process's own CPUs, whichever they are.
        assert_eq!(own_cpu(1, 3, &[2, 5, 7]), Some(5));
        // More CPUs than workers: the scheduler has room to spread them.
        assert_eq!(own_cpu(0, 2, &[0, 1, 2, 3]), None);
        // Fewer: two workers would share a CPU either way.
        assert_eq!(own_cpu(2, 4, &[0, 1]), None);
        // One worker on one CPU: nothing to choose.
        assert_eq!(own_cpu(0, 1, &[3]), None);
        // Four of four binds; sixteen of sixteen stays free (measured slower).
        assert_eq!(own_cpu(3, 4, &[0, 1, 2, 3]), Some(3));
        let many: Vec<usize> = (0..16).collect();
        assert_eq!(own_cpu(5, 16, &many), None);
    }
}
