//! Counting calls at the entry points: `Engine::transfer` and
//! `Engine::submit` time each request and add it to the calling thread's
//! shard; the C ABI counts registrations and refused calls.
//!
//! At level 0, or before the region exists, a call costs one relaxed load.
//! At level 1 it costs two clock reads and about eight relaxed adds to
//! cache lines no other thread writes.

use super::layout::{self, Api, Event, Region, DIRS, SHARDS, TARGETS};
use crate::error::Result;
use crate::pipeline::{Completion, Direction, IoRequest, Memory};
use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::time::Instant;

/// The process's region; null until it is made (and in a child after fork).
static REGION: AtomicPtr<Region> = AtomicPtr::new(std::ptr::null_mut());
/// The level calls are counted at: 0 while there is no region.
static LEVEL: AtomicU32 = AtomicU32::new(0);
/// Shards handed out to threads so far.
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);
/// When the region was made (the zero of `last_io_ns` and `published_ns`).
static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
    /// The entry point `Engine::submit` counts its requests under.
    static API_TAG: Cell<Api> = const { Cell::new(Api::Async) };
    /// Set by `Engine::transfer` when it served the call on this thread.
    static INLINE: Cell<bool> = const { Cell::new(false) };
}

/// Make `region` the process's region, counted at `level` (the server calls
/// this once, after the region is initialised).
pub(crate) fn install(region: &'static Region, level: u32) {
    let _ = START.get_or_init(Instant::now);
    REGION.store(region as *const Region as *mut Region, Ordering::Release);
    set_level_raw(level);
}

/// Stop counting (a child after fork: its region belongs to the parent).
pub(crate) fn detach() {
    LEVEL.store(0, Ordering::Relaxed);
    REGION.store(std::ptr::null_mut(), Ordering::Relaxed);
}

pub(crate) fn set_level_raw(level: u32) {
    let level = level.min(3);
    if let Some(r) = region() {
        r.header.level.store(level as u64, Ordering::Relaxed);
        LEVEL.store(level, Ordering::Relaxed);
    }
}

/// The level calls are counted at now (0: not counted).
pub fn level() -> u32 {
    LEVEL.load(Ordering::Relaxed)
}

pub(crate) fn region() -> Option<&'static Region> {
    let p = REGION.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is the process's region, mapped for the life
    // of the process and never unmapped.
    (!p.is_null()).then(|| unsafe { &*p })
}

pub(crate) fn since_start_ns() -> u64 {
    ns_since_start(Instant::now())
}

fn ns_since_start(now: Instant) -> u64 {
    START.get().map_or(0, |s| {
        u64::try_from(now.saturating_duration_since(*s).as_nanos()).unwrap_or(u64::MAX)
    })
}

fn shard_index() -> usize {
    SHARD.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            i = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
            s.set(i);
        }
        i
    })
}

/// Count a rare event (registrations, batch setups, refused calls).
pub fn event(e: Event) {
    event_add(e, 1);
}

pub fn event_add(e: Event, n: u64) {
    if level() > 0 {
        if let Some(r) = region() {
            r.events[e as usize].fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// Run `f` with `Engine::submit` counting its requests under `api` (the C
/// ABI's batch submit tags its entries this way).
pub fn with_api<T>(api: Api, f: impl FnOnce() -> T) -> T {
    struct Restore(Api);
    impl Drop for Restore {
        fn drop(&mut self) {
            API_TAG.with(|t| t.set(self.0));
        }
    }
    let _restore = Restore(API_TAG.with(|t| t.replace(api)));
    f()
}

/// `Engine::transfer` served the current call on the caller's thread.
pub fn served_inline() {
    if level() > 0 {
        INLINE.with(|i| i.set(true));
    }
}

/// Where a request's memory is, as a level-3 target index.
fn target_of(mem: &Memory) -> usize {
    match *mem {
        Memory::Host(_) => 0,
        Memory::Device { device, .. } => 1 + (device.max(0) as usize).min(TARGETS - 2),
    }
}

/// One request being timed.
pub struct Call {
    api: Api,
    dir: usize,
    target: usize,
    size: u64,
    t0: Instant,
}

impl Call {
    fn start(api: Api, req: &IoRequest) -> Option<Call> {
        if level() == 0 {
            return None;
        }
        Some(Call {
            api,
            dir: match req.dir {
                Direction::Read => 0,
                Direction::Write => 1,
            },
            target: target_of(&req.mem),
            size: req.size.min(crate::MAX_RW_COUNT) as u64,
            t0: Instant::now(),
        })
    }

    /// A synchronous call (`Engine::transfer`).
    #[inline]
    pub fn sync(req: &IoRequest) -> Option<Call> {
        let c = Call::start(Api::Sync, req);
        if c.is_some() {
            INLINE.with(|i| i.set(false));
        }
        c
    }

    /// A submitted request (`Engine::submit`), under the thread's tag.
    #[inline]
    pub fn submitted(req: &IoRequest) -> Option<Call> {
        Call::start(API_TAG.with(|t| t.get()), req)
    }

    /// Count the finished call.
    pub fn finish(self, r: &Result<usize>) {
        // One clock read serves the latency and the shard's last-call time.
        let now = Instant::now();
        let lat_ns =
            u64::try_from(now.saturating_duration_since(self.t0).as_nanos()).unwrap_or(u64::MAX);
        let mut api = self.api;
        if api == Api::Sync && INLINE.with(|i| i.get()) {
            api = Api::Inline;
        }
        let level = level();
        if let Some(region) = region() {
            let done = r.as_ref().ok().map(|&n| n as u64);
            record_into(
                region,
                shard_index(),
                level,
                &Sample {
                    api,
                    dir: self.dir,
                    target: self.target,
                    size: self.size,
                    done,
                    lat_ns,
                },
                ns_since_start(now),
            );
        }
    }
}

/// Count `call` (if any) as finished with `r`.
#[inline]
pub fn finish(call: Option<Call>, r: &Result<usize>) {
    if let Some(c) = call {
        c.finish(r);
    }
}

/// Wrap `done` so that the request is counted when it finishes, before the
/// caller hears of it (so a caller that saw a completion sees it counted).
pub(crate) fn track_submit(req: &IoRequest, done: Completion) -> Completion {
    let Some(call) = Call::submitted(req) else {
        return done;
    };
    match done {
        Completion::Wait(w) => Completion::Callback(Box::new(move |r| {
            call.finish(&r);
            w.set(r);
        })),
        Completion::Callback(f) => Completion::Callback(Box::new(move |r| {
            call.finish(&r);
            f(r);
        })),
    }
}

/// One finished call: `done` holds the bytes moved, or None for an error.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub api: Api,
    pub dir: usize,
    pub target: usize,
    pub size: u64,
    pub done: Option<u64>,
    pub lat_ns: u64,
}

/// Add `s` to shard `shard` of `region` at `level` (≥ 1).
pub fn record_into(region: &Region, shard: usize, level: u32, s: &Sample, now_ns: u64) {
    if level == 0 {
        return;
    }
    let sh = &region.shards[shard % SHARDS];
    let c = &sh.class[s.api as usize][s.dir % DIRS];
    let add = |a: &std::sync::atomic::AtomicU64, n: u64| {
        a.fetch_add(n, Ordering::Relaxed);
    };
    match s.done {
        Some(n) => {
            add(&c.ops, 1);
            add(&c.bytes, n);
            add(&c.lat_ns, s.lat_ns);
            c.lat_max_ns.fetch_max(s.lat_ns, Ordering::Relaxed);
            add(&c.lat_hist[layout::lat_bucket(s.lat_ns)], 1);
            if level >= 2 {
                add(&c.size_hist[layout::size_bucket(s.size)], 1);
            }
        }
        None => add(&c.errors, 1),
    }
    if level >= 3 {
        let t = &sh.target[s.target.min(TARGETS - 1)][s.dir % DIRS];
        match s.done {
            Some(n) => {
                add(&t.ops, 1);
                add(&t.bytes, n);
                add(&t.lat_ns, s.lat_ns);
                add(&t.lat_hist[layout::target_lat_bucket(s.lat_ns)], 1);
            }
            None => add(&t.errors, 1),
        }
    }
    sh.last_io_ns.store(now_ns, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::snapshot::Snapshot;

    fn sample(api: Api, dir: usize, size: u64, done: Option<u64>) -> Sample {
        Sample {
            api,
            dir,
            target: 0,
            size,
            done,
            lat_ns: 5000,
        }
    }

    #[test]
    fn level_one_counts_ops_bytes_errors_and_latency_but_no_sizes() {
        let r = Region::boxed();
        record_into(&r, 0, 1, &sample(Api::Sync, 0, 4096, Some(4096)), 1);
        record_into(&r, 1, 1, &sample(Api::Sync, 0, 8192, Some(100)), 2);
        record_into(&r, 2, 1, &sample(Api::Sync, 0, 4096, None), 3);
        let s = Snapshot::of(&r);
        let c = &s.class[Api::Sync as usize][0];
        assert_eq!((c.ops, c.bytes, c.errors), (2, 4196, 1));
        assert_eq!(c.lat_ns, 10_000);
        assert_eq!(c.lat_hist.iter().sum::<u64>(), 2);
        assert_eq!(c.size_hist.iter().sum::<u64>(), 0, "sizes are level 2");
        assert_eq!(s.target[0][0].ops, 0, "targets are level 3");
        assert_eq!(s.last_io_ns, 3);
    }

    #[test]
    fn level_two_adds_sizes_and_level_three_targets() {
        let r = Region::boxed();
        record_into(&r, 0, 2, &sample(Api::Batch, 1, 1 << 20, Some(1 << 20)), 1);
        let s = Snapshot::of(&r);
        assert_eq!(s.class[Api::Batch as usize][1].size_hist[9], 1);
        assert_eq!(s.target[0][1].ops, 0);
        let mut gpu = sample(Api::Async, 0, 4096, Some(4096));
        gpu.target = 3;
        record_into(&r, 0, 3, &gpu, 1);
        let s = Snapshot::of(&r);
        assert_eq!((s.target[3][0].ops, s.target[3][0].bytes), (1, 4096));
        assert_eq!(s.target[3][0].lat_hist[layout::target_lat_bucket(5000)], 1);
        assert_eq!(s.target[3][0].percentile_ns(50.0), Some(6144));
    }

    #[test]
    fn threads_counting_at_once_lose_nothing() {
        let r: &'static Region = Box::leak(Region::boxed());
        let threads = 8;
        let per = 20_000u64;
        std::thread::scope(|sc| {
            for t in 0..threads {
                sc.spawn(move || {
                    // Fewer shards than threads: pairs of threads share one.
                    for i in 0..per {
                        record_into(
                            r,
                            t % 4,
                            2,
                            &sample(Api::Inline, (i % 2) as usize, 512, Some(512)),
                            i,
                        );
                    }
                });
            }
        });
        let s = Snapshot::of(r);
        let total = threads as u64 * per;
        let read = &s.class[Api::Inline as usize][0];
        let write = &s.class[Api::Inline as usize][1];
        assert_eq!(read.ops + write.ops, total);
        assert_eq!(read.bytes + write.bytes, total * 512);
        assert_eq!(read.size_hist[0] + write.size_hist[0], total);
        assert_eq!(read.lat_hist.iter().sum::<u64>(), read.ops);
    }

    #[test]
    fn gpu_ordinals_map_to_targets() {
        assert_eq!(target_of(&Memory::Host(8)), 0);
        assert_eq!(target_of(&Memory::Device { ptr: 1, device: 0 }), 1);
        assert_eq!(target_of(&Memory::Device { ptr: 1, device: 15 }), 16);
        assert_eq!(target_of(&Memory::Device { ptr: 1, device: 40 }), 16);
    }

    #[test]
    fn the_api_tag_is_restored_after_with_api() {
        with_api(Api::Batch, || {
            assert_eq!(API_TAG.with(|t| t.get()), Api::Batch);
        });
        assert_eq!(API_TAG.with(|t| t.get()), Api::Async);
    }
}
