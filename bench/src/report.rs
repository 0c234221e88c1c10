//! Reports: fio's normal text and fio's JSON structure, plus our extras
//! (GB/s with 1e9 bytes, the engine, the memory kind, the GPU runtime).

use crate::json::{Json, Obj};
use crate::stats::{mean_stddev, DirStats, LatStat, PERCENTILES};
use std::fmt::Write;

/// Process-wide resource use over the run (getrusage RUSAGE_SELF): it counts
/// the library's worker threads too, which is the cost an application pays.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu {
    pub usr_pct: f64,
    pub sys_pct: f64,
    pub ctx: u64,
    pub majf: u64,
    pub minf: u64,
}

/// Our extras, shown in both formats.
#[derive(Clone, Debug, Default)]
pub struct Extras {
    pub ioengine: String,
    pub mem: String,
    pub gpu_runtime: String,
    pub direct: bool,
    pub iodepth: usize,
    pub verify: bool,
    /// Share of the range the page cache still held after `--invalidate` (None: not checked).
    pub cache_resident_pct: Option<f64>,
    /// Bytes of pattern written to create or extend the file before the run.
    pub created_bytes: u64,
    /// Bytes checked against the pattern (reads, and the read-back of writes).
    pub verified_bytes: u64,
    pub fixed_buffers: Option<bool>,
}

/// One reported entry: a job, or all jobs with `--group_reporting`.
pub struct Unit {
    pub name: String,
    pub jobs: usize,
    pub read: DirStats,
    pub write: DirStats,
    pub runtime_ns: u64,
    /// This unit's share of the group's bandwidth, per direction (fio's "per"/bw_agg).
    pub share_pct: [f64; 2],
}

impl Unit {
    pub fn gbps(&self, dir: usize) -> f64 {
        let s = if dir == 0 { &self.read } else { &self.write };
        s.bw_bytes(self.runtime_ns) / 1e9
    }

    pub fn total_gbps(&self) -> f64 {
        self.gbps(0) + self.gbps(1)
    }
}

/// Everything a report needs.
pub struct Report<'a> {
    pub units: &'a [Unit],
    /// All jobs folded together (the "Run status group" line and the top-level extras).
    pub all: &'a Unit,
    /// Per-job runtimes and bandwidths (bytes/s) per direction, for the group line's ranges.
    pub job_runtimes_ns: Vec<u64>,
    pub job_bw: [Vec<f64>; 2],
    pub cpu: Cpu,
    pub extras: &'a Extras,
    pub options: &'a [(String, String)],
    pub version: &'a str,
}

// ---------------------------------------------------------------------------
// Number formatting as fio prints it.

/// fio-style value with a unit prefix: the smallest unit in which the value is
/// below 10000, integer from 100 up, else three significant digits:
/// 1021 MiB → "1021Mi", 11469 MiB → "11.2Gi", 99.5 MiB → "99.5Mi".
pub fn human(v: f64, base: f64) -> String {
    let prefixes = ["", "K", "M", "G", "T", "P"];
    let infix = if base == 1024.0 { "i" } else { "" };
    let mut x = v;
    let mut i = 0;
    while x >= 10000.0 && i + 1 < prefixes.len() {
        x /= base;
        i += 1;
    }
    let p = if i == 0 {
        String::new()
    } else {
        format!("{}{}", prefixes[i], infix)
    };
    if x >= 100.0 || x == x.trunc() {
        format!("{}{p}", x.round() as u64)
    } else if x >= 10.0 {
        format!("{x:.1}{p}")
    } else {
        format!("{x:.2}{p}")
    }
}

/// "1021MiB/s (1071MB/s)".
fn bw_pair(bytes_per_s: f64) -> String {
    format!(
        "{}B/s ({}B/s)",
        human(bytes_per_s, 1024.0),
        human(bytes_per_s, 1000.0)
    )
}

fn iops_str(v: f64) -> String {
    if v >= 10000.0 {
        human(v, 1000.0).to_lowercase()
    } else {
        format!("{}", v.round() as u64)
    }
}

/// The unit a latency line uses, from its largest value: (name, ns per unit).
fn lat_unit(max_ns: u64) -> (&'static str, f64) {
    if max_ns < 10_000 {
        ("nsec", 1.0)
    } else if max_ns < 10_000_000 {
        ("usec", 1e3)
    } else {
        ("msec", 1e6)
    }
}

fn lat_line(out: &mut String, label: &str, s: &LatStat) {
    let (u, div) = lat_unit(s.max);
    let _ = writeln!(
        out,
        "{label} ({u}): min={}, max={}, avg={:.2}, stdev={:.2}",
        (s.min as f64 / div).round() as u64,
        (s.max as f64 / div).round() as u64,
        s.mean() / div,
        s.stddev() / div
    );
}

fn dir_text(
    out: &mut String,
    dir: &str,
    s: &DirStats,
    runtime_ns: u64,
    share: f64,
    show_slat: bool,
) {
    let bw = s.bw_bytes(runtime_ns);
    let _ = writeln!(
        out,
        "  {dir}: IOPS={}, BW={}({}B/{}msec)",
        iops_str(s.iops(runtime_ns)),
        bw_pair(bw),
        human(s.bytes as f64, 1024.0),
        runtime_ns / 1_000_000
    );
    if show_slat {
        lat_line(out, "    slat", &s.slat);
    }
    lat_line(out, "    clat", &s.clat);
    lat_line(out, "     lat", &s.lat);
    // Percentiles keep finer units than the summary lines (as fio does):
    // usec up to a second, so a 26 ms tail reads [26084], not [26].
    let (u, div) = if s.clat.max < 10_000 {
        ("nsec", 1.0)
    } else if s.clat.max < 1_000_000_000 {
        ("usec", 1e3)
    } else {
        ("msec", 1e6)
    };
    let _ = writeln!(out, "    clat percentiles ({u}):");
    let entries: Vec<String> = PERCENTILES
        .iter()
        .map(|&p| {
            format!(
                "{:>5.2}th=[{:>5}]",
                p,
                (s.clat_percentile(p) as f64 / div).round() as u64
            )
        })
        .collect();
    for (i, chunk) in entries.chunks(4).enumerate() {
        let last = (i + 1) * 4 >= entries.len();
        let _ = writeln!(
            out,
            "     | {}{}",
            chunk.join(", "),
            if last { "" } else { "," }
        );
    }
    if !s.bw_samples.is_empty() {
        let kib: Vec<f64> = s.bw_samples.iter().map(|b| b / 1024.0).collect();
        let (mean, dev) = mean_stddev(&kib);
        let min = kib.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = kib.iter().cloned().fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "   bw (  MiB/s): min={:>5}, max={:>5}, per={:.2}%, avg={:.2}, stdev={:.2}, samples={}",
            (min / 1024.0).round() as u64,
            (max / 1024.0).round() as u64,
            share,
            mean / 1024.0,
            dev / 1024.0,
            kib.len()
        );
        let (imean, idev) = mean_stddev(&s.iops_samples);
        let imin = s.iops_samples.iter().cloned().fold(f64::INFINITY, f64::min);
        let imax = s.iops_samples.iter().cloned().fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "   iops        : min={:>5}, max={:>5}, avg={:.2}, stdev={:.2}, samples={}",
            imin.round() as u64,
            imax.round() as u64,
            imean,
            idev,
            s.iops_samples.len()
        );
    }
}

fn gbps_line(extras: &Extras, u: &Unit) -> String {
    let mut dirs = Vec::new();
    if u.read.ios > 0 {
        dirs.push(format!("read {:.3} GB/s", u.gbps(0)));
    }
    if u.write.ios > 0 {
        dirs.push(format!("write {:.3} GB/s", u.gbps(1)));
    }
    if dirs.is_empty() {
        dirs.push("no I/O measured".into());
    }
    format!(
        "{} (ioengine={}, mem={}, gpu_runtime={}, direct={}, iodepth={})",
        dirs.join(", "),
        extras.ioengine,
        extras.mem,
        extras.gpu_runtime,
        extras.direct as u8,
        extras.iodepth
    )
}

/// fio's normal output.
pub fn normal(r: &Report) -> String {
    let mut out = String::new();
    let pid = std::process::id();
    let show_slat = r.extras.ioengine.contains("async")
        || r.extras.ioengine == "copy"
        || r.extras.ioengine == "raw";
    for u in r.units {
        let _ = writeln!(
            out,
            "{}: (groupid=0, jobs={}): err= 0: pid={pid}",
            u.name, u.jobs
        );
        if u.read.ios > 0 {
            dir_text(
                &mut out,
                "read",
                &u.read,
                u.runtime_ns,
                u.share_pct[0],
                show_slat,
            );
        }
        if u.write.ios > 0 {
            dir_text(
                &mut out,
                "write",
                &u.write,
                u.runtime_ns,
                u.share_pct[1],
                show_slat,
            );
        }
        let _ = writeln!(
            out,
            "  cpu          : usr={:.2}%, sys={:.2}%, ctx={}, majf={}, minf={}",
            r.cpu.usr_pct, r.cpu.sys_pct, r.cpu.ctx, r.cpu.majf, r.cpu.minf
        );
        let _ = writeln!(out, "  hipfile      : {}", gbps_line(r.extras, u));
        out.push('\n');
    }
    let _ = writeln!(out, "Run status group 0 (all jobs):");
    for (i, (label, s)) in [("READ", &r.all.read), ("WRITE", &r.all.write)]
        .into_iter()
        .enumerate()
    {
        if s.ios == 0 {
            continue;
        }
        let bws = &r.job_bw[i];
        let lo = bws.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = bws.iter().cloned().fold(0.0, f64::max);
        let rmin = r.job_runtimes_ns.iter().min().copied().unwrap_or(0) / 1_000_000;
        let rmax = r.job_runtimes_ns.iter().max().copied().unwrap_or(0) / 1_000_000;
        let _ = writeln!(
            out,
            "{label:>7}: bw={}B/s ({}B/s), {}B/s-{}B/s ({}B/s-{}B/s), io={}B ({}B), run={rmin}-{rmax}msec",
            human(s.bw_bytes(r.all.runtime_ns), 1024.0),
            human(s.bw_bytes(r.all.runtime_ns), 1000.0),
            human(lo, 1024.0),
            human(hi, 1024.0),
            human(lo, 1000.0),
            human(hi, 1000.0),
            human(s.bytes as f64, 1024.0),
            human(s.bytes as f64, 1000.0),
        );
    }
    let _ = writeln!(out, "\nhipfile-bench: {}", gbps_line(r.extras, r.all));
    out
}

// ---------------------------------------------------------------------------
// JSON

fn lat_json(s: &LatStat, hist: Option<&DirStats>) -> Json {
    let mut o = Obj::new()
        .field("min", s.min)
        .field("max", s.max)
        .field("mean", s.mean())
        .field("stddev", s.stddev())
        .field("N", s.n);
    if let Some(d) = hist {
        let mut p = Obj::new();
        for &q in PERCENTILES.iter() {
            p.push(&format!("{q:.6}"), d.clat_percentile(q));
        }
        o.push("percentile", p.build());
    }
    o.build()
}

fn dir_json(s: &DirStats, runtime_ns: u64, share: f64) -> Json {
    let runtime_ms = if s.ios > 0 { runtime_ns / 1_000_000 } else { 0 };
    let bw_bytes = s.bw_bytes(runtime_ns);
    let kib: Vec<f64> = s.bw_samples.iter().map(|b| b / 1024.0).collect();
    let (bw_mean, bw_dev) = mean_stddev(&kib);
    let (iops_mean, iops_dev) = mean_stddev(&s.iops_samples);
    let minmax = |v: &[f64]| {
        if v.is_empty() {
            (0.0, 0.0)
        } else {
            (
                v.iter().cloned().fold(f64::INFINITY, f64::min),
                v.iter().cloned().fold(0.0, f64::max),
            )
        }
    };
    let (bw_min, bw_max) = minmax(&kib);
    let (iops_min, iops_max) = minmax(&s.iops_samples);
    Obj::new()
        .field("io_bytes", s.bytes)
        .field("io_kbytes", s.bytes / 1024)
        .field("bw_bytes", bw_bytes.round() as u64)
        .field("bw", (bw_bytes / 1024.0) as u64)
        .field("iops", s.iops(runtime_ns))
        .field("runtime", runtime_ms)
        .field("total_ios", s.ios)
        .field("short_ios", s.short_ios)
        .field("drop_ios", 0u64)
        .field("slat_ns", lat_json(&s.slat, None))
        .field("clat_ns", lat_json(&s.clat, Some(s)))
        .field("lat_ns", lat_json(&s.lat, None))
        .field("bw_min", bw_min.round() as u64)
        .field("bw_max", bw_max.round() as u64)
        .field("bw_agg", if s.ios > 0 { share } else { 0.0 })
        .field("bw_mean", bw_mean)
        .field("bw_dev", bw_dev)
        .field("bw_samples", kib.len())
        .field("iops_min", iops_min.round() as u64)
        .field("iops_max", iops_max.round() as u64)
        .field("iops_mean", iops_mean)
        .field("iops_stddev", iops_dev)
        .field("iops_samples", s.iops_samples.len())
        .build()
}

fn extras_json(e: &Extras, u: &Unit) -> Json {
    let mut o = Obj::new()
        .field("ioengine", e.ioengine.as_str())
        .field("mem", e.mem.as_str())
        .field("gpu_runtime", e.gpu_runtime.as_str())
        .field("gbps", u.total_gbps())
        .field("read_gbps", u.gbps(0))
        .field("write_gbps", u.gbps(1))
        .field("direct", e.direct)
        .field("iodepth", e.iodepth)
        .field("verify", e.verify)
        .field("verified_bytes", e.verified_bytes)
        .field("created_bytes", e.created_bytes);
    match e.cache_resident_pct {
        Some(p) => o.push("cache_resident_pct", p),
        None => o.push("cache_resident_pct", Json::Null),
    }
    if let Some(f) = e.fixed_buffers {
        o.push("fixed_buffers", f);
    }
    o.build()
}

/// fio's JSON structure (`--output-format=json`).
pub fn json(r: &Report) -> Json {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut opts = Obj::new();
    for (k, v) in r.options {
        opts.push(k, v.as_str());
    }
    let opts = opts.build();
    let jobs: Vec<Json> = r
        .units
        .iter()
        .map(|u| {
            Obj::new()
                .field("jobname", u.name.as_str())
                .field("groupid", 0u32)
                .field("error", 0u32)
                .field("eta", 0u32)
                .field("elapsed", u.runtime_ns.div_ceil(1_000_000_000))
                .field("job options", opts.clone())
                .field("read", dir_json(&u.read, u.runtime_ns, u.share_pct[0]))
                .field("write", dir_json(&u.write, u.runtime_ns, u.share_pct[1]))
                .field("trim", dir_json(&DirStats::new(), 0, 0.0))
                .field("job_runtime", u.runtime_ns / 1_000_000)
                .field("usr_cpu", r.cpu.usr_pct)
                .field("sys_cpu", r.cpu.sys_pct)
                .field("ctx", r.cpu.ctx)
                .field("majf", r.cpu.majf)
                .field("minf", r.cpu.minf)
                .field("hipfile", extras_json(r.extras, u))
                .build()
        })
        .collect();
    Obj::new()
        .field("fio version", r.version)
        .field("timestamp", now.as_secs())
        .field("timestamp_ms", now.as_millis() as u64)
        .field("global options", Obj::new().build())
        .field("jobs", Json::Arr(jobs))
        .field("hipfile", extras_json(r.extras, r.all))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::check_json;

    fn unit() -> Unit {
        let mut read = DirStats::new();
        for i in 0..100u64 {
            read.record(1 << 20, false, 500, 900_000 + i * 1000);
        }
        read.bw_samples = vec![1e9, 1.1e9];
        read.iops_samples = vec![950.0, 1050.0];
        Unit {
            name: "seq \"read\"".into(),
            jobs: 1,
            read,
            write: DirStats::new(),
            runtime_ns: 100_000_000,
            share_pct: [100.0, 0.0],
        }
    }

    fn report<'a>(
        units: &'a [Unit],
        extras: &'a Extras,
        opts: &'a [(String, String)],
    ) -> Report<'a> {
        Report {
            units,
            all: &units[0],
            job_runtimes_ns: vec![units[0].runtime_ns],
            job_bw: [vec![units[0].read.bw_bytes(units[0].runtime_ns)], vec![]],
            cpu: Cpu {
                usr_pct: 1.5,
                sys_pct: 20.25,
                ctx: 10,
                majf: 0,
                minf: 5,
            },
            extras,
            options: opts,
            version: "hipfile-bench-0.2.0",
        }
    }

    #[test]
    fn human_units_follow_fio() {
        assert_eq!(human(1021.0 * 1048576.0, 1024.0), "1021Mi");
        assert_eq!(human(11469.0 * 1048576.0, 1024.0), "11.2Gi");
        assert_eq!(human(99.5 * 1048576.0, 1024.0), "99.5Mi");
        assert_eq!(human(1.5 * 1048576.0, 1024.0), "1536Ki");
        assert_eq!(human(0.0, 1024.0), "0");
        assert_eq!(human(4096.0, 1024.0), "4096");
        assert_eq!(human(256.0 * 1048576.0, 1024.0), "256Mi");
        assert_eq!(human(268_435_456.0, 1000.0), "268M");
        assert_eq!(iops_str(12345.0), "12.3k");
        assert_eq!(iops_str(1021.4), "1021");
    }

    #[test]
    fn json_report_has_fio_structure_and_is_valid() {
        let units = [unit()];
        let extras = Extras {
            ioengine: "hipfile-sync".into(),
            mem: "host".into(),
            gpu_runtime: "none".into(),
            iodepth: 1,
            cache_resident_pct: Some(0.0),
            ..Extras::default()
        };
        let opts = vec![
            ("rw".to_string(), "read".to_string()),
            ("bs".to_string(), "1M".to_string()),
        ];
        let j = json(&report(&units, &extras, &opts));
        let text = j.to_pretty(2);
        check_json(&text).unwrap();
        assert!(matches!(j.get("fio version"), Some(Json::Str(s)) if s == "hipfile-bench-0.2.0"));
        let Some(Json::Arr(jobs)) = j.get("jobs") else {
            panic!("no jobs")
        };
        let job = &jobs[0];
        for k in [
            "jobname",
            "groupid",
            "job options",
            "read",
            "write",
            "usr_cpu",
            "sys_cpu",
            "job_runtime",
            "hipfile",
        ] {
            assert!(job.get(k).is_some(), "job lacks {k}");
        }
        let read = job.get("read").unwrap();
        for k in [
            "io_bytes",
            "io_kbytes",
            "bw_bytes",
            "bw",
            "iops",
            "runtime",
            "total_ios",
            "clat_ns",
            "lat_ns",
        ] {
            assert!(read.get(k).is_some(), "read lacks {k}");
        }
        assert_eq!(read.get("io_bytes"), Some(&Json::UInt(100 << 20)));
        assert_eq!(read.get("io_kbytes"), Some(&Json::UInt(100 << 10)));
        assert_eq!(read.get("runtime"), Some(&Json::UInt(100)));
        assert_eq!(read.get("total_ios"), Some(&Json::UInt(100)));
        // 100 MiB in 0.1 s = 1048576000 B/s = 1024000 KiB/s.
        assert_eq!(read.get("bw_bytes"), Some(&Json::UInt(1_048_576_000)));
        assert_eq!(read.get("bw"), Some(&Json::UInt(1_024_000)));
        let clat = read.get("clat_ns").unwrap();
        for k in ["min", "max", "mean", "stddev", "N", "percentile"] {
            assert!(clat.get(k).is_some(), "clat_ns lacks {k}");
        }
        assert_eq!(clat.get("min"), Some(&Json::UInt(900_000)));
        let pct = clat.get("percentile").unwrap();
        for k in ["1.000000", "50.000000", "99.500000", "99.990000"] {
            assert!(pct.get(k).is_some(), "percentile lacks {k}");
        }
        let hf = job.get("hipfile").unwrap();
        for k in ["ioengine", "mem", "gpu_runtime", "gbps"] {
            assert!(hf.get(k).is_some(), "hipfile lacks {k}");
        }
        assert!(matches!(hf.get("gbps"), Some(Json::Float(g)) if (g - 1.048576).abs() < 1e-9));
        assert!(text.contains("\"jobname\" : \"seq \\\"read\\\"\""));
        let write = job.get("write").unwrap();
        assert_eq!(write.get("io_bytes"), Some(&Json::UInt(0)));
        assert_eq!(write.get("runtime"), Some(&Json::UInt(0)));
    }

    #[test]
    fn normal_report_lines() {
        let units = [unit()];
        let extras = Extras {
            ioengine: "raw".into(),
            mem: "host".into(),
            gpu_runtime: "none".into(),
            iodepth: 4,
            ..Extras::default()
        };
        let text = normal(&report(&units, &extras, &[]));
        assert!(
            text.contains("  read: IOPS=1000, BW=1000MiB/s (1049MB/s)(100MiB/100msec)"),
            "{text}"
        );
        assert!(
            text.contains("    clat (usec): min=900, max=999, avg=949.50"),
            "{text}"
        );
        assert!(text.contains("    clat percentiles (usec):"));
        assert!(text.contains("|  1.00th=["));
        assert!(text.contains("99.99th=["));
        assert!(text.contains("  cpu          : usr=1.50%, sys=20.25%"));
        assert!(text.contains(
            "read 1.049 GB/s (ioengine=raw, mem=host, gpu_runtime=none, direct=0, iodepth=4)"
        ));
        assert!(text.contains("   READ: bw=1000MiB/s (1049MB/s)"));
        assert!(!text.contains("write:"));
    }
}
