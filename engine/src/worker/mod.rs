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
//! What a completion's errno means is [`crate::errno`]'s table, shared with
//! the inline path.
//!
//! Files: `admission.rs` (which chunks the worker takes from the queue),
//! `slots.rs` (bounce slots), `storage.rs` (ring ops and their completions),
//! `copies.rs` (GPU copies and events: where a chunk waits for its copy).

mod admission;
mod copies;
mod slots;
mod storage;

pub(crate) use copies::StreamPool;

use crate::bounce::{self, Slab};
use crate::config::Config;
use crate::error::{Error, OpError, Result};
use crate::gpu::{Event, Gpu, HtodCopy, Stream};
use crate::queue::WorkQueue;
use crate::request::{Chunk, Direction};
use crate::ring::{Cqe, FaultPlan, Ring};
use crate::stats::{Stage, Stats};
use crate::{log::Level, log_once};
use std::collections::{HashMap, VecDeque};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// Longest a worker waits for the kernel while it has GPU copies in flight or
/// room for more work (a 1 MiB copy takes about 20 µs on the H200's link).
const WAIT_SLICE: std::time::Duration = std::time::Duration::from_micros(100);

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
                // Sleep on the event rather than poll it: a spinning worker
                // would hold a core that other workers' page-cache copies need.
                let _ = self.gpu.event_synchronize(ev);
            }
        }
        self.poll_copies();
        if let Err(e) = self.ring.submit() {
            log_once!(Level::Error, "io_uring submit failed: {e}");
        }
        self.cached_this_pass = 0;
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
        a.chunk.req.chunk_done(a.chunk.idx, r);
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
