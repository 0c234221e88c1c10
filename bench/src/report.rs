//! Reports in fio 3.33's layouts: normal text, terse (versions 3 to 5) and
//! JSON/json+ (through the typed model in [`crate::fiojson`]), built from the
//! jobs' statistics. Units follow fio: each job is reported alone unless it
//! has `group_reporting`, which folds it into the group's report.

use crate::diskutil::Usage;
use crate::fiojson::{self, DiskUtil, Extras, Map};
use crate::stats::{dist_percent, lat_percent, JobStats, Lat, Plat};
use crate::units::num2str;
use std::fmt::Write;

/// Which latency kinds get percentiles, and which.
#[derive(Clone, Debug, PartialEq)]
pub struct Percentiles {
    pub clat: bool,
    pub lat: bool,
    pub slat: bool,
    pub list: Vec<f64>,
}

/// Process-wide resource use over the run (getrusage RUSAGE_SELF): it counts
/// the library's worker threads too, which is the cost an application pays.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cpu {
    pub usr_pct: f64,
    pub sys_pct: f64,
    pub ctx: u64,
    pub majf: u64,
    pub minf: u64,
}

/// A reported entry: one job, or a group's jobs folded together (fio's
/// thread_stat).
#[derive(Clone, Debug)]
pub struct Unit {
    pub name: String,
    pub groupid: usize,
    /// Jobs folded in (1 for a job alone).
    pub members: usize,
    /// The job asked to be folded with its group's other such jobs.
    pub group_reporting: bool,
    pub description: String,
    pub options: Map<String>,
    pub stats: JobStats,
    pub job_runtime_ns: u64,
    pub iodepth: u64,
    pub pct: Percentiles,
    pub cpu: Cpu,
    pub extras: Extras,
}

impl Unit {
    pub fn gbps(&self, dir: usize) -> f64 {
        self.stats.dirs[dir].bw_bytes() / 1e9
    }
}

/// Fold jobs into units as fio does: consecutive jobs of one group that
/// have group_reporting become one unit.
pub fn units(jobs: &[Unit]) -> Vec<Unit> {
    let mut out: Vec<Unit> = Vec::new();
    let mut last_group: Option<usize> = None;
    for j in jobs {
        let merge = j.group_reporting && last_group == Some(j.groupid) && !out.is_empty();
        last_group = j.group_reporting.then_some(j.groupid);
        match out.last_mut() {
            Some(u) if merge => {
                u.members += j.members;
                u.stats.merge(&j.stats);
                u.job_runtime_ns += j.job_runtime_ns;
                u.extras.files += j.extras.files;
                u.extras.bytes_per_pass += j.extras.bytes_per_pass;
                u.extras.verified_bytes += j.extras.verified_bytes;
                u.extras.created_bytes += j.extras.created_bytes;
            }
            _ => out.push(j.clone()),
        }
    }
    for u in out.iter_mut() {
        u.extras.read_gbps = u.gbps(0);
        u.extras.write_gbps = u.gbps(1);
        u.extras.gbps = u.extras.read_gbps + u.extras.write_gbps;
    }
    out
}

/// fio's per-group figures ("Run status group N").
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupRun {
    pub id: usize,
    pub min_run_ms: [u64; 2],
    pub max_run_ms: [u64; 2],
    pub min_bw: [u64; 2],
    pub max_bw: [u64; 2],
    pub io_bytes: [u64; 2],
    /// Bytes/s: all bytes over the longest runtime.
    pub agg: [u64; 2],
}

pub fn group_runs(units: &[Unit]) -> Vec<GroupRun> {
    let mut groups: Vec<GroupRun> = Vec::new();
    for u in units {
        if !groups.iter().any(|g| g.id == u.groupid) {
            groups.push(GroupRun {
                id: u.groupid,
                min_bw: [u64::MAX; 2],
                ..GroupRun::default()
            });
        }
        let g = groups
            .iter_mut()
            .find(|g| g.id == u.groupid)
            .expect("added above");
        for d in 0..2 {
            let s = &u.stats.dirs[d];
            let run = s.runtime_ms();
            if s.runtime_ns == 0 {
                continue;
            }
            if g.min_run_ms[d] == 0 || run < g.min_run_ms[d] {
                g.min_run_ms[d] = run;
            }
            g.max_run_ms[d] = g.max_run_ms[d].max(run);
            let bw = s.bw_bytes() as u64;
            g.min_bw[d] = g.min_bw[d].min(bw);
            g.max_bw[d] = g.max_bw[d].max(bw);
            g.io_bytes[d] += s.bytes;
        }
    }
    for g in groups.iter_mut() {
        for d in 0..2 {
            if g.min_bw[d] == u64::MAX {
                g.min_bw[d] = 0;
            }
            // All bytes over the longest runtime, in ns for precision.
            let max_ns = units
                .iter()
                .filter(|u| u.groupid == g.id)
                .map(|u| u.stats.dirs[d].runtime_ns)
                .max()
                .unwrap_or(0);
            if max_ns > 0 {
                g.agg[d] = (g.io_bytes[d] as u128 * 1_000_000_000 / max_ns as u128) as u64;
            }
        }
    }
    groups.sort_by_key(|g| g.id);
    groups
}

/// A unit's mean bandwidth as a share of its group's (fio's "per" and bw_agg).
fn share_of_group(mean_kib: f64, agg_bytes: u64) -> f64 {
    if agg_bytes > 1024 {
        (mean_kib * 100.0 / (agg_bytes as f64 / 1024.0)).min(100.0)
    } else {
        100.0
    }
}

/// The whole report's inputs.
pub struct Inputs<'a> {
    pub units: &'a [Unit],
    pub groups: &'a [GroupRun],
    pub disks: &'a [Usage],
    pub global_options: &'a Map<String>,
    pub version: &'a str,
    pub json_plus: bool,
    /// Seconds since the run started (fio's "elapsed").
    pub elapsed_s: u64,
    /// All units folded (our top-level `hipfile` object and final line).
    pub total: Extras,
}

fn now() -> (u64, u64, String) {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_secs(), t.as_millis() as u64, ctime(t.as_secs()))
}

/// ctime(3)'s text without the newline: "Fri Dec  4 15:55:07 2026".
pub fn ctime(secs: u64) -> String {
    let t = secs as libc::time_t;
    let mut buf = [0 as libc::c_char; 32];
    // SAFETY: ctime_r writes at most 26 bytes into the 32 given.
    let p = unsafe { libc::ctime_r(&t, buf.as_mut_ptr()) };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: ctime_r NUL-terminates what it wrote.
    let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    s.to_string_lossy().trim_end().to_string()
}

// ---------------------------------------------------------------------------
// JSON

fn lat_json(l: &Lat, percentiles: bool, list: &[f64], plus: bool) -> fiojson::Lat {
    let s = &l.sum;
    let mut out = fiojson::Lat {
        min: if s.n > 0 { s.min } else { 0 },
        max: s.max,
        mean: s.mean(),
        stddev: s.stddev(),
        n: s.n,
        percentile: None,
        bins: None,
    };
    if percentiles && s.n > 0 {
        let vals = l.plat.percentiles(list);
        out.percentile = Some(
            list.iter()
                .zip(vals)
                .map(|(&p, v)| (fiojson::percentile_key(p), v))
                .collect(),
        );
        if plus {
            out.bins = Some(bins_map(&l.plat));
        }
    }
    out
}

fn bins_map(p: &Plat) -> Map<u64> {
    p.bins()
        .into_iter()
        .map(|(v, c)| (v.to_string(), c))
        .collect()
}

fn dir_json(u: &Unit, d: usize, agg: u64, plus: bool) -> fiojson::Dir {
    let s = &u.stats.dirs[d];
    let runtime = s.runtime_ms();
    let bw_bytes = s.bw_bytes() as u64;
    let pct = &u.pct;
    let (bw_min, bw_max, bw_agg, bw_mean, bw_dev) = if s.bw_samples.n > 0 {
        let b = &s.bw_samples;
        (
            b.min,
            b.max,
            share_of_group(b.mean, agg),
            b.mean,
            b.stddev(),
        )
    } else {
        (0, 0, 0.0, 0.0, 0.0)
    };
    let i = &s.iops_samples;
    fiojson::Dir {
        io_bytes: s.bytes,
        io_kbytes: s.bytes >> 10,
        bw_bytes,
        bw: bw_bytes / 1024,
        iops: s.iops(),
        runtime,
        total_ios: s.ios,
        short_ios: s.short_ios,
        drop_ios: 0,
        slat_ns: lat_json(&s.slat, pct.slat, &pct.list, plus),
        clat_ns: lat_json(&s.clat, pct.clat, &pct.list, plus),
        lat_ns: lat_json(&s.lat, pct.lat, &pct.list, plus),
        bw_min,
        bw_max,
        bw_agg,
        bw_mean,
        bw_dev,
        bw_samples: s.bw_samples.n,
        iops_min: i.min,
        iops_max: i.max,
        iops_mean: i.mean,
        iops_stddev: i.stddev(),
        iops_samples: i.n,
    }
}

fn empty_dir() -> fiojson::Dir {
    let lat = fiojson::Lat {
        min: 0,
        max: 0,
        mean: 0.0,
        stddev: 0.0,
        n: 0,
        percentile: None,
        bins: None,
    };
    fiojson::Dir {
        io_bytes: 0,
        io_kbytes: 0,
        bw_bytes: 0,
        bw: 0,
        iops: 0.0,
        runtime: 0,
        total_ios: 0,
        short_ios: 0,
        drop_ios: 0,
        slat_ns: lat.clone(),
        clat_ns: lat.clone(),
        lat_ns: lat,
        bw_min: 0,
        bw_max: 0,
        bw_agg: 0.0,
        bw_mean: 0.0,
        bw_dev: 0.0,
        bw_samples: 0,
        iops_min: 0,
        iops_max: 0,
        iops_mean: 0.0,
        iops_stddev: 0.0,
        iops_samples: 0,
    }
}

fn named(keys: &[&str], vals: &[f64]) -> Map<f64> {
    keys.iter()
        .zip(vals)
        .map(|(k, v)| (k.to_string(), *v))
        .collect()
}

const DEPTH_KEYS: [&str; 7] = ["1", "2", "4", "8", "16", "32", ">=64"];
const COUNT_KEYS: [&str; 7] = ["0", "4", "8", "16", "32", "64", ">=64"];
const DECADE_KEYS: [&str; 10] = [
    "2", "4", "10", "20", "50", "100", "250", "500", "750", "1000",
];
const MS_KEYS: [&str; 12] = [
    "2", "4", "10", "20", "50", "100", "250", "500", "750", "1000", "2000", ">=2000",
];

fn job_json(inp: &Inputs, u: &Unit) -> fiojson::Job {
    let g = inp.groups.iter().find(|g| g.id == u.groupid);
    let agg = |d: usize| g.map_or(0, |g| g.agg[d]);
    let st = &u.stats;
    let total = st.total_ios();
    fiojson::Job {
        jobname: u.name.clone(),
        groupid: u.groupid as u64,
        error: 0,
        eta: 0,
        elapsed: inp.elapsed_s,
        job_options: (!u.options.is_empty()).then(|| u.options.clone()),
        read: dir_json(u, 0, agg(0), inp.json_plus),
        write: dir_json(u, 1, agg(1), inp.json_plus),
        trim: empty_dir(),
        sync: fiojson::Sync {
            total_ios: st.sync.sum.n,
            lat_ns: lat_json(
                &st.sync,
                u.pct.lat || u.pct.clat,
                &u.pct.list,
                inp.json_plus,
            ),
        },
        job_runtime: u.job_runtime_ns / 1_000_000,
        usr_cpu: u.cpu.usr_pct,
        sys_cpu: u.cpu.sys_pct,
        ctx: u.cpu.ctx,
        majf: u.cpu.majf,
        minf: u.cpu.minf,
        iodepth_level: named(&DEPTH_KEYS, &dist_percent(&st.depth_map, total)),
        iodepth_submit: named(&COUNT_KEYS, &dist_percent(&st.submit_map, st.total_submit)),
        iodepth_complete: named(
            &COUNT_KEYS,
            &dist_percent(&st.complete_map, st.total_complete),
        ),
        latency_ns: named(&DECADE_KEYS, &lat_percent(&st.lat_n, total)),
        latency_us: named(&DECADE_KEYS, &lat_percent(&st.lat_u, total)),
        latency_ms: named(&MS_KEYS, &lat_percent(&st.lat_m, total)),
        latency_depth: u.iodepth,
        latency_target: 0,
        latency_percentile: 100.0,
        latency_window: 0,
        desc: (!u.description.is_empty()).then(|| u.description.clone()),
        hipfile: Some(u.extras.clone()),
    }
}

/// fio's JSON report (`json`, or `json+` with the latency `bins`).
pub fn json(inp: &Inputs) -> fiojson::Report {
    let (secs, ms, time) = now();
    fiojson::Report {
        fio_version: inp.version.to_string(),
        timestamp: secs,
        timestamp_ms: ms,
        time,
        global_options: (!inp.global_options.is_empty()).then(|| inp.global_options.clone()),
        jobs: inp.units.iter().map(|u| job_json(inp, u)).collect(),
        disk_util: (!inp.disks.is_empty()).then(|| {
            inp.disks
                .iter()
                .map(|d| {
                    let (f, a) = (&d.figures, d.aggregate.as_ref());
                    DiskUtil {
                        name: d.name.clone(),
                        read_ios: f.ios[0],
                        write_ios: f.ios[1],
                        read_merges: f.merges[0],
                        write_merges: f.merges[1],
                        read_ticks: f.ticks[0],
                        write_ticks: f.ticks[1],
                        in_queue: f.in_queue,
                        util: f.util,
                        aggr_read_ios: a.map(|a| a.ios[0]),
                        aggr_write_ios: a.map(|a| a.ios[1]),
                        aggr_read_merges: a.map(|a| a.merges[0]),
                        aggr_write_merge: a.map(|a| a.merges[1]),
                        aggr_read_ticks: a.map(|a| a.ticks[0]),
                        aggr_write_ticks: a.map(|a| a.ticks[1]),
                        aggr_in_queue: a.map(|a| a.in_queue),
                        aggr_util: a.map(|a| a.util),
                    }
                })
                .collect()
        }),
        hipfile: Some(inp.total.clone()),
    }
}

// ---------------------------------------------------------------------------
// Normal text

/// One latency summary line, in the unit fio picks for it.
fn display_lat(out: &mut String, name: &str, l: &Lat) {
    let s = &l.sum;
    if s.n == 0 {
        return;
    }
    let (mut min, mut max, mut mean, mut dev) = (s.min, s.max, s.mean(), s.stddev());
    let mut unit = "nsec";
    if min > 2_000_000 && max > 99_999_999 && dev > 1_000_000.0 {
        (min, max, mean, dev) = (min / 1_000_000, max / 1_000_000, mean / 1e6, dev / 1e6);
        unit = "msec";
    } else if min > 2000 && max > 99_999 && dev > 1000.0 {
        (min, max, mean, dev) = (min / 1000, max / 1000, mean / 1e3, dev / 1e3);
        unit = "usec";
    }
    let _ = writeln!(
        out,
        "    {name} ({unit}): min={}, max={}, avg={mean:5.2}, stdev={dev:5.2}",
        num2str(min, 6, false, ""),
        num2str(max, 6, false, "")
    );
}

/// A percentile block, laid out as fio does (unit from the values' range,
/// four to a line at the default width).
fn show_percentiles(out: &mut String, label: &str, l: &Lat, list: &[f64]) {
    if l.sum.n == 0 || list.is_empty() {
        return;
    }
    let vals = l.plat.percentiles(list);
    let minv = *vals.iter().min().unwrap_or(&0);
    let maxv = *vals.iter().max().unwrap_or(&0);
    let (scale, divisor, unit) = if minv > 2_000_000 && maxv > 99_999_999 {
        (2, 1_000_000, "msec")
    } else if minv > 2000 && maxv > 99_999 {
        (1, 1000, "usec")
    } else {
        (0, 1, "nsec")
    };
    let _ = write!(out, "    {label} percentiles ({unit}):\n     |");
    let top = maxv / divisor;
    let width = if top == 0 {
        5
    } else {
        (top.ilog10() as usize + 1).max(5)
    };
    let precision = 2;
    let per_line = (80 - 7) / (precision + 10 + width);
    for (j, (&p, &v)) in list.iter().zip(&vals).enumerate() {
        if j != 0 && j % per_line == 0 {
            out.push_str("     |");
        }
        let last = j == list.len() - 1;
        let mut v = v;
        for _ in 0..scale {
            v = v.div_ceil(1000);
        }
        let _ = write!(
            out,
            " {p:>w$.precision$}th=[{v:>width$}]{}",
            if last { '\n' } else { ',' },
            w = precision + 3
        );
        if !last && j % per_line == per_line - 1 {
            out.push('\n');
        }
    }
}

fn dir_text(out: &mut String, u: &Unit, d: usize, agg: u64) {
    let s = &u.stats.dirs[d];
    if s.ios == 0 || s.runtime_ns == 0 {
        return;
    }
    let bw = s.bw_bytes() as u64;
    let _ = writeln!(
        out,
        "  {}: IOPS={}, BW={} ({})({}/{}msec){}",
        if d == 0 { "read" } else { "write" },
        num2str(s.iops() as u64, 4, false, ""),
        num2str(bw, 4, true, "B/s"),
        num2str(bw, 4, false, "B/s"),
        num2str(s.bytes, 4, true, "B"),
        s.runtime_ms(),
        if d == 1 { "; 0 zone resets" } else { "" }
    );
    display_lat(out, "slat", &s.slat);
    display_lat(out, "clat", &s.clat);
    display_lat(out, " lat", &s.lat);
    if u.pct.slat {
        show_percentiles(out, "slat", &s.slat, &u.pct.list);
    }
    if u.pct.clat {
        show_percentiles(out, "clat", &s.clat, &u.pct.list);
    }
    if u.pct.lat {
        show_percentiles(out, "lat", &s.lat, &u.pct.list);
    }
    let b = &s.bw_samples;
    if b.n > 0 {
        let per = share_of_group(b.mean, agg);
        let (mut min, mut max, mut mean, mut dev) = (b.min, b.max, b.mean, b.stddev());
        let mut unit = "KiB";
        if mean > 1024.0 * 1024.0 {
            (min, max, mean, dev) = (min / 1024, max / 1024, mean / 1024.0, dev / 1024.0);
            unit = "MiB";
        }
        let _ = writeln!(
            out,
            "   bw ({unit:>5}/s): min={min:5}, max={max:5}, per={per:3.2}%, avg={mean:5.2}, stdev={dev:5.2}, samples={}",
            b.n
        );
    }
    let i = &s.iops_samples;
    if i.n > 0 {
        let _ = writeln!(
            out,
            "   iops        : min={:5}, max={:5}, avg={:5.2}, stdev={:5.2}, samples={}",
            i.min,
            i.max,
            i.mean,
            i.stddev(),
            i.n
        );
    }
}

fn lat_lines(out: &mut String, unit: &str, keys: &[&str], pct: &[f64]) {
    let mut line = 0;
    let mut any = false;
    for (k, &p) in keys.iter().zip(pct) {
        if p <= 0.0 {
            continue;
        }
        if line == 0 {
            if any {
                out.push('\n');
            }
            let _ = write!(out, "  lat ({unit})   : ");
        } else {
            out.push_str(", ");
        }
        any = true;
        let _ = write!(out, "{k}={p:3.2}%");
        line += 1;
        if line == 5 {
            line = 0;
        }
    }
    if any {
        out.push('\n');
    }
}

fn dist_line(out: &mut String, head: &str, keys: &[&str], pct: &[f64]) {
    let parts: Vec<String> = keys
        .iter()
        .zip(pct)
        .map(|(k, p)| format!("{k}={p:3.1}%"))
        .collect();
    let _ = writeln!(out, "{head}{}", parts.join(", "));
}

/// Our line: what ran, in GB/s, and the case measured.
pub fn hipfile_line(e: &Extras, read_ios: u64, write_ios: u64) -> String {
    let mut dirs = Vec::new();
    if read_ios > 0 {
        dirs.push(format!("read {:.3} GB/s", e.read_gbps));
    }
    if write_ios > 0 {
        dirs.push(format!("write {:.3} GB/s", e.write_gbps));
    }
    if dirs.is_empty() {
        dirs.push("no I/O measured".into());
    }
    let engine = match &e.ioengine_as {
        Some(a) => format!("{} (as {a})", e.ioengine),
        None => e.ioengine.clone(),
    };
    let cache = match e.cache_resident_pct {
        Some(p) if !e.direct => format!("{} ({p:.0}% cached)", e.cache),
        _ => e.cache.clone(),
    };
    format!(
        "{} (ioengine={engine}, mem={}, gpu_runtime={}, direct={}, iodepth={}, bs={}, files={}, {} per pass, page cache {cache})",
        dirs.join(", "),
        e.mem,
        e.gpu_runtime,
        e.direct as u8,
        e.iodepth,
        num2str(e.bs, 4, true, "B"),
        e.files,
        num2str(e.bytes_per_pass, 4, true, "B"),
    )
}

fn unit_text(out: &mut String, u: &Unit, groups: &[GroupRun]) {
    let st = &u.stats;
    if st.total_ios() == 0 && st.dirs.iter().all(|d| d.bytes == 0) {
        return;
    }
    let g = groups.iter().find(|g| g.id == u.groupid);
    let (secs, _, _) = now();
    let _ = writeln!(
        out,
        "{}: (groupid={}, jobs={}): err= 0: pid={}: {}",
        u.name,
        u.groupid,
        u.members,
        std::process::id(),
        ctime(secs)
    );
    if !u.description.is_empty() {
        let _ = writeln!(out, "  Description  : [{}]", u.description);
    }
    for d in 0..2 {
        dir_text(out, u, d, g.map_or(0, |g| g.agg[d]));
    }
    let total = st.total_ios();
    lat_lines(out, "nsec", &DECADE_KEYS, &lat_percent(&st.lat_n, total));
    lat_lines(out, "usec", &DECADE_KEYS, &lat_percent(&st.lat_u, total));
    lat_lines(out, "msec", &MS_KEYS, &lat_percent(&st.lat_m, total));
    if st.sync.sum.n > 0 {
        out.push_str("  fsync/fdatasync/sync_file_range:\n");
        display_lat(out, "sync", &st.sync);
        show_percentiles(out, "sync", &st.sync, &u.pct.list);
    }
    let c = &u.cpu;
    let _ = writeln!(
        out,
        "  cpu          : usr={:3.2}%, sys={:3.2}%, ctx={}, majf={}, minf={}",
        c.usr_pct, c.sys_pct, c.ctx, c.majf, c.minf
    );
    dist_line(
        out,
        "  IO depths    : ",
        &DEPTH_KEYS,
        &dist_percent(&st.depth_map, total),
    );
    dist_line(
        out,
        "     submit    : ",
        &COUNT_KEYS,
        &dist_percent(&st.submit_map, st.total_submit),
    );
    dist_line(
        out,
        "     complete  : ",
        &COUNT_KEYS,
        &dist_percent(&st.complete_map, st.total_complete),
    );
    let _ = writeln!(
        out,
        "     issued rwts: total={},{},0,{} short={},{},0,0 dropped=0,0,0,0",
        st.dirs[0].ios, st.dirs[1].ios, st.sync.sum.n, st.dirs[0].short_ios, st.dirs[1].short_ios
    );
    let _ = writeln!(
        out,
        "     latency   : target=0, window=0, percentile=100.00%, depth={}",
        u.iodepth
    );
    let _ = writeln!(
        out,
        "  hipfile      : {}",
        hipfile_line(&u.extras, st.dirs[0].ios, st.dirs[1].ios)
    );
}

fn group_text(out: &mut String, g: &GroupRun) {
    let _ = writeln!(out, "\nRun status group {} (all jobs):", g.id);
    for (d, label) in ["   READ", "  WRITE"].iter().enumerate() {
        if g.max_run_ms[d] == 0 && g.io_bytes[d] == 0 {
            continue;
        }
        let _ = writeln!(
            out,
            "{label}: bw={} ({}), {}-{} ({}-{}), io={} ({}), run={}-{}msec",
            num2str(g.agg[d], 4, true, "B/s"),
            num2str(g.agg[d], 4, false, "B/s"),
            num2str(g.min_bw[d], 4, true, "B/s"),
            num2str(g.max_bw[d], 4, true, "B/s"),
            num2str(g.min_bw[d], 4, false, "B/s"),
            num2str(g.max_bw[d], 4, false, "B/s"),
            num2str(g.io_bytes[d], 4, true, "B"),
            num2str(g.io_bytes[d], 4, false, "B"),
            g.min_run_ms[d],
            g.max_run_ms[d]
        );
    }
}

/// fio's normal report (the per-job blocks, the group lines, the disks),
/// then our summary line.
pub fn normal(inp: &Inputs) -> String {
    let mut out = String::from("\n");
    for u in inp.units {
        unit_text(&mut out, u, inp.groups);
    }
    for g in inp.groups {
        group_text(&mut out, g);
    }
    if !inp.disks.is_empty() {
        out.push_str("\nDisk stats (read/write):\n");
        for d in inp.disks {
            // A disk made of others shows their figures after its own.
            let line = |prefix: &str, f: &[String; 8]| {
                format!(
                    "{prefix}ios={}/{}, {prefix}merge={}/{}, {prefix}ticks={}/{}, {prefix}in_queue={}, {prefix}util={}",
                    f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]
                )
            };
            let indent = if d.aggregate.is_some() { "  " } else { "" };
            let _ = write!(
                out,
                "{indent}  {}: {}",
                d.name,
                line("", &d.figures.fields())
            );
            if let Some(a) = &d.aggregate {
                let _ = write!(out, ", {}", line("aggr", &a.fields()));
            }
            out.push('\n');
        }
    }
    let reads: u64 = inp.units.iter().map(|u| u.stats.dirs[0].ios).sum();
    let writes: u64 = inp.units.iter().map(|u| u.stats.dirs[1].ios).sum();
    let _ = writeln!(
        out,
        "\nhipfile-bench: {}",
        hipfile_line(&inp.total, reads, writes)
    );
    out
}

// ---------------------------------------------------------------------------
// Terse

fn terse_lat(out: &mut String, l: &Lat) {
    let s = &l.sum;
    if s.n == 0 {
        out.push_str(";0;0;0.000000;0.000000");
    } else {
        let _ = write!(
            out,
            ";{};{};{:.6};{:.6}",
            s.min / 1000,
            s.max / 1000,
            s.mean() / 1000.0,
            s.stddev() / 1000.0
        );
    }
}

fn terse_dir(out: &mut String, u: &Unit, d: Option<usize>, agg: u64, ver: u32) {
    let empty = crate::stats::DirStats::default();
    let s = d.map_or(&empty, |d| &u.stats.dirs[d]);
    let (bw, iops) = if s.runtime_ns > 0 {
        ((s.bw_bytes() as u64) / 1024, s.iops() as u64)
    } else {
        (0, 0)
    };
    let _ = write!(out, ";{};{bw};{iops};{}", s.bytes >> 10, s.runtime_ms());
    terse_lat(out, &s.slat);
    terse_lat(out, &s.clat);
    let lat_for_pct = if u.pct.lat {
        Some(&s.lat)
    } else if u.pct.clat {
        Some(&s.clat)
    } else {
        None
    };
    let vals = lat_for_pct
        .filter(|l| l.sum.n > 0)
        .map(|l| l.plat.percentiles(&u.pct.list));
    for i in 0..crate::options::MAX_PERCENTILES {
        match (&vals, u.pct.list.get(i)) {
            (Some(v), Some(p)) => {
                let _ = write!(out, ";{p:.6}%={}", v[i] / 1000);
            }
            _ => out.push_str(";0%=0"),
        }
    }
    terse_lat(out, &s.lat);
    let b = &s.bw_samples;
    if b.n > 0 {
        let per = if agg > 0 {
            (b.mean * 100.0 / (agg / 1024) as f64).min(100.0)
        } else {
            100.0
        };
        let _ = write!(
            out,
            ";{};{};{per:.6}%;{:.6};{:.6}",
            b.min,
            b.max,
            b.mean,
            b.stddev()
        );
    } else {
        out.push_str(";0;0;0.000000%;0.000000;0.000000");
    }
    if ver == 5 {
        let _ = write!(out, ";{}", b.n);
        let i = &s.iops_samples;
        if i.n > 0 {
            let _ = write!(
                out,
                ";{};{};{:.6};{:.6};{}",
                i.min,
                i.max,
                i.mean,
                i.stddev(),
                i.n
            );
        } else {
            out.push_str(";0;0;0.000000;0.000000;0");
        }
    }
}

/// fio's terse report: one `;`-separated line per unit (versions 3, 4, 5).
pub fn terse(inp: &Inputs, ver: u32) -> String {
    let mut out = String::new();
    for u in inp.units {
        let g = inp.groups.iter().find(|g| g.id == u.groupid);
        let agg = |d: usize| g.map_or(0, |g| g.agg[d]);
        let _ = write!(out, "{ver};{};{};{};0", inp.version, u.name, u.groupid);
        terse_dir(&mut out, u, Some(0), agg(0), ver);
        terse_dir(&mut out, u, Some(1), agg(1), ver);
        if ver >= 4 {
            terse_dir(&mut out, u, None, 0, ver);
        }
        let c = &u.cpu;
        let _ = write!(
            out,
            ";{:.6}%;{:.6}%;{};{};{}",
            c.usr_pct, c.sys_pct, c.ctx, c.majf, c.minf
        );
        let st = &u.stats;
        let total = st.total_ios();
        for p in dist_percent(&st.depth_map, total) {
            let _ = write!(out, ";{p:3.1}%");
        }
        // The terse layout has no ns buckets: they count in the first us one.
        let mut lat_u = lat_percent(&st.lat_u, total);
        if total > 0 {
            lat_u[0] += 100.0 * st.lat_n.iter().sum::<u64>() as f64 / total as f64;
        }
        for p in lat_u {
            let _ = write!(out, ";{p:3.2}%");
        }
        for p in lat_percent(&st.lat_m, total) {
            let _ = write!(out, ";{p:3.2}%");
        }
        for d in inp.disks {
            let _ = write!(out, ";{};{}", d.name, d.figures.fields().join(";"));
            if let Some(a) = &d.aggregate {
                let _ = write!(out, ";slaves;{}", a.fields().join(";"));
            }
        }
        if !u.description.is_empty() {
            let _ = write!(out, ";{}", u.description);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::DEFAULT_PERCENTILES;

    fn unit() -> Unit {
        let mut st = JobStats::default();
        let r = &mut st.dirs[0];
        for i in 0..100u64 {
            r.bytes += 1 << 20;
            r.ios += 1;
            r.clat.add(900_000 + i * 1000);
            r.lat.add(900_500 + i * 1000);
            st.lat_u[9] += 1;
        }
        st.dirs[0].runtime_ns = 100_000_000;
        st.dirs[0].bw_samples.add(1_000_000);
        st.dirs[0].bw_samples.add(1_048_576);
        st.depth_map[0] = 100;
        st.submit_map[1] = 100;
        st.total_submit = 100;
        st.complete_map[1] = 100;
        st.total_complete = 100;
        Unit {
            name: "seq \"read\"".into(),
            groupid: 0,
            members: 1,
            group_reporting: false,
            description: String::new(),
            options: [("rw".to_string(), "read".to_string())]
                .into_iter()
                .collect(),
            stats: st,
            job_runtime_ns: 100_000_000,
            iodepth: 1,
            pct: Percentiles {
                clat: true,
                lat: false,
                slat: false,
                list: DEFAULT_PERCENTILES.to_vec(),
            },
            cpu: Cpu {
                usr_pct: 1.5,
                sys_pct: 20.25,
                ctx: 10,
                majf: 0,
                minf: 5,
            },
            extras: Extras {
                ioengine: "posix".into(),
                ioengine_as: Some("psync".into()),
                mem: "host".into(),
                gpu_runtime: "none".into(),
                read_gbps: 1.048576,
                gbps: 1.048576,
                iodepth: 1,
                bs: 1 << 20,
                files: 1,
                bytes_per_pass: 100 << 20,
                cache: "hot".into(),
                cache_resident_pct: Some(100.0),
                ..Extras::default()
            },
        }
    }

    fn with<T>(plus: bool, f: impl FnOnce(&Inputs) -> T) -> T {
        let units = vec![unit()];
        let groups = group_runs(&units);
        let opts = Map::new();
        let total = units[0].extras.clone();
        let inp = Inputs {
            units: &units,
            groups: &groups,
            disks: &[],
            global_options: &opts,
            version: "hipfile-bench-0.2.0",
            json_plus: plus,
            elapsed_s: 1,
            total,
        };
        f(&inp)
    }

    #[test]
    fn json_has_fios_figures() {
        let r = with(false, json);
        let job = &r.jobs[0];
        assert_eq!(job.read.io_bytes, 100 << 20);
        assert_eq!(job.read.io_kbytes, 100 << 10);
        assert_eq!(job.read.runtime, 100);
        // 100 MiB in 0.1 s = 1048576000 B/s = 1024000 KiB/s.
        assert_eq!(job.read.bw_bytes, 1_048_576_000);
        assert_eq!(job.read.bw, 1_024_000);
        assert_eq!(job.read.clat_ns.min, 900_000);
        let p = job.read.clat_ns.percentile.as_ref().unwrap();
        assert_eq!(p.len(), 17);
        assert!(p.contains_key("99.990000"));
        assert!(job.read.clat_ns.bins.is_none());
        assert!(job.read.lat_ns.percentile.is_none());
        assert_eq!(job.iodepth_level["1"], 100.0);
        assert_eq!(job.latency_us["1000"], 100.0);
        assert_eq!(job.write.io_bytes, 0);
        assert_eq!(job.job_options.as_ref().unwrap()["rw"], "read");
        let text = fiojson::to_string_pretty(&r);
        assert!(text.contains(r#""jobname": "seq \"read\"""#));
    }

    #[test]
    fn json_plus_adds_bins_that_count_every_io() {
        let r = with(true, json);
        let bins = r.jobs[0].read.clat_ns.bins.as_ref().unwrap();
        assert_eq!(bins.values().sum::<u64>(), 100);
    }

    #[test]
    fn normal_report_lines() {
        let text = with(false, normal);
        for want in [
            "seq \"read\": (groupid=0, jobs=1): err= 0: pid=",
            "  read: IOPS=1000, BW=1000MiB/s (1049MB/s)(100MiB/100msec)",
            "    clat (usec): min=900, max=999, avg=949.50, stdev=",
            "    clat percentiles (usec):",
            "     |  1.00th=[  ",
            "99.99th=[  996]",
            "   bw (  KiB/s): min=1000000, max=1048576, per=100.00%",
            "  lat (usec)   : 1000=100.00%",
            "  cpu          : usr=1.50%, sys=20.25%, ctx=10, majf=0, minf=5",
            "  IO depths    : 1=100.0%, 2=0.0%, 4=0.0%, 8=0.0%, 16=0.0%, 32=0.0%, >=64=0.0%",
            "     submit    : 0=0.0%, 4=100.0%, 8=0.0%",
            "     issued rwts: total=100,0,0,0 short=0,0,0,0 dropped=0,0,0,0",
            "     latency   : target=0, window=0, percentile=100.00%, depth=1",
            "Run status group 0 (all jobs):",
            "   READ: bw=1000MiB/s (1049MB/s), 1000MiB/s-1000MiB/s (1049MB/s-1049MB/s), io=100MiB (105MB), run=100-100msec",
            "ioengine=posix (as psync), mem=host, gpu_runtime=none, direct=0, iodepth=1, bs=1024KiB, files=1, 100MiB per pass",
            "page cache hot (100% cached)",
        ] {
            assert!(text.contains(want), "missing '{want}' in:\n{text}");
        }
        assert!(!text.contains("write:"));
    }

    #[test]
    fn terse_lines_have_fios_field_count() {
        // v3: 5 head + 2 x 41 direction fields + 5 cpu + 7 depths + 10 us + 12 ms.
        for (ver, dirs, per_dir) in [(3u32, 2usize, 41usize), (4, 3, 41), (5, 3, 47)] {
            let line = with(false, |i| terse(i, ver));
            let n = line.trim_end().split(';').count();
            assert_eq!(
                n,
                5 + dirs * per_dir + 5 + 7 + 10 + 12,
                "version {ver}: {line}"
            );
            assert!(line.starts_with(&format!(
                "{ver};hipfile-bench-0.2.0;seq \"read\";0;0;102400;1024000;1000;100;"
            )));
        }
    }

    #[test]
    fn group_reporting_folds_consecutive_jobs_of_a_group() {
        let mut a = Unit {
            name: "a".into(),
            group_reporting: true,
            job_runtime_ns: 100,
            extras: Extras::default(),
            ..unit()
        };
        let jobs = vec![a.clone(), a.clone(), {
            a.groupid = 1;
            a.clone()
        }];
        let u = units(&jobs);
        assert_eq!(u.len(), 2);
        assert_eq!(u[0].members, 2);
        assert_eq!(u[0].stats.dirs[0].ios, 200);
        assert_eq!(u[0].job_runtime_ns, 200);
        let g = group_runs(&u);
        assert_eq!(g[0].io_bytes[0], 200 << 20);
        // Two jobs' bytes over the longest runtime.
        assert_eq!(g[0].agg[0], 2 * 1_048_576_000);
    }

    #[test]
    fn ctime_has_fios_layout() {
        let t = ctime(0);
        assert_eq!(t.len(), 24, "{t}");
        assert!(t.ends_with("1970") || t.ends_with("1969"));
    }
}
