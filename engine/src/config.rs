//! Settings: the spec's `HIPFILE_*` environment variables, the engine's own
//! knobs, and the cuFile-style parameters (`hipFileSet*Parameter`), which are
//! staged while the driver is closed and applied at open.
//!
//! Only what a user or operator sets is read from the environment (threads,
//! chunk size, bounce memory, read mode, inline size, GPU runtime, huge
//! pages, registration and pinning, write durability, the spec's compat
//! switches, statistics, logging). The engine's fixed choices are constants
//! next to the code they steer, each with the reason for its value.
//!
//! Precedence for a knob that both a parameter and a variable can set:
//! SetParameter > environment variable > default (cuFile API Reference §5.1.9).
//! A malformed variable is reported once on stderr and its default is used.

use crate::gpu::RuntimeChoice;
use crate::log_warn;
use crate::storage::BackendSetting;

/// How reads reach storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// Per chunk: a buffered read with RWF_NOWAIT is served from the page cache
    /// when the range is resident; whatever is not resident is read with O_DIRECT.
    Auto,
    /// Always O_DIRECT (when the file allows it); the page cache is bypassed.
    Direct,
    /// Always through the page cache.
    Buffered,
}

/// Engine settings, resolved once when the driver opens.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Worker (submission) threads, one io_uring each. `HIPFILE_IO_THREADS`.
    pub io_threads: usize,
    /// Workers that may take chunks bound for storage (reads by O_DIRECT: an
    /// O_DIRECT descriptor, `HIPFILE_READ_MODE=direct`, or a range the page
    /// cache does not hold; durable writes and writes on an O_DIRECT
    /// descriptor, `Engine::storage_bound`); page-cache chunks still go to every worker,
    /// whose threads the kernel's page-cache copy needs. 0 lets every worker
    /// take them. Fixed at [`DEFAULT_COLD_IO_THREADS`] (no limit with that
    /// many workers or fewer); not read from the environment (tests set it).
    pub cold_io_threads: usize,
    /// Bytes per chunk, the unit a request is split into. `HIPFILE_CHUNK_KB`.
    pub chunk_bytes: usize,
    /// Bounce slots (chunks in flight) per worker. `HIPFILE_QUEUE_DEPTH`.
    pub slots_per_worker: usize,
    /// Small bounce slots per worker, for I/O of up to `SMALL_SLOT_BYTES`
    /// (4 KiB random reads keep many in flight without tying up chunk slots).
    pub small_slots_per_worker: usize,
    /// Mid-size bounce slots per worker, for I/O of up to `MID_SLOT_DATA_BYTES`
    /// (batch entries of 1 MiB keep twelve in flight per worker, not four).
    pub mid_slots_per_worker: usize,
    /// Synchronous host-memory reads up to this size run on the caller's
    /// thread with preadv2/pread: no hand-off to a worker, so a 4 KiB read
    /// costs what pread costs. Default: [`default_inline_bytes`]. Host writes
    /// and device transfers go inline only up to [`INLINE_OTHER_MAX_BYTES`].
    /// 0 disables. `HIPFILE_INLINE_KB`.
    pub inline_max_bytes: usize,
    /// A worker with no GPU copy on its way submits one page-cache read
    /// alone, so its first copy starts after one read, not two: the kernel
    /// copies a cached read inside `io_uring_enter`, and two 4 MiB reads
    /// take 2 × 1.2 ms on the H200 host before the first byte could reach
    /// the GPU. Hot 1 GiB sync reads on the H200: 48.0–48.6 GB/s with it,
    /// 44.0–47.3 without. Always on; not read from the environment (tests
    /// compare both settings).
    pub first_read_alone: bool,
    /// `HIPFILE_COPY_SPIN_US`: how long a worker whose only work is GPU
    /// copies asks the oldest copy's event (yielding its core between asks)
    /// before it sleeps on it ([`DEFAULT_COPY_SPIN`]). 0 sleeps at once.
    pub copy_spin: std::time::Duration,
    /// io_uring submission-queue entries per worker ring.
    pub ring_entries: u32,
    /// `HIPFILE_IO_BACKEND` = auto | io_uring | posix: the workers' storage
    /// backend (see [`crate::storage`]).
    pub io_backend: BackendSetting,
    /// `HIPFILE_READ_MODE` = auto | direct | buffered.
    pub read_mode: ReadMode,
    /// `HIPFILE_STREAM_STAGES`: stages per stream of stream-ordered I/O
    /// (2..=[`crate::streamops::MAX_STAGES`]), each a pinned host slot of one
    /// chunk; with 4 MiB chunks the default 8 keep 32 MiB of a stream's
    /// reads in flight (see [`crate::streamops`]).
    pub stream_stages: usize,
    /// `HIPFILE_GPU_RUNTIME` = auto | cuda | hip | none.
    pub gpu_runtime: RuntimeChoice,
    /// `HIPFILE_REGISTER_BUFFERS`: register bounce slabs with io_uring (READ_FIXED).
    pub register_buffers: bool,
    /// `HIPFILE_PIN_BUFFERS`: page-lock bounce slabs with the GPU runtime.
    pub pin_buffers: bool,
    /// `HIPFILE_HUGE_PAGES`: back bounce slabs with transparent huge pages
    /// (see [`crate::bounce::Slab::with_pages`]). On by default: on the
    /// H200's virtio disk a cold batch of 1 MiB entries ran at 2.06 GB/s with
    /// them and 1.27 without (a 1 MiB read from 4 KiB pages has 256 segments,
    /// above the disk's 254, so it is split and cannot merge), while hot
    /// reads and 4 KiB random reads measured the same. Where the kernel gives
    /// no huge pages (THP off) the slab is plain memory.
    pub huge_pages: bool,
    /// `HIPFILE_BIND_IO_THREADS`: when the workers are as many as the CPUs
    /// the process may run on, and those are at most
    /// [`crate::worker::BIND_MAX_CPUS`], bind each to a CPU of its own (see
    /// `worker::bind_to_own_cpu`: a single-queue disk's completion interrupt
    /// otherwise wakes them all on one CPU, where their copies run one after
    /// another). False leaves every worker to the scheduler.
    pub bind_io_threads: bool,
    /// `HIPFILE_WRITE_SYNC`: sync writes are durable (fdatasync) before they return.
    pub write_sync: bool,
    /// `HIPFILE_ALLOW_COMPAT_MODE` (spec §5.9): the bounce path may be used.
    pub allow_compat_mode: bool,
    /// `HIPFILE_FORCE_COMPAT_MODE` (spec §5.9): never use a vendor fast path.
    pub force_compat_mode: bool,
    /// `HIPFILE_UNSUPPORTED_FILE_SYSTEMS` (spec §5.9).
    pub unsupported_file_systems: bool,
    /// `HIPFILE_STATS_LEVEL`, clamped to 3.
    pub stats_level: u32,
    /// Largest batch (`PropertiesIOBatchsize`).
    pub max_batch_entries: u32,
    /// `PropertiesBatchIOTimeoutMs`.
    pub batch_timeout_ms: u32,
}

/// Measured defaults (H200 host, 4 GiB page-cache-hot file): 4 MiB chunks
/// with 12 threads reached 50.0 GB/s of the 54.7 GB/s pinned link; 1 MiB
/// chunks topped at 41.9 and 16 MiB at 36.0, so the chunk is 4 MiB.
pub const DEFAULT_CHUNK_BYTES: usize = 4 << 20;
/// How long a worker with only GPU copies to wait for asks the oldest
/// copy's event before it sleeps on it ([`Config::copy_spin`]): long enough
/// for the copies a worker queues at once to cross a shared link (a 4 MiB
/// chunk behind fifteen others: 64 MiB at about 50 GB/s, 1.3 ms), so a
/// mid-size request's end does not wait for the blocking-sync wake-up.
/// Hot sync reads into device memory on an H100 (Firecracker, 300 MiB-L3
/// host, two rounds): 16 MiB requests 20.1–20.2 GB/s against 17.7–18.0
/// sleeping at once, 256 MiB 42.1–42.5 against 40.2–41.8, 1 GiB
/// 46.5–47.6 against 46.0–48.1 (1 ms: 20.2–20.8, 41.0–42.0, 45.7–46.7).
pub const DEFAULT_COPY_SPIN: std::time::Duration = std::time::Duration::from_micros(3000);
/// Threads: min(cores, 16). 16 workers read a hot file faster than 12 on the
/// H200 (1 GiB sync reads: 43.6–47.6 against 38.1–45.6 GB/s over five paired
/// rounds), while cold, batch and 4 KiB random reads measured the same
/// (storage reads stay on [`DEFAULT_COLD_IO_THREADS`] workers either way).
pub const DEFAULT_MAX_THREADS: usize = 16;
/// Two slots overlap one read with one copy, and keep the bounce memory the
/// CPU actually touches (16 × 2 × 4 MiB = 128 MiB) inside the H200 host's
/// 300 MiB L3: the page-cache copy writes a slot and the DMA reads it from
/// cache. Four slots (192 MiB, plus the mid-size class) fall out of it: hot
/// reads on the H200 ran at 27.6 GB/s with four and 40.1 with two
/// (`engine/examples/hot_probe.rs`: 40.6 against 46.2).
pub const DEFAULT_SLOTS_PER_WORKER: usize = 2;
/// Data bytes a small bounce slot takes.
pub const SMALL_SLOT_DATA_BYTES: usize = 64 << 10;
/// Data bytes a mid-size bounce slot takes.
pub const MID_SLOT_DATA_BYTES: usize = 1 << 20;
/// Largest host write or device transfer done on the caller's thread (when
/// `inline_max_bytes` allows that much): larger durable writes start their
/// writeback piece by piece on the workers, and device transfers were
/// measured inline at this size only.
pub const INLINE_OTHER_MAX_BYTES: usize = 64 << 10;

/// Largest device read done on the caller's thread when its range is in the
/// page cache (`cachestat` says so), whatever `inline_max_bytes` is (0 still
/// turns every inline transfer off). A page-cache read of this size is a single
/// memcpy out of the cache plus one host-to-device copy: on the caller's
/// thread it costs no hand-off to a worker and no wake-up, and callers on
/// several threads each keep their own copy going. Eight threads each
/// opening, reading and closing 256 KiB files into device memory (H100, four
/// interleaved rounds) read 12.8–15.5 GB/s this way against 6.2–7.1 through
/// the workers, and one thread's sequential 256 KiB reads 4.2–4.6 against
/// 1.9–2.1. A cold range still goes to the storage workers, whose O_DIRECT
/// reads keep the disk's queue full (the same threads without the
/// `cachestat` check read cold files at 0.78–1.06 × the workers' rate).
pub const HOT_DEVICE_INLINE_MAX_BYTES: usize = 256 << 10;

/// Largest host read done on the caller's thread when its range is in the
/// page cache (`cachestat` says so), above `inline_max_bytes` (0 still turns
/// every inline transfer off). Spread over sixteen workers, a 256 KiB hot
/// read paid the hand-off and the wake-ups of four workers for a copy that
/// takes 9 µs on one core: 26 µs per read from Python on an H100 machine,
/// against 9 µs for `os.preadv` (36–38 against 11–12 µs for `pread` on the
/// H200's). The same bound as the device reads' above; a cold range still
/// goes to the storage workers.
pub const HOT_HOST_INLINE_MAX_BYTES: usize = 256 << 10;

/// The CPUs this process may run on (4 where the kernel does not say).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get())
}

/// The inline limit for host reads where `parallel` workers can copy at
/// once: the worker count, or the CPUs the process may use where those are
/// fewer. With two or fewer a 1 MiB read runs faster on the caller's
/// thread: on a 2-core VM 7.5–7.9 GB/s inline against 6.6 through two
/// workers (two wake-ups per request cost about 100 µs there; fio:
/// 8.0–8.2). With twelve on the H200 the workers' parallel copy wins by far
/// (1 MiB host reads: 19.35 GB/s through them, 7.17 inline), so above two
/// the limit is 64 KiB, where a hand-off to a worker costs more than the
/// copy. More workers than cores add no copy in parallel, only hand-offs:
/// eight workers on the 2-core VM read hot 512 KiB and 1 MiB host reads at
/// 0.62 and 0.87 × `pread` through the workers, 0.99 and 1.00 × on the
/// caller's thread (`small-reads`, eight rounds each).
pub fn default_inline_bytes(parallel: usize) -> usize {
    if parallel <= 2 {
        1 << 20
    } else {
        64 << 10
    }
}

/// Workers that take storage-bound read chunks (the rest take only
/// page-cache chunks), a property of the engine rather than a setting: four
/// rings keep up to 4 × 42 reads in flight, more than a disk queue needs,
/// and fewer rings submitting to one disk means fewer, larger submissions.
/// On the H200's virtio disk, 4 KiB random reads at QD128: 81.7k IOPS with
/// 4, 71.5k with all 12 (raw io_uring: 89.5–91.1k); sequential cold and hot
/// reads measured the same.
pub const DEFAULT_COLD_IO_THREADS: usize = 4;
/// Piece size of a write that must reach the disk before it completes (a
/// durable sync write, or any write on an O_DIRECT descriptor). The virtio
/// disks of the H200 and H100 machines take 1 MiB O_DIRECT writes at 32 in
/// flight faster than 4 MiB ones (3.5–4.8 against 2.9–3.9 GB/s, raw
/// io_uring from huge pages), and durable 256 MiB writes from device memory
/// followed: on an O_DIRECT handle, 1 MiB pieces on the four storage
/// workers ran 1.04–1.26 × 4 MiB chunks on all sixteen in 8 of 9
/// interleaved rounds over the two machines; on a buffered handle (page
/// cache, then writeback) 2 and 4 MiB pieces ran 0.95 × and 0.91 × the
/// 1 MiB ones and 512 KiB pieces 0.99 × (medians of 10 interleaved rounds,
/// H100). Where those pieces go: `Engine::storage_bound`. A chunk size
/// below it (`HIPFILE_CHUNK_KB`) still caps it.
pub const STORAGE_WRITE_PIECE_BYTES: usize = 1 << 20;
/// Smallest piece a request is split into when it is spread over the workers.
pub const MIN_SPLIT_BYTES: usize = 64 << 10;
/// Pieces per worker a synchronous request is cut into when it is smaller
/// than workers × chunk × 2 (see `request::split_bytes`): with one
/// piece per worker every worker reads its whole piece before its first
/// byte can go to the GPU; with two, the first piece's copy overlaps the
/// second read. Hot 64 MiB sync reads on the H200: 28.7–32.2 GB/s in 2 MiB
/// pieces against 26.6–28.9 in 4 MiB ones.
pub const PIECES_PER_WORKER: usize = 2;
/// Workers that get one piece each of a mid-size synchronous request, at
/// most, while its pieces would be under [`MIN_PIECE_BYTES`] (see
/// `request::split_bytes`): a 16 MiB request is 8 pieces of 2 MiB, not 16
/// of 1 MiB. Page-cache-hot sync reads into device memory on an H100
/// machine, three interleaved rounds: 4 MiB requests 10.9–11.2 GB/s against
/// 9.3–9.9 cut for all 16 workers, 16 MiB 17.7–18.6 against 15.2–16.2 (on
/// the H200, 8 workers in all read 16 MiB requests 1.07–1.15 × faster than
/// 16). Every piece costs a hand-off, a wake-up and a GPU copy of its own,
/// and past eight the page-cache copies only contend for the same memory.
/// Requests of 32 MiB and more are cut as before: 2 MiB pieces or whole
/// chunks.
pub const SPREAD_MAX_WORKERS: usize = 8;
/// Smallest piece that [`PIECES_PER_WORKER`] cuts (a request whose one
/// piece per worker is already smaller keeps that size): 512 KiB pieces made
/// 16 MiB sync reads on the H200 12–15 % slower than one piece per worker.
pub const MIN_PIECE_BYTES: usize = 2 << 20;

impl Default for Config {
    fn default() -> Self {
        let cores = cores();
        Config {
            io_threads: cores.clamp(1, DEFAULT_MAX_THREADS),
            cold_io_threads: DEFAULT_COLD_IO_THREADS,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            slots_per_worker: DEFAULT_SLOTS_PER_WORKER,
            small_slots_per_worker: 32,
            mid_slots_per_worker: 8,
            inline_max_bytes: default_inline_bytes(cores.clamp(1, DEFAULT_MAX_THREADS)),
            first_read_alone: true,
            copy_spin: DEFAULT_COPY_SPIN,
            ring_entries: 128,
            io_backend: BackendSetting::Auto,
            read_mode: ReadMode::Auto,
            stream_stages: crate::streamops::DEFAULT_STAGES,
            gpu_runtime: RuntimeChoice::Auto,
            register_buffers: true,
            pin_buffers: true,
            huge_pages: true,
            bind_io_threads: true,
            write_sync: true,
            allow_compat_mode: true,
            force_compat_mode: false,
            unsupported_file_systems: false,
            stats_level: 1,
            max_batch_entries: 128,
            batch_timeout_ms: 5,
        }
    }
}

/// Something that reads variables: the process environment, or a map in tests.
pub trait Env {
    fn get(&self, name: &str) -> Option<String>;
}

pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl Env for [(&str, &str)] {
    fn get(&self, name: &str) -> Option<String> {
        self.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_string())
    }
}

/// Boolean as upstream parses it: only case-insensitive "true"/"false"; anything
/// else keeps the default (and is reported).
pub fn parse_bool(name: &str, value: &str) -> Option<bool> {
    if value.eq_ignore_ascii_case("true") {
        Some(true)
    } else if value.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        log_warn!("{name}={value:?} is not \"true\" or \"false\"; using the default");
        None
    }
}

/// Unsigned as upstream parses it: the whole string in base 10, saturating at
/// `u32::MAX`; anything else keeps the default (and is reported).
pub fn parse_unsigned(name: &str, value: &str) -> Option<u32> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        log_warn!("{name}={value:?} is not an unsigned decimal number; using the default");
        return None;
    }
    // All digits: the only failure left is overflow, which saturates.
    Some(
        value
            .parse::<u64>()
            .map_or(u32::MAX, |v| v.min(u32::MAX as u64) as u32),
    )
}

fn env_bool(env: &(impl Env + ?Sized), name: &str, default: bool) -> bool {
    env.get(name)
        .and_then(|v| parse_bool(name, &v))
        .unwrap_or(default)
}

fn env_unsigned(env: &(impl Env + ?Sized), name: &str) -> Option<u32> {
    env.get(name).and_then(|v| parse_unsigned(name, &v))
}

fn env_choice<T: Copy>(
    env: &(impl Env + ?Sized),
    name: &str,
    choices: &[(&str, T)],
    default: T,
) -> T {
    let Some(v) = env.get(name) else {
        return default;
    };
    match choices.iter().find(|(k, _)| v.eq_ignore_ascii_case(k)) {
        Some((_, t)) => *t,
        None => {
            let names: Vec<&str> = choices.iter().map(|(k, _)| *k).collect();
            log_warn!("{name}={v:?} is not one of {names:?}; using the default");
            default
        }
    }
}

impl Config {
    /// Settings from the process environment (see [`Config::from_env_with`]).
    pub fn from_env() -> Config {
        crate::config_file::with_process_env(Config::from_env_with)
    }

    /// Settings from `env`, over the measured defaults. Out-of-range values are
    /// clamped to what the engine can do, with a warning.
    pub fn from_env_with(env: &(impl Env + ?Sized)) -> Config {
        let mut c = Config::default();
        if let Some(n) = env_unsigned(env, "HIPFILE_IO_THREADS") {
            // The upper bound comes from the machine (bound_io_threads, below).
            c.io_threads = clamp_warn("HIPFILE_IO_THREADS", n as usize, 1, usize::MAX);
        }
        c.inline_max_bytes = default_inline_bytes(c.io_threads.min(cores()));
        c.cold_io_threads = c.cold_io_threads.min(c.io_threads);
        if let Some(kb) = env_unsigned(env, "HIPFILE_CHUNK_KB") {
            // Multiples of 4 KiB keep every chunk boundary DIO-aligned.
            let kb = clamp_warn("HIPFILE_CHUNK_KB", kb as usize, 4, 256 * 1024);
            c.chunk_bytes = (kb & !3) << 10;
        }
        if let Some(us) = env_unsigned(env, "HIPFILE_COPY_SPIN_US") {
            let us = clamp_warn("HIPFILE_COPY_SPIN_US", us as usize, 0, 100_000);
            c.copy_spin = std::time::Duration::from_micros(us as u64);
        }
        if let Some(n) = env_unsigned(env, "HIPFILE_QUEUE_DEPTH") {
            c.slots_per_worker = clamp_warn("HIPFILE_QUEUE_DEPTH", n as usize, 1, 64);
        }
        if let Some(kb) = env_unsigned(env, "HIPFILE_INLINE_KB") {
            c.inline_max_bytes = clamp_warn("HIPFILE_INLINE_KB", kb as usize, 0, 1024) << 10;
        }
        if let Some(n) = env_unsigned(env, "HIPFILE_STREAM_STAGES") {
            let max = crate::streamops::MAX_STAGES;
            c.stream_stages = clamp_warn("HIPFILE_STREAM_STAGES", n as usize, 2, max);
        }
        c.ring_entries =
            ((c.slots_per_worker * 2 + c.small_slots_per_worker + c.mid_slots_per_worker) as u32)
                .next_power_of_two()
                .max(64);
        c.read_mode = env_choice(
            env,
            "HIPFILE_READ_MODE",
            &[
                ("auto", ReadMode::Auto),
                ("direct", ReadMode::Direct),
                ("buffered", ReadMode::Buffered),
            ],
            c.read_mode,
        );
        c.io_backend = env_choice(
            env,
            "HIPFILE_IO_BACKEND",
            &[
                ("auto", BackendSetting::Auto),
                ("io_uring", BackendSetting::IoUring),
                ("posix", BackendSetting::Posix),
            ],
            c.io_backend,
        );
        c.gpu_runtime = env_choice(
            env,
            "HIPFILE_GPU_RUNTIME",
            &[
                ("auto", RuntimeChoice::Auto),
                ("cuda", RuntimeChoice::Cuda),
                ("hip", RuntimeChoice::Hip),
                ("none", RuntimeChoice::None),
            ],
            c.gpu_runtime,
        );
        c.register_buffers = env_bool(env, "HIPFILE_REGISTER_BUFFERS", c.register_buffers);
        c.pin_buffers = env_bool(env, "HIPFILE_PIN_BUFFERS", c.pin_buffers);
        c.huge_pages = env_bool(env, "HIPFILE_HUGE_PAGES", c.huge_pages);
        c.bind_io_threads = env_bool(env, "HIPFILE_BIND_IO_THREADS", c.bind_io_threads);
        c.write_sync = env_bool(env, "HIPFILE_WRITE_SYNC", c.write_sync);
        c.allow_compat_mode = env_bool(env, "HIPFILE_ALLOW_COMPAT_MODE", c.allow_compat_mode);
        c.force_compat_mode = env_bool(env, "HIPFILE_FORCE_COMPAT_MODE", c.force_compat_mode);
        if c.force_compat_mode && !c.allow_compat_mode {
            // Upstream: FORCE=true with ALLOW=false warns and keeps the fallback on.
            log_warn!(
                "HIPFILE_FORCE_COMPAT_MODE=true overrides HIPFILE_ALLOW_COMPAT_MODE=false; \
                 the compatibility path stays enabled"
            );
            c.allow_compat_mode = true;
        }
        c.unsupported_file_systems = env_bool(
            env,
            "HIPFILE_UNSUPPORTED_FILE_SYSTEMS",
            c.unsupported_file_systems,
        );
        if let Some(l) = env_unsigned(env, "HIPFILE_STATS_LEVEL") {
            c.stats_level = l.min(3);
        }
        for (i, name) in retired_settings(env) {
            warn_retired(i, name);
        }
        c.bound_io_threads("HIPFILE_IO_THREADS");
        c
    }

    /// The number of workers that take storage-bound reads, when it is fewer
    /// than all of them.
    pub(crate) fn cold_limit(&self) -> Option<usize> {
        (self.cold_io_threads > 0 && self.cold_io_threads < self.io_threads)
            .then_some(self.cold_io_threads)
    }

    /// The most workers this machine can use: four per core, 64 in all, and
    /// no more than fit their bounce memory into an eighth of RAM. Each
    /// worker pins its own slab (about 20 MiB by default) and its start
    /// costs tens of milliseconds, so 256 workers took 16.5 s and 5.25 GB
    /// to open on a 2-core machine.
    pub fn max_io_threads(&self) -> usize {
        let cores = cores();
        let per_worker = Config {
            io_threads: 1,
            ..self.clone()
        }
        .bounce_bytes()
        .max(1);
        // SAFETY: sysconf only reads system configuration.
        let (pages, page) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let ram = if pages > 0 && page > 0 {
            (pages as usize).saturating_mul(page as usize)
        } else {
            usize::MAX
        };
        worker_limit(cores, ram, per_worker)
    }

    /// Clamp `io_threads` to [`Config::max_io_threads`], with a log line
    /// naming `what` set it.
    pub fn bound_io_threads(&mut self, what: &str) {
        let max = self.max_io_threads();
        if self.io_threads > max {
            log_warn!(
                "{what}: {} I/O threads asked for; using {max} (at most 4 per core, 64 in all, \
                 bounce memory within an eighth of RAM)",
                self.io_threads
            );
            self.io_threads = max;
            self.cold_io_threads = self.cold_io_threads.min(max);
        }
    }

    /// Pinned bounce memory the engine allocates at open, in bytes.
    pub fn bounce_bytes(&self) -> usize {
        self.io_threads
            * (self.slots_per_worker * self.slot_bytes()
                + self.small_slots_per_worker * self.small_slot_bytes()
                + self.mid_slots_per_worker
                    * (MID_SLOT_DATA_BYTES + 2 * crate::file::MAX_DIO_ALIGN))
    }

    /// Slot classes of a worker's slab, smallest first: (count, bytes per slot).
    /// Each slot has room to widen its data to DIO boundaries on both ends.
    pub fn slot_classes(&self) -> Vec<(usize, usize)> {
        let pad = 2 * crate::file::MAX_DIO_ALIGN;
        let mut v = vec![
            (self.small_slots_per_worker, SMALL_SLOT_DATA_BYTES + pad),
            (self.mid_slots_per_worker, MID_SLOT_DATA_BYTES + pad),
            (self.slots_per_worker, self.slot_bytes()),
        ];
        v.retain(|&(n, b)| n > 0 && b <= self.slot_bytes());
        v
    }

    /// A small slot: 64 KiB of data plus the same widening room as a chunk slot.
    pub fn small_slot_bytes(&self) -> usize {
        SMALL_SLOT_DATA_BYTES + 2 * crate::file::MAX_DIO_ALIGN
    }

    /// One bounce slot: a chunk plus room to widen both ends to a 4 KiB DIO
    /// boundary (a 4 MiB chunk at offset 4095 covers 4096 + 4 MiB + 4096 at most).
    pub fn slot_bytes(&self) -> usize {
        self.chunk_bytes + 2 * crate::file::MAX_DIO_ALIGN
    }
}

/// Variables that once tuned the engine and are now fixed in the code. A
/// script that still sets one is told so (once per variable and process)
/// instead of silently getting the fixed behaviour.
pub const RETIRED_SETTINGS: [&str; 6] = [
    "HIPFILE_CACHED_READS_PER_PASS",
    "HIPFILE_FIRST_READ_ALONE",
    "HIPFILE_PIECES_PER_WORKER",
    "HIPFILE_BATCH_COPIES",
    "HIPFILE_POLL_COPIES",
    "HIPFILE_COLD_IO_THREADS",
];

/// The retired variables `env` sets, with their index in [`RETIRED_SETTINGS`].
pub fn retired_settings(
    env: &(impl Env + ?Sized),
) -> impl Iterator<Item = (usize, &'static str)> + '_ {
    RETIRED_SETTINGS
        .iter()
        .enumerate()
        .filter(|(_, name)| env.get(name).is_some())
        .map(|(i, name)| (i, *name))
}

fn warn_retired(i: usize, name: &str) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static WARNED: AtomicU32 = AtomicU32::new(0);
    if WARNED.fetch_or(1 << i, Ordering::Relaxed) & (1 << i) == 0 {
        log_warn!("{name} is no longer a setting: the engine's behaviour is fixed; the variable is ignored");
    }
}

/// [`Config::max_io_threads`] for a machine of `cores` and `ram` bytes, with
/// `per_worker` bytes of bounce memory each.
fn worker_limit(cores: usize, ram: usize, per_worker: usize) -> usize {
    (4 * cores).min(64).min(ram / 8 / per_worker.max(1)).max(1)
}

fn clamp_warn(name: &str, v: usize, lo: usize, hi: usize) -> usize {
    let c = v.clamp(lo, hi);
    if c != v {
        log_warn!("{name}={v} is outside {lo}..={hi}; using {c}");
    }
    c
}

// ---------------------------------------------------------------------------
// cuFile-style parameters (hipFileSet/Get*Parameter), spec §2.9 and §5.8.

/// `hipFileSizeTConfigParameter_t` ordinals.
pub const SIZE_T_PARAMS: usize = 12;
/// `hipFileBoolConfigParameter_t` ordinals.
pub const BOOL_PARAMS: usize = 12;
/// `hipFileStringConfigParameter_t` ordinals.
pub const STRING_PARAMS: usize = 3;

pub mod param {
    pub const PROFILE_STATS: usize = 0;
    pub const EXECUTION_MAX_IO_QUEUE_DEPTH: usize = 1;
    pub const EXECUTION_MAX_IO_THREADS: usize = 2;
    pub const EXECUTION_MIN_IO_THRESHOLD_SIZE_KB: usize = 3;
    pub const EXECUTION_MAX_REQUEST_PARALLELISM: usize = 4;
    pub const PROPERTIES_MAX_DIRECT_IO_SIZE_KB: usize = 5;
    pub const PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB: usize = 6;
    pub const PROPERTIES_PER_BUFFER_CACHE_SIZE_KB: usize = 7;
    pub const PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB: usize = 8;
    pub const PROPERTIES_IO_BATCHSIZE: usize = 9;
    pub const POLLTHRESHOLD_SIZE_KB: usize = 10;
    pub const PROPERTIES_BATCH_IO_TIMEOUT_MS: usize = 11;

    pub const B_PROPERTIES_USE_POLL_MODE: usize = 0;
    pub const B_PROPERTIES_ALLOW_COMPAT_MODE: usize = 1;
    pub const B_FORCE_COMPAT_MODE: usize = 2;
    pub const B_FS_MISC_API_CHECK_AGGRESSIVE: usize = 3;
    pub const B_EXECUTION_PARALLEL_IO: usize = 4;
    pub const B_PROFILE_NVTX: usize = 5;
    pub const B_PROPERTIES_ALLOW_SYSTEM_MEMORY: usize = 6;
    pub const B_USE_PCIP2PDMA: usize = 7;
    pub const B_PREFER_IO_URING: usize = 8;
    pub const B_FORCE_ODIRECT_MODE: usize = 9;
    pub const B_SKIP_TOPOLOGY_DETECTION: usize = 10;
    pub const B_STREAM_MEMOPS_BYPASS: usize = 11;

    pub const S_LOGGING_LEVEL: usize = 0;
    pub const S_ENV_LOGFILE_PATH: usize = 1;
    pub const S_LOG_DIR: usize = 2;
}

/// The parameter table: staged while the driver is closed, live while open.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub size_t: [u64; SIZE_T_PARAMS],
    pub bools: [bool; BOOL_PARAMS],
    pub strings: [String; STRING_PARAMS],
}

impl Default for Params {
    /// The project's defaults (spec §5.8). `ExecutionMaxIOThreads` reads back 0,
    /// meaning "the library's default", as cuFile does.
    fn default() -> Self {
        Params {
            size_t: [0, 128, 0, 8192, 4, 16384, 131072, 1024, 33554432, 128, 4, 5],
            bools: [
                false, true, false, false, true, false, true, false, true, false, false, true,
            ],
            // LogDir is empty, as libcufile reports it: "the current directory".
            strings: ["ERROR".to_string(), String::new(), String::new()],
        }
    }
}

impl Params {
    /// Apply parameters onto env-derived settings (parameters win where set).
    pub fn apply(&self, c: &mut Config) {
        let threads = self.size_t[param::EXECUTION_MAX_IO_THREADS];
        if threads != 0 {
            c.io_threads = usize::try_from(threads).unwrap_or(usize::MAX);
        }
        c.max_batch_entries = self.size_t[param::PROPERTIES_IO_BATCHSIZE].clamp(1, 1024) as u32;
        c.batch_timeout_ms =
            self.size_t[param::PROPERTIES_BATCH_IO_TIMEOUT_MS].min(u32::MAX as u64) as u32;
        if !self.bools[param::B_PROPERTIES_ALLOW_COMPAT_MODE] {
            c.allow_compat_mode = false;
        }
        if self.bools[param::B_FORCE_COMPAT_MODE] {
            c.force_compat_mode = true;
            c.allow_compat_mode = true;
        }
        if self.bools[param::B_FORCE_ODIRECT_MODE] {
            c.read_mode = ReadMode::Direct;
        }
        c.bound_io_threads("ExecutionMaxIOThreads");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bools_parse_like_upstream() {
        assert_eq!(parse_bool("X", "TRUE"), Some(true));
        assert_eq!(parse_bool("X", "false"), Some(false));
        assert_eq!(parse_bool("X", "1"), None);
        assert_eq!(parse_bool("X", "yes"), None);
    }

    #[test]
    fn unsigned_parse_like_upstream() {
        assert_eq!(parse_unsigned("X", "12"), Some(12));
        assert_eq!(parse_unsigned("X", "12x"), None);
        assert_eq!(parse_unsigned("X", "99999999999"), Some(u32::MAX));
        assert_eq!(parse_unsigned("X", ""), None);
        assert_eq!(parse_unsigned("X", "-3"), None);
    }

    #[test]
    fn env_overrides_and_malformed_values_keep_defaults() {
        let d = Config::default();
        let env: &[(&str, &str)] = &[
            ("HIPFILE_IO_THREADS", "3"),
            ("HIPFILE_CHUNK_KB", "1027"),
            ("HIPFILE_QUEUE_DEPTH", "many"),
            ("HIPFILE_READ_MODE", "Direct"),
            ("HIPFILE_GPU_RUNTIME", "opencl"),
        ];
        let c = Config::from_env_with(env);
        assert_eq!(c.io_threads, 3);
        assert_eq!(
            c.chunk_bytes,
            1024 << 10,
            "chunks are rounded down to 4 KiB"
        );
        assert_eq!(c.slots_per_worker, d.slots_per_worker);
        assert_eq!(c.read_mode, ReadMode::Direct);
        assert_eq!(c.gpu_runtime, RuntimeChoice::Auto);
    }

    #[test]
    fn the_copy_spin_is_read_in_microseconds_and_clamped() {
        assert_eq!(Config::default().copy_spin, DEFAULT_COPY_SPIN);
        let us = std::time::Duration::from_micros;
        for (v, want) in [("0", us(0)), ("250", us(250)), ("900000", us(100_000))] {
            let env: &[(&str, &str)] = &[("HIPFILE_COPY_SPIN_US", v)];
            assert_eq!(Config::from_env_with(env).copy_spin, want, "{v}");
        }
        let env: &[(&str, &str)] = &[("HIPFILE_COPY_SPIN_US", "soon")];
        assert_eq!(Config::from_env_with(env).copy_spin, DEFAULT_COPY_SPIN);
    }

    #[test]
    fn stream_stages_are_read_and_clamped() {
        assert_eq!(Config::default().stream_stages, 8);
        for (v, want) in [("4", 4), ("1", 2), ("1000", 64), ("four", 8)] {
            let env: &[(&str, &str)] = &[("HIPFILE_STREAM_STAGES", v)];
            assert_eq!(Config::from_env_with(env).stream_stages, want, "{v}");
        }
    }

    #[test]
    fn the_io_backend_comes_from_hipfile_io_backend() {
        assert_eq!(Config::default().io_backend, BackendSetting::Auto);
        for (v, want) in [
            ("posix", BackendSetting::Posix),
            ("IO_URING", BackendSetting::IoUring),
            ("auto", BackendSetting::Auto),
            ("aio", BackendSetting::Auto),
        ] {
            let env: &[(&str, &str)] = &[("HIPFILE_IO_BACKEND", v)];
            assert_eq!(Config::from_env_with(env).io_backend, want, "{v}");
        }
    }

    #[test]
    fn force_compat_keeps_fallback_enabled() {
        let env: &[(&str, &str)] = &[
            ("HIPFILE_FORCE_COMPAT_MODE", "true"),
            ("HIPFILE_ALLOW_COMPAT_MODE", "false"),
        ];
        let c = Config::from_env_with(env);
        assert!(c.force_compat_mode);
        assert!(c.allow_compat_mode);
    }

    #[test]
    fn cold_io_threads_and_inline_limit_follow_the_worker_count() {
        let env: &[(&str, &str)] = &[("HIPFILE_IO_THREADS", "12")];
        let c = Config::from_env_with(env);
        // Twelve workers copy in parallel only where there are the cores.
        let inline = if cores() <= 2 { 1 << 20 } else { 64 << 10 };
        assert_eq!((c.cold_io_threads, c.inline_max_bytes), (4, inline));
        assert_eq!(default_inline_bytes(12), 64 << 10);
        assert_eq!(default_inline_bytes(2), 1 << 20);
        let env: &[(&str, &str)] = &[("HIPFILE_IO_THREADS", "2")];
        let c = Config::from_env_with(env);
        assert_eq!((c.cold_io_threads, c.inline_max_bytes), (2, 1 << 20));
        let env: &[(&str, &str)] = &[("HIPFILE_IO_THREADS", "12"), ("HIPFILE_INLINE_KB", "256")];
        assert_eq!(Config::from_env_with(env).inline_max_bytes, 256 << 10);
    }

    #[test]
    fn io_threads_bind_unless_refused() {
        assert!(Config::default().bind_io_threads);
        let env: &[(&str, &str)] = &[("HIPFILE_BIND_IO_THREADS", "FALSE")];
        assert!(!Config::from_env_with(env).bind_io_threads);
        let env: &[(&str, &str)] = &[("HIPFILE_BIND_IO_THREADS", "no")];
        assert!(
            Config::from_env_with(env).bind_io_threads,
            "not a boolean: the default"
        );
    }

    #[test]
    fn huge_pages_are_on_unless_refused() {
        assert!(Config::default().huge_pages);
        let env: &[(&str, &str)] = &[("HIPFILE_HUGE_PAGES", "false")];
        assert!(!Config::from_env_with(env).huge_pages);
    }

    #[test]
    fn retired_settings_are_named_and_ignored() {
        let env: &[(&str, &str)] = &[
            ("HIPFILE_IO_THREADS", "6"),
            ("HIPFILE_COLD_IO_THREADS", "2"),
            ("HIPFILE_FIRST_READ_ALONE", "false"),
            ("HIPFILE_POLL_COPIES", "true"),
        ];
        let named: Vec<&str> = retired_settings(env).map(|(_, n)| n).collect();
        assert_eq!(
            named,
            [
                "HIPFILE_FIRST_READ_ALONE",
                "HIPFILE_POLL_COPIES",
                "HIPFILE_COLD_IO_THREADS"
            ]
        );
        let c = Config::from_env_with(env);
        let fixed = Config {
            io_threads: 6,
            inline_max_bytes: default_inline_bytes(6.min(cores())),
            ring_entries: c.ring_entries,
            ..Config::default()
        };
        assert_eq!(c, fixed);
        assert_eq!(c.cold_io_threads, DEFAULT_COLD_IO_THREADS);
        assert!(c.first_read_alone);
    }

    #[test]
    fn storage_reads_use_at_most_the_fixed_worker_count() {
        let env: &[(&str, &str)] = &[("HIPFILE_IO_THREADS", "2")];
        assert_eq!(Config::from_env_with(env).cold_limit(), None);
        let env: &[(&str, &str)] = &[("HIPFILE_IO_THREADS", "12")];
        assert_eq!(
            Config::from_env_with(env).cold_limit(),
            Some(DEFAULT_COLD_IO_THREADS)
        );
    }

    #[test]
    fn stats_level_is_clamped() {
        let env: &[(&str, &str)] = &[("HIPFILE_STATS_LEVEL", "7")];
        assert_eq!(Config::from_env_with(env).stats_level, 3);
    }

    #[test]
    fn params_apply_over_env() {
        let mut p = Params::default();
        assert_eq!(p.size_t[param::EXECUTION_MAX_IO_THREADS], 0);
        p.size_t[param::EXECUTION_MAX_IO_THREADS] = 5;
        let env: &[(&str, &str)] = &[("HIPFILE_IO_THREADS", "3")];
        let mut c = Config::from_env_with(env);
        p.apply(&mut c);
        assert_eq!(c.io_threads, 5);
    }

    #[test]
    fn a_huge_worker_count_is_bounded_by_the_machine() {
        let cores = cores();
        let bound = (4 * cores).min(64);
        let mut p = Params::default();
        p.size_t[param::EXECUTION_MAX_IO_THREADS] = u64::MAX;
        let mut c = Config::from_env_with(&[] as &[(&str, &str)]);
        p.apply(&mut c);
        assert!(
            c.io_threads >= 1 && c.io_threads <= bound,
            "{}",
            c.io_threads
        );
        assert!(c.cold_io_threads <= c.io_threads);
        let env: &[(&str, &str)] = &[("HIPFILE_IO_THREADS", "4000000")];
        let c = Config::from_env_with(env);
        assert!(
            c.io_threads >= 1 && c.io_threads <= bound,
            "{}",
            c.io_threads
        );
    }

    #[test]
    fn the_worker_limit_follows_cores_and_memory() {
        let gib = 1usize << 30;
        let slab = 20 << 20;
        assert_eq!(worker_limit(2, 24 * gib, slab), 8);
        assert_eq!(worker_limit(16, 128 * gib, slab), 64);
        assert_eq!(worker_limit(192, 2048 * gib, slab), 64);
        // 1 GiB of RAM: 128 MiB of bounce memory, six slabs of 20 MiB.
        assert_eq!(worker_limit(16, gib, slab), 6);
        // Never none, whatever the machine says.
        assert_eq!(worker_limit(1, 0, slab), 1);
        assert_eq!(worker_limit(0, gib, 0), 1);
    }
}
