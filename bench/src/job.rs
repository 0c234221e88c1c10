//! One job: a thread with its own buffer, engine and files, running the
//! submit/reap loop and measuring every I/O.
//!
//! Timing uses a job clock that stops while the job verifies data or prepares
//! verify patterns, so checking never counts in latency or bandwidth. I/Os
//! already in flight keep running during such a pause, so with `verify=1`
//! and iodepth > 1 the figures can flatter slightly; iodepth 1 is exact.

use crate::engines::{self, Dir, Done, Engine as Queue, Op};
use crate::files::{self, FileSpec};
use crate::logs::{Kind as LogKind, Log};
use crate::mem::{HostPages, JobMem};
use crate::options::{CpuPolicy, Engine, JobOptions, MemKind};
use crate::pattern;
use crate::stats::{count_bucket, depth_bucket, JobStats};
use crate::workload::{Gen, Shape};
use hipfile_engine::gpu::Gpu;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Everything one job (one clone) needs.
pub struct JobPlan {
    /// Job number over the whole run (0-based; logs are numbered from 1).
    pub index: usize,
    /// Clone number within its job section (fio's $jobnum).
    pub clone: u64,
    pub opts: Arc<JobOptions>,
    pub engine: Engine,
    pub mem: MemKind,
    pub device: i32,
    pub direct: bool,
    /// I/Os in flight (the engine honours it; checked before the run).
    pub depth: usize,
    pub files: Vec<FileSpec>,
    pub shape: Shape,
    pub ramp_ns: u64,
    /// Stop submitting at this job-clock time (ramp + runtime).
    pub deadline_ns: Option<u64>,
    pub gpu: Arc<dyn Gpu>,
}

impl JobPlan {
    fn slot_bytes(&self) -> usize {
        self.opts.max_bs() as usize
    }

    fn writes(&self) -> bool {
        self.shape.read_pct < 100
    }
}

/// What the main thread sees of a running job: progress counters, and the
/// statistics so far when `--status-interval` asks for them.
#[derive(Default)]
pub struct Live {
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    /// Snapshot generation asked for by the main thread.
    pub want: AtomicU64,
    /// (generation served, statistics then).
    pub snap: Mutex<(u64, Option<JobStats>)>,
    pub served: Condvar,
    pub finished: AtomicBool,
}

impl Live {
    fn publish(&self, generation: u64, stats: &JobStats) {
        if let Ok(mut s) = self.snap.lock() {
            *s = (generation, Some(stats.clone()));
        }
        self.served.notify_all();
    }

    /// The statistics as of a request made now (waits up to `limit` for the
    /// job to answer; a finished job answers with its last figures).
    pub fn snapshot(&self, limit: Duration) -> Option<JobStats> {
        let generation = self.want.fetch_add(1, Ordering::AcqRel) + 1;
        let deadline = Instant::now() + limit;
        let mut s = self.snap.lock().ok()?;
        while s.0 < generation && !self.finished.load(Ordering::Acquire) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s = self.served.wait_timeout(s, left).ok()?.0;
        }
        s.1.clone()
    }
}

/// File blocks a job wrote, for the read-back of `verify=1` writes.
#[derive(Clone, Debug)]
pub struct Written {
    origin: u64,
    unit: u64,
    end: u64,
    bits: Vec<u64>,
}

impl Written {
    pub fn new(origin: u64, end: u64, unit: u64) -> Written {
        let blocks = (end - origin).div_ceil(unit);
        Written {
            origin,
            unit,
            end,
            bits: vec![0; blocks.div_ceil(64) as usize],
        }
    }

    /// Mark every block `[offset, offset + len)` touches.
    pub fn mark(&mut self, offset: u64, len: u64) {
        let first = (offset - self.origin) / self.unit;
        let last = (offset + len.max(1) - 1 - self.origin) / self.unit;
        for k in first..=last {
            self.bits[(k / 64) as usize] |= 1 << (k % 64);
        }
    }

    /// The written byte ranges, adjacent blocks merged, in file order.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        let blocks = (self.end - self.origin).div_ceil(self.unit);
        let mut out: Vec<(u64, u64)> = Vec::new();
        for k in 0..blocks {
            if self.bits[(k / 64) as usize] & (1 << (k % 64)) == 0 {
                continue;
            }
            let s = self.origin + k * self.unit;
            let e = (s + self.unit).min(self.end);
            match out.last_mut() {
                Some(last) if last.1 == s => last.1 = e,
                _ => out.push((s, e)),
            }
        }
        out
    }
}

/// Why a job stopped early.
#[derive(Debug)]
pub enum JobError {
    Io(String),
    Verify {
        path: String,
        offset: u64,
        got: u8,
        want: u8,
    },
}

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobError::Io(e) => write!(f, "{e}"),
            JobError::Verify {
                path,
                offset,
                got,
                want,
            } => write!(
                f,
                "verify: data mismatch in {path} at offset {offset} ({offset:#x}): read {got:#04x}, expected {want:#04x}"
            ),
        }
    }
}

impl From<String> for JobError {
    fn from(e: String) -> JobError {
        JobError::Io(e)
    }
}

/// What a job measured.
pub struct JobOutcome {
    pub stats: JobStats,
    /// From the start of statistics (after ramp) to the job's end, job clock.
    pub runtime_ns: u64,
    /// Time the clock stood still for verification.
    pub verify_ns: u64,
    /// Ranges written per file (verify=1 writes), for the read-back.
    pub written: Vec<(String, Vec<(u64, u64)>)>,
    /// The raw engine registered its buffer with the ring.
    pub fixed_buffers: Option<bool>,
    pub logs: Vec<Log>,
}

/// The job clock: wall time minus the pauses for verification.
struct Clock {
    t0: Instant,
    paused_ns: u64,
}

impl Clock {
    fn now(&self) -> u64 {
        (self.t0.elapsed().as_nanos() as u64).saturating_sub(self.paused_ns)
    }
}

/// A file the job has open.
struct OpenFile {
    fd: i32,
    fh: usize,
    in_flight: usize,
    written: bool,
    writes_since_sync: u64,
}

struct Files<'a> {
    plan: &'a JobPlan,
    open: Vec<Option<OpenFile>>,
    /// Files ever written (for end_fsync after they were closed).
    written: Vec<bool>,
}

impl<'a> Files<'a> {
    fn new(plan: &'a JobPlan) -> Files<'a> {
        Files {
            plan,
            open: (0..plan.files.len()).map(|_| None).collect(),
            written: vec![false; plan.files.len()],
        }
    }

    fn ensure_open(&mut self, f: usize) -> Result<&mut OpenFile, String> {
        if self.open[f].is_none() && self.plan.engine == Engine::Copy {
            // copy moves no file data: its "file" is only a size.
            self.open[f] = Some(OpenFile {
                fd: -1,
                fh: 0,
                in_flight: 0,
                written: false,
                writes_since_sync: 0,
            });
        }
        if self.open[f].is_none() {
            let path = &self.plan.files[f].path;
            let fd = files::open(path, self.plan.writes(), self.plan.direct)?;
            let fh = if self.plan.engine.uses_hipfile() {
                match engines::hipfile::handle_register(fd) {
                    Ok(h) => h,
                    Err(e) => {
                        // SAFETY: fd is ours.
                        unsafe { libc::close(fd) };
                        return Err(format!("{path}: {e}"));
                    }
                }
            } else {
                0
            };
            self.open[f] = Some(OpenFile {
                fd,
                fh,
                in_flight: 0,
                written: false,
                writes_since_sync: 0,
            });
        }
        Ok(self.open[f].as_mut().expect("opened above"))
    }

    fn sync_one(fd: i32, data_only: bool) -> Result<(), String> {
        // SAFETY: fd is a descriptor this job holds open.
        let r = unsafe {
            if data_only {
                libc::fdatasync(fd)
            } else {
                libc::fsync(fd)
            }
        };
        if r != 0 {
            return Err(format!("fsync: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    fn close(&mut self, f: usize) -> Result<(), String> {
        let Some(of) = self.open[f].take() else {
            return Ok(());
        };
        if of.fd < 0 {
            return Ok(());
        }
        let mut res = Ok(());
        if of.written && self.plan.opts.fsync_on_close {
            res = Files::sync_one(of.fd, false);
        }
        if self.plan.engine.uses_hipfile() {
            engines::hipfile::handle_deregister(of.fh);
        }
        // SAFETY: fd is ours and no I/O uses it any more.
        unsafe { libc::close(of.fd) };
        res
    }

    fn close_all(&mut self) -> Result<(), String> {
        let mut res = Ok(());
        for f in 0..self.open.len() {
            let r = self.close(f);
            if res.is_ok() {
                res = r;
            }
        }
        res
    }
}

impl Drop for Files<'_> {
    fn drop(&mut self) {
        let _ = self.close_all();
    }
}

struct Setup {
    mem: JobMem,
    engine: Box<dyn Queue>,
    registered: bool,
    fixed_buffers: Option<bool>,
}

fn set_affinity(o: &JobOptions, clone: u64) -> Result<(), String> {
    let Some(cpus) = &o.cpus_allowed else {
        return Ok(());
    };
    let chosen: Vec<usize> = match o.cpus_allowed_policy {
        CpuPolicy::Shared => cpus.clone(),
        CpuPolicy::Split => vec![cpus[(clone % cpus.len() as u64) as usize]],
    };
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in chosen {
        if c < 8 * std::mem::size_of::<libc::cpu_set_t>() {
            // SAFETY: CPU_SET writes inside the set; c is below its size in bits.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
    }
    // SAFETY: pid 0 is this thread; set is a live cpu_set_t of the size given.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        return Err(format!(
            "cpus_allowed: sched_setaffinity: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn setup(plan: &JobPlan, first_offset: u64) -> Result<Setup, String> {
    set_affinity(&plan.opts, plan.clone)?;
    let slot_bytes = plan.slot_bytes();
    let mut mem = match plan.mem {
        MemKind::Device => JobMem::device(plan.depth, slot_bytes, &plan.gpu, plan.device)?,
        MemKind::Host => JobMem::host(plan.depth, slot_bytes, &plan.gpu, HostPages::Populated)?,
        MemKind::HostHuge => JobMem::host(plan.depth, slot_bytes, &plan.gpu, HostPages::Huge)?,
        MemKind::HostMalloc => JobMem::host(plan.depth, slot_bytes, &plan.gpu, HostPages::Malloc)?,
    };
    if plan.writes() {
        // Writes without verify send what the buffer holds: the pattern of
        // the job's first blocks, prepared once, outside the timed run.
        for slot in 0..plan.depth {
            let off = first_offset + (slot * slot_bytes) as u64;
            mem.store(slot, slot_bytes, |b| pattern::fill(b, off))?;
        }
    }
    let mut registered = false;
    if plan.engine.uses_hipfile() && plan.opts.buf_register {
        engines::hipfile::buf_register(mem.base(), mem.len())?;
        registered = true;
    }
    let base = mem.base();
    let mut fixed_buffers = None;
    let engine: Result<Box<dyn Queue>, String> = match plan.engine {
        Engine::HipfileSync => Ok(Box::new(engines::hipfile::SyncEngine::new(
            base, slot_bytes,
        ))),
        Engine::HipfileAsync => engines::hipfile::AsyncEngine::new(
            base,
            slot_bytes,
            plan.depth,
            &plan.gpu,
            plan.device,
            plan.opts.bs.iter().all(|b| b % 4096 == 0)
                && plan.files.iter().all(|f| f.start % 4096 == 0),
        )
        .map(|e| Box::new(e) as Box<dyn Queue>),
        Engine::HipfileBatch => engines::hipfile::BatchEngine::new(base, slot_bytes, plan.depth)
            .map(|e| Box::new(e) as Box<dyn Queue>),
        Engine::Posix => {
            if mem.is_device() {
                engines::posix::PosixEngine::device(base, slot_bytes, &plan.gpu, plan.device)
                    .map(|e| Box::new(e) as Box<dyn Queue>)
            } else {
                Ok(Box::new(engines::posix::PosixEngine::host(
                    base, slot_bytes,
                )))
            }
        }
        Engine::Raw => {
            engines::raw::RawEngine::new(base, slot_bytes, plan.depth, plan.opts.fixedbufs).map(
                |e| {
                    fixed_buffers = plan.opts.fixedbufs.then(|| e.uses_fixed_buffers());
                    Box::new(e) as Box<dyn Queue>
                },
            )
        }
        Engine::Copy => {
            engines::copy::CopyEngine::new(&plan.gpu, plan.device, base, slot_bytes, plan.depth)
                .map(|e| Box::new(e) as Box<dyn Queue>)
        }
    };
    match engine {
        Ok(engine) => Ok(Setup {
            mem,
            engine,
            registered,
            fixed_buffers,
        }),
        Err(e) => {
            if registered {
                let _ = engines::hipfile::buf_deregister(base);
            }
            Err(e)
        }
    }
}

/// Run job `plan`: set up, wait at `start` with the others, run, wait at
/// `finish` until every job's I/O is done, tear down. Both barriers are
/// always reached, even when setup fails, so no job hangs.
pub fn run(
    plan: &JobPlan,
    start: &Barrier,
    finish: &Barrier,
    live: &Live,
) -> Result<JobOutcome, JobError> {
    let first_offset = plan.files.first().map_or(0, |f| f.start);
    let mut files = Files::new(plan);
    // A panic in setup must not leave the other jobs waiting at the barrier.
    let ready = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let s = setup(plan, first_offset)?;
        // Files open before the clock starts unless the job opens them per
        // I/O or may hold only some open at a time.
        if plan.engine != Engine::Copy
            && !plan.opts.open_per_io
            && plan.shape.open_limit >= plan.files.len()
        {
            for f in 0..plan.files.len() {
                files.ensure_open(f)?;
            }
        }
        Ok::<Setup, String>(s)
    }))
    .unwrap_or_else(|_| Err("setup panicked".into()));
    start.wait();
    let Setup {
        mut mem,
        mut engine,
        registered,
        fixed_buffers,
    } = match ready {
        Ok(s) => s,
        Err(e) => {
            live.finished.store(true, Ordering::Release);
            live.served.notify_all();
            finish.wait();
            return Err(JobError::Io(format!("job {}: {e}", plan.index)));
        }
    };
    let r = Runner::new(plan, live).run(&mut files, &mut mem, engine.as_mut());
    let fin = engine.finish();
    live.finished.store(true, Ordering::Release);
    live.served.notify_all();
    finish.wait();
    drop(engine);
    let closed = files.close_all();
    if registered {
        let d = engines::hipfile::buf_deregister(mem.base());
        if r.is_ok() && fin.is_ok() {
            d?;
        }
    }
    let mut out = r?;
    fin?;
    closed?;
    out.fixed_buffers = fixed_buffers;
    Ok(out)
}

struct InFlight {
    op: Op,
    file: usize,
    t_start: u64,
    t_end: u64,
}

/// Windowed bandwidth/IOPS sampling (fio's bw_avg_time, iops_avg_time, and
/// log_avg_msec for those logs).
struct Sampler {
    period_ns: u64,
    last_ns: u64,
    /// Bytes and I/Os per direction at the last sample.
    at_last: [(u64, u64); 2],
}

impl Sampler {
    fn new(period_ms: u64, start_ns: u64) -> Sampler {
        Sampler {
            period_ns: period_ms.max(1) * 1_000_000,
            last_ns: start_ns,
            at_last: [(0, 0); 2],
        }
    }

    /// When a period has passed: (spent ns, per direction: byte and I/O deltas).
    fn take(&mut self, now: u64, stats: &JobStats) -> Option<(u64, [(u64, u64); 2])> {
        if now < self.last_ns + self.period_ns {
            return None;
        }
        let spent = now - self.last_ns;
        let mut d = [(0, 0); 2];
        for (i, s) in stats.dirs.iter().enumerate() {
            d[i] = (s.bytes - self.at_last[i].0, s.ios - self.at_last[i].1);
            self.at_last[i] = (s.bytes, s.ios);
        }
        self.last_ns = now;
        Some((spent, d))
    }
}

struct Runner<'a> {
    plan: &'a JobPlan,
    live: &'a Live,
    clock: Clock,
    stats: JobStats,
    gen: Gen,
    written: HashMap<usize, Written>,
    logs: Vec<Log>,
    bw_sampler: Sampler,
    iops_sampler: Sampler,
    log_sampler: Option<Sampler>,
    served_snapshot: u64,
    last_completion: u64,
}

impl<'a> Runner<'a> {
    fn new(plan: &'a JobPlan, live: &'a Live) -> Runner<'a> {
        let o = &plan.opts;
        let mut logs = Vec::new();
        if let Some(p) = &o.write_bw_log {
            logs.push(Log::new(LogKind::Bw, p, o.log_avg_msec));
        }
        if let Some(p) = &o.write_iops_log {
            logs.push(Log::new(LogKind::Iops, p, o.log_avg_msec));
        }
        if let Some(p) = &o.write_lat_log {
            for k in [LogKind::Lat, LogKind::Clat, LogKind::Slat] {
                logs.push(Log::new(k, p, o.log_avg_msec));
            }
        }
        let ramp = plan.ramp_ns;
        Runner {
            plan,
            live,
            clock: Clock {
                t0: Instant::now(),
                paused_ns: 0,
            },
            stats: JobStats::default(),
            gen: Gen::new(plan.shape.clone()),
            written: HashMap::new(),
            bw_sampler: Sampler::new(o.bw_avg_msec, ramp),
            iops_sampler: Sampler::new(o.iops_avg_msec, ramp),
            log_sampler: (o.log_avg_msec > 0
                && (o.write_bw_log.is_some() || o.write_iops_log.is_some()))
            .then(|| Sampler::new(o.log_avg_msec, ramp)),
            logs,
            served_snapshot: 0,
            last_completion: ramp,
        }
    }

    fn paused<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let p0 = Instant::now();
        let r = f();
        self.clock.paused_ns += p0.elapsed().as_nanos() as u64;
        r
    }

    fn run(
        mut self,
        files: &mut Files,
        mem: &mut JobMem,
        eng: &mut dyn Queue,
    ) -> Result<JobOutcome, JobError> {
        let plan = self.plan;
        let o = &*plan.opts;
        let depth = plan.depth;
        let mut free: Vec<usize> = (0..depth).rev().collect();
        let mut slots: Vec<Option<InFlight>> = (0..depth).map(|_| None).collect();
        let mut in_flight = 0usize;
        let mut stopping = false;
        let mut draining = false;
        let mut done: Vec<Done> = Vec::with_capacity(depth);
        let low = o.iodepth_low.unwrap_or(depth as u64) as usize;
        // I/Os per submission: all queued ones for the batch API (one
        // hipFileBatchIOSubmit); otherwise fio's 1 (io_uring: each I/O its
        // own io_uring_enter, as fio commits it; the other engines make one
        // call per I/O anyway).
        let batch = match (o.iodepth_batch_submit, plan.engine) {
            (Some(n), _) => n.max(1) as usize,
            (None, Engine::HipfileBatch) => usize::MAX,
            (None, _) => 1,
        };
        let mut result: Result<(), JobError> = Ok(());

        'run: loop {
            if !stopping && plan.deadline_ns.is_some_and(|d| self.clock.now() >= d) {
                stopping = true;
            }
            if draining && in_flight <= low {
                draining = false;
            }
            let mut queued = 0usize;
            while !stopping && !draining {
                let Some(&slot) = free.last() else { break };
                let Some(next) = self.gen.next_op() else {
                    stopping = true;
                    break;
                };
                free.pop();
                let t_start = self.clock.now();
                let of = match files.ensure_open(next.file) {
                    Ok(of) => of,
                    Err(e) => {
                        free.push(slot);
                        result = Err(e.into());
                        break 'run;
                    }
                };
                of.in_flight += 1;
                let op = Op {
                    dir: next.dir,
                    offset: next.offset,
                    len: next.len,
                    fd: of.fd,
                    fh: of.fh,
                };
                if op.dir == Dir::Write {
                    of.written = true;
                    files.written[next.file] = true;
                    if o.verify {
                        let r = self
                            .paused(|| mem.store(slot, op.len, |b| pattern::fill(b, op.offset)));
                        if let Err(e) = r {
                            result = Err(e.into());
                            break 'run;
                        }
                        let f = &plan.files[next.file];
                        // Blocks of the smaller size: reads and writes may differ (bs=R,W).
                        let unit = plan.shape.bs[0].min(plan.shape.bs[1]);
                        self.written
                            .entry(next.file)
                            .or_insert_with(|| Written::new(f.start, f.start + f.len, unit))
                            .mark(op.offset, op.len as u64);
                    }
                }
                if let Err(e) = eng.submit(slot, op) {
                    free.push(slot);
                    result = Err(e.into());
                    break 'run;
                }
                let t_end = self.clock.now();
                slots[slot] = Some(InFlight {
                    op,
                    file: next.file,
                    t_start,
                    t_end,
                });
                in_flight += 1;
                queued += 1;
                if t_end >= plan.ramp_ns {
                    self.stats.depth_map[depth_bucket(in_flight as u64)] += 1;
                }
                if queued >= batch {
                    if let Err(e) = self.commit(eng, queued) {
                        result = Err(e);
                        break 'run;
                    }
                    queued = 0;
                }
            }
            if queued > 0 {
                if let Err(e) = self.commit(eng, queued) {
                    result = Err(e);
                    break 'run;
                }
            }
            if in_flight >= depth {
                draining = true;
            }
            if in_flight == 0 {
                break;
            }
            done.clear();
            let min = (o.iodepth_batch_complete_min as usize).clamp(1, in_flight);
            if let Err(e) = eng.reap(min, &mut done) {
                result = Err(e.into());
                break;
            }
            self.stats.complete_map[count_bucket(done.len() as u64)] += 1;
            self.stats.total_complete += 1;
            for d in done.drain(..) {
                let Some(f) = slots.get_mut(d.slot).and_then(Option::take) else {
                    result = Err(JobError::Io(format!(
                        "engine reported slot {} that has no I/O",
                        d.slot
                    )));
                    break 'run;
                };
                in_flight -= 1;
                free.push(d.slot);
                if let Err(e) = self.complete(files, mem, &f, d.slot, d.result) {
                    result = Err(e);
                    break 'run;
                }
            }
            let now = self.clock.now();
            self.sample(now);
            if let Err(e) = self.maybe_sync(files, mem, eng, &mut slots, &mut free, &mut in_flight)
            {
                result = Err(e);
                break;
            }
            let want = self.live.want.load(Ordering::Acquire);
            if want != self.served_snapshot {
                self.served_snapshot = want;
                self.live.publish(want, &self.stats);
            }
        }
        if result.is_err() {
            // Let every I/O still in flight finish before the buffers go away.
            let mut tries = 0;
            while in_flight > 0 && tries < 1_000_000 {
                tries += 1;
                done.clear();
                if eng.reap(1, &mut done).is_err() {
                    break;
                }
                in_flight = in_flight.saturating_sub(done.len());
            }
        }
        result?;
        self.end_fsync(files)?;
        let end = self.clock.now();
        let runtime_ns = self.last_completion.saturating_sub(plan.ramp_ns);
        for s in self.stats.dirs.iter_mut() {
            s.runtime_ns = if s.ios > 0 { runtime_ns } else { 0 };
        }
        let end_ms = end / 1_000_000;
        for l in self.logs.iter_mut() {
            l.finish(end_ms);
        }
        self.live.publish(u64::MAX, &self.stats);
        let written = self
            .written
            .iter()
            .map(|(&f, w)| (plan.files[f].path.clone(), w.ranges()))
            .collect();
        Ok(JobOutcome {
            stats: self.stats,
            runtime_ns,
            verify_ns: self.clock.paused_ns,
            written,
            fixed_buffers: None,
            logs: self.logs,
        })
    }

    /// Hand `n` queued I/Os to the engine (one fio "submit").
    fn commit(&mut self, eng: &mut dyn Queue, n: usize) -> Result<(), JobError> {
        eng.flush()?;
        self.stats.submit_map[count_bucket(n as u64)] += 1;
        self.stats.total_submit += 1;
        Ok(())
    }

    /// Account one finished I/O.
    fn complete(
        &mut self,
        files: &mut Files,
        mem: &mut JobMem,
        f: &InFlight,
        slot: usize,
        result: Result<usize, String>,
    ) -> Result<(), JobError> {
        let plan = self.plan;
        let o = &*plan.opts;
        let n = result?;
        let path = &plan.files[f.file].path;
        if n == 0 && f.op.len > 0 {
            return Err(JobError::Io(format!(
                "unexpected end of file in {path} at offset {} (the file is shorter than offset + size?)",
                f.op.offset
            )));
        }
        if let Some(of) = files.open[f.file].as_mut() {
            of.in_flight -= 1;
            if f.op.dir == Dir::Write {
                of.writes_since_sync += 1;
            }
        }
        // The file is done with: per-I/O opens close now; a finished file
        // closes when the job may hold only some files open.
        let idle = files.open[f.file]
            .as_ref()
            .is_some_and(|of| of.in_flight == 0);
        if idle
            && (o.open_per_io
                || (plan.shape.open_limit < plan.files.len() && self.gen.is_done(f.file)))
        {
            files.close(f.file)?;
        }
        let t_done = self.clock.now();
        if plan.opts.verify && f.op.dir == Dir::Read {
            let bad = self.paused(|| {
                mem.fetch(slot, n)
                    .map(|data| pattern::check(data, f.op.offset))
            });
            match bad {
                Ok(None) => {}
                Ok(Some((offset, got, want))) => {
                    return Err(JobError::Verify {
                        path: path.clone(),
                        offset,
                        got,
                        want,
                    })
                }
                Err(e) => return Err(e.into()),
            }
        }
        if t_done < plan.ramp_ns {
            return Ok(());
        }
        let di = (f.op.dir == Dir::Write) as usize;
        let slat = f.t_end - f.t_start;
        let clat = t_done - f.t_end;
        let lat = t_done - f.t_start;
        let s = &mut self.stats.dirs[di];
        s.bytes += n as u64;
        s.ios += 1;
        if n < f.op.len {
            s.short_ios += 1;
        }
        if plan.engine.has_slat() && !o.disable_slat {
            s.slat.add(slat);
        }
        if !o.disable_clat {
            s.clat.add(clat);
        }
        if !o.disable_lat {
            s.lat.add(lat);
        }
        if !o.disable_clat {
            self.stats.mark_latency(clat);
        }
        self.last_completion = t_done;
        let ctr = if di == 0 {
            &self.live.read_bytes
        } else {
            &self.live.write_bytes
        };
        ctr.fetch_add(n as u64, Ordering::Relaxed);
        let t_ms = t_done / 1_000_000;
        let has_slat = plan.engine.has_slat();
        for l in self.logs.iter_mut() {
            let v = match l.kind {
                LogKind::Lat => Some(lat),
                LogKind::Clat => Some(clat),
                LogKind::Slat => has_slat.then_some(slat),
                // fio's per-I/O bandwidth: bytes * 10^6 / completion ns.
                LogKind::Bw if !l.windowed() => {
                    Some((n as u64 * 1_000_000).checked_div(clat).unwrap_or(0))
                }
                LogKind::Iops if !l.windowed() => Some(1),
                _ => None,
            };
            if let Some(v) = v {
                l.add(t_ms, v, di as u8, n as u64, f.op.offset);
            }
        }
        Ok(())
    }

    /// Close the sampling windows that have passed.
    fn sample(&mut self, now: u64) {
        if now < self.plan.ramp_ns || self.plan.opts.disable_bw {
            return;
        }
        if let Some((spent, d)) = self.bw_sampler.take(now, &self.stats) {
            for (i, (bytes, _)) in d.iter().enumerate() {
                if *bytes > 0 {
                    let kib_s = (*bytes as u128 * 1_000_000_000 / spent as u128 / 1024) as u64;
                    self.stats.dirs[i].bw_samples.add(kib_s);
                }
            }
        }
        if let Some((spent, d)) = self.iops_sampler.take(now, &self.stats) {
            for (i, (_, ios)) in d.iter().enumerate() {
                if *ios > 0 {
                    let iops = (*ios as u128 * 1_000_000_000 / spent as u128) as u64;
                    self.stats.dirs[i].iops_samples.add(iops);
                }
            }
        }
        if let Some(s) = self.log_sampler.as_mut() {
            if let Some((spent, d)) = s.take(now, &self.stats) {
                let t_ms = now / 1_000_000;
                for l in self.logs.iter_mut() {
                    for (i, (bytes, ios)) in d.iter().enumerate() {
                        let v = match l.kind {
                            LogKind::Bw => *bytes as u128 * 1_000_000_000 / spent as u128 / 1024,
                            LogKind::Iops => *ios as u128 * 1_000_000_000 / spent as u128,
                            _ => continue,
                        };
                        if *ios > 0 {
                            l.push_window(t_ms, v as u64, i as u8);
                        }
                    }
                }
            }
        }
    }

    /// fsync=N / fdatasync=N: after N writes to a file, let every I/O in
    /// flight finish, then sync that file (timed as fio's `sync` latency).
    #[allow(clippy::too_many_arguments)]
    fn maybe_sync(
        &mut self,
        files: &mut Files,
        mem: &mut JobMem,
        eng: &mut dyn Queue,
        slots: &mut [Option<InFlight>],
        free: &mut Vec<usize>,
        in_flight: &mut usize,
    ) -> Result<(), JobError> {
        let o = &*self.plan.opts;
        let (every, data_only) = if o.fsync > 0 {
            (o.fsync, false)
        } else if o.fdatasync > 0 {
            (o.fdatasync, true)
        } else {
            return Ok(());
        };
        let due: Vec<usize> = files
            .open
            .iter()
            .enumerate()
            .filter(|(_, f)| f.as_ref().is_some_and(|f| f.writes_since_sync >= every))
            .map(|(i, _)| i)
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        let mut done = Vec::new();
        while *in_flight > 0 {
            done.clear();
            eng.reap(1, &mut done)?;
            for d in done.drain(..) {
                if let Some(f) = slots.get_mut(d.slot).and_then(Option::take) {
                    *in_flight -= 1;
                    free.push(d.slot);
                    self.complete(files, mem, &f, d.slot, d.result)?;
                }
            }
        }
        for f in due {
            let Some(of) = files.open[f].as_mut() else {
                continue;
            };
            let t0 = self.clock.now();
            Files::sync_one(of.fd, data_only)?;
            let t1 = self.clock.now();
            of.writes_since_sync = 0;
            if t1 >= self.plan.ramp_ns {
                self.stats.sync.add(t1 - t0);
                self.last_completion = t1;
            }
        }
        Ok(())
    }

    /// end_fsync: sync every file the job wrote; the time counts in the run.
    fn end_fsync(&mut self, files: &mut Files) -> Result<(), JobError> {
        if !self.plan.opts.end_fsync {
            return Ok(());
        }
        for f in 0..files.written.len() {
            if !files.written[f] {
                continue;
            }
            let t0 = self.clock.now();
            let of = files.ensure_open(f)?;
            Files::sync_one(of.fd, false)?;
            let t1 = self.clock.now();
            self.stats.sync.add(t1 - t0);
            self.last_completion = self.last_completion.max(t1);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_ranges_merge() {
        let mut w = Written::new(100, 100 + 10 * 10 + 5, 10);
        for off in [100, 110, 130, 200] {
            w.mark(off, 10);
        }
        assert_eq!(w.ranges(), vec![(100, 120), (130, 140), (200, 205)]);
        // A write larger than a block marks every block it covers.
        let mut w = Written::new(0, 100, 10);
        w.mark(20, 25);
        assert_eq!(w.ranges(), vec![(20, 50)]);
    }
}
