//! cuFile's statistics API (`cuFileSetStatsLevel` … `cuFileGetStatsL3`),
//! counted by this front as calls pass through it.
//!
//! Collection runs between `cuFileStatsStart` and `cuFileStatsStop` while the
//! level is 1 or more; the level (0 to 3, default 0, as libcufile reports it)
//! can be set at any time, the other calls need the driver open (5001
//! otherwise, as libcufile answers). The final `cuFileDriverClose` stops
//! collection and zeroes the counters.
//!
//! What is counted, and what is not:
//!
//! - Level 1: every sync `cuFileRead`/`cuFileWrite` (and stream calls on the
//!   NULL stream, which are synchronous) with their bytes and latency; handle
//!   and buffer (de)registrations; batch set-up, submit, cancel and destroy;
//!   batch entries enqueued, and the events handed out by
//!   `cuFileBatchIOGetStatus` (`batch_processed_ops`; complete ones in
//!   `batch_complete_ops.ok` with their bytes, failed ones in `.err`) with
//!   their time from submit to hand-out. Bandwidths are bytes over the summed
//!   latency of the calls; operations per second are over the time since
//!   `cuFileStatsStart`. Stream operations on a real stream complete after
//!   the call returns and are not counted. The fields that name a cuFile
//!   transport (`batch_posix_*`, `batch_nvfs_*`, `batch_p2p_*`, `batch_aio_*`,
//!   `batch_iouring_*`, `batch_mixed_io_*`) stay 0: this library has one
//!   transport, the engine, counted in the unlabelled fields.
//! - Level 2: size histograms. Bucket 0 counts transfers under 1 KiB; bucket
//!   i (1..=30) counts sizes in [2^(i-1), 2^i) KiB; bucket 31 everything from
//!   1 TiB up.
//! - Level 3: `num_gpus` is the GPU runtime's device count; the per-GPU
//!   entries stay zero (the front does not attribute transfers to devices).

use crate::types::*;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An ok/err pair of counters.
#[derive(Default)]
pub struct Counter {
    ok: AtomicU64,
    err: AtomicU64,
}

impl Counter {
    pub fn add(&self, ok: bool) {
        if ok { &self.ok } else { &self.err }.fetch_add(1, Relaxed);
    }

    fn add_n(&self, ok: bool, n: u64) {
        if ok { &self.ok } else { &self.err }.fetch_add(n, Relaxed);
    }

    fn get(&self) -> CUfileOpCounter {
        CUfileOpCounter {
            ok: self.ok.load(Relaxed),
            err: self.err.load(Relaxed),
        }
    }

    fn zero(&self) {
        self.ok.store(0, Relaxed);
        self.err.store(0, Relaxed);
    }
}

/// One direction of synchronous I/O.
#[derive(Default)]
struct Direction {
    ops: Counter,
    bytes: AtomicU64,
    lat_sum_us: AtomicU64,
    hist: [AtomicU64; HIST_BUCKETS],
}

#[derive(Default)]
pub struct Stats {
    level: AtomicI32,
    started: AtomicBool,
    since: Mutex<Option<Instant>>,
    read: Direction,
    write: Direction,
    pub hdl_register: Counter,
    pub hdl_deregister: Counter,
    pub buf_register: Counter,
    pub buf_deregister: Counter,
    pub batch_submit: Counter,
    pub batch_setup: Counter,
    pub batch_cancel: Counter,
    pub batch_destroy: Counter,
    batch_complete: Counter,
    batch_enqueued: Counter,
    batch_processed: Counter,
    batch_read_bytes: AtomicU64,
    batch_write_bytes: AtomicU64,
    batch_submit_lat_sum_us: AtomicU64,
    batch_completion_lat_sum_us: AtomicU64,
    last_batch_read_bytes: AtomicU64,
    last_batch_write_bytes: AtomicU64,
}

/// The histogram bucket of a transfer of `bytes` (module docs).
pub fn bucket(bytes: u64) -> usize {
    let kb = bytes >> 10;
    if kb == 0 {
        0
    } else {
        ((64 - kb.leading_zeros()) as usize).min(HIST_BUCKETS - 1)
    }
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Stats {
    pub fn level(&self) -> i32 {
        self.level.load(Relaxed)
    }

    pub fn set_level(&self, level: i32) {
        self.level.store(level, Relaxed);
    }

    /// True while calls are counted.
    pub fn collecting(&self) -> bool {
        self.started.load(Relaxed) && self.level() >= 1
    }

    pub fn start(&self) {
        *self.since.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.started.store(true, Relaxed);
    }

    pub fn stop(&self) {
        self.started.store(false, Relaxed);
    }

    /// Zero every counter (collection continues if started).
    pub fn reset(&self) {
        for d in [&self.read, &self.write] {
            d.ops.zero();
            d.bytes.store(0, Relaxed);
            d.lat_sum_us.store(0, Relaxed);
            d.hist.iter().for_each(|h| h.store(0, Relaxed));
        }
        for c in [
            &self.hdl_register,
            &self.hdl_deregister,
            &self.buf_register,
            &self.buf_deregister,
            &self.batch_submit,
            &self.batch_setup,
            &self.batch_cancel,
            &self.batch_destroy,
            &self.batch_complete,
            &self.batch_enqueued,
            &self.batch_processed,
        ] {
            c.zero();
        }
        for a in [
            &self.batch_read_bytes,
            &self.batch_write_bytes,
            &self.batch_submit_lat_sum_us,
            &self.batch_completion_lat_sum_us,
            &self.last_batch_read_bytes,
            &self.last_batch_write_bytes,
        ] {
            a.store(0, Relaxed);
        }
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        if since.is_some() {
            *since = Some(Instant::now());
        }
    }

    /// A synchronous read or write that returned `ret` after `took`.
    pub fn io(&self, write: bool, ret: isize, took: Duration) {
        let d = if write { &self.write } else { &self.read };
        d.ops.add(ret >= 0);
        d.lat_sum_us.fetch_add(us(took), Relaxed);
        if ret >= 0 {
            d.bytes.fetch_add(ret as u64, Relaxed);
            d.hist[bucket(ret as u64)].fetch_add(1, Relaxed);
        }
    }

    /// A batch submission of `entries` that succeeded or not, taking `took`.
    pub fn batch_submitted(&self, ok: bool, entries: u64, took: Duration) {
        self.batch_submit.add(ok);
        if ok {
            self.batch_enqueued.add_n(true, entries);
            self.batch_submit_lat_sum_us.fetch_add(us(took), Relaxed);
        }
    }

    /// An event handed out by GetStatus: complete with `bytes`, or failed.
    pub fn batch_event(&self, write: bool, complete: bool, bytes: u64, age: Duration) {
        self.batch_processed.add(true);
        self.batch_complete.add(complete);
        self.batch_completion_lat_sum_us.fetch_add(us(age), Relaxed);
        if complete {
            let (total, last) = if write {
                (&self.batch_write_bytes, &self.last_batch_write_bytes)
            } else {
                (&self.batch_read_bytes, &self.last_batch_read_bytes)
            };
            total.fetch_add(bytes, Relaxed);
            last.store(bytes, Relaxed);
        }
    }

    pub fn level1(&self) -> CUfileStatsLevel1 {
        let g = |a: &AtomicU64| a.load(Relaxed);
        let secs = self
            .since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map_or(0.0, |t| t.elapsed().as_secs_f64());
        let per_sec = |n: u64| {
            if secs > 0.0 {
                (n as f64 / secs) as u64
            } else {
                0
            }
        };
        let rate = |bytes: u64, lat_us: u64| {
            if lat_us > 0 {
                (bytes as f64 * 1e6 / lat_us as f64) as u64
            } else {
                0
            }
        };
        let avg = |sum: u64, n: u64| sum.checked_div(n).unwrap_or(0);
        let (r, w) = (self.read.ops.get(), self.write.ops.get());
        let (rl, wl) = (g(&self.read.lat_sum_us), g(&self.write.lat_sum_us));
        let (rb, wb) = (g(&self.read.bytes), g(&self.write.bytes));
        let submit = self.batch_submit.get();
        let complete = self.batch_complete.get();
        let processed = self.batch_processed.get();
        let (bsl, bcl) = (
            g(&self.batch_submit_lat_sum_us),
            g(&self.batch_completion_lat_sum_us),
        );
        let (brb, bwb) = (g(&self.batch_read_bytes), g(&self.batch_write_bytes));
        CUfileStatsLevel1 {
            read_ops: r,
            write_ops: w,
            hdl_register_ops: self.hdl_register.get(),
            hdl_deregister_ops: self.hdl_deregister.get(),
            buf_register_ops: self.buf_register.get(),
            buf_deregister_ops: self.buf_deregister.get(),
            read_bytes: rb,
            write_bytes: wb,
            read_bw_bytes_per_sec: rate(rb, rl),
            write_bw_bytes_per_sec: rate(wb, wl),
            read_lat_avg_us: avg(rl, r.ok + r.err),
            write_lat_avg_us: avg(wl, w.ok + w.err),
            read_ops_per_sec: per_sec(r.ok + r.err),
            write_ops_per_sec: per_sec(w.ok + w.err),
            read_lat_sum_us: rl,
            write_lat_sum_us: wl,
            batch_submit_ops: submit,
            batch_complete_ops: complete,
            batch_setup_ops: self.batch_setup.get(),
            batch_cancel_ops: self.batch_cancel.get(),
            batch_destroy_ops: self.batch_destroy.get(),
            batch_enqueued_ops: self.batch_enqueued.get(),
            batch_processed_ops: processed,
            batch_total_submit_ops: submit,
            batch_read_bytes: brb,
            batch_write_bytes: bwb,
            batch_read_bw_bytes: rate(brb, bcl),
            batch_write_bw_bytes: rate(bwb, bcl),
            batch_submit_lat_avg_us: avg(bsl, submit.ok),
            batch_completion_lat_avg_us: avg(bcl, processed.ok),
            batch_submit_ops_per_sec: per_sec(submit.ok + submit.err),
            batch_complete_ops_per_sec: per_sec(complete.ok + complete.err),
            batch_submit_lat_sum_us: bsl,
            batch_completion_lat_sum_us: bcl,
            last_batch_read_bytes: g(&self.last_batch_read_bytes),
            last_batch_write_bytes: g(&self.last_batch_write_bytes),
            ..CUfileStatsLevel1::default()
        }
    }

    pub fn level2(&self) -> CUfileStatsLevel2 {
        CUfileStatsLevel2 {
            basic: self.level1(),
            read_size_kb_hist: std::array::from_fn(|i| self.read.hist[i].load(Relaxed)),
            write_size_kb_hist: std::array::from_fn(|i| self.write.hist[i].load(Relaxed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_powers_of_two_in_kib() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1023), 0);
        assert_eq!(bucket(1024), 1);
        assert_eq!(bucket(2047), 1);
        assert_eq!(bucket(2048), 2);
        assert_eq!(bucket(4 << 20), 13);
        assert_eq!(bucket(u64::MAX), HIST_BUCKETS - 1);
    }

    #[test]
    fn a_failed_read_counts_as_an_error_without_bytes() {
        let s = Stats::default();
        s.io(false, 4096, Duration::from_micros(10));
        s.io(false, -5022, Duration::from_micros(1));
        let l1 = s.level1();
        assert_eq!(l1.read_ops, CUfileOpCounter { ok: 1, err: 1 });
        assert_eq!(l1.read_bytes, 4096);
        assert_eq!(l1.read_lat_sum_us, 11);
    }

    #[test]
    fn reset_zeroes_every_counter() {
        let s = Stats::default();
        s.io(true, 1 << 20, Duration::from_micros(100));
        s.batch_event(false, true, 4096, Duration::from_micros(5));
        s.hdl_register.add(true);
        s.reset();
        assert_eq!(s.level2(), CUfileStatsLevel2::default());
    }
}
