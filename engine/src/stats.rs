//! Statistics: what the data path did, kept where an operator can read it.
//!
//! Two layers:
//! - [`Stats`]: counters of one engine, kept by its workers (which way bytes
//!   reached storage, bounce use, GPU copies, time per [`Stage`]). Cheap
//!   relaxed atomics; `Engine::stats` reads them.
//! - The process's statistics region ([`layout`]): per-call figures counted
//!   at the entry points ([`record`]), per entry point, direction and (level
//!   3) GPU, with latency and size histograms; registrations and other rare
//!   events; and the engines' [`Stats`], copied in by the listener
//!   ([`server`]). Another process reads it without stopping this one
//!   ([`client`], `ais-stats`).
//!
//! `HIPFILE_STATS_LEVEL` (or `profile.cufile_stats`, or the `ProfileStats`
//! parameter) picks what is counted: 0 nothing, and no shared memory is made;
//! 1 calls, bytes, errors, latencies and the engine figures; 2 adds request
//! sizes; 3 adds the split by GPU.
//!
//! # Why a memfd served over an abstract socket
//!
//! The region is an anonymous, sealed memfd mapped shared, handed to readers
//! over the abstract UNIX socket `@hipfile-stats.<pid>` with SCM_RIGHTS (as
//! upstream hipFile does). Against the alternative, a file in /dev/shm:
//! - nothing outlives the process: the memfd and the socket name vanish
//!   with its last descriptor, so a crashed or killed job leaves no file for
//!   anyone to clean up, and a reused pid never finds a stale region;
//! - a reader that received the memfd keeps it, so it can report after the
//!   process exited (`ais-stats PROGRAM`, or `-p` waiting for the exit);
//! - seals (`F_SEAL_FUTURE_WRITE`) make the reader's copy read-only, and the
//!   listener checks the peer's uid (SO_PEERCRED): same user or root, the
//!   rule /proc/PID/fd applies too;
//! - the listener thread sleeps in poll(2) and wakes only when a reader
//!   connects, or every 100 ms while one stays connected to keep the engine
//!   figures fresh.
//!
//! Its limits, and what covers them: abstract sockets belong to a network
//! namespace, so a reader outside the process's container falls back to
//! /proc/PID/fd (ptrace-read permission), where the memfd is visible as
//! `/memfd:hipfile-stats`; and a program that exits before a reader can
//! connect is covered by `ais-stats PROGRAM`, which passes the program an
//! inherited socket ([`server::HANDOFF_ENV`]) that the library sends its
//! memfd to as soon as the region exists.

pub mod client;
mod clock;
pub mod layout;
pub mod record;
pub mod server;
pub mod snapshot;

pub use layout::{Api, Event};
pub use record::{event, event_add, level, with_api, Call};
pub use server::set_level;

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default, Debug)]
pub struct Stats {
    /// Bytes served by buffered RWF_NOWAIT reads (page-cache hits).
    pub cache_hit_bytes: AtomicU64,
    /// Bytes read with O_DIRECT.
    pub direct_read_bytes: AtomicU64,
    /// Bytes read through the page cache without the probe (buffered mode or no O_DIRECT).
    pub buffered_read_bytes: AtomicU64,
    /// Bytes written with O_DIRECT.
    pub direct_write_bytes: AtomicU64,
    /// Bytes written through the page cache.
    pub buffered_write_bytes: AtomicU64,
    /// Page-cache probes that missed (EAGAIN) and fell back to O_DIRECT.
    pub cache_misses: AtomicU64,
    /// Host-to-device and device-to-host copies issued.
    pub gpu_copies: AtomicU64,
    /// Completion events recorded after copies: one covers every copy a
    /// worker queued on a stream since its previous event.
    pub gpu_events: AtomicU64,
    /// Host-to-device copies of two or more given to the runtime as one batch.
    pub gpu_copy_batches: AtomicU64,
    /// Chunks that needed a bounce slot.
    pub bounced_chunks: AtomicU64,
    /// Bytes read from storage into a bounce buffer (a huge page where THP
    /// is on) and copied into a caller's host buffer: O_DIRECT reads of more
    /// than [`crate::host_bounce::MIN_BYTES`], inline or on a worker, and
    /// unaligned host ranges on a worker.
    pub host_bounce_bytes: AtomicU64,
    /// Ops resubmitted after EINTR/EAGAIN/short transfers.
    pub retries: AtomicU64,
    /// Bytes of small requests done on the caller's thread: added by every
    /// calling thread, so kept per thread ([`PerThread`]); shared with the
    /// threads' remembered fast reads ([`crate::fast`]).
    pub inline_bytes: std::sync::Arc<PerThread>,
    /// Time chunks spent in each [`Stage`] (sum and longest, nanoseconds).
    pub stage_ns: [AtomicU64; STAGES],
    pub stage_max_ns: [AtomicU64; STAGES],
    /// Chunks finished by workers, and their time from being cut to done.
    pub chunks: AtomicU64,
    pub chunk_ns: AtomicU64,
    pub chunk_max_ns: AtomicU64,
    /// Worker threads running now (they start as work needs them, up to
    /// `Config::io_threads`).
    pub workers: AtomicU64,
    /// Bytes of the running workers' bounce slabs, and of those the bytes
    /// locked in memory (page-locked by the GPU runtime or registered with
    /// io_uring; either counts against RLIMIT_MEMLOCK).
    pub bounce_bytes: AtomicU64,
    pub locked_bounce_bytes: AtomicU64,
}

/// A counter that every calling thread adds to, in [`layout::SHARDS`] cells
/// of their own cache lines, indexed by the thread's statistics shard
/// ([`record::ShardPool`]). An atomic add to one shared word is a locked
/// read-modify-write that takes its cache line exclusive, so threads adding
/// at once on several cores pass the line between them on every add; here a
/// thread that holds its shard alone adds with a plain load and store to a
/// line no other thread writes, and only threads beyond the pool's shards
/// share the last cell (with atomic adds). [`PerThread::get`] sums the
/// cells: exact once the adds it should see have happened before it.
pub struct PerThread {
    cells: Box<[Padded; layout::SHARDS]>,
}

/// One cell of a [`PerThread`], alone on its cache lines (128 bytes: the
/// adjacent-line prefetcher pairs 64-byte lines).
#[repr(align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

impl PerThread {
    pub fn new() -> Self {
        PerThread {
            cells: Box::new(std::array::from_fn(|_| Padded::default())),
        }
    }

    /// Add `n` for the calling thread.
    #[inline]
    pub fn add(&self, n: u64) {
        let (i, alone) = record::thread_shard();
        self.add_at(i, alone, n);
    }

    /// Add `n` to cell `i`; `alone`: the caller is the only thread that
    /// writes that cell (it holds shard `i` from a [`record::ShardPool`]).
    #[inline]
    pub(crate) fn add_at(&self, i: usize, alone: bool, n: u64) {
        let c = &self.cells[i % layout::SHARDS].0;
        if alone {
            // Readers load the word while it changes; a relaxed store of the
            // sum is a whole word to them either way.
            c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        } else {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The sum over every thread.
    pub fn get(&self) -> u64 {
        self.cells
            .iter()
            .fold(0u64, |s, c| s.wrapping_add(c.0.load(Ordering::Relaxed)))
    }
}

impl Default for PerThread {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for PerThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// Where a worker chunk's time goes, from the moment its request is cut into
/// chunks: waiting for its worker, for a bounce slot, for storage (every read
/// or write op of the chunk), for its GPU copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Queue = 0,
    Slot = 1,
    Storage = 2,
    Gpu = 3,
}

pub const STAGES: usize = 4;
pub const STAGE_NAMES: [&str; STAGES] = ["queue", "slot", "storage", "gpu"];

/// A plain copy of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub cache_hit_bytes: u64,
    pub direct_read_bytes: u64,
    pub buffered_read_bytes: u64,
    pub direct_write_bytes: u64,
    pub buffered_write_bytes: u64,
    pub cache_misses: u64,
    pub gpu_copies: u64,
    pub gpu_events: u64,
    pub gpu_copy_batches: u64,
    pub bounced_chunks: u64,
    pub host_bounce_bytes: u64,
    pub retries: u64,
    pub inline_bytes: u64,
    pub stage_ns: [u64; STAGES],
    pub stage_max_ns: [u64; STAGES],
    pub chunks: u64,
    pub chunk_ns: u64,
    pub chunk_max_ns: u64,
    pub workers: u64,
    pub bounce_bytes: u64,
    pub locked_bounce_bytes: u64,
}

impl StatsSnapshot {
    /// "queue 12/340 µs, slot ..., whole chunk 80/900 µs over N chunks"
    /// (mean/longest per stage), or None before any worker chunk finished.
    pub fn stage_summary(&self) -> Option<String> {
        if self.chunks == 0 {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1e3;
        let n = self.chunks as f64;
        let mut parts: Vec<String> = (0..STAGES)
            .map(|i| {
                format!(
                    "{} {:.0}/{:.0}",
                    STAGE_NAMES[i],
                    us(self.stage_ns[i]) / n,
                    us(self.stage_max_ns[i])
                )
            })
            .collect();
        parts.push(format!(
            "whole chunk {:.0}/{:.0}",
            us(self.chunk_ns) / n,
            us(self.chunk_max_ns)
        ));
        Some(format!(
            "{} µs (mean/longest) over {} chunks",
            parts.join(", "),
            self.chunks
        ))
    }
}

impl Stats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            cache_hit_bytes: g(&self.cache_hit_bytes),
            direct_read_bytes: g(&self.direct_read_bytes),
            buffered_read_bytes: g(&self.buffered_read_bytes),
            direct_write_bytes: g(&self.direct_write_bytes),
            buffered_write_bytes: g(&self.buffered_write_bytes),
            cache_misses: g(&self.cache_misses),
            gpu_copies: g(&self.gpu_copies),
            gpu_events: g(&self.gpu_events),
            gpu_copy_batches: g(&self.gpu_copy_batches),
            bounced_chunks: g(&self.bounced_chunks),
            host_bounce_bytes: g(&self.host_bounce_bytes),
            retries: g(&self.retries),
            inline_bytes: self.inline_bytes.get(),
            stage_ns: std::array::from_fn(|i| g(&self.stage_ns[i])),
            stage_max_ns: std::array::from_fn(|i| g(&self.stage_max_ns[i])),
            chunks: g(&self.chunks),
            chunk_ns: g(&self.chunk_ns),
            chunk_max_ns: g(&self.chunk_max_ns),
            workers: g(&self.workers),
            bounce_bytes: g(&self.bounce_bytes),
            locked_bounce_bytes: g(&self.locked_bounce_bytes),
        }
    }

    /// A worker with a slab of `bytes` (`locked` in memory) started.
    pub(crate) fn worker_started(&self, bytes: usize, locked: bool) {
        self.workers.fetch_add(1, Ordering::Relaxed);
        self.bounce_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        if locked {
            self.locked_bounce_bytes
                .fetch_add(bytes as u64, Ordering::Relaxed);
        }
    }

    /// That worker exited and unmapped its slab.
    pub(crate) fn worker_stopped(&self, bytes: usize, locked: bool) {
        self.workers.fetch_sub(1, Ordering::Relaxed);
        self.bounce_bytes.fetch_sub(bytes as u64, Ordering::Relaxed);
        if locked {
            self.locked_bounce_bytes
                .fetch_sub(bytes as u64, Ordering::Relaxed);
        }
    }

    /// Account `d` to `stage`.
    pub fn stage(&self, stage: Stage, d: std::time::Duration) {
        let ns = nanos(d);
        self.stage_ns[stage as usize].fetch_add(ns, Ordering::Relaxed);
        self.stage_max_ns[stage as usize].fetch_max(ns, Ordering::Relaxed);
    }

    /// Account a finished chunk that took `d` in all.
    pub fn chunk(&self, d: std::time::Duration) {
        let ns = nanos(d);
        self.chunks.fetch_add(1, Ordering::Relaxed);
        self.chunk_ns.fetch_add(ns, Ordering::Relaxed);
        self.chunk_max_ns.fetch_max(ns, Ordering::Relaxed);
    }
}

impl Drop for Stats {
    /// An engine is going: its counters stay in the process's statistics.
    fn drop(&mut self) {
        server::retire(self);
    }
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_thread_counts_stay_exact_with_more_threads_than_shards_adding_at_once() {
        let c = PerThread::new();
        // More threads than the pool has shards, all alive at once: most
        // hold a cell alone, the rest share the last one.
        let threads = layout::SHARDS + 8;
        let per = 20_000u64;
        let all_in = std::sync::Barrier::new(threads);
        std::thread::scope(|sc| {
            for t in 0..threads {
                let (c, all_in) = (&c, &all_in);
                sc.spawn(move || {
                    c.add(0); // claim a shard before any thread starts counting
                    all_in.wait();
                    for i in 0..per {
                        c.add(1 + (i + t as u64) % 3);
                    }
                    all_in.wait(); // keep the shard until every thread is done
                });
            }
        });
        let expected: u64 = (0..threads as u64)
            .map(|t| (0..per).map(|i| 1 + (i + t) % 3).sum::<u64>())
            .sum();
        assert_eq!(c.get(), expected);
    }

    #[test]
    fn a_shard_handed_to_a_new_thread_keeps_adding_to_the_same_total() {
        let c = PerThread::new();
        for _ in 0..4 {
            std::thread::scope(|sc| {
                sc.spawn(|| c.add(5));
            });
        }
        c.add(1);
        assert_eq!(c.get(), 21);
    }
}
