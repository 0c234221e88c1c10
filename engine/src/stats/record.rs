//! Counting calls at the entry points: `Engine::transfer` and
//! `Engine::submit` time each request and add it to the calling thread's
//! shard; the C ABI counts registrations and refused calls.
//!
//! At level 0, or before the region exists, a call costs one relaxed load.
//! At level 1 it costs two reads of the TSC ([`super::clock`]) and about
//! eight adds to cache lines no other thread writes: a thread holds a shard
//! of its own while it lives ([`ShardPool`]), so its adds are plain loads
//! and stores, without the locked read-modify-write an atomic add needs
//! (which waits for the core's store buffer to drain, about 20 cycles).
//! Readers sum the shards.

use super::clock;
use super::layout::{self, Api, Event, Region, DIRS, SHARDS, TARGETS};
use crate::error::Result;
use crate::pipeline::{Completion, Direction, IoRequest, Memory};
use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// The process's region; null until it is made (and in a child after fork).
static REGION: AtomicPtr<Region> = AtomicPtr::new(std::ptr::null_mut());
/// The level calls are counted at: 0 while there is no region.
static LEVEL: AtomicU32 = AtomicU32::new(0);
/// Which shards live threads hold.
static POOL: ShardPool = ShardPool::new();

/// The shard every thread without one of its own writes, with atomic adds.
pub const SHARED_SHARD: usize = SHARDS - 1;

/// Hands each thread a shard it alone writes: the first [`SHARED_SHARD`]
/// shards, one per live thread; a thread that finds none free writes
/// [`SHARED_SHARD`], where adds are atomic. A thread gives its shard back
/// when it exits; the next holder keeps adding to the same totals.
pub struct ShardPool {
    /// Bit i set: shard i is held by a live thread.
    held: AtomicU64,
}

const _: () = assert!(SHARDS <= 64, "the pool's bitmap is one u64");

impl ShardPool {
    pub const fn new() -> Self {
        ShardPool {
            held: AtomicU64::new(0),
        }
    }

    /// A shard for the calling thread: `(index, held alone)`.
    pub fn claim(&self) -> (usize, bool) {
        let own = (1u64 << SHARED_SHARD) - 1;
        let mut held = self.held.load(Ordering::Relaxed);
        loop {
            let free = !held & own;
            if free == 0 {
                return (SHARED_SHARD, false);
            }
            let i = free.trailing_zeros() as usize;
            // Acquire: the previous holder's last plain stores (published by
            // its Release in `release`) happen before this holder's loads.
            match self.held.compare_exchange_weak(
                held,
                held | 1 << i,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return (i, true),
                Err(now) => held = now,
            }
        }
    }

    /// Give back shard `i` (held alone by the caller).
    pub fn release(&self, i: usize) {
        if i < SHARED_SHARD {
            self.held.fetch_and(!(1u64 << i), Ordering::Release);
        }
    }
}

impl Default for ShardPool {
    fn default() -> Self {
        Self::new()
    }
}

/// A thread's shard from `pool`, given back when the thread exits.
struct Lease {
    pool: &'static ShardPool,
    shard: Cell<Option<(usize, bool)>>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some((i, true)) = self.shard.get() {
            self.pool.release(i);
        }
    }
}

thread_local! {
    static LEASE: Lease = const {
        Lease {
            pool: &POOL,
            shard: Cell::new(None),
        }
    };
    /// The entry point `Engine::submit` counts its requests under.
    static API_TAG: Cell<Api> = const { Cell::new(Api::Async) };
}

/// Make `region` the process's region, counted at `level` (the server calls
/// this once, after the region is initialised).
pub(crate) fn install(region: &'static Region, level: u32) {
    clock::start();
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

/// Nanoseconds since the region was made (the zero of `last_io_ns` and
/// `published_ns`).
pub(crate) fn since_start_ns() -> u64 {
    clock::to_ns(clock::now())
}

/// The calling thread's shard: `(index, held alone)`. A thread whose
/// thread-locals are being torn down writes the shared shard.
fn shard() -> (usize, bool) {
    leased(&LEASE)
}

/// [`shard`], for the other per-thread counters ([`super::PerThread`]): the
/// index a thread holds alone in the region's shards is its own there too.
#[inline]
pub(crate) fn thread_shard() -> (usize, bool) {
    shard()
}

fn leased(lease: &'static std::thread::LocalKey<Lease>) -> (usize, bool) {
    lease
        .try_with(|l| match l.shard.get() {
            Some(s) => s,
            None => {
                let s = l.pool.claim();
                l.shard.set(Some(s));
                s
            }
        })
        .unwrap_or((SHARED_SHARD, false))
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
    /// [`clock::now`] at the start.
    t0: u64,
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
            t0: clock::now(),
        })
    }

    /// A synchronous call (`Engine::transfer`).
    #[inline]
    pub fn sync(req: &IoRequest) -> Option<Call> {
        Call::start(Api::Sync, req)
    }

    /// A small host-memory read served on the caller's thread from what the
    /// thread remembered ([`crate::fast`]): counted as [`Api::Inline`], as
    /// the same read through [`Engine::transfer`](crate::pipeline::Engine::transfer) is.
    #[inline]
    pub fn remembered_host_read(size: usize) -> Option<Call> {
        if level() == 0 {
            return None;
        }
        Some(Call {
            api: Api::Inline,
            dir: 0,
            target: 0,
            size: size as u64,
            t0: clock::now(),
        })
    }

    /// The synchronous call is served on the caller's thread: counted as
    /// [`Api::Inline`].
    #[inline]
    pub fn served_inline(call: &mut Option<Call>) {
        if let Some(c) = call {
            c.api = Api::Inline;
        }
    }

    /// A submitted request (`Engine::submit`), under the thread's tag.
    #[inline]
    pub fn submitted(req: &IoRequest) -> Option<Call> {
        Call::start(API_TAG.with(|t| t.get()), req)
    }

    /// Count the finished call.
    pub fn finish(self, r: &Result<usize>) {
        self.finish_in(r, None)
    }

    /// [`Call::finish`] into `shard` (the calling thread's, from
    /// [`thread_shard`]) where the caller knows it already; None asks.
    #[inline]
    pub(crate) fn finish_in(self, r: &Result<usize>, shard: Option<(usize, bool)>) {
        // One clock read serves the latency and the shard's last-call time.
        let now = clock::now();
        let lat_ns = clock::to_ns(now.saturating_sub(self.t0));
        let api = self.api;
        let level = level();
        if let Some(region) = region() {
            let done = r.as_ref().ok().map(|&n| n as u64);
            let (shard, alone) = shard.unwrap_or_else(self::shard);
            record_into(
                region,
                shard,
                alone,
                level,
                &Sample {
                    api,
                    dir: self.dir,
                    target: self.target,
                    size: self.size,
                    done,
                    lat_ns,
                },
                clock::to_ns(now),
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

/// Add `s` to shard `shard` of `region` at `level` (≥ 1). `alone`: the
/// caller is the only thread writing this shard (it holds it from a
/// [`ShardPool`]), so plain loads and stores suffice; otherwise adds are
/// atomic.
pub fn record_into(
    region: &Region,
    shard: usize,
    alone: bool,
    level: u32,
    s: &Sample,
    now_ns: u64,
) {
    if level == 0 {
        return;
    }
    let sh = &region.shards[shard % SHARDS];
    let c = &sh.class[s.api as usize][s.dir % DIRS];
    // Readers in other processes load these words while they change; a
    // relaxed store of the sum is a whole word to them either way.
    let add = |a: &AtomicU64, n: u64| {
        if alone {
            a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        } else {
            a.fetch_add(n, Ordering::Relaxed);
        }
    };
    match s.done {
        Some(n) => {
            add(&c.ops, 1);
            add(&c.bytes, n);
            add(&c.lat_ns, s.lat_ns);
            if !alone {
                c.lat_max_ns.fetch_max(s.lat_ns, Ordering::Relaxed);
            } else if s.lat_ns > c.lat_max_ns.load(Ordering::Relaxed) {
                c.lat_max_ns.store(s.lat_ns, Ordering::Relaxed);
            }
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
        record_into(&r, 0, true, 1, &sample(Api::Sync, 0, 4096, Some(4096)), 1);
        record_into(&r, 1, true, 1, &sample(Api::Sync, 0, 8192, Some(100)), 2);
        record_into(&r, 2, true, 1, &sample(Api::Sync, 0, 4096, None), 3);
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
        record_into(
            &r,
            0,
            true,
            2,
            &sample(Api::Batch, 1, 1 << 20, Some(1 << 20)),
            1,
        );
        let s = Snapshot::of(&r);
        assert_eq!(s.class[Api::Batch as usize][1].size_hist[9], 1);
        assert_eq!(s.target[0][1].ops, 0);
        let mut gpu = sample(Api::Async, 0, 4096, Some(4096));
        gpu.target = 3;
        record_into(&r, 0, true, 3, &gpu, 1);
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
                            false,
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
    fn threads_on_shards_of_their_own_and_on_the_shared_one_lose_nothing() {
        let r: &'static Region = Box::leak(Region::boxed());
        let pool: &'static ShardPool = Box::leak(Box::new(ShardPool::new()));
        // More threads than shards: some hold one alone, the rest share.
        let threads = SHARDS + 6;
        let per = 5_000u64;
        std::thread::scope(|sc| {
            for _ in 0..threads {
                sc.spawn(move || {
                    let (shard, alone) = pool.claim();
                    for i in 0..per {
                        let mut s = sample(Api::Sync, 0, 4096, Some(4096));
                        s.lat_ns = 1000 + i;
                        record_into(r, shard, alone, 1, &s, i);
                    }
                    // Held until every thread has claimed: the last threads
                    // find none free.
                });
            }
        });
        let s = Snapshot::of(r);
        let c = &s.class[Api::Sync as usize][0];
        let total = threads as u64 * per;
        assert_eq!((c.ops, c.bytes), (total, total * 4096));
        assert_eq!(c.lat_hist.iter().sum::<u64>(), total);
        assert_eq!(
            c.lat_ns,
            threads as u64 * (1000 * per + per * (per - 1) / 2)
        );
        assert_eq!(c.lat_max_ns, 1000 + per - 1);
    }

    #[test]
    fn the_pool_gives_each_thread_its_own_shard_until_none_is_free() {
        let pool = ShardPool::new();
        let claims: Vec<_> = (0..SHARED_SHARD).map(|_| pool.claim()).collect();
        let mut own: Vec<usize> = claims
            .iter()
            .map(|&(i, alone)| {
                assert!(alone);
                i
            })
            .collect();
        own.sort_unstable();
        assert_eq!(own, (0..SHARED_SHARD).collect::<Vec<_>>());
        assert_eq!(pool.claim(), (SHARED_SHARD, false));
        pool.release(17);
        assert_eq!(
            pool.claim(),
            (17, true),
            "a shard given back is handed out again"
        );
        pool.release(SHARED_SHARD);
        assert_eq!(
            pool.claim(),
            (SHARED_SHARD, false),
            "the shared shard is never held"
        );
    }

    static TEST_POOL: ShardPool = ShardPool::new();
    thread_local! {
        static TEST_LEASE: Lease = const {
            Lease {
                pool: &TEST_POOL,
                shard: Cell::new(None),
            }
        };
    }

    #[test]
    fn a_thread_keeps_its_shard_and_gives_it_back_when_it_exits() {
        let first = std::thread::spawn(|| {
            let s = leased(&TEST_LEASE);
            assert_eq!(leased(&TEST_LEASE), s, "the same shard on every call");
            assert_ne!(TEST_POOL.held.load(Ordering::Relaxed), 0);
            s
        })
        .join()
        .unwrap();
        assert_eq!(first, (0, true));
        assert_eq!(
            TEST_POOL.held.load(Ordering::Acquire),
            0,
            "given back at exit"
        );
        assert_eq!(
            std::thread::spawn(|| leased(&TEST_LEASE)).join().unwrap(),
            (0, true)
        );
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
