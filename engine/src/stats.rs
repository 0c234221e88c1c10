//! Counters of what the data path did, per engine: which way bytes reached
//! storage (page-cache probe hits, O_DIRECT, plain buffered), bounce usage and
//! GPU copies. Cheap relaxed atomics; read them to see which path served I/O.

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
    /// Chunks that needed a bounce slot.
    pub bounced_chunks: AtomicU64,
    /// Ops resubmitted after EINTR/EAGAIN/short transfers.
    pub retries: AtomicU64,
    /// Bytes of small host-memory requests done on the caller's thread.
    pub inline_bytes: AtomicU64,
}

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
    pub bounced_chunks: u64,
    pub retries: u64,
    pub inline_bytes: u64,
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
            bounced_chunks: g(&self.bounced_chunks),
            retries: g(&self.retries),
            inline_bytes: g(&self.inline_bytes),
        }
    }
}
