//! Statistics as fio keeps them: exact min/max/mean/stddev per latency kind,
//! fio's log-linear latency histogram (so percentiles and json+ `bins` land on
//! the same values fio reports), the queue-depth and latency distributions,
//! and windowed bandwidth/IOPS samples.

/// Sub-buckets per power of two: values are kept to 1/64 of their magnitude.
const PLAT_BITS: u32 = 6;
const PLAT_VAL: u64 = 1 << PLAT_BITS;
/// Powers of two covered (beyond them everything lands in the last bucket).
const PLAT_GROUPS: usize = 29;
pub const PLAT_NR: usize = PLAT_GROUPS * PLAT_VAL as usize;

/// The histogram bucket of a latency in ns. Below 2 * 64 every value has a
/// bucket of its own; above, each power of two is cut into 64 equal buckets.
pub fn plat_index(v: u64) -> usize {
    let msb = 63 - v.max(1).leading_zeros();
    if msb <= PLAT_BITS {
        return v as usize;
    }
    let shift = msb - PLAT_BITS;
    let group_start = ((shift + 1) as usize) << PLAT_BITS;
    let within = ((v >> shift) & (PLAT_VAL - 1)) as usize;
    (group_start + within).min(PLAT_NR - 1)
}

/// The value a bucket stands for: the middle of its range.
pub fn plat_value(idx: usize) -> u64 {
    if idx < (PLAT_VAL as usize) << 1 {
        return idx as u64;
    }
    let shift = (idx >> PLAT_BITS) as u32 - 1;
    let low = 1u64 << (shift + PLAT_BITS);
    let k = (idx as u64) % PLAT_VAL;
    // (k + 0.5) buckets of width 2^shift above the group's start.
    low + ((2 * k + 1) << shift) / 2
}

/// fio's latency histogram.
#[derive(Clone, Debug)]
pub struct Plat {
    counts: Box<[u64; PLAT_NR]>,
    n: u64,
}

impl Default for Plat {
    fn default() -> Plat {
        Plat {
            counts: Box::new([0; PLAT_NR]),
            n: 0,
        }
    }
}

impl Plat {
    pub fn add(&mut self, v: u64) {
        self.counts[plat_index(v)] += 1;
        self.n += 1;
    }

    pub fn merge(&mut self, o: &Plat) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.n += o.n;
    }

    /// Values at the (sorted) percentiles `list`: for each, the first bucket
    /// where the running count reaches that share of all samples.
    pub fn percentiles(&self, list: &[f64]) -> Vec<u64> {
        let mut out = Vec::with_capacity(list.len());
        if self.n == 0 {
            return vec![0; list.len()];
        }
        let mut sum = 0u64;
        let mut j = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            sum += c;
            while j < list.len() && sum as f64 >= list[j] / 100.0 * self.n as f64 {
                out.push(plat_value(i));
                j += 1;
            }
            if j == list.len() {
                break;
            }
        }
        while out.len() < list.len() {
            out.push(plat_value(PLAT_NR - 1));
        }
        out
    }

    /// Non-empty buckets: (value, count), ascending (json+ `bins`).
    pub fn bins(&self) -> Vec<(u64, u64)> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| (plat_value(i), c))
            .collect()
    }
}

/// Exact summary of a series. Sums are u128: 10^9 samples of 10^12 squared
/// is 10^33 < 2^128.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub n: u64,
    pub min: u64,
    pub max: u64,
    sum: u128,
    sumsq: u128,
}

impl Summary {
    pub fn add(&mut self, v: u64) {
        if self.n == 0 || v < self.min {
            self.min = v;
        }
        if v > self.max {
            self.max = v;
        }
        self.n += 1;
        self.sum += v as u128;
        self.sumsq += (v as u128) * (v as u128);
    }

    pub fn merge(&mut self, o: &Summary) {
        if o.n == 0 {
            return;
        }
        if self.n == 0 || o.min < self.min {
            self.min = o.min;
        }
        self.max = self.max.max(o.max);
        self.n += o.n;
        self.sum += o.sum;
        self.sumsq += o.sumsq;
    }

    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum as f64 / self.n as f64
        }
    }

    /// Sample standard deviation (n − 1), as fio reports it.
    pub fn stddev(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        let n = self.n as f64;
        let var = (self.sumsq as f64 - (self.sum as f64).powi(2) / n) / (n - 1.0);
        var.max(0.0).sqrt()
    }
}

/// Windowed samples (bandwidth in KiB/s, IOPS): running mean and spread.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Samples {
    pub n: u64,
    pub min: u64,
    pub max: u64,
    pub mean: f64,
    /// Sum of squared deviations from the mean (Welford).
    m2: f64,
}

impl Samples {
    pub fn add(&mut self, v: u64) {
        if self.n == 0 || v < self.min {
            self.min = v;
        }
        self.max = self.max.max(v);
        self.n += 1;
        let d = v as f64 - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (v as f64 - self.mean);
    }

    /// Group reporting: jobs ran side by side, so their rates add up (fio
    /// sums min, max, mean and spread of the members).
    pub fn sum_with(&mut self, o: &Samples) {
        if o.n == 0 {
            return;
        }
        if self.n == 0 {
            *self = *o;
            return;
        }
        self.min += o.min;
        self.max += o.max;
        self.n += o.n;
        self.mean += o.mean;
        self.m2 += o.m2;
    }

    pub fn stddev(&self) -> f64 {
        if self.n < 2 {
            0.0
        } else {
            (self.m2 / (self.n - 1) as f64).max(0.0).sqrt()
        }
    }
}

/// One latency kind (slat, clat, lat, sync): summary plus histogram.
#[derive(Clone, Debug, Default)]
pub struct Lat {
    pub sum: Summary,
    pub plat: Plat,
}

impl Lat {
    pub fn add(&mut self, v: u64) {
        self.sum.add(v);
        self.plat.add(v);
    }

    pub fn merge(&mut self, o: &Lat) {
        self.sum.merge(&o.sum);
        self.plat.merge(&o.plat);
    }
}

/// Everything measured for one direction of one job or group.
#[derive(Clone, Debug, Default)]
pub struct DirStats {
    pub bytes: u64,
    pub ios: u64,
    /// I/Os that moved fewer bytes than asked (end of file).
    pub short_ios: u64,
    pub slat: Lat,
    pub clat: Lat,
    pub lat: Lat,
    /// Windowed samples: KiB/s and IOPS (fio's bw_avg_time/iops_avg_time).
    pub bw_samples: Samples,
    pub iops_samples: Samples,
    /// Time of the last completion counted, from the start of statistics (ns).
    pub runtime_ns: u64,
}

impl DirStats {
    pub fn merge(&mut self, o: &DirStats) {
        self.bytes += o.bytes;
        self.ios += o.ios;
        self.short_ios += o.short_ios;
        self.slat.merge(&o.slat);
        self.clat.merge(&o.clat);
        self.lat.merge(&o.lat);
        self.bw_samples.sum_with(&o.bw_samples);
        self.iops_samples.sum_with(&o.iops_samples);
        self.runtime_ns = self.runtime_ns.max(o.runtime_ns);
    }

    /// Bytes per second over the direction's runtime.
    pub fn bw_bytes(&self) -> f64 {
        if self.runtime_ns == 0 {
            0.0
        } else {
            self.bytes as f64 * 1e9 / self.runtime_ns as f64
        }
    }

    pub fn iops(&self) -> f64 {
        if self.runtime_ns == 0 {
            0.0
        } else {
            self.ios as f64 * 1e9 / self.runtime_ns as f64
        }
    }

    pub fn runtime_ms(&self) -> u64 {
        self.runtime_ns / 1_000_000
    }
}

/// The bucket of `v` among buckets whose inclusive upper bounds are
/// `bounds` (one more bucket for anything above).
fn bucket(v: u64, bounds: &[u64]) -> usize {
    bounds.iter().position(|&b| v <= b).unwrap_or(bounds.len())
}

/// Bucket of fio's depth levels (I/Os in flight): 1, 2-3, 4-7, ..., >=64.
pub fn depth_bucket(depth: u64) -> usize {
    bucket(depth, &[1, 3, 7, 15, 31, 63])
}

/// Bucket of fio's submit and complete counts: 0, 1-4, 5-8, 9-16, 17-32, 33-64, >64.
pub fn count_bucket(n: u64) -> usize {
    bucket(n, &[0, 4, 8, 16, 32, 64])
}

/// Bucket of fio's latency distribution within a decade (ns, us or ms):
/// <2, <4, <10, <20, <50, <100, <250, <500, <750, <1000, (ms only) <2000, more.
fn decade_bucket(v: u64) -> usize {
    bucket(v, &[1, 3, 9, 19, 49, 99, 249, 499, 749, 999, 1999])
}

/// Per-job totals besides the directions.
#[derive(Clone, Debug, Default)]
pub struct JobStats {
    pub dirs: [DirStats; 2],
    /// fsync/fdatasync calls.
    pub sync: Lat,
    /// I/Os issued by in-flight level at issue.
    pub depth_map: [u64; 7],
    pub submit_map: [u64; 7],
    pub total_submit: u64,
    pub complete_map: [u64; 7],
    pub total_complete: u64,
    /// Completion latencies by magnitude: [ns buckets; us buckets; ms buckets].
    pub lat_n: [u64; 10],
    pub lat_u: [u64; 10],
    pub lat_m: [u64; 12],
}

impl JobStats {
    pub fn mark_latency(&mut self, ns: u64) {
        if ns < 1000 {
            self.lat_n[decade_bucket(ns)] += 1;
        } else if ns < 1_000_000 {
            self.lat_u[decade_bucket(ns / 1000)] += 1;
        } else {
            self.lat_m[decade_bucket(ns / 1_000_000)] += 1;
        }
    }

    pub fn merge(&mut self, o: &JobStats) {
        for (a, b) in self.dirs.iter_mut().zip(&o.dirs) {
            a.merge(b);
        }
        self.sync.merge(&o.sync);
        let add = |a: &mut [u64], b: &[u64]| a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        add(&mut self.depth_map, &o.depth_map);
        add(&mut self.submit_map, &o.submit_map);
        add(&mut self.complete_map, &o.complete_map);
        add(&mut self.lat_n, &o.lat_n);
        add(&mut self.lat_u, &o.lat_u);
        add(&mut self.lat_m, &o.lat_m);
        self.total_submit += o.total_submit;
        self.total_complete += o.total_complete;
    }

    pub fn total_ios(&self) -> u64 {
        self.dirs[0].ios + self.dirs[1].ios
    }
}

/// A distribution in percent of `total`, as fio shows it: a bucket with any
/// count shows at least `floor` (fio: 0.1 for depths, 0.01 for latencies).
fn percent(map: &[u64], total: u64, floor: f64) -> Vec<f64> {
    map.iter()
        .map(|&c| match total {
            0 => 0.0,
            t => (100.0 * c as f64 / t as f64).max(if c > 0 { floor } else { 0.0 }),
        })
        .collect()
}

/// fio's depth distribution in percent.
pub fn dist_percent(map: &[u64], total: u64) -> Vec<f64> {
    percent(map, total, 0.1)
}

/// fio's latency distribution in percent.
pub fn lat_percent(map: &[u64], total: u64) -> Vec<f64> {
    percent(map, total, 0.01)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_have_buckets_of_their_own() {
        for v in 0..128u64 {
            assert_eq!(plat_value(plat_index(v)), v);
        }
    }

    #[test]
    fn bucket_values_match_fios_bins() {
        // (latency, bin value) pairs read from fio 3.33 json+ output.
        for (v, bin) in [
            (3906u64, 3920u64),
            (5649, 5664),
            (2_353_322, 2_342_912),
            (127_000, 127_488),
        ] {
            assert_eq!(plat_value(plat_index(v)), bin, "{v}");
        }
    }

    #[test]
    fn buckets_keep_values_within_one_part_in_64() {
        let mut v = 128u64;
        // Up to the last group (beyond it, values share the last bucket).
        while v < 1 << 33 {
            let b = plat_value(plat_index(v));
            let err = (b as f64 - v as f64).abs() / v as f64;
            assert!(err <= 1.0 / 64.0, "{v} -> {b}");
            v = v * 3 / 2 + 7;
        }
        assert_eq!(plat_index(u64::MAX), PLAT_NR - 1);
    }

    #[test]
    fn percentiles_walk_the_histogram() {
        let mut p = Plat::default();
        for i in 1..=100u64 {
            p.add(i);
        }
        assert_eq!(p.percentiles(&[1.0, 50.0, 99.0, 100.0]), [1, 50, 99, 100]);
        assert_eq!(Plat::default().percentiles(&[50.0]), [0]);
        let bins = p.bins();
        assert_eq!(bins.len(), 100);
        assert_eq!(bins.iter().map(|b| b.1).sum::<u64>(), 100);
    }

    #[test]
    fn exact_summary_and_merge() {
        let mut s = Summary::default();
        for v in [2u64, 4, 4, 4, 5, 5, 7, 9] {
            s.add(v);
        }
        assert_eq!((s.n, s.min, s.max), (8, 2, 9));
        assert_eq!(s.mean(), 5.0);
        assert!((s.stddev() - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        let mut a = Summary::default();
        let mut b = Summary::default();
        [2u64, 4, 4, 4].iter().for_each(|&v| a.add(v));
        [5u64, 5, 7, 9].iter().for_each(|&v| b.add(v));
        a.merge(&b);
        assert_eq!(a, s);
        assert_eq!(Summary::default().stddev(), 0.0);
    }

    #[test]
    fn samples_keep_mean_and_spread_and_add_up_across_jobs() {
        let mut a = Samples::default();
        for v in [2u64, 4, 4, 4, 5, 5, 7, 9] {
            a.add(v);
        }
        assert_eq!((a.n, a.min, a.max), (8, 2, 9));
        assert!((a.mean - 5.0).abs() < 1e-12);
        assert!((a.stddev() - (32.0f64 / 7.0).sqrt()).abs() < 1e-9);
        let mut g = Samples::default();
        g.sum_with(&a);
        g.sum_with(&a);
        assert_eq!((g.min, g.max), (4, 18));
        assert!((g.mean - 10.0).abs() < 1e-12);
    }

    #[test]
    fn depth_and_latency_buckets_follow_fio() {
        assert_eq!(
            [1, 2, 3, 4, 8, 16, 32, 64, 1000].map(depth_bucket),
            [0, 1, 1, 2, 3, 4, 5, 6, 6]
        );
        assert_eq!(
            [0, 1, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65].map(count_bucket),
            [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6]
        );
        let mut j = JobStats::default();
        for ns in [1, 999, 1000, 999_999, 1_000_000, 2_500_000_000] {
            j.mark_latency(ns);
        }
        assert_eq!(j.lat_n[0] + j.lat_n[9], 2);
        assert_eq!((j.lat_u[0], j.lat_u[9]), (1, 1));
        assert_eq!((j.lat_m[0], j.lat_m[11]), (1, 1));
        assert_eq!(dist_percent(&[1, 999_999], 1_000_000)[0], 0.1);
        assert_eq!(lat_percent(&[1, 0], 1_000_000)[0], 0.01);
    }
}
