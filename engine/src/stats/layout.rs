//! The statistics region: the bytes the library writes and `ais-stats` reads.
//!
//! Everything is a native-endian `u64` updated with relaxed atomics; a reader
//! maps the region read-only and sums it. The layout is an ABI between a
//! library and a reader built from different commits, so [`VERSION`] changes
//! with any change here, and a reader refuses a region whose header does not
//! match (`region_layout_is_stable` pins the sizes). The one exception: a
//! header word taken from the reserved ones, where 0 means "not recorded",
//! keeps the version, since a reader that does not know it never looks at it
//! and a reader that does reads 0 from a library that does not write it.
//!
//! Per-call figures live in [`SHARDS`] shards, each on its own cache lines.
//! A live thread holds one of the first `SHARDS - 1` alone and writes it with
//! plain loads and stores (no locked instruction, no cache line shared with
//! another writer); threads beyond that share the last one with atomic adds
//! (`record::ShardPool`). Readers sum the shards.

use std::sync::atomic::{AtomicU64, Ordering};

/// "HFSTATS" and a format byte.
pub const MAGIC: u64 = u64::from_le_bytes(*b"HFSTATS\x01");
pub const VERSION: u64 = 1;
/// Shards of per-call counters. Loader processes run tens of threads (16
/// workers, one caller per data-loader thread); 63 of their own keep most
/// threads alone on theirs, and the shared last one only costs contention,
/// never counts.
pub const SHARDS: usize = 64;
/// GPUs counted one by one (level 3); GPU 15 also counts any higher ordinal.
pub const MAX_GPUS: usize = 16;
/// Level-3 targets: host memory, then GPU 0..MAX_GPUS.
pub const TARGETS: usize = MAX_GPUS + 1;
/// Request-size buckets as upstream hipFile's: [0, 4 KiB), then powers of two
/// up to [32 MiB, 64 MiB), then 64 MiB and more.
pub const SIZE_BUCKETS: usize = 16;
/// Latency buckets: below 1024 ns, then four per power of two (each within
/// 19 % of its neighbours) up to 2^37 ns (137 s), then the rest.
pub const LAT_BUCKETS: usize = 1 + 27 * 4 + 1;
/// Latency buckets per target (level 3): one per power of two from 1024 ns
/// to 2^37 ns (within a factor of two), so that 17 targets stay small.
pub const TARGET_LAT_BUCKETS: usize = 28;

/// Which entry point a call came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Api {
    /// Synchronous calls served by the worker threads.
    Sync = 0,
    /// Synchronous calls served on the caller's thread (small host reads,
    /// small writes and device transfers).
    Inline = 1,
    /// Batch entries (`hipFileBatchIOSubmit`).
    Batch = 2,
    /// Stream ops (`hipFileReadAsync`/`WriteAsync`) and `Engine::submit`.
    Async = 3,
}

pub const APIS: usize = 4;
pub const API_NAMES: [&str; APIS] = ["sync", "inline", "batch", "async"];
pub const DIRS: usize = 2;
pub const DIR_NAMES: [&str; DIRS] = ["read", "write"];

/// Counters of one entry point and direction in one shard.
#[repr(C)]
pub struct Class {
    /// Calls that succeeded (a short read at end of file is a success).
    pub ops: AtomicU64,
    /// Bytes those calls moved.
    pub bytes: AtomicU64,
    /// Calls that failed inside the engine.
    pub errors: AtomicU64,
    /// Sum and maximum of the successful calls' latencies.
    pub lat_ns: AtomicU64,
    pub lat_max_ns: AtomicU64,
    /// Successful calls by latency ([`lat_bucket`]).
    pub lat_hist: [AtomicU64; LAT_BUCKETS],
    /// Successful calls by requested size ([`size_bucket`]); level 2.
    pub size_hist: [AtomicU64; SIZE_BUCKETS],
}

/// Counters of one memory target and direction in one shard (level 3).
#[repr(C)]
pub struct Target {
    pub ops: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
    pub lat_ns: AtomicU64,
    /// Successful calls by latency ([`target_lat_bucket`]).
    pub lat_hist: [AtomicU64; TARGET_LAT_BUCKETS],
}

/// One thread's counters. 128-byte alignment keeps two shards off the same
/// pair of cache lines (the adjacent-line prefetcher fetches pairs).
#[repr(C, align(128))]
pub struct Shard {
    pub class: [[Class; DIRS]; APIS],
    pub target: [[Target; DIRS]; TARGETS],
    /// When this shard last finished a call, ns after the region was made.
    pub last_io_ns: AtomicU64,
}

/// Rare events, counted in one place (their cost is not per byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Event {
    DriverOpen,
    DriverClose,
    HandleRegister,
    HandleRegisterError,
    HandleDeregister,
    BufRegister,
    BufRegisterError,
    BufRegisterBytes,
    BufDeregister,
    BufDeregisterError,
    BatchSetup,
    BatchSubmit,
    BatchSubmitError,
    BatchCancel,
    BatchDestroy,
    /// Synchronous reads and writes refused before any I/O (a bad handle,
    /// buffer, offset or size): the caller got an error code.
    ReadRejected,
    WriteRejected,
    EngineStart,
}

pub const EVENTS: usize = 18;
pub const EVENT_NAMES: [&str; EVENTS] = [
    "driver_open",
    "driver_close",
    "handle_register",
    "handle_register_error",
    "handle_deregister",
    "buf_register",
    "buf_register_error",
    "buf_register_bytes",
    "buf_deregister",
    "buf_deregister_error",
    "batch_setup",
    "batch_submit",
    "batch_submit_error",
    "batch_cancel",
    "batch_destroy",
    "read_rejected",
    "write_rejected",
    "engine_start",
];

/// The engines' own counters ([`crate::stats::Stats`]), copied in by the
/// publisher: summed over every engine the process has run.
pub mod engine {
    pub const CACHE_HIT_BYTES: usize = 0;
    pub const DIRECT_READ_BYTES: usize = 1;
    pub const BUFFERED_READ_BYTES: usize = 2;
    pub const DIRECT_WRITE_BYTES: usize = 3;
    pub const BUFFERED_WRITE_BYTES: usize = 4;
    pub const CACHE_MISSES: usize = 5;
    pub const GPU_COPIES: usize = 6;
    pub const GPU_EVENTS: usize = 7;
    pub const GPU_COPY_BATCHES: usize = 8;
    pub const BOUNCED_CHUNKS: usize = 9;
    pub const RETRIES: usize = 10;
    pub const INLINE_BYTES: usize = 11;
    /// Four stage sums, then four stage maxima ([`crate::stats::Stage`] order).
    pub const STAGE_NS: usize = 12;
    pub const STAGE_MAX_NS: usize = 16;
    pub const CHUNKS: usize = 20;
    pub const CHUNK_NS: usize = 21;
    pub const CHUNK_MAX_NS: usize = 22;
    /// Engines running now, their workers, bounce slots and bounce bytes.
    pub const ENGINES: usize = 23;
    pub const WORKERS: usize = 24;
    pub const BOUNCE_SLOTS: usize = 25;
    pub const BOUNCE_BYTES: usize = 26;
    pub const FIELDS: usize = 27;
    pub const NAMES: [&str; FIELDS] = [
        "cache_hit_bytes",
        "direct_read_bytes",
        "buffered_read_bytes",
        "direct_write_bytes",
        "buffered_write_bytes",
        "cache_misses",
        "gpu_copies",
        "gpu_events",
        "gpu_copy_batches",
        "bounced_chunks",
        "retries",
        "inline_bytes",
        "stage_queue_ns",
        "stage_slot_ns",
        "stage_storage_ns",
        "stage_gpu_ns",
        "stage_queue_max_ns",
        "stage_slot_max_ns",
        "stage_storage_max_ns",
        "stage_gpu_max_ns",
        "chunks",
        "chunk_ns",
        "chunk_max_ns",
        "engines",
        "workers",
        "bounce_slots",
        "bounce_bytes",
    ];
    /// Fields that combine by maximum, not by sum, across engines.
    pub fn is_max(i: usize) -> bool {
        (STAGE_MAX_NS..STAGE_MAX_NS + 4).contains(&i) || i == CHUNK_MAX_NS
    }
}

/// What a reader checks before trusting the rest.
#[repr(C)]
pub struct Header {
    pub magic: AtomicU64,
    pub version: AtomicU64,
    /// `size_of::<Region>()` as the writer built it.
    pub region_bytes: AtomicU64,
    /// The statistics level recording uses now (0..=3).
    pub level: AtomicU64,
    pub pid: AtomicU64,
    /// CLOCK_REALTIME when the region was made, ns since the epoch.
    pub start_unix_ns: AtomicU64,
    /// When the engine figures were last copied in, ns after the start.
    pub published_ns: AtomicU64,
    pub shards: AtomicU64,
    pub lat_buckets: AtomicU64,
    pub size_buckets: AtomicU64,
    pub targets: AtomicU64,
    pub target_lat_buckets: AtomicU64,
    /// Times the engine figures have been copied in.
    pub publications: AtomicU64,
    /// The process's command name (/proc/PID/comm, at most 15 bytes, NUL
    /// padded), so a report made after the process exited can name it.
    pub comm: [AtomicU64; 2],
    /// The storage backend serving the workers and why, as
    /// `storage::choice_word` encodes it (`storage::described` reads it); 0
    /// until an engine starts.
    pub storage: AtomicU64,
}

#[repr(C)]
pub struct Region {
    pub header: Header,
    pub events: [AtomicU64; EVENTS],
    pub engine: [AtomicU64; engine::FIELDS],
    pub shards: [Shard; SHARDS],
}

impl Region {
    /// A zeroed region on the heap (tests, and nothing else: the library's
    /// region lives in shared memory).
    pub fn boxed() -> Box<Region> {
        let layout = std::alloc::Layout::new::<Region>();
        // SAFETY: Region has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Region>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: p is a fresh allocation of Region's layout, zeroed: every
        // field is an AtomicU64 or an array of them, for which all-zero bytes
        // are a valid value; Box frees it with the same layout.
        unsafe { Box::from_raw(p) }
    }

    /// Fill in the header of a zeroed region; the magic goes last, so a
    /// reader that sees it sees the rest.
    pub fn init(&self, level: u32, pid: u32, start_unix_ns: u64) {
        let h = &self.header;
        let set = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        set(&h.version, VERSION);
        set(&h.region_bytes, std::mem::size_of::<Region>() as u64);
        set(&h.level, level as u64);
        set(&h.pid, pid as u64);
        set(&h.start_unix_ns, start_unix_ns);
        set(&h.shards, SHARDS as u64);
        set(&h.lat_buckets, LAT_BUCKETS as u64);
        set(&h.size_buckets, SIZE_BUCKETS as u64);
        set(&h.targets, TARGETS as u64);
        set(&h.target_lat_buckets, TARGET_LAT_BUCKETS as u64);
        let mut name = [0u8; 16];
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
        let comm = comm.trim_end().as_bytes();
        let n = comm.len().min(15);
        name[..n].copy_from_slice(&comm[..n]);
        for (i, part) in name.chunks(8).enumerate() {
            let word = u64::from_le_bytes(part.try_into().expect("8 bytes"));
            set(&h.comm[i], word);
        }
        h.magic.store(MAGIC, Ordering::Release);
    }

    /// The command name stored by [`Region::init`].
    pub fn comm(&self) -> String {
        let mut b = Vec::with_capacity(16);
        for w in &self.header.comm {
            b.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    }

    /// Whether the header says this is a region of this layout.
    pub fn compatible(&self) -> Result<(), String> {
        let h = &self.header;
        let g = |a: &AtomicU64| a.load(Ordering::Acquire);
        if g(&h.magic) != MAGIC {
            return Err("not a hipfile statistics region (bad magic)".into());
        }
        let want = [
            ("version", g(&h.version), VERSION),
            (
                "size",
                g(&h.region_bytes),
                std::mem::size_of::<Region>() as u64,
            ),
            ("shards", g(&h.shards), SHARDS as u64),
            ("latency buckets", g(&h.lat_buckets), LAT_BUCKETS as u64),
            ("size buckets", g(&h.size_buckets), SIZE_BUCKETS as u64),
            ("targets", g(&h.targets), TARGETS as u64),
            (
                "target latency buckets",
                g(&h.target_lat_buckets),
                TARGET_LAT_BUCKETS as u64,
            ),
        ];
        for (what, got, exp) in want {
            if got != exp {
                return Err(format!(
                    "statistics layout differs ({what} {got}, this reader knows {exp}): \
                     use the ais-stats built with that library"
                ));
            }
        }
        Ok(())
    }
}

/// The size bucket of a request of `bytes`: 0 below 4 KiB, then
/// bit_length(bytes / 4 KiB) up to 15 (upstream hipFile's buckets).
pub fn size_bucket(bytes: u64) -> usize {
    let k = bytes >> 12;
    if k == 0 {
        0
    } else {
        ((64 - k.leading_zeros()) as usize).min(SIZE_BUCKETS - 1)
    }
}

/// Lower bound, in bytes, of size bucket `i`.
pub fn size_bucket_low(i: usize) -> u64 {
    if i == 0 {
        0
    } else {
        4096u64 << (i - 1)
    }
}

/// The latency bucket of `ns`: four per power of two from 1024 ns.
pub fn lat_bucket(ns: u64) -> usize {
    if ns < 1024 {
        return 0;
    }
    let log = 63 - ns.leading_zeros() as usize;
    let sub = ((ns >> (log - 2)) & 3) as usize;
    (1 + (log - 10) * 4 + sub).min(LAT_BUCKETS - 1)
}

/// The level-3 latency bucket of `ns`: 0 below 1024 ns, then one per power
/// of two.
pub fn target_lat_bucket(ns: u64) -> usize {
    let k = ns >> 10;
    if k == 0 {
        0
    } else {
        ((64 - k.leading_zeros()) as usize).min(TARGET_LAT_BUCKETS - 1)
    }
}

/// `[low, high)` of level-3 latency bucket `i` in ns (the last is open-ended).
pub fn target_lat_bucket_range(i: usize) -> (u64, u64) {
    match i {
        0 => (0, 1024),
        i if i == TARGET_LAT_BUCKETS - 1 => (1024 << (i - 1), u64::MAX),
        i => (1024 << (i - 1), 1024 << i),
    }
}

/// `[low, high)` of latency bucket `i` in ns (the last one is open-ended:
/// `high` is `u64::MAX`).
pub fn lat_bucket_range(i: usize) -> (u64, u64) {
    if i == 0 {
        return (0, 1024);
    }
    if i == LAT_BUCKETS - 1 {
        return (1u64 << 37, u64::MAX);
    }
    let log = (i - 1) / 4 + 10;
    let sub = ((i - 1) % 4) as u64;
    let step = 1u64 << (log - 2);
    let low = (1u64 << log) + sub * step;
    (low, low + step)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_layout_is_stable() {
        // A change here changes what readers of other builds see: bump VERSION.
        assert_eq!(
            std::mem::size_of::<Class>(),
            (5 + LAT_BUCKETS + SIZE_BUCKETS) * 8
        );
        assert_eq!(std::mem::size_of::<Shard>() % 128, 0);
        assert_eq!(std::mem::size_of::<Header>(), 16 * 8);
        assert_eq!(std::mem::size_of::<Target>(), (4 + TARGET_LAT_BUCKETS) * 8);
        assert_eq!(std::mem::size_of::<Region>(), 1_098_240);
        assert_eq!(VERSION, 1);
    }

    #[test]
    fn size_buckets_match_upstream() {
        assert_eq!(size_bucket(0), 0);
        assert_eq!(size_bucket(4095), 0);
        assert_eq!(size_bucket(4096), 1);
        assert_eq!(size_bucket(8191), 1);
        assert_eq!(size_bucket(8192), 2);
        assert_eq!(size_bucket(1 << 20), 9);
        assert_eq!(size_bucket((64 << 20) - 1), 14);
        assert_eq!(size_bucket(64 << 20), 15);
        assert_eq!(size_bucket(u64::MAX), 15);
        for i in 1..SIZE_BUCKETS {
            assert_eq!(size_bucket(size_bucket_low(i)), i);
            assert_eq!(size_bucket(size_bucket_low(i) - 1), i - 1);
        }
    }

    #[test]
    fn latency_buckets_cover_every_value_in_order() {
        assert_eq!(lat_bucket(0), 0);
        assert_eq!(lat_bucket(1023), 0);
        assert_eq!(lat_bucket(1024), 1);
        assert_eq!(lat_bucket(u64::MAX), LAT_BUCKETS - 1);
        for i in 0..LAT_BUCKETS {
            let (lo, hi) = lat_bucket_range(i);
            assert_eq!(lat_bucket(lo), i, "low end of bucket {i}");
            if hi != u64::MAX {
                assert_eq!(lat_bucket(hi - 1), i, "high end of bucket {i}");
                assert_eq!(lat_bucket(hi), i + 1, "next after bucket {i}");
            }
        }
    }

    #[test]
    fn target_latency_buckets_cover_every_value_in_order() {
        assert_eq!(target_lat_bucket(1023), 0);
        assert_eq!(target_lat_bucket(u64::MAX), TARGET_LAT_BUCKETS - 1);
        for i in 0..TARGET_LAT_BUCKETS {
            let (lo, hi) = target_lat_bucket_range(i);
            assert_eq!(target_lat_bucket(lo), i, "low end of bucket {i}");
            if hi != u64::MAX {
                assert_eq!(target_lat_bucket(hi - 1), i, "high end of bucket {i}");
                assert_eq!(target_lat_bucket(hi), i + 1);
            }
        }
    }

    #[test]
    fn a_fresh_region_is_compatible_only_after_init() {
        let r = Region::boxed();
        assert!(r.compatible().is_err());
        r.init(2, 42, 7);
        assert_eq!(r.compatible(), Ok(()));
        assert_eq!(r.header.level.load(Ordering::Relaxed), 2);
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        let want: String = comm.trim_end().chars().take(15).collect();
        assert_eq!(r.comm(), want);
    }
}
