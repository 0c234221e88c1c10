//! One job: a thread with its own buffer, engine and offsets, running the
//! submit/reap loop and measuring every I/O.
//!
//! Timing uses a job clock that stops while the job verifies data or prepares
//! verify patterns, so checking never counts in latency or bandwidth. I/Os
//! already in flight keep running during such a pause, so with `--verify=1`
//! and iodepth > 1 the figures can flatter slightly; iodepth 1 is exact.

use crate::engines::{self, Dir, Done, Engine, Op};
use crate::mem::JobMem;
use crate::opts::{IoEngine, MemChoice};
use crate::pattern;
use crate::stats::DirStats;
use hipfile_engine::gpu::Gpu;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// Bandwidth sampling window (fio's default `bw_avg_time` / `iops_avg_time`).
pub const SAMPLE_WINDOW_NS: u64 = 500_000_000;

/// What every job shares.
pub struct Plan {
    pub engine: IoEngine,
    pub mem: MemChoice,
    pub gpu: Arc<dyn Gpu>,
    pub device: i32,
    pub fd: i32,
    /// The hipFile handle (hipfile engines only).
    pub fh: usize,
    /// I/Os in flight per job after the engine's limits.
    pub depth: usize,
    pub bs: u64,
    pub read_pct: u32,
    pub random: bool,
    /// The file range `[range_start, range_start + range_len)` under test.
    pub range_start: u64,
    pub range_len: u64,
    /// Bytes per job and pass (sequential: the job's own region).
    pub per_job: u64,
    /// Passes over the region; None = until the deadline (`--time_based`).
    pub passes: Option<u64>,
    pub ramp_ns: u64,
    /// Stop submitting at this job-clock time (ramp + runtime).
    pub deadline_ns: Option<u64>,
    pub verify: bool,
    /// bs and offset are multiples of 4 KiB (hipFileStreamRegister's PAGE_ALIGNED_INPUTS).
    pub aligned: bool,
    /// `--iomem=mmaphuge`: host buffers on transparent huge pages.
    pub huge_pages: bool,
    /// `--fixedbufs=1`: raw registers its buffer with its ring.
    pub fixedbufs: bool,
}

/// Live counters for the progress line.
#[derive(Default)]
pub struct Progress {
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
}

/// File blocks a job wrote, for the read-back check of `--verify=1` writes.
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

    pub fn mark(&mut self, offset: u64) {
        let k = (offset - self.origin) / self.unit;
        self.bits[(k / 64) as usize] |= 1 << (k % 64);
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

/// The offsets and directions of one job's I/Os.
pub struct Gen {
    read_pct: u32,
    random: bool,
    bs: u64,
    start: u64,
    end: u64,
    pos: u64,
    blocks: u64,
    ops_per_pass: u64,
    ops_in_pass: u64,
    passes_left: Option<u64>,
    rng: u64,
}

impl Gen {
    /// Sequential over `[start, end)`, `bs` at a time (the last I/O may be short).
    pub fn sequential(
        start: u64,
        end: u64,
        bs: u64,
        read_pct: u32,
        passes: Option<u64>,
        seed: u64,
    ) -> Gen {
        Gen {
            read_pct,
            random: false,
            bs,
            start,
            end,
            pos: start,
            blocks: 0,
            ops_per_pass: 0,
            ops_in_pass: 0,
            passes_left: passes,
            rng: seed,
        }
    }

    /// `ops_per_pass` uniformly random `bs` blocks of `[start, end)` per pass.
    pub fn random(
        start: u64,
        end: u64,
        bs: u64,
        ops_per_pass: u64,
        read_pct: u32,
        passes: Option<u64>,
        seed: u64,
    ) -> Gen {
        Gen {
            read_pct,
            random: true,
            bs,
            start,
            end,
            pos: start,
            blocks: (end - start).div_ceil(bs),
            ops_per_pass,
            ops_in_pass: 0,
            passes_left: passes,
            rng: seed,
        }
    }

    /// splitmix64: fast, and a fixed seed repeats the run (fio's randrepeat=1).
    fn next_rand(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn dir(&mut self) -> Dir {
        match self.read_pct {
            100 => Dir::Read,
            0 => Dir::Write,
            p => {
                if self.next_rand() % 100 < p as u64 {
                    Dir::Read
                } else {
                    Dir::Write
                }
            }
        }
    }

    /// A pass is over: true when another one follows.
    fn next_pass(&mut self) -> bool {
        match self.passes_left {
            None => true,
            Some(n) if n > 1 => {
                self.passes_left = Some(n - 1);
                true
            }
            Some(_) => {
                self.passes_left = Some(0);
                false
            }
        }
    }

    pub fn next_op(&mut self) -> Option<Op> {
        if self.start >= self.end || self.passes_left == Some(0) {
            return None;
        }
        let offset = if self.random {
            if self.ops_per_pass == 0 {
                return None;
            }
            if self.ops_in_pass >= self.ops_per_pass {
                if !self.next_pass() {
                    return None;
                }
                self.ops_in_pass = 0;
            }
            self.ops_in_pass += 1;
            let b = self.next_rand() % self.blocks;
            self.start + b * self.bs
        } else {
            if self.pos >= self.end {
                if !self.next_pass() {
                    return None;
                }
                self.pos = self.start;
            }
            let o = self.pos;
            self.pos += self.bs.min(self.end - o);
            o
        };
        let len = self.bs.min(self.end - offset) as usize;
        Some(Op {
            dir: self.dir(),
            offset,
            len,
        })
    }
}

/// Why a job stopped early.
#[derive(Debug)]
pub enum JobError {
    Io(String),
    Verify { offset: u64, got: u8, want: u8 },
}

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobError::Io(e) => write!(f, "{e}"),
            JobError::Verify { offset, got, want } => write!(
                f,
                "verify: data mismatch at file offset {offset} ({offset:#x}): read {got:#04x}, expected {want:#04x}"
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
    pub index: usize,
    pub read: DirStats,
    pub write: DirStats,
    /// From the start of the statistics (after ramp) to the last completion, job clock.
    pub runtime_ns: u64,
    /// Time the clock stood still for verification.
    pub verify_ns: u64,
    pub written: Option<Written>,
    /// The raw engine registered its buffer with the ring.
    pub fixed_buffers: Option<bool>,
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

struct InFlight {
    op: Op,
    t_start: u64,
    t_end: u64,
}

struct Setup {
    mem: JobMem,
    engine: Box<dyn Engine>,
    registered: bool,
    fixed_buffers: Option<bool>,
}

fn setup(plan: &Plan, index: usize, first_offset: u64) -> Result<Setup, String> {
    let slot_bytes = plan.bs as usize;
    let mut mem = match plan.mem {
        MemChoice::Device => JobMem::device(plan.depth, slot_bytes, &plan.gpu, plan.device)?,
        MemChoice::Host => JobMem::host(plan.depth, slot_bytes, &plan.gpu, plan.huge_pages)?,
    };
    if plan.read_pct < 100 {
        // Writes without --verify send what the buffer holds: the pattern of
        // the job's first blocks, prepared once, outside the timed run.
        for slot in 0..plan.depth {
            let off = first_offset + (slot as u64) * plan.bs;
            mem.store(slot, slot_bytes, |b| pattern::fill(b, off))?;
        }
    }
    let mut registered = false;
    if plan.engine.uses_hipfile() {
        engines::hipfile::buf_register(mem.base(), mem.len())?;
        registered = true;
    }
    let base = mem.base();
    let mut fixed_buffers = None;
    let engine: Result<Box<dyn Engine>, String> = match plan.engine {
        IoEngine::HipfileSync => Ok(Box::new(engines::hipfile::SyncEngine::new(
            plan.fh, base, slot_bytes,
        ))),
        IoEngine::HipfileAsync => engines::hipfile::AsyncEngine::new(
            plan.fh,
            base,
            slot_bytes,
            plan.depth,
            &plan.gpu,
            plan.device,
            plan.aligned,
        )
        .map(|e| Box::new(e) as Box<dyn Engine>),
        IoEngine::HipfileBatch => {
            engines::hipfile::BatchEngine::new(plan.fh, base, slot_bytes, plan.depth)
                .map(|e| Box::new(e) as Box<dyn Engine>)
        }
        IoEngine::Posix => {
            if mem.is_device() {
                engines::posix::PosixEngine::device(
                    plan.fd,
                    base,
                    slot_bytes,
                    &plan.gpu,
                    plan.device,
                )
                .map(|e| Box::new(e) as Box<dyn Engine>)
            } else {
                Ok(Box::new(engines::posix::PosixEngine::host(
                    plan.fd, base, slot_bytes,
                )))
            }
        }
        IoEngine::Raw => {
            engines::raw::RawEngine::new(plan.fd, base, slot_bytes, plan.depth, plan.fixedbufs).map(
                |e| {
                    fixed_buffers = plan.fixedbufs.then(|| e.uses_fixed_buffers());
                    Box::new(e) as Box<dyn Engine>
                },
            )
        }
        IoEngine::Copy => {
            engines::copy::CopyEngine::new(&plan.gpu, plan.device, base, slot_bytes, plan.depth)
                .map(|e| Box::new(e) as Box<dyn Engine>)
        }
    };
    let engine = match engine {
        Ok(e) => e,
        Err(e) => {
            if registered {
                let _ = engines::hipfile::buf_deregister(base);
            }
            return Err(format!("job {index}: {e}"));
        }
    };
    Ok(Setup {
        mem,
        engine,
        registered,
        fixed_buffers,
    })
}

/// The region (sequential) or range (random) of job `index`, and its generator.
pub fn generator(plan: &Plan, index: usize) -> (Gen, u64, u64) {
    let seed = 0x5eed_0000_0000_0000 ^ index as u64;
    if plan.random {
        let (s, e) = (plan.range_start, plan.range_start + plan.range_len);
        let ops = plan.per_job.div_ceil(plan.bs);
        (
            Gen::random(s, e, plan.bs, ops, plan.read_pct, plan.passes, seed),
            s,
            e,
        )
    } else {
        let s = plan.range_start + index as u64 * plan.per_job;
        let e = s + plan.per_job;
        (
            Gen::sequential(s, e, plan.bs, plan.read_pct, plan.passes, seed),
            s,
            e,
        )
    }
}

/// Run job `index`: set up, wait at `start` with the others, run, wait at
/// `finish` until every job's I/O is done, tear down. Both barriers are always
/// reached, even when setup fails, so no job hangs.
pub fn run(
    plan: &Plan,
    index: usize,
    start: &Barrier,
    finish: &Barrier,
    progress: &Progress,
) -> Result<JobOutcome, JobError> {
    let (mut gen, region_start, region_end) = generator(plan, index);
    // A panic in setup must not leave the other jobs waiting at the barrier.
    let ready = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        setup(plan, index, region_start)
    }))
    .unwrap_or_else(|_| Err(format!("job {index}: setup panicked")));
    start.wait();
    let Setup {
        mut mem,
        mut engine,
        registered,
        fixed_buffers,
    } = match ready {
        Ok(s) => s,
        Err(e) => {
            finish.wait();
            return Err(e.into());
        }
    };
    let written = (plan.verify && plan.read_pct < 100)
        .then(|| Written::new(region_start, region_end, plan.bs));
    let r = run_loop(plan, &mut gen, &mut mem, engine.as_mut(), progress, written);
    let fin = engine.finish();
    finish.wait();
    drop(engine);
    if registered {
        let d = engines::hipfile::buf_deregister(mem.base());
        if r.is_ok() && fin.is_ok() {
            d?;
        }
    }
    let mut out = r?;
    fin?;
    out.index = index;
    out.fixed_buffers = fixed_buffers;
    Ok(out)
}

fn run_loop(
    plan: &Plan,
    gen: &mut Gen,
    mem: &mut JobMem,
    eng: &mut dyn Engine,
    progress: &Progress,
    mut written: Option<Written>,
) -> Result<JobOutcome, JobError> {
    let depth = plan.depth;
    let mut clock = Clock {
        t0: Instant::now(),
        paused_ns: 0,
    };
    let mut stats = [DirStats::new(), DirStats::new()];
    let mut free: Vec<usize> = (0..depth).rev().collect();
    let mut slots: Vec<Option<InFlight>> = (0..depth).map(|_| None).collect();
    let mut in_flight = 0usize;
    let mut stopping = false;
    let mut done: Vec<Done> = Vec::with_capacity(depth);
    let mut last_completion = 0u64;
    // Bandwidth samples: bytes and I/Os per direction at the last window edge.
    let mut next_sample = plan.ramp_ns + SAMPLE_WINDOW_NS;
    let mut at_last_sample = [(0u64, 0u64); 2];

    let mut result: Result<(), JobError> = Ok(());
    'run: loop {
        if !stopping && plan.deadline_ns.is_some_and(|d| clock.now() >= d) {
            stopping = true;
        }
        while !stopping {
            let Some(&slot) = free.last() else { break };
            let Some(op) = gen.next_op() else {
                stopping = true;
                break;
            };
            free.pop();
            if op.dir == Dir::Write {
                if plan.verify {
                    let p0 = Instant::now();
                    let r = mem.store(slot, op.len, |b| pattern::fill(b, op.offset));
                    clock.paused_ns += p0.elapsed().as_nanos() as u64;
                    if let Err(e) = r {
                        result = Err(e.into());
                        break 'run;
                    }
                }
                if let Some(w) = written.as_mut() {
                    w.mark(op.offset);
                }
            }
            let t_start = clock.now();
            if let Err(e) = eng.submit(slot, op) {
                free.push(slot);
                result = Err(e.into());
                break 'run;
            }
            let t_end = clock.now();
            slots[slot] = Some(InFlight { op, t_start, t_end });
            in_flight += 1;
        }
        if in_flight == 0 {
            break;
        }
        done.clear();
        if let Err(e) = eng.reap(1, &mut done) {
            result = Err(e.into());
            break;
        }
        let t_done = clock.now();
        for d in done.drain(..) {
            let Some(f) = slots[d.slot].take() else {
                result = Err(JobError::Io(format!(
                    "engine reported slot {} twice",
                    d.slot
                )));
                break 'run;
            };
            in_flight -= 1;
            free.push(d.slot);
            let n = match d.result {
                Ok(n) => n,
                Err(e) => {
                    result = Err(e.into());
                    break 'run;
                }
            };
            if n == 0 && f.op.len > 0 {
                result = Err(JobError::Io(format!(
                    "unexpected end of file at offset {} (the file is shorter than --offset + --size?)",
                    f.op.offset
                )));
                break 'run;
            }
            let di = (f.op.dir == Dir::Write) as usize;
            if t_done >= plan.ramp_ns {
                stats[di].record(
                    n as u64,
                    n < f.op.len,
                    f.t_end - f.t_start,
                    t_done - f.t_end,
                );
                last_completion = t_done;
                let ctr = if di == 0 {
                    &progress.read_bytes
                } else {
                    &progress.write_bytes
                };
                ctr.fetch_add(n as u64, Ordering::Relaxed);
            }
            if plan.verify && f.op.dir == Dir::Read {
                let p0 = Instant::now();
                let bad = mem
                    .fetch(d.slot, n)
                    .map(|data| pattern::check(data, f.op.offset));
                clock.paused_ns += p0.elapsed().as_nanos() as u64;
                match bad {
                    Ok(None) => {}
                    Ok(Some((offset, got, want))) => {
                        result = Err(JobError::Verify { offset, got, want });
                        break 'run;
                    }
                    Err(e) => {
                        result = Err(e.into());
                        break 'run;
                    }
                }
            }
        }
        // Close every sampling window that has passed (fio's bw/iops samples).
        while t_done >= next_sample {
            for (i, s) in stats.iter_mut().enumerate() {
                let (b0, n0) = at_last_sample[i];
                let secs = SAMPLE_WINDOW_NS as f64 / 1e9;
                s.bw_samples.push((s.bytes - b0) as f64 / secs);
                s.iops_samples.push((s.ios - n0) as f64 / secs);
                at_last_sample[i] = (s.bytes, s.ios);
            }
            next_sample += SAMPLE_WINDOW_NS;
        }
    }
    if result.is_err() {
        // Let every I/O still in flight finish before the buffers go away.
        let mut spins = 0;
        while in_flight > 0 && spins < 1_000_000 {
            spins += 1;
            done.clear();
            if eng.reap(1, &mut done).is_err() {
                break;
            }
            in_flight = in_flight.saturating_sub(done.len());
        }
    }
    result?;
    let runtime_ns = last_completion.saturating_sub(plan.ramp_ns);
    // A run shorter than one window still gets one sample: its average.
    for s in stats.iter_mut() {
        if s.bw_samples.is_empty() && s.ios > 0 && runtime_ns > 0 {
            s.bw_samples.push(s.bw_bytes(runtime_ns));
            s.iops_samples.push(s.iops(runtime_ns));
        }
    }
    let [read, write] = stats;
    Ok(JobOutcome {
        index: 0,
        read,
        write,
        runtime_ns,
        verify_ns: clock.paused_ns,
        written,
        fixed_buffers: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(g: &mut Gen) -> Vec<Op> {
        let mut v = Vec::new();
        while let Some(op) = g.next_op() {
            v.push(op);
            assert!(v.len() < 100_000);
        }
        v
    }

    #[test]
    fn sequential_covers_the_region_per_pass() {
        let mut g = Gen::sequential(1000, 1000 + 10 * 4096 + 100, 4096, 100, Some(2), 1);
        let ops = drain(&mut g);
        assert_eq!(ops.len(), 22);
        assert_eq!(ops[0].offset, 1000);
        assert_eq!(ops[10].offset, 1000 + 10 * 4096);
        assert_eq!(ops[10].len, 100);
        assert_eq!(ops[11].offset, 1000);
        assert!(ops.iter().all(|o| o.dir == Dir::Read));
    }

    #[test]
    fn random_stays_in_range_on_block_boundaries() {
        let mut g = Gen::random(4096, 4096 + 64 * 4096, 4096, 64, 0, Some(3), 7);
        let ops = drain(&mut g);
        assert_eq!(ops.len(), 192);
        assert!(ops.iter().all(|o| o.offset >= 4096
            && o.offset < 4096 + 64 * 4096
            && o.offset % 4096 == 0
            && o.len == 4096));
        assert!(ops.iter().all(|o| o.dir == Dir::Write));
        // Not all the same block.
        assert!(ops.iter().any(|o| o.offset != ops[0].offset));
    }

    #[test]
    fn mixed_direction_follows_the_percentage() {
        let mut g = Gen::sequential(0, 1 << 30, 4096, 70, Some(1), 3);
        let ops: Vec<Op> = (0..10_000).map(|_| g.next_op().unwrap()).collect();
        let reads = ops.iter().filter(|o| o.dir == Dir::Read).count();
        assert!((6500..7500).contains(&reads), "{reads} reads of 10000");
    }

    #[test]
    fn time_based_never_ends_by_itself() {
        let mut g = Gen::sequential(0, 8192, 4096, 100, None, 3);
        for _ in 0..1000 {
            assert!(g.next_op().is_some());
        }
    }

    #[test]
    fn written_ranges_merge() {
        let mut w = Written::new(100, 100 + 10 * 10 + 5, 10);
        for off in [100, 110, 130, 200] {
            w.mark(off);
        }
        w.mark(205);
        assert_eq!(w.ranges(), vec![(100, 120), (130, 140), (200, 205)]);
    }
}
