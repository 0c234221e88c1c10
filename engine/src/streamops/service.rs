//! The stream service: the threads that carry stream ops forward once they
//! are on their streams. One poller watches the words the streams write
//! (`started`, `back`) and the results of file I/O, and decides what happens
//! next; a small pool of I/O threads does the `pread`s and `pwrite`s.
//!
//! **No GPU runtime is reachable from this module.** It imports nothing from
//! `crate::gpu` but the plain [`CopyDesc`] struct, and nothing it holds owns a
//! runtime handle: a lane's memory appears here as raw pointers
//! ([`LaneMem`]), whose registration and freeing belong to `lane.rs` on the
//! application's threads. Everything the service does to release a parked
//! stream is a file I/O call or a store to pinned host memory, so no driver
//! lock held by the application can stop it (module docs of `streamops`).
//!
//! The poller never waits for a submitting thread either: it acts only on
//! what a submission has published (stages enqueued, done-wait enqueued,
//! failure), since the submitter may be blocked on that same driver lock.

use super::io::{self, IoCtx};
use super::{result_value, Binding, Bound};
use crate::config::ReadMode;
use crate::error::{Error, OpError, Result};
use crate::file::File;
use crate::gpu::CopyDesc;
use crate::pipeline::Direction;
use crate::registry::BufferUse;
use crate::request::combine_results;
use crate::stats::Stats;
use crate::worker::Faults;
use crate::{log_debug, log_warn};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Bytes of slack after each stage in a slot: room for a 16-byte alignment
/// skew and for rounding an O_DIRECT read up to 4 KiB; keeps slots page-aligned.
pub(crate) const SLOT_PAD: usize = 4096;
/// Device bytes per slot for its descriptor (a `CopyDesc` is 32; 64 keeps
/// each on its own half cache line).
pub(crate) const DEV_DESC_BYTES: usize = 64;
/// Bytes a stage's host ↔ device copy moves beyond the stage's length: the
/// skew (< 16) that lines the data up with the user's buffer modulo 16, so
/// the place kernel can move 16-byte vectors.
pub(crate) const SKEW_ROOM: usize = 16;

/// u32 indices of the words in a lane's flag page, and the byte offset of
/// its descriptors (one 4 KiB page: 64 stages at most).
const STARTED: usize = 0;
const DONE: usize = 1;
const PASSED: usize = 2;
const READY: usize = 64;
const BACK: usize = 128;
const DESCS: usize = 1024;
/// Size of a lane's flag page.
pub(crate) const PAGE_BYTES: usize = 4096;

/// Polls without progress before the poller starts to sleep between polls.
const SPIN_POLLS: u32 = 128;
/// Sleep between polls once idle (a parked op costs little CPU then).
const IDLE_POLL: Duration = Duration::from_micros(20);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A lane's staging: R pinned host slots of `stage_bytes + SLOT_PAD` bytes
/// and one device buffer of that size.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Staging {
    pub host: *mut u8,
    pub dev: u64,
    pub stages: usize,
    pub stage_bytes: usize,
}

// SAFETY: the staging is plain pinned host memory and a device address; who
// may touch a slot when is governed by the stage protocol (module docs).
unsafe impl Send for Staging {}
// SAFETY: as above.
unsafe impl Sync for Staging {}

impl Staging {
    pub(crate) fn stride(&self) -> usize {
        self.stage_bytes + SLOT_PAD
    }

    /// Device memory for slot `s`'s descriptor, after the staging buffer: the
    /// place kernel reads its descriptor there (see `Gpu::copy_described_async`).
    pub(crate) fn dev_desc(&self, s: usize) -> u64 {
        debug_assert!(s < self.stages);
        self.dev + (self.stride() + s * DEV_DESC_BYTES) as u64
    }

    pub(crate) fn slot(&self, s: usize) -> *mut u8 {
        debug_assert!(s < self.stages);
        // SAFETY: s < stages, so the offset stays inside the slab.
        unsafe { self.host.add(s * self.stride()) }
    }
}

/// A lane's host memory as the service sees it: the flag page (words and
/// descriptors) and, once a device op came, the staging. Raw pointers only:
/// `lane.rs` owns, registers and frees the memory, and frees it only after
/// the service has let go of the lane ([`Service::forget_lane`]).
pub(crate) struct LaneMem {
    page: *mut u8,
    pub(crate) staging: OnceLock<Staging>,
}

// SAFETY: the page is accessed only through atomics (words) and volatile
// copies of descriptors whose ownership the stage protocol hands over.
unsafe impl Send for LaneMem {}
// SAFETY: as above.
unsafe impl Sync for LaneMem {}

impl LaneMem {
    /// # Safety
    /// `page` must be a zeroed, page-aligned mapping of [`PAGE_BYTES`] that
    /// outlives every use of the returned value.
    pub(crate) unsafe fn new(page: *mut u8) -> LaneMem {
        LaneMem {
            page,
            staging: OnceLock::new(),
        }
    }

    fn word(&self, i: usize) -> &AtomicU32 {
        debug_assert!(i * 4 < DESCS);
        // SAFETY: i indexes the word area of the live, aligned page; zeroed
        // memory is a valid AtomicU32.
        unsafe { &*(self.page.add(4 * i) as *const AtomicU32) }
    }

    pub(crate) fn word_ptr(&self, i: usize) -> *mut u32 {
        self.word(i).as_ptr()
    }

    pub(crate) fn started_ptr(&self) -> *mut u32 {
        self.word_ptr(STARTED)
    }
    pub(crate) fn done_ptr(&self) -> *mut u32 {
        self.word_ptr(DONE)
    }
    pub(crate) fn passed_ptr(&self) -> *mut u32 {
        self.word_ptr(PASSED)
    }
    pub(crate) fn ready_ptr(&self, s: usize) -> *mut u32 {
        self.word_ptr(READY + s)
    }
    pub(crate) fn back_ptr(&self, s: usize) -> *mut u32 {
        self.word_ptr(BACK + s)
    }
    pub(crate) fn passed(&self) -> u32 {
        self.word(PASSED).load(Ordering::Acquire)
    }

    pub(crate) fn desc(&self, s: usize) -> *mut CopyDesc {
        debug_assert!(DESCS + (s + 1) * std::mem::size_of::<CopyDesc>() <= PAGE_BYTES);
        // SAFETY: inside the page, 32-byte aligned (DESCS is a multiple of 32).
        unsafe { self.page.add(DESCS + s * std::mem::size_of::<CopyDesc>()) as *mut CopyDesc }
    }

    /// Fill stage slot `s`'s descriptor in, then release its wait.
    fn release(&self, s: usize, d: CopyDesc, value: u32) {
        // SAFETY: the descriptor is ours until `ready` says otherwise: the
        // stream's previous use of it ended before its `back` was written.
        unsafe { self.desc(s).write_volatile(d) };
        // Release: the descriptor is visible before the stream sees `ready`.
        self.word(READY + s).store(value, Ordering::Release);
    }
}

const SUBMITTING: u8 = 0;
const FINISHED: u8 = 1;
const WITHDRAWN: u8 = 2;

/// Keeps a file marked busy (deregistration refuses) while an op holds it.
struct FileBusy(Arc<File>);

impl FileBusy {
    fn new(f: Arc<File>) -> FileBusy {
        f.begin_io();
        FileBusy(f)
    }
}

impl Drop for FileBusy {
    fn drop(&mut self) {
        self.0.end_io();
    }
}

/// One stream op, shared by its submitter (which publishes what it has
/// enqueued) and the service.
pub(crate) struct Op {
    pub lane: u64,
    pub gen: u32,
    pub dir: Direction,
    /// Device memory: the op goes through the lane's stages.
    pub staged: bool,
    pub first_seq: u64,
    /// Stages it needs (0 for host memory).
    pub stages: usize,
    pub binding: Binding,
    file: FileBusy,
    _hold: BufferUse,
    /// Stages whose wait is on the stream.
    enqueued: AtomicUsize,
    state: AtomicU8,
    /// A GPU call of the submission failed: the op's result.
    failure: Mutex<Option<Error>>,
    failed: AtomicBool,
}

impl Op {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        lane: u64,
        gen: u32,
        dir: Direction,
        staged: bool,
        first_seq: u64,
        stages: usize,
        binding: Binding,
        file: Arc<File>,
        hold: BufferUse,
    ) -> Op {
        Op {
            lane,
            gen,
            dir,
            staged,
            first_seq,
            stages,
            binding,
            file: FileBusy::new(file),
            _hold: hold,
            enqueued: AtomicUsize::new(0),
            state: AtomicU8::new(SUBMITTING),
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
        }
    }

    /// Submitter: stage `k`'s wait is on the stream.
    pub(crate) fn publish_stage(&self, k: usize) {
        self.enqueued.store(k + 1, Ordering::Release);
    }

    /// Submitter: a GPU call failed; the op's result is this error.
    pub(crate) fn fail(&self, e: Error) {
        let mut f = lock(&self.failure);
        if f.is_none() {
            *f = Some(e);
        }
        self.failed.store(true, Ordering::Release);
    }

    /// Submitter: nothing more will be enqueued for this op.
    pub(crate) fn finish_submit(&self) {
        self.state.store(FINISHED, Ordering::Release);
    }

    /// Submitter: nothing was enqueued; the service drops the op.
    pub(crate) fn withdraw(&self) {
        self.state.store(WITHDRAWN, Ordering::Release);
    }

    fn failure(&self) -> Option<Error> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.failure).clone()
    }
}

/// What the service knows about one stage slot of a lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// Nobody uses it: the next stage may.
    Free,
    /// Its read is in the I/O pool.
    Reading { seq: u64 },
    /// Released to the stream; free once `back` says the stream is past it.
    Gpu { seq: u64 },
    /// A write stage released to the stream, waiting for the bytes (`back`).
    Fill {
        seq: u64,
        k: usize,
        len: usize,
        off: u64,
        skew: usize,
    },
    /// Its write is in the I/O pool.
    Writing { seq: u64 },
}

/// The service's state of the op at the head of a lane.
struct Run {
    op: Arc<Op>,
    /// Set when the stream reached the op: the bound parameters, or the
    /// op's result without I/O.
    bound: Option<std::result::Result<Bound, isize>>,
    /// Next stage to prepare.
    next: usize,
    /// Per stage (or host piece): its execution-time length and outcome.
    results: Vec<(usize, Option<Result<usize>>)>,
    /// EOF or an error: later stages move nothing.
    stop: bool,
    /// Stages or pieces whose outcome is still to come.
    pending: usize,
    /// Host op: its pieces are in the I/O pool.
    dispatched: bool,
}

struct LaneQueue {
    mem: Arc<LaneMem>,
    ops: VecDeque<Run>,
    slots: Vec<Slot>,
}

impl LaneQueue {
    fn active(&self) -> bool {
        !self.ops.is_empty() || self.slots.iter().any(|s| *s != Slot::Free)
    }
}

/// A task for an I/O thread.
struct Task {
    lane: u64,
    gen: u32,
    /// Stage (or host piece) index.
    k: usize,
    op: Arc<Op>,
    mem: Arc<LaneMem>,
    kind: TaskKind,
}

enum TaskKind {
    /// Read one piece of a stage into its slot; the last piece of the stage
    /// to finish fills the descriptor in (its length is what was read) and
    /// sets `ready[slot]`.
    ReadStage {
        join: Arc<StageJoin>,
        piece: usize,
        host: *mut u8,
        len: usize,
        room: usize,
        off: u64,
        direct: bool,
    },
    /// Write a filled stage slot to the file.
    WriteStage {
        slot: usize,
        host: *const u8,
        len: usize,
        off: u64,
    },
    /// Read or write the caller's host memory directly.
    Host {
        ptr: *mut u8,
        len: usize,
        off: u64,
        direct: bool,
    },
}

// SAFETY: the pointers name pinned stage slots or the caller's host buffer,
// lent to this one task by the stage protocol until its completion.
unsafe impl Send for Task {}

/// A stage read split into pieces that I/O threads run at once: one thread
/// copies a page-cache read at a few GB/s, so a whole 4 MiB stage on one
/// thread keeps the stream waiting for its first stage about four times as
/// long as pieces on four threads do, and a stream op is that wait plus its
/// copies.
struct StageJoin {
    slot: usize,
    desc: CopyDesc,
    value: u32,
    /// Pieces still reading.
    remaining: AtomicUsize,
    /// Per piece: its length and outcome.
    results: Mutex<Vec<(usize, Option<Result<usize>>)>>,
}

/// Bytes per piece of a stage read (the engine's worker chunks are of this
/// order too: large enough that a `pread` is mostly copying).
const STAGE_PIECE_BYTES: usize = 1 << 20;

/// The outcome of a task.
struct IoDone {
    lane: u64,
    gen: u32,
    k: usize,
    slot: Option<usize>,
    result: Result<usize>,
}

/// Run a task; `None` while other pieces of its stage are still reading.
fn run_task(t: Task, ctx: &mut IoCtx, stats: &Stats) -> Option<IoDone> {
    let file = &t.op.file.0;
    let (slot, result) = match t.kind {
        TaskKind::ReadStage {
            join,
            piece,
            host,
            len,
            room,
            off,
            direct,
        } => {
            // SAFETY: the piece (room bytes at host) is this task's until the
            // stage's last piece sets `ready` below.
            let r = unsafe { io::read_into(ctx, file, host, len, room, off, direct) };
            lock(&join.results)[piece].1 = Some(count(stats, Direction::Read, r));
            // AcqRel: the last piece sees every other piece's bytes and result.
            if join.remaining.fetch_sub(1, Ordering::AcqRel) != 1 {
                return None;
            }
            let r = combine_results(&lock(&join.results));
            let mut desc = join.desc;
            desc.len = *r.as_ref().unwrap_or(&0) as u64;
            t.mem.release(join.slot, desc, join.value);
            (Some(join.slot), r)
        }
        TaskKind::WriteStage {
            slot,
            host,
            len,
            off,
        } => {
            // SAFETY: the stream filled the slot (its `back` was seen) and
            // will not touch it again until the slot is released.
            let r = unsafe { io::write_from(ctx, file, host, len, off) };
            (Some(slot), count(stats, Direction::Write, r))
        }
        TaskKind::Host {
            ptr,
            len,
            off,
            direct,
        } => {
            // SAFETY: the caller's host buffer, in use by this op from its
            // `started` to its `done` (the stream API's contract).
            let r = unsafe {
                match t.op.dir {
                    Direction::Read => io::read_into(ctx, file, ptr, len, len, off, direct),
                    Direction::Write => io::write_from(ctx, file, ptr, len, off),
                }
            };
            (None, count(stats, t.op.dir, r))
        }
    };
    Some(IoDone {
        lane: t.lane,
        gen: t.gen,
        k: t.k,
        slot,
        result,
    })
}

/// Add an I/O result to the engine's path statistics; the byte count.
fn count(stats: &Stats, dir: Direction, r: Result<(usize, bool)>) -> Result<usize> {
    let (n, direct) = r?;
    let counter = match (dir, direct) {
        (Direction::Read, true) => &stats.direct_read_bytes,
        (Direction::Read, false) => &stats.buffered_read_bytes,
        (Direction::Write, true) => &stats.direct_write_bytes,
        (Direction::Write, false) => &stats.buffered_write_bytes,
    };
    Stats::add(counter, n as u64);
    Ok(n)
}

/// Tasks waiting for an I/O thread, served round-robin over lanes and in
/// order within each: every stream's next stage goes before any stream's
/// stages further ahead, where one queue in dispatch order would make the
/// last stream to dispatch wait behind all the others' whole windows.
#[derive(Default)]
struct TaskQueue {
    by_lane: HashMap<u64, VecDeque<Task>>,
    /// Lanes with tasks, in the order they are served next.
    turn: VecDeque<u64>,
}

impl TaskQueue {
    fn push(&mut self, t: Task) {
        let q = self.by_lane.entry(t.lane).or_default();
        if q.is_empty() {
            self.turn.push_back(t.lane);
        }
        q.push_back(t);
    }

    fn pop(&mut self) -> Option<Task> {
        let lane = self.turn.pop_front()?;
        let q = self.by_lane.get_mut(&lane)?;
        let t = q.pop_front();
        if q.is_empty() {
            self.by_lane.remove(&lane);
        } else {
            self.turn.push_back(lane);
        }
        t
    }
}

struct IoQueue {
    tasks: TaskQueue,
    idle: usize,
    threads: usize,
    /// Set once the poller has exited: no task can come any more.
    closing: bool,
}

struct State {
    lanes: HashMap<u64, LaneQueue>,
    poller_alive: bool,
}

/// The service of one engine (see the module docs).
pub(crate) struct Service {
    state: Mutex<State>,
    /// Wakes a poller that sleeps with nothing to do.
    wake: Condvar,
    completions: Mutex<Vec<IoDone>>,
    poller: Mutex<Option<std::thread::Thread>>,
    io: Mutex<IoQueue>,
    io_cv: Condvar,
    max_threads: usize,
    mode: ReadMode,
    faults: Faults,
    /// Fault plans of I/O threads are numbered from here (after the workers').
    fault_base: usize,
    stats: Arc<Stats>,
    closing: AtomicBool,
}

impl Service {
    pub(crate) fn new(
        io_threads: usize,
        mode: ReadMode,
        faults: Faults,
        fault_base: usize,
        stats: Arc<Stats>,
    ) -> Arc<Service> {
        Arc::new(Service {
            state: Mutex::new(State {
                lanes: HashMap::new(),
                poller_alive: false,
            }),
            wake: Condvar::new(),
            completions: Mutex::new(Vec::new()),
            poller: Mutex::new(None),
            io: Mutex::new(IoQueue {
                tasks: TaskQueue::default(),
                idle: 0,
                threads: 0,
                closing: false,
            }),
            io_cv: Condvar::new(),
            max_threads: io_threads.max(1),
            mode,
            faults,
            fault_base,
            stats,
            closing: AtomicBool::new(false),
        })
    }

    /// Queue `op` on its lane. Before anything of it is on a stream: an
    /// error here means the op was not submitted.
    pub(crate) fn push(self: &Arc<Self>, mem: &Arc<LaneMem>, op: Arc<Op>) -> Result<()> {
        let mut st = lock(&self.state);
        if !st.poller_alive {
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name("hipfile-stream".into())
                .spawn(move || me.poll());
            match spawned {
                Ok(h) => {
                    *lock(&self.poller) = Some(h.thread().clone());
                    st.poller_alive = true;
                }
                Err(e) => {
                    log_warn!("cannot start the stream service thread: {e}");
                    return Err(OpError::InternalError.into());
                }
            }
        }
        let lq = st.lanes.entry(op.lane).or_insert_with(|| LaneQueue {
            mem: mem.clone(),
            ops: VecDeque::new(),
            slots: Vec::new(),
        });
        if op.staged && lq.slots.is_empty() {
            let stages = mem.staging.get().map_or(0, |s| s.stages);
            lq.slots = vec![Slot::Free; stages];
        }
        lq.ops.push_back(Run {
            op,
            bound: None,
            next: 0,
            results: Vec::new(),
            stop: false,
            pending: 0,
            dispatched: false,
        });
        drop(st);
        self.wake.notify_one();
        self.unpark_poller();
        Ok(())
    }

    /// True when the lane has no op and every slot is free.
    pub(crate) fn lane_idle(&self, lane: u64) -> bool {
        lock(&self.state)
            .lanes
            .get(&lane)
            .is_none_or(|lq| !lq.active())
    }

    /// Let go of an idle lane (its memory may then be freed). False when it
    /// still has work.
    pub(crate) fn forget_lane(&self, lane: u64) -> bool {
        let mut st = lock(&self.state);
        if st.lanes.get(&lane).is_some_and(|lq| lq.active()) {
            return false;
        }
        st.lanes.remove(&lane);
        true
    }

    /// No more ops will come: the threads exit once the queued ones are done.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        let _st = lock(&self.state);
        self.wake.notify_all();
    }

    fn unpark_poller(&self) {
        if let Some(t) = lock(&self.poller).as_ref() {
            t.unpark();
        }
    }

    fn poll(self: Arc<Self>) {
        // Sleeps of 20 µs should last about that long, not the default 50 µs
        // of timer slack more: they bound how late a stream flag is seen.
        // SAFETY: PR_SET_TIMERSLACK changes only the calling thread's slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000, 0, 0, 0) };
        let mut idle = 0u32;
        loop {
            let progress = {
                let mut st = lock(&self.state);
                let mut progress = self.apply_completions(&mut st);
                for lq in st.lanes.values_mut() {
                    progress |= self.step(lq);
                }
                if !st.lanes.values().any(LaneQueue::active) {
                    if self.closing.load(Ordering::Acquire) {
                        st.poller_alive = false;
                        drop(st);
                        self.close_io();
                        return;
                    }
                    // Nothing on any stream: sleep until an op is queued.
                    drop(self.wake.wait(st).unwrap_or_else(|e| e.into_inner()));
                    idle = 0;
                    continue;
                }
                progress
            };
            if self.run_orphan_tasks() {
                continue;
            }
            if progress {
                idle = 0;
            } else if idle < SPIN_POLLS {
                idle += 1;
                std::hint::spin_loop();
                std::thread::yield_now();
            } else {
                std::thread::park_timeout(IDLE_POLL);
            }
        }
    }

    /// When no I/O thread could be started, the poller does the I/O itself.
    fn run_orphan_tasks(&self) -> bool {
        let task = {
            let mut q = lock(&self.io);
            if q.threads > 0 {
                return false;
            }
            q.tasks.pop()
        };
        let Some(task) = task else {
            return false;
        };
        let mut ctx = IoCtx::default();
        if let Some(done) = run_task(task, &mut ctx, &self.stats) {
            lock(&self.completions).push(done);
        }
        true
    }

    fn apply_completions(&self, st: &mut State) -> bool {
        let done = std::mem::take(&mut *lock(&self.completions));
        let any = !done.is_empty();
        for d in done {
            let Some(lq) = st.lanes.get_mut(&d.lane) else {
                log_warn!("stream service: an I/O result for an unknown lane");
                continue;
            };
            let Some(run) = lq.ops.front_mut().filter(|r| r.op.gen == d.gen) else {
                log_warn!("stream service: an I/O result for an op that is not running");
                continue;
            };
            let short = match &d.result {
                Ok(n) => *n < run.results[d.k].0,
                Err(_) => true,
            };
            if short {
                run.stop = true;
            }
            run.results[d.k].1 = Some(d.result);
            run.pending -= 1;
            if let Some(s) = d.slot {
                lq.slots[s] = match lq.slots[s] {
                    Slot::Reading { seq } => Slot::Gpu { seq },
                    _ => Slot::Free, // a write finished
                };
            }
        }
        any
    }

    /// Move one lane forward; true when anything changed.
    fn step(self: &Arc<Self>, lq: &mut LaneQueue) -> bool {
        let mut progress = false;
        let staging = lq.mem.staging.get().copied();
        if let Some(stg) = staging {
            for s in 0..lq.slots.len() {
                // SAFETY: s < stages; the word lives in the lane's page.
                let back = unsafe { &*(lq.mem.back_ptr(s) as *const AtomicU32) };
                match lq.slots[s] {
                    Slot::Gpu { seq } if back.load(Ordering::Acquire) == (seq + 1) as u32 => {
                        lq.slots[s] = Slot::Free;
                        progress = true;
                    }
                    Slot::Fill {
                        seq,
                        k,
                        len,
                        off,
                        skew,
                    } if back.load(Ordering::Acquire) == (seq + 1) as u32 => {
                        let run = lq
                            .ops
                            .front()
                            .expect("a filling stage belongs to the head op");
                        // SAFETY: skew < SKEW_ROOM <= SLOT_PAD, inside the slot.
                        let host = unsafe { stg.slot(s).add(skew) };
                        self.dispatch(Task {
                            lane: run.op.lane,
                            gen: run.op.gen,
                            k,
                            op: run.op.clone(),
                            mem: lq.mem.clone(),
                            kind: TaskKind::WriteStage {
                                slot: s,
                                host,
                                len,
                                off,
                            },
                        });
                        lq.slots[s] = Slot::Writing { seq };
                        progress = true;
                    }
                    _ => {}
                }
            }
        }
        while let Some(run) = lq.ops.front_mut() {
            let state = run.op.state.load(Ordering::Acquire);
            if state == WITHDRAWN {
                lq.ops.pop_front();
                progress = true;
                continue;
            }
            if run.bound.is_none() {
                if lq.mem.word(STARTED).load(Ordering::Acquire) != run.op.gen {
                    break;
                }
                self.bind(run, staging);
                progress = true;
            }
            if !run.op.staged && !run.dispatched {
                self.dispatch_host(run, &lq.mem);
                progress = true;
            }
            // After `state`: once the submission finished, this is final.
            let enqueued = run.op.enqueued.load(Ordering::Acquire);
            if let Some(stg) = staging {
                while run.op.staged && run.next < enqueued {
                    let q = run.op.first_seq + run.next as u64;
                    let s = (q % stg.stages as u64) as usize;
                    if lq.slots[s] != Slot::Free {
                        break;
                    }
                    lq.slots[s] = self.prepare(run, &lq.mem, &stg, s, q);
                    run.next += 1;
                    progress = true;
                }
            }
            let all_prepared = !run.op.staged || run.next == enqueued;
            if state == FINISHED && all_prepared && run.pending == 0 {
                let run = lq.ops.pop_front().expect("the head op");
                Self::finish(run, &lq.mem);
                progress = true;
                continue;
            }
            break;
        }
        progress
    }

    /// The stream reached the op: bind its parameters.
    fn bind(&self, run: &mut Run, staging: Option<Staging>) {
        let op = &run.op;
        let bound = match op.failure() {
            Some(e) => Err(result_value(&Err(e))),
            // SAFETY: the stream has reached the op and the caller keeps
            // parameter storage alive until it has executed.
            None => unsafe { op.binding.bind() },
        };
        let piece = staging.map_or(0, |s| s.stage_bytes);
        let size = *bound.as_ref().map(|b| &b.size).unwrap_or(&0);
        run.results = if op.staged {
            (0..op.stages)
                .map(|k| ((size.saturating_sub(k * piece)).min(piece), None))
                .collect()
        } else {
            Vec::new()
        };
        log_debug!(
            "stream op lane {} gen {}: reached, bound {:?}",
            op.lane,
            op.gen,
            bound
        );
        run.bound = Some(bound);
    }

    /// Hand stage `k = run.next` (sequence `q`, slot `s`) to the stream:
    /// directly when it moves nothing, through a read first when it is a
    /// read, as a descriptor when it is a write. Returns the slot's new state.
    fn prepare(
        self: &Arc<Self>,
        run: &mut Run,
        mem: &Arc<LaneMem>,
        stg: &Staging,
        s: usize,
        q: u64,
    ) -> Slot {
        let k = run.next;
        let value = (q + 1) as u32;
        let bound = match run.bound {
            Some(Ok(b)) if !run.stop && !run.op.failed.load(Ordering::Acquire) => Some(b),
            _ => None,
        };
        let len = bound.map_or(0, |_| run.results[k].0);
        let Some(b) = bound.filter(|_| len > 0) else {
            mem.release(s, CopyDesc::default(), value);
            run.results[k].1 = Some(Ok(0));
            return Slot::Gpu { seq: q };
        };
        let at = (k * stg.stage_bytes) as u64;
        let off = b.file_offset + at;
        let user = b.buf + at;
        let file = &run.op.file.0;
        run.pending += 1;
        match run.op.dir {
            Direction::Read => {
                let direct = io::wants_direct(file, off, len, self.mode);
                // Land the bytes at the user's address modulo 16 (the place
                // kernel then moves 16-byte vectors); an O_DIRECT read needs
                // the slot's alignment instead.
                let skew = if direct { 0 } else { (user % 16) as usize };
                let room = stg.stride() - skew;
                let pieces = len.div_ceil(STAGE_PIECE_BYTES);
                let join = Arc::new(StageJoin {
                    slot: s,
                    desc: CopyDesc {
                        dst: user,
                        src: stg.dev + skew as u64,
                        len: 0,
                        reserved: 0,
                    },
                    value,
                    remaining: AtomicUsize::new(pieces),
                    results: Mutex::new(
                        (0..pieces)
                            .map(|i| ((len - i * STAGE_PIECE_BYTES).min(STAGE_PIECE_BYTES), None))
                            .collect(),
                    ),
                });
                for i in 0..pieces {
                    let at = i * STAGE_PIECE_BYTES;
                    let piece_len = (len - at).min(STAGE_PIECE_BYTES);
                    self.dispatch(Task {
                        lane: run.op.lane,
                        gen: run.op.gen,
                        k,
                        op: run.op.clone(),
                        mem: mem.clone(),
                        kind: TaskKind::ReadStage {
                            join: join.clone(),
                            piece: i,
                            // SAFETY: skew + at < SLOT_PAD + len: inside the slot.
                            host: unsafe { stg.slot(s).add(skew + at) },
                            len: piece_len,
                            // A piece before the last must not round up into
                            // its neighbour: it is whole alignment units (an
                            // O_DIRECT stage starts aligned, pieces are 1 MiB).
                            room: if i + 1 == pieces {
                                room - at
                            } else {
                                piece_len
                            },
                            off: off + at as u64,
                            direct,
                        },
                    });
                }
                Slot::Reading { seq: q }
            }
            Direction::Write => {
                let skew = (user % 16) as usize;
                let desc = CopyDesc {
                    dst: stg.dev + skew as u64,
                    src: user,
                    len: len as u64,
                    reserved: 0,
                };
                mem.release(s, desc, value);
                Slot::Fill {
                    seq: q,
                    k,
                    len,
                    off,
                    skew,
                }
            }
        }
    }

    /// A host-memory op: its pieces go to the I/O pool.
    fn dispatch_host(self: &Arc<Self>, run: &mut Run, mem: &Arc<LaneMem>) {
        run.dispatched = true;
        let Some(Ok(b)) = run.bound else {
            return;
        };
        let piece = crate::config::DEFAULT_CHUNK_BYTES;
        let n = b.size.div_ceil(piece);
        run.results = (0..n)
            .map(|i| ((b.size - i * piece).min(piece), None))
            .collect();
        run.pending = n;
        for i in 0..n {
            let len = run.results[i].0;
            let off = b.file_offset + (i * piece) as u64;
            let direct = run.op.dir == Direction::Read
                && io::wants_direct(&run.op.file.0, off, len, self.mode);
            self.dispatch(Task {
                lane: run.op.lane,
                gen: run.op.gen,
                k: i,
                op: run.op.clone(),
                mem: mem.clone(),
                kind: TaskKind::Host {
                    ptr: (b.buf as usize + i * piece) as *mut u8,
                    len,
                    off,
                    direct,
                },
            });
        }
    }

    /// Store the op's result, then release the stream's final wait.
    fn finish(run: Run, mem: &LaneMem) {
        let op = &run.op;
        let v = match (op.failure(), &run.bound) {
            (Some(e), _) => result_value(&Err(e)),
            (None, Some(Err(v))) => *v,
            (None, Some(Ok(_))) => result_value(&combine_results(&run.results)),
            (None, None) => result_value(&Err(OpError::InternalError.into())),
        };
        // SAFETY: the stream has not passed the op (it waits for `done`),
        // so the caller's result storage is live.
        unsafe { op.binding.ptrs.store_result(v) };
        mem.word(DONE).store(op.gen, Ordering::Release);
        log_debug!(
            "stream op lane {} gen {}: done ({v}), releasing its stream",
            op.lane,
            op.gen
        );
    }

    /// Queue a task; start another I/O thread while all are busy and fewer
    /// than the engine's I/O threads run.
    fn dispatch(self: &Arc<Self>, task: Task) {
        let mut q = lock(&self.io);
        q.tasks.push(task);
        if q.idle > 0 {
            drop(q);
            self.io_cv.notify_one();
            return;
        }
        if q.threads < self.max_threads {
            let id = q.threads;
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("hipfile-sio-{id}"))
                .spawn(move || me.io_thread(id));
            match spawned {
                Ok(_) => q.threads += 1,
                Err(e) if q.threads == 0 => log_warn!(
                    "cannot start a stream I/O thread ({e}); the stream service thread \
                     does the I/O itself"
                ),
                Err(_) => {}
            }
        }
    }

    fn io_thread(self: Arc<Self>, id: usize) {
        let mut ctx = IoCtx::new(&self.faults, self.fault_base + id);
        loop {
            let task = {
                let mut q = lock(&self.io);
                loop {
                    if let Some(t) = q.tasks.pop() {
                        break t;
                    }
                    if q.closing {
                        q.threads -= 1;
                        return;
                    }
                    q.idle += 1;
                    q = self.io_cv.wait(q).unwrap_or_else(|e| e.into_inner());
                    q.idle -= 1;
                }
            };
            if let Some(done) = run_task(task, &mut ctx, &self.stats) {
                lock(&self.completions).push(done);
                self.unpark_poller();
            }
        }
    }

    fn close_io(&self) {
        lock(&self.io).closing = true;
        self.io_cv.notify_all();
    }
}
