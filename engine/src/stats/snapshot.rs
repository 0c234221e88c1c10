//! A region summed into plain numbers, and what a reader derives from them:
//! totals, latency percentiles, the difference between two snapshots.

use super::layout::{
    self, engine, Region, APIS, DIRS, EVENTS, LAT_BUCKETS, SIZE_BUCKETS, TARGETS,
    TARGET_LAT_BUCKETS,
};
use std::sync::atomic::{AtomicU64, Ordering};

/// One entry point and direction, summed over the shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassTotals {
    pub ops: u64,
    pub bytes: u64,
    pub errors: u64,
    pub lat_ns: u64,
    pub lat_max_ns: u64,
    pub lat_hist: [u64; LAT_BUCKETS],
    pub size_hist: [u64; SIZE_BUCKETS],
}

impl Default for ClassTotals {
    fn default() -> Self {
        ClassTotals {
            ops: 0,
            bytes: 0,
            errors: 0,
            lat_ns: 0,
            lat_max_ns: 0,
            lat_hist: [0; LAT_BUCKETS],
            size_hist: [0; SIZE_BUCKETS],
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetTotals {
    pub ops: u64,
    pub bytes: u64,
    pub errors: u64,
    pub lat_ns: u64,
    pub lat_hist: [u64; TARGET_LAT_BUCKETS],
}

impl TargetTotals {
    /// The `pct` percentile of this target's latencies, as the middle of its
    /// power-of-two bucket (within a factor of two), or None without calls.
    pub fn percentile_ns(&self, pct: f64) -> Option<u64> {
        percentile_in(&self.lat_hist, pct, layout::target_lat_bucket_range)
    }
}

/// Everything in a region at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub pid: u32,
    pub level: u32,
    pub start_unix_ns: u64,
    pub published_ns: u64,
    pub publications: u64,
    pub class: [[ClassTotals; DIRS]; APIS],
    pub target: [[TargetTotals; DIRS]; TARGETS],
    pub events: [u64; EVENTS],
    pub engine: [u64; engine::FIELDS],
    /// The latest `last_io_ns` of any shard.
    pub last_io_ns: u64,
    /// The storage backend word (`storage::described`); 0: not recorded.
    pub storage: u64,
}

fn g(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

impl Snapshot {
    /// Sum `r`. Counters move while this runs, so figures of a busy process
    /// may be a few calls apart from each other; those of an idle one are
    /// exact.
    pub fn of(r: &Region) -> Snapshot {
        let h = &r.header;
        let mut s = Snapshot {
            pid: g(&h.pid) as u32,
            level: g(&h.level) as u32,
            start_unix_ns: g(&h.start_unix_ns),
            published_ns: g(&h.published_ns),
            publications: g(&h.publications),
            class: Default::default(),
            target: [[TargetTotals::default(); DIRS]; TARGETS],
            events: std::array::from_fn(|i| g(&r.events[i])),
            engine: std::array::from_fn(|i| g(&r.engine[i])),
            last_io_ns: 0,
            storage: g(&h.storage),
        };
        for sh in &r.shards {
            for a in 0..APIS {
                for d in 0..DIRS {
                    let c = &sh.class[a][d];
                    let t = &mut s.class[a][d];
                    t.ops += g(&c.ops);
                    t.bytes += g(&c.bytes);
                    t.errors += g(&c.errors);
                    t.lat_ns += g(&c.lat_ns);
                    t.lat_max_ns = t.lat_max_ns.max(g(&c.lat_max_ns));
                    for (i, b) in c.lat_hist.iter().enumerate() {
                        t.lat_hist[i] += g(b);
                    }
                    for (i, b) in c.size_hist.iter().enumerate() {
                        t.size_hist[i] += g(b);
                    }
                }
            }
            for (k, per) in sh.target.iter().enumerate() {
                for (d, c) in per.iter().enumerate() {
                    let t = &mut s.target[k][d];
                    t.ops += g(&c.ops);
                    t.bytes += g(&c.bytes);
                    t.errors += g(&c.errors);
                    t.lat_ns += g(&c.lat_ns);
                    for (i, b) in c.lat_hist.iter().enumerate() {
                        t.lat_hist[i] += g(b);
                    }
                }
            }
            s.last_io_ns = s.last_io_ns.max(g(&sh.last_io_ns));
        }
        s
    }

    /// Direction `dir` over every entry point.
    pub fn dir_total(&self, dir: usize) -> ClassTotals {
        let mut t = ClassTotals::default();
        for a in 0..APIS {
            t.add(&self.class[a][dir]);
        }
        t
    }

    pub fn event(&self, e: layout::Event) -> u64 {
        self.events[e as usize]
    }

    /// What happened between `earlier` and `self` (counters only; maxima and
    /// the engine's current geometry keep `self`'s values).
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        let mut d = self.clone();
        for a in 0..APIS {
            for k in 0..DIRS {
                d.class[a][k].sub(&earlier.class[a][k]);
            }
        }
        for k in 0..TARGETS {
            for dir in 0..DIRS {
                let (x, y) = (&mut d.target[k][dir], &earlier.target[k][dir]);
                x.ops = x.ops.saturating_sub(y.ops);
                x.bytes = x.bytes.saturating_sub(y.bytes);
                x.errors = x.errors.saturating_sub(y.errors);
                x.lat_ns = x.lat_ns.saturating_sub(y.lat_ns);
                sub_each(&mut x.lat_hist, &y.lat_hist);
            }
        }
        sub_each(&mut d.events, &earlier.events);
        for i in 0..engine::FIELDS {
            let keep = engine::is_max(i) || i >= engine::ENGINES;
            if !keep {
                d.engine[i] = d.engine[i].saturating_sub(earlier.engine[i]);
            }
        }
        d
    }
}

impl ClassTotals {
    pub fn add(&mut self, o: &ClassTotals) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.errors += o.errors;
        self.lat_ns += o.lat_ns;
        self.lat_max_ns = self.lat_max_ns.max(o.lat_max_ns);
        for i in 0..LAT_BUCKETS {
            self.lat_hist[i] += o.lat_hist[i];
        }
        for i in 0..SIZE_BUCKETS {
            self.size_hist[i] += o.size_hist[i];
        }
    }

    fn sub(&mut self, o: &ClassTotals) {
        self.ops = self.ops.saturating_sub(o.ops);
        self.bytes = self.bytes.saturating_sub(o.bytes);
        self.errors = self.errors.saturating_sub(o.errors);
        self.lat_ns = self.lat_ns.saturating_sub(o.lat_ns);
        sub_each(&mut self.lat_hist, &o.lat_hist);
        sub_each(&mut self.size_hist, &o.size_hist);
    }

    pub fn mean_lat_ns(&self) -> Option<u64> {
        (self.ops > 0).then(|| self.lat_ns / self.ops)
    }

    /// The latency below which `pct` percent of the calls fell, as the middle
    /// of its histogram bucket (within 12 % of the true value) but never above
    /// the longest call seen, or None without calls.
    pub fn percentile_ns(&self, pct: f64) -> Option<u64> {
        let p = percentile_ns(&self.lat_hist, pct)?;
        Some(if self.lat_max_ns > 0 {
            p.min(self.lat_max_ns)
        } else {
            p
        })
    }
}

/// The `pct` percentile of a latency histogram (see [`ClassTotals::percentile_ns`]).
pub fn percentile_ns(hist: &[u64; LAT_BUCKETS], pct: f64) -> Option<u64> {
    percentile_in(hist, pct, layout::lat_bucket_range)
}

/// The middle of the bucket that holds rank `pct` % of `hist`, whose bucket
/// `i` spans `range(i)`.
fn percentile_in(hist: &[u64], pct: f64, range: fn(usize) -> (u64, u64)) -> Option<u64> {
    let n: u64 = hist.iter().sum();
    if n == 0 {
        return None;
    }
    let rank = ((pct / 100.0 * n as f64).ceil() as u64).clamp(1, n);
    let mut seen = 0;
    for (i, &c) in hist.iter().enumerate() {
        seen += c;
        if seen >= rank {
            let (lo, hi) = range(i);
            return Some(if hi == u64::MAX {
                lo
            } else {
                lo + (hi - lo) / 2
            });
        }
    }
    None
}

/// `x[i] -= y[i]` for every counter, stopping at 0.
fn sub_each(x: &mut [u64], y: &[u64]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a = a.saturating_sub(*b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_bucket_holding_the_rank() {
        let mut h = [0u64; LAT_BUCKETS];
        h[layout::lat_bucket(10_000)] = 90;
        h[layout::lat_bucket(1_000_000)] = 10;
        let p50 = percentile_ns(&h, 50.0).unwrap();
        let p99 = percentile_ns(&h, 99.0).unwrap();
        assert!((8_700..=11_300).contains(&p50), "{p50}");
        assert!((870_000..=1_130_000).contains(&p99), "{p99}");
        assert_eq!(percentile_ns(&[0; LAT_BUCKETS], 50.0), None);
    }

    #[test]
    fn a_percentile_never_exceeds_the_longest_call() {
        let mut c = ClassTotals::default();
        c.lat_hist[layout::lat_bucket(9_240_000)] = 1;
        c.ops = 1;
        c.lat_max_ns = 9_240_000;
        assert_eq!(c.percentile_ns(99.0), Some(9_240_000));
    }

    #[test]
    fn since_subtracts_counters_and_keeps_maxima() {
        let r = Region::boxed();
        let a = Snapshot::of(&r);
        r.shards[3].class[0][0].ops.store(5, Ordering::Relaxed);
        r.shards[3].class[0][0]
            .lat_max_ns
            .store(9, Ordering::Relaxed);
        r.engine[engine::WORKERS].store(4, Ordering::Relaxed);
        r.engine[engine::CHUNKS].store(7, Ordering::Relaxed);
        let b = Snapshot::of(&r);
        let d = b.since(&a);
        assert_eq!(d.class[0][0].ops, 5);
        assert_eq!(d.class[0][0].lat_max_ns, 9);
        assert_eq!(d.engine[engine::WORKERS], 4);
        assert_eq!(d.engine[engine::CHUNKS], 7);
        assert_eq!(b.since(&b).class[0][0].ops, 0);
    }
}
