//! Per-direction statistics: exact min/max/mean/stddev, an HDR histogram for
//! the completion-latency percentiles, and periodic bandwidth samples.

use hdrhistogram::Histogram;

/// fio's default `percentile_list`.
pub const PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

/// Exact summary of a latency series (nanoseconds). Sums are u128, so they
/// cannot overflow: 10^9 samples of 10^12 ns squared is 10^33 < 2^128.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatStat {
    pub n: u64,
    pub min: u64,
    pub max: u64,
    sum: u128,
    sumsq: u128,
}

impl LatStat {
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

    pub fn merge(&mut self, o: &LatStat) {
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

/// Mean and sample standard deviation of plain values (bandwidth samples).
pub fn mean_stddev(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// Everything measured for one direction (read or write) of one job or group.
#[derive(Clone, Debug)]
pub struct DirStats {
    pub bytes: u64,
    pub ios: u64,
    /// I/Os that moved fewer bytes than asked (end of file).
    pub short_ios: u64,
    /// Time inside the submit call.
    pub slat: LatStat,
    /// From the end of submission to the completion being seen.
    pub clat: LatStat,
    /// From the start of submission to completion (slat + clat).
    pub lat: LatStat,
    pub clat_hist: Histogram<u64>,
    /// Bandwidth samples in bytes/s and IOPS samples, one per sampling window.
    pub bw_samples: Vec<f64>,
    pub iops_samples: Vec<f64>,
}

impl Default for DirStats {
    fn default() -> DirStats {
        DirStats::new()
    }
}

impl DirStats {
    pub fn new() -> DirStats {
        DirStats {
            bytes: 0,
            ios: 0,
            short_ios: 0,
            slat: LatStat::default(),
            clat: LatStat::default(),
            lat: LatStat::default(),
            // 3 significant figures, auto-resizing: 0.1% resolution at any latency.
            clat_hist: Histogram::new(3).expect("3 significant figures is a valid histogram"),
            bw_samples: Vec::new(),
            iops_samples: Vec::new(),
        }
    }

    pub fn record(&mut self, bytes: u64, short: bool, slat_ns: u64, clat_ns: u64) {
        self.bytes += bytes;
        self.ios += 1;
        if short {
            self.short_ios += 1;
        }
        self.slat.add(slat_ns);
        self.clat.add(clat_ns);
        self.lat.add(slat_ns + clat_ns);
        // Auto-resizing histograms only refuse values they cannot grow to hold.
        let _ = self.clat_hist.record(clat_ns.max(1));
    }

    /// Fold another job's figures in (group reporting). Bandwidth samples of
    /// jobs that ran side by side add up window by window.
    pub fn merge(&mut self, o: &DirStats) {
        self.bytes += o.bytes;
        self.ios += o.ios;
        self.short_ios += o.short_ios;
        self.slat.merge(&o.slat);
        self.clat.merge(&o.clat);
        self.lat.merge(&o.lat);
        let _ = self.clat_hist.add(&o.clat_hist);
        for (dst, src) in [
            (&mut self.bw_samples, &o.bw_samples),
            (&mut self.iops_samples, &o.iops_samples),
        ] {
            if dst.len() < src.len() {
                dst.resize(src.len(), 0.0);
            }
            for (d, s) in dst.iter_mut().zip(src) {
                *d += s;
            }
        }
    }

    /// Completion latency at percentile `p` (0–100), in ns.
    pub fn clat_percentile(&self, p: f64) -> u64 {
        if self.clat_hist.is_empty() {
            0
        } else {
            self.clat_hist.value_at_quantile(p / 100.0)
        }
    }

    /// Bytes per second over `runtime_ns`.
    pub fn bw_bytes(&self, runtime_ns: u64) -> f64 {
        if runtime_ns == 0 {
            0.0
        } else {
            self.bytes as f64 * 1e9 / runtime_ns as f64
        }
    }

    pub fn iops(&self, runtime_ns: u64) -> f64 {
        if runtime_ns == 0 {
            0.0
        } else {
            self.ios as f64 * 1e9 / runtime_ns as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_summary() {
        let mut s = LatStat::default();
        for v in [2u64, 4, 4, 4, 5, 5, 7, 9] {
            s.add(v);
        }
        assert_eq!((s.n, s.min, s.max), (8, 2, 9));
        assert_eq!(s.mean(), 5.0);
        // Sample variance of this classic series is 32/7.
        assert!((s.stddev() - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        let mut a = LatStat::default();
        let mut b = LatStat::default();
        for v in [2u64, 4, 4, 4] {
            a.add(v);
        }
        for v in [5u64, 5, 7, 9] {
            b.add(v);
        }
        a.merge(&b);
        assert_eq!(a, s);
        assert_eq!(LatStat::default().stddev(), 0.0);
    }

    #[test]
    fn percentiles_and_merge() {
        let mut a = DirStats::new();
        let mut b = DirStats::new();
        for i in 1..=1000u64 {
            a.record(4096, false, 10, i * 1000);
            b.record(4096, i == 1000, 10, i * 1000);
        }
        a.bw_samples = vec![1.0, 2.0];
        b.bw_samples = vec![3.0];
        a.merge(&b);
        assert_eq!(a.ios, 2000);
        assert_eq!(a.bytes, 2000 * 4096);
        assert_eq!(a.short_ios, 1);
        assert_eq!(a.bw_samples, vec![4.0, 2.0]);
        let p50 = a.clat_percentile(50.0);
        assert!((499_000..=501_000).contains(&p50), "p50 {p50}");
        let p99 = a.clat_percentile(99.0);
        assert!((989_000..=991_000).contains(&p99), "p99 {p99}");
        assert_eq!(a.lat.min, 1010);
        assert_eq!(DirStats::new().clat_percentile(50.0), 0);
        assert_eq!(a.bw_bytes(1_000_000_000), (2000 * 4096) as f64);
        assert_eq!(mean_stddev(&[1.0, 3.0]), (2.0, 2f64.sqrt()));
    }
}
