//! Job options: fio's names, one table entry per option (its aliases, the
//! kind of value, one line of help, and how it sets [`JobOptions`]).
//!
//! Every option the table holds is implemented; options fio has and this
//! tool lacks are refused by name, so a job never silently measures
//! something other than what it says. Errors are one line naming the option.

use crate::units::{parse_bool, parse_size, parse_size_range, parse_time, parse_uint};
use std::time::Duration;

/// The I/O pattern (`rw`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Read,
    Write,
    RandRead,
    RandWrite,
    /// Sequential mixed reads and writes (`rwmixread`).
    Rw,
    RandRw,
}

impl Workload {
    pub fn parse(s: &str) -> Option<Workload> {
        Some(match s {
            "read" => Workload::Read,
            "write" => Workload::Write,
            "randread" => Workload::RandRead,
            "randwrite" => Workload::RandWrite,
            // fio accepts "readwrite" as a synonym of "rw".
            "rw" | "readwrite" => Workload::Rw,
            "randrw" => Workload::RandRw,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::Read => "read",
            Workload::Write => "write",
            Workload::RandRead => "randread",
            Workload::RandWrite => "randwrite",
            Workload::Rw => "rw",
            Workload::RandRw => "randrw",
        }
    }

    pub fn is_random(self) -> bool {
        matches!(
            self,
            Workload::RandRead | Workload::RandWrite | Workload::RandRw
        )
    }

    pub fn has_writes(self) -> bool {
        !matches!(self, Workload::Read | Workload::RandRead)
    }

    /// Percentage of reads among the operations.
    pub fn read_percent(self, rwmixread: u32) -> u32 {
        match self {
            Workload::Read | Workload::RandRead => 100,
            Workload::Write | Workload::RandWrite => 0,
            Workload::Rw | Workload::RandRw => rwmixread,
        }
    }
}

/// The engines behind `ioengine`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    HipfileSync,
    HipfileAsync,
    HipfileBatch,
    Posix,
    Raw,
    Copy,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::HipfileSync => "hipfile-sync",
            Engine::HipfileAsync => "hipfile-async",
            Engine::HipfileBatch => "hipfile-batch",
            Engine::Posix => "posix",
            Engine::Raw => "raw",
            Engine::Copy => "copy",
        }
    }

    /// The engines that go through libhipfile (driver open, handle and buffer registration).
    pub fn uses_hipfile(self) -> bool {
        matches!(
            self,
            Engine::HipfileSync | Engine::HipfileAsync | Engine::HipfileBatch
        )
    }

    /// Synchronous engines have one I/O in flight per job.
    pub fn is_sync(self) -> bool {
        matches!(self, Engine::HipfileSync | Engine::Posix)
    }

    /// Engines whose submission is a call of its own (fio shows slat for them).
    pub fn has_slat(self) -> bool {
        matches!(
            self,
            Engine::HipfileAsync | Engine::HipfileBatch | Engine::Raw | Engine::Copy
        )
    }
}

/// How an `ioengine` name maps onto our engines (see [`ENGINE_NAMES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineFamily {
    /// Our own names: device memory when a GPU is present.
    Ours,
    /// fio's engines (psync, io_uring, ...): host memory, fio's `direct=0`.
    Fio,
    /// fio's GPU engines (libcufile, libhipfile): device memory, always.
    FioGpu,
}

/// Every `ioengine` name accepted, what it runs, and its family.
pub const ENGINE_NAMES: &[(&str, Engine, EngineFamily)] = &[
    ("hipfile-sync", Engine::HipfileSync, EngineFamily::Ours),
    ("hipfile", Engine::HipfileSync, EngineFamily::Ours),
    ("hipfile-async", Engine::HipfileAsync, EngineFamily::Ours),
    ("hipfile-batch", Engine::HipfileBatch, EngineFamily::Ours),
    ("posix", Engine::Posix, EngineFamily::Ours),
    ("raw", Engine::Raw, EngineFamily::Ours),
    ("copy", Engine::Copy, EngineFamily::Ours),
    // fio's GPU engines: rocm_io/cuda_io=posix turns them into posix.
    ("libhipfile", Engine::HipfileSync, EngineFamily::FioGpu),
    ("libcufile", Engine::HipfileSync, EngineFamily::FioGpu),
    // fio's synchronous engines: pread/pwrite into host memory.
    ("psync", Engine::Posix, EngineFamily::Fio),
    ("sync", Engine::Posix, EngineFamily::Fio),
    ("vsync", Engine::Posix, EngineFamily::Fio),
    ("pvsync", Engine::Posix, EngineFamily::Fio),
    ("pvsync2", Engine::Posix, EngineFamily::Fio),
    // fio's asynchronous engines: our io_uring ring, iodepth in flight.
    ("io_uring", Engine::Raw, EngineFamily::Fio),
    ("libaio", Engine::Raw, EngineFamily::Fio),
];

/// `mem`/`iomem`: where the job's buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemKind {
    Device,
    Host,
    /// Host memory on transparent huge pages (fio's `mmaphuge`/`shmhuge`).
    HostHuge,
    /// Host memory from glibc `malloc`, untouched until the first I/O, as
    /// fio's `iomem=malloc` (its default) allocates it.
    HostMalloc,
}

impl MemKind {
    pub fn parse(v: &str) -> Option<MemKind> {
        // fio's mmaphuge takes an optional hugetlbfs file (`mmaphuge:/path`);
        // our huge pages are transparent ones, so the path is not needed.
        let base = v.split_once(':').map_or(v, |(b, _)| b);
        Some(match base {
            "device" | "cudamalloc" | "hipmalloc" => MemKind::Device,
            "host" | "mmap" | "mmapshared" | "shm" => MemKind::Host,
            "malloc" => MemKind::HostMalloc,
            "mmaphuge" | "shmhuge" => MemKind::HostHuge,
            _ => return None,
        })
    }

    pub fn is_device(self) -> bool {
        self == MemKind::Device
    }

    pub fn name(self) -> &'static str {
        match self {
            MemKind::Device => "device",
            MemKind::Host => "host",
            MemKind::HostHuge => "host-huge",
            MemKind::HostMalloc => "host-malloc",
        }
    }
}

/// `file_service_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileService {
    Random,
    RoundRobin,
    Sequential,
}

/// `cpus_allowed_policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuPolicy {
    Shared,
    Split,
}

/// fio's default `percentile_list`.
pub const DEFAULT_PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];
/// Most entries fio takes in `percentile_list`.
pub const MAX_PERCENTILES: usize = 20;
/// Largest `iodepth` accepted (fio's own limit).
pub const MAX_IODEPTH: u64 = 65536;
/// Largest `numjobs` accepted: every job is a thread with its own buffer.
pub const MAX_NUMJOBS: u64 = 4096;
/// Largest `nrfiles` accepted.
pub const MAX_NRFILES: u64 = 1 << 20;

/// One job's options, as fio defines them (plus ours, marked).
#[derive(Clone, Debug)]
pub struct JobOptions {
    pub name: String,
    pub description: String,
    /// `filename`: one or more files, `:`-separated (`\:` escapes a colon).
    pub filenames: Vec<String>,
    /// `directory`: one or more, `:`-separated; generated names cycle through them per clone.
    pub directories: Vec<String>,
    pub filename_format: String,
    pub nrfiles: u64,
    pub openfiles: Option<u64>,
    pub file_service: FileService,
    /// I/Os to a file before the service type picks the next (`random:8`).
    pub file_service_nr: u64,
    pub filesize: Option<(u64, u64)>,
    /// `size`: bytes per job (fio's meaning: each clone gets all of it).
    pub size: Option<u64>,
    /// `size=N%`: that share of the existing files.
    pub size_percent: Option<u32>,
    pub io_size: Option<u64>,
    pub offset: u64,
    pub offset_increment: u64,
    /// `bs`: read and write block sizes.
    pub bs: [u64; 2],
    pub rw: Workload,
    pub rwmixread: u32,
    pub iodepth: u64,
    /// I/Os handed to the kernel or library per submission; None = the
    /// engine's own (fio's 1 for io_uring, all queued I/Os for the batch API).
    pub iodepth_batch_submit: Option<u64>,
    pub iodepth_batch_complete_min: u64,
    pub iodepth_low: Option<u64>,
    pub numjobs: u64,
    /// `direct`; None = the engine's default.
    pub direct: Option<bool>,
    pub runtime: Option<Duration>,
    pub time_based: bool,
    pub loops: u64,
    pub ramp_time: Option<Duration>,
    pub invalidate: bool,
    pub pre_read: bool,
    pub verify: bool,
    pub group_reporting: bool,
    pub stonewall: bool,
    pub new_group: bool,
    /// `ioengine` as given.
    pub ioengine: String,
    /// `cuda_io`/`rocm_io`: true for posix I/O through a host buffer.
    pub gpu_io_posix: Option<bool>,
    pub gpu_dev_ids: Vec<i32>,
    pub mem: Option<MemKind>,
    pub fixedbufs: bool,
    pub fsync: u64,
    pub fdatasync: u64,
    pub end_fsync: bool,
    pub fsync_on_close: bool,
    pub unlink: bool,
    pub randrepeat: bool,
    pub randseed: Option<u64>,
    pub norandommap: bool,
    pub allow_file_create: bool,
    pub clat_percentiles: bool,
    pub lat_percentiles: bool,
    pub slat_percentiles: bool,
    pub percentile_list: Vec<f64>,
    pub disable_clat: bool,
    pub disable_slat: bool,
    pub disable_lat: bool,
    pub disable_bw: bool,
    pub write_bw_log: Option<String>,
    pub write_lat_log: Option<String>,
    pub write_iops_log: Option<String>,
    pub log_avg_msec: u64,
    pub log_offset: bool,
    pub per_job_logs: bool,
    pub bw_avg_msec: u64,
    pub iops_avg_msec: u64,
    pub cpus_allowed: Option<Vec<usize>>,
    pub cpus_allowed_policy: CpuPolicy,
    /// Ours: open (and register) the file before each I/O and close after it.
    pub open_per_io: bool,
    /// Ours: register the job's buffer with hipFileBufRegister (hipfile engines).
    pub buf_register: bool,
    /// Ours: how often the main thread wakes while jobs run.
    pub main_tick: Duration,
}

impl Default for JobOptions {
    fn default() -> JobOptions {
        JobOptions {
            name: String::new(),
            description: String::new(),
            filenames: Vec::new(),
            directories: Vec::new(),
            filename_format: "$jobname.$jobnum.$filenum".into(),
            nrfiles: 1,
            openfiles: None,
            file_service: FileService::RoundRobin,
            file_service_nr: 1,
            filesize: None,
            size: None,
            size_percent: None,
            io_size: None,
            offset: 0,
            offset_increment: 0,
            bs: [4096, 4096],
            rw: Workload::Read,
            rwmixread: 50,
            iodepth: 1,
            iodepth_batch_submit: None,
            iodepth_batch_complete_min: 1,
            iodepth_low: None,
            numjobs: 1,
            direct: None,
            runtime: None,
            time_based: false,
            loops: 1,
            ramp_time: None,
            invalidate: true,
            pre_read: false,
            verify: false,
            group_reporting: false,
            stonewall: false,
            new_group: false,
            ioengine: "hipfile-sync".into(),
            gpu_io_posix: None,
            gpu_dev_ids: vec![0],
            mem: None,
            fixedbufs: false,
            fsync: 0,
            fdatasync: 0,
            end_fsync: false,
            fsync_on_close: false,
            unlink: false,
            randrepeat: true,
            randseed: None,
            norandommap: false,
            allow_file_create: true,
            clat_percentiles: true,
            lat_percentiles: false,
            slat_percentiles: false,
            percentile_list: DEFAULT_PERCENTILES.to_vec(),
            disable_clat: false,
            disable_slat: false,
            disable_lat: false,
            disable_bw: false,
            write_bw_log: None,
            write_lat_log: None,
            write_iops_log: None,
            log_avg_msec: 0,
            log_offset: false,
            per_job_logs: true,
            bw_avg_msec: 500,
            iops_avg_msec: 500,
            cpus_allowed: None,
            cpus_allowed_policy: CpuPolicy::Shared,
            open_per_io: false,
            buf_register: true,
            main_tick: Duration::from_millis(10),
        }
    }
}

/// What a resolved `ioengine` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineChoice {
    pub engine: Engine,
    pub family: EngineFamily,
}

impl JobOptions {
    /// The engine `ioengine` (with `cuda_io`/`rocm_io`) names.
    pub fn engine(&self) -> Result<EngineChoice, String> {
        let Some(&(_, engine, family)) = ENGINE_NAMES.iter().find(|e| e.0 == self.ioengine) else {
            let names: Vec<&str> = ENGINE_NAMES.iter().map(|e| e.0).collect();
            return Err(format!(
                "ioengine: '{}' is not one of {}",
                self.ioengine,
                names.join(", ")
            ));
        };
        match (family, self.gpu_io_posix) {
            (EngineFamily::FioGpu, Some(true)) => Ok(EngineChoice {
                engine: Engine::Posix,
                family,
            }),
            (EngineFamily::FioGpu, _) | (_, None) => Ok(EngineChoice { engine, family }),
            (_, Some(_)) => Err(format!(
                "cuda_io/rocm_io apply to ioengine=libcufile or libhipfile, not '{}'",
                self.ioengine
            )),
        }
    }

    /// `direct` after the engine's default (our `raw`: 1, everything else fio's 0).
    pub fn direct_for(&self, e: EngineChoice) -> bool {
        self.direct
            .unwrap_or(e.engine == Engine::Raw && e.family == EngineFamily::Ours)
    }

    /// The GPU for clone `clone` (fio's libcufile: `gpu_dev_ids` round robin).
    pub fn gpu_for(&self, clone: u64) -> i32 {
        self.gpu_dev_ids[(clone % self.gpu_dev_ids.len() as u64) as usize]
    }

    /// The largest block size of the directions the job uses.
    pub fn max_bs(&self) -> u64 {
        match self.rw.read_percent(self.rwmixread) {
            100 => self.bs[0],
            0 => self.bs[1],
            _ => self.bs[0].max(self.bs[1]),
        }
    }

    /// Cross-option checks fio makes once a job is complete.
    pub fn check(&self) -> Result<(), String> {
        if self.time_based && self.runtime.is_none() {
            return Err("time_based needs runtime".into());
        }
        if self.runtime.is_some_and(|r| r.is_zero()) {
            return Err("runtime: must be above 0".into());
        }
        let e = self.engine()?;
        if self.verify && e.engine == Engine::Copy {
            return Err("verify=1 does not apply to ioengine=copy (it moves no file data)".into());
        }
        if self.nrfiles > 1 && !self.filenames.is_empty() {
            // fio ignores nrfiles when filenames are listed; saying so is kinder.
            return Err(format!(
                "nrfiles={} with filename: list the files in filename (a:b:c) or use directory/filename_format",
                self.nrfiles
            ));
        }
        if self.open_per_io && (self.fsync > 0 || self.fdatasync > 0) {
            return Err(
                "fsync/fdatasync=N with open_per_io: each file closes after its I/O; use fsync_on_close"
                    .into(),
            );
        }
        if self.pre_read && self.direct_for(e) {
            return Err("pre_read warms the page cache, which direct=1 bypasses".into());
        }
        Ok(())
    }
}

/// The kind of value an option takes (for `--cmdhelp` and bare flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Size,
    Int,
    Bool,
    Time,
    Str,
    List,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Size => "size",
            Kind::Int => "int",
            Kind::Bool => "bool",
            Kind::Time => "time",
            Kind::Str => "str",
            Kind::List => "list",
        }
    }
}

pub type Setter = fn(&mut JobOptions, &str) -> Result<(), String>;

/// One option: names, value kind, help, effect.
pub struct Spec {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub kind: Kind,
    pub help: &'static str,
    pub set: Setter,
}

fn b(v: &str) -> Result<bool, String> {
    parse_bool(v)
}

fn split_colons(v: &str) -> Vec<String> {
    // fio: ':' separates names, '\:' is a colon inside one.
    let mut out = vec![String::new()];
    let mut chars = v.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&':') => {
                out.last_mut().unwrap().push(':');
                chars.next();
            }
            ':' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

fn set_bs(o: &mut JobOptions, v: &str) -> Result<(), String> {
    let max = hipfile_engine::MAX_RW_COUNT as u64;
    let one = |s: &str| -> Result<u64, String> {
        let n = parse_size(s)?;
        if n == 0 || n > max {
            return Err(format!("{n} is out of range 1..={max}"));
        }
        Ok(n)
    };
    let parts: Vec<&str> = v.split(',').collect();
    match parts.as_slice() {
        [a] => {
            let n = one(a)?;
            o.bs = [n, n];
        }
        // fio: "bs=4k,8k" reads 4k, writes 8k (a third value is for trims; an
        // empty one keeps the default).
        [r, w] | [r, w, _] => {
            if !r.is_empty() {
                o.bs[0] = one(r)?;
            }
            if !w.is_empty() {
                o.bs[1] = one(w)?;
            }
        }
        _ => return Err(format!("bad block size list '{v}'")),
    }
    Ok(())
}

fn set_size(o: &mut JobOptions, v: &str) -> Result<(), String> {
    if let Some(p) = v.trim().strip_suffix('%') {
        let pct = parse_uint(p, 1, 100)? as u32;
        o.size_percent = Some(pct);
        o.size = None;
        return Ok(());
    }
    let n = parse_size(v)?;
    if n == 0 {
        return Err("must be above 0".into());
    }
    o.size = Some(n);
    o.size_percent = None;
    Ok(())
}

fn set_file_service(o: &mut JobOptions, v: &str) -> Result<(), String> {
    let (kind, nr) = match v.split_once(':') {
        Some((k, n)) => (k, parse_uint(n, 1, u32::MAX as u64)?),
        None => (v, 1),
    };
    o.file_service = match kind {
        "random" => FileService::Random,
        "roundrobin" => FileService::RoundRobin,
        "sequential" => FileService::Sequential,
        _ => {
            return Err(format!(
                "'{kind}' is not random, roundrobin or sequential (the distributions are not supported)"
            ))
        }
    };
    o.file_service_nr = nr;
    Ok(())
}

fn set_percentile_list(o: &mut JobOptions, v: &str) -> Result<(), String> {
    let mut list = Vec::new();
    for p in v.split(':') {
        let x: f64 = p
            .trim()
            .parse()
            .map_err(|_| format!("'{p}' is not a number"))?;
        if !(x > 0.0 && x <= 100.0) {
            return Err(format!("{x} is not a percentile in (0, 100]"));
        }
        list.push(x);
    }
    if list.len() > MAX_PERCENTILES {
        return Err(format!("at most {MAX_PERCENTILES} percentiles"));
    }
    list.sort_by(|a, b| a.total_cmp(b));
    o.percentile_list = list;
    Ok(())
}

fn set_gpu_ids(o: &mut JobOptions, v: &str) -> Result<(), String> {
    let mut ids = Vec::new();
    for p in v.split(':') {
        ids.push(parse_uint(p, 0, 1023)? as i32);
    }
    if ids.is_empty() {
        return Err("no GPU ids".into());
    }
    o.gpu_dev_ids = ids;
    Ok(())
}

fn set_gpu_io(o: &mut JobOptions, v: &str, direct_name: &str) -> Result<(), String> {
    o.gpu_io_posix = Some(match v {
        "posix" => true,
        x if x == direct_name => false,
        _ => return Err(format!("'{v}' is not {direct_name} or posix")),
    });
    Ok(())
}

/// `cpus_allowed`: "0-3,6" style lists.
pub fn parse_cpu_list(v: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in v.split(',') {
        let part = part.trim();
        match part.split_once('-') {
            Some((a, z)) => {
                let a = parse_uint(a, 0, 4095)? as usize;
                let z = parse_uint(z, 0, 4095)? as usize;
                if a > z {
                    return Err(format!("bad CPU range '{part}'"));
                }
                cpus.extend(a..=z);
            }
            None => cpus.push(parse_uint(part, 0, 4095)? as usize),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

fn log_name(o: &JobOptions, v: &str) -> String {
    if v.is_empty() || v == "1" {
        o.name.clone()
    } else {
        v.to_string()
    }
}

macro_rules! spec {
    ($name:literal, [$($alias:literal),*], $kind:ident, $help:literal, $set:expr) => {
        Spec { name: $name, aliases: &[$($alias),*], kind: Kind::$kind, help: $help, set: $set }
    };
}

/// Every job option, in the order `--cmdhelp` lists them.
pub static SPECS: &[Spec] = &[
    spec!("name", [], Str, "job name (a new job on the command line)", |o, v| {
        o.name = v.to_string();
        Ok(())
    }),
    spec!("description", [], Str, "text shown with the job's report", |o, v| {
        o.description = v.to_string();
        Ok(())
    }),
    spec!("filename", [], Str, "file(s) to use, ':'-separated; all clones share them", |o, v| {
        let f = split_colons(v);
        if f.is_empty() {
            return Err("empty file name".into());
        }
        o.filenames = f;
        Ok(())
    }),
    spec!("directory", [], Str, "where the files live (':'-separated: generated names take one per clone in turn); empty: unchanged", |o, v| {
        // An empty value (an unset ${VAR} in a job file) keeps the directory
        // given before it, so a job file can defer to --directory.
        if !v.is_empty() {
            o.directories = split_colons(v);
        }
        Ok(())
    }),
    spec!("filename_format", [], Str, "generated names: $jobname, $jobnum, $filenum (default $jobname.$jobnum.$filenum)", |o, v| {
        if v.is_empty() {
            return Err("empty format".into());
        }
        o.filename_format = v.to_string();
        Ok(())
    }),
    spec!("nrfiles", ["nr_files"], Int, "files per job (default 1)", |o, v| {
        o.nrfiles = parse_uint(v, 1, MAX_NRFILES)?;
        Ok(())
    }),
    spec!("openfiles", ["open_files"], Int, "files open at once (default: nrfiles)", |o, v| {
        o.openfiles = Some(parse_uint(v, 1, MAX_NRFILES)?);
        Ok(())
    }),
    spec!("file_service_type", [], Str, "next file: random, roundrobin (default) or sequential, optionally :N I/Os per turn", set_file_service),
    spec!("filesize", [], Size, "size of each file (a range lo-hi picks sizes at random)", |o, v| {
        let r = parse_size_range(v)?;
        if r.0 == 0 {
            return Err("must be above 0".into());
        }
        o.filesize = Some(r);
        Ok(())
    }),
    spec!("size", [], Size, "bytes of I/O per job, over its files (N% of existing files)", set_size),
    spec!("io_size", ["io_limit"], Size, "bytes of I/O per job when it differs from size", |o, v| {
        let n = parse_size(v)?;
        if n == 0 {
            return Err("must be above 0".into());
        }
        o.io_size = Some(n);
        Ok(())
    }),
    spec!("offset", [], Size, "where I/O starts in each file", |o, v| {
        o.offset = parse_size(v)?;
        Ok(())
    }),
    spec!("offset_increment", [], Size, "added to offset per clone (clone k starts at offset + k x increment)", |o, v| {
        o.offset_increment = parse_size(v)?;
        Ok(())
    }),
    spec!("bs", ["blocksize"], Size, "bytes per I/O; bs=R,W for reads and writes (default 4k)", set_bs),
    spec!("rw", ["readwrite"], Str, "read, write, randread, randwrite, rw (readwrite), randrw", |o, v| {
        o.rw = Workload::parse(v).ok_or_else(|| {
            format!("'{v}' is not one of read, write, randread, randwrite, rw, randrw")
        })?;
        Ok(())
    }),
    spec!("rwmixread", [], Int, "percentage of reads in rw/randrw (default 50)", |o, v| {
        o.rwmixread = parse_uint(v, 0, 100)? as u32;
        Ok(())
    }),
    spec!("rwmixwrite", [], Int, "percentage of writes in rw/randrw", |o, v| {
        o.rwmixread = 100 - parse_uint(v, 0, 100)? as u32;
        Ok(())
    }),
    spec!("iodepth", [], Int, "I/Os in flight per job (an engine that cannot keep them is an error)", |o, v| {
        o.iodepth = parse_uint(v, 1, MAX_IODEPTH)?;
        Ok(())
    }),
    spec!("iodepth_batch_submit", ["iodepth_batch"], Int, "I/Os per submission (default: io_uring 1 as fio, hipfile-batch all queued)", |o, v| {
        o.iodepth_batch_submit = Some(parse_uint(v, 0, MAX_IODEPTH)?.max(1));
        Ok(())
    }),
    spec!("iodepth_batch_complete_min", ["iodepth_batch_complete"], Int, "completions to wait for before submitting again (default 1)", |o, v| {
        o.iodepth_batch_complete_min = parse_uint(v, 0, MAX_IODEPTH)?.max(1);
        Ok(())
    }),
    spec!("iodepth_low", [], Int, "refill the queue once it drains to this depth", |o, v| {
        o.iodepth_low = Some(parse_uint(v, 0, MAX_IODEPTH)?);
        Ok(())
    }),
    spec!("numjobs", [], Int, "clones of the job; each does size bytes (fio's meaning)", |o, v| {
        o.numjobs = parse_uint(v, 1, MAX_NUMJOBS)?;
        Ok(())
    }),
    spec!("direct", [], Bool, "O_DIRECT (default 0; ioengine=raw: 1)", |o, v| {
        o.direct = Some(b(v)?);
        Ok(())
    }),
    spec!("buffered", [], Bool, "the opposite of direct", |o, v| {
        o.direct = Some(!b(v)?);
        Ok(())
    }),
    spec!("runtime", ["timeout"], Time, "stop after this long (seconds, or a us/ms/s/m/h suffix)", |o, v| {
        o.runtime = Some(parse_time(v)?);
        Ok(())
    }),
    spec!("time_based", [], Bool, "repeat the workload until runtime has passed", |o, v| {
        o.time_based = b(v)?;
        Ok(())
    }),
    spec!("loops", [], Int, "passes over the workload (default 1)", |o, v| {
        o.loops = parse_uint(v, 1, u32::MAX as u64)?;
        Ok(())
    }),
    spec!("ramp_time", [], Time, "run this long before statistics start", |o, v| {
        o.ramp_time = Some(parse_time(v)?);
        Ok(())
    }),
    spec!("invalidate", [], Bool, "drop the files' page cache before the job (default 1)", |o, v| {
        o.invalidate = b(v)?;
        Ok(())
    }),
    spec!("pre_read", [], Bool, "read the files into the page cache before the job (clears invalidate)", |o, v| {
        o.pre_read = b(v)?;
        Ok(())
    }),
    spec!("verify", [], Str, "0, or 1/pattern: check data against hipfile-bench's pattern", |o, v| {
        o.verify = match v {
            "0" | "null" => false,
            "1" | "pattern" => true,
            _ => return Err(format!("'{v}' is not 0 or 1 (checks use hipfile-bench's own pattern)")),
        };
        Ok(())
    }),
    spec!("group_reporting", [], Bool, "report each group's jobs as one", |o, v| {
        o.group_reporting = b(v)?;
        Ok(())
    }),
    spec!("stonewall", ["wait_for_previous"], Bool, "wait for the jobs above to finish; starts a new group", |o, v| {
        o.stonewall = b(v)?;
        Ok(())
    }),
    spec!("new_group", [], Bool, "start a new reporting group (without waiting)", |o, v| {
        o.new_group = b(v)?;
        Ok(())
    }),
    spec!("ioengine", [], Str, "hipfile-sync (default), hipfile-async, hipfile-batch, posix, raw, copy, or fio's names (README)", |o, v| {
        o.ioengine = v.to_string();
        if !ENGINE_NAMES.iter().any(|e| e.0 == v) {
            let names: Vec<&str> = ENGINE_NAMES.iter().map(|e| e.0).collect();
            return Err(format!("'{v}' is not one of {}", names.join(", ")));
        }
        Ok(())
    }),
    spec!("cuda_io", [], Str, "libcufile: cufile (hipFile calls) or posix (pread + copy)", |o, v| set_gpu_io(o, v, "cufile")),
    spec!("rocm_io", [], Str, "libhipfile: hipfile (hipFile calls) or posix (pread + copy)", |o, v| set_gpu_io(o, v, "hipfile")),
    spec!("gpu_dev_ids", [], List, "GPU ordinals, ':'-separated; clones take them in turn", set_gpu_ids),
    spec!("gpu", [], Int, "GPU ordinal (ours; gpu_dev_ids=N does the same)", set_gpu_ids),
    spec!("mem", ["iomem"], Str, "buffer memory: device (cudamalloc), host (mmap, shm), glibc malloc as fio's default (malloc), host huge pages (mmaphuge, shmhuge)", |o, v| {
        o.mem = Some(MemKind::parse(v).ok_or_else(|| {
            format!("'{v}' is not device, host, malloc, mmap, shm, mmaphuge, shmhuge or cudamalloc")
        })?);
        Ok(())
    }),
    spec!("fixedbufs", [], Bool, "io_uring (raw): register the buffer with the ring (default 0)", |o, v| {
        o.fixedbufs = b(v)?;
        Ok(())
    }),
    spec!("thread", [], Bool, "accepted: every job is a thread here", |_, v| {
        b(v).map(|_| ())
    }),
    spec!("fsync", [], Int, "fsync the file after every N writes (0: never)", |o, v| {
        o.fsync = parse_uint(v, 0, u32::MAX as u64)?;
        Ok(())
    }),
    spec!("fdatasync", [], Int, "fdatasync the file after every N writes (0: never)", |o, v| {
        o.fdatasync = parse_uint(v, 0, u32::MAX as u64)?;
        Ok(())
    }),
    spec!("end_fsync", [], Bool, "fsync each written file when the job's writes are done", |o, v| {
        o.end_fsync = b(v)?;
        Ok(())
    }),
    spec!("fsync_on_close", [], Bool, "fsync a written file when it is closed", |o, v| {
        o.fsync_on_close = b(v)?;
        Ok(())
    }),
    spec!("unlink", [], Bool, "delete the job's files when it is done", |o, v| {
        o.unlink = b(v)?;
        Ok(())
    }),
    spec!("randrepeat", [], Bool, "the same random offsets every run (default 1)", |o, v| {
        o.randrepeat = b(v)?;
        Ok(())
    }),
    spec!("randseed", [], Int, "seed of the random offsets", |o, v| {
        o.randseed = Some(parse_uint(v, 0, u64::MAX)?);
        Ok(())
    }),
    spec!("norandommap", [], Bool, "random offsets with repeats (default: every block once per pass)", |o, v| {
        o.norandommap = b(v)?;
        Ok(())
    }),
    spec!("allow_file_create", [], Bool, "create missing files (default 1)", |o, v| {
        o.allow_file_create = b(v)?;
        Ok(())
    }),
    spec!("clat_percentiles", [], Bool, "completion-latency percentiles (default 1)", |o, v| {
        o.clat_percentiles = b(v)?;
        Ok(())
    }),
    spec!("lat_percentiles", [], Bool, "total-latency percentiles", |o, v| {
        o.lat_percentiles = b(v)?;
        Ok(())
    }),
    spec!("slat_percentiles", [], Bool, "submission-latency percentiles", |o, v| {
        o.slat_percentiles = b(v)?;
        Ok(())
    }),
    spec!("percentile_list", [], List, "percentiles to report, ':'-separated (at most 20)", set_percentile_list),
    spec!("gtod_reduce", [], Bool, "measure no latencies and no bandwidth samples (disable_lat/clat/slat/bw)", |o, v| {
        let on = b(v)?;
        o.disable_lat = on;
        o.disable_clat = on;
        o.disable_slat = on;
        o.disable_bw = on;
        Ok(())
    }),
    spec!("disable_lat", [], Bool, "do not measure total latency", |o, v| {
        o.disable_lat = b(v)?;
        Ok(())
    }),
    spec!("disable_clat", [], Bool, "do not measure completion latency", |o, v| {
        o.disable_clat = b(v)?;
        Ok(())
    }),
    spec!("disable_slat", [], Bool, "do not measure submission latency", |o, v| {
        o.disable_slat = b(v)?;
        Ok(())
    }),
    spec!("disable_bw_measurement", ["disable_bw"], Bool, "take no bandwidth/IOPS samples", |o, v| {
        o.disable_bw = b(v)?;
        Ok(())
    }),
    spec!("write_bw_log", [], Str, "write PREFIX_bw.N.log (fio's log format)", |o, v| {
        o.write_bw_log = Some(log_name(o, v));
        Ok(())
    }),
    spec!("write_lat_log", [], Str, "write PREFIX_{lat,clat,slat}.N.log", |o, v| {
        o.write_lat_log = Some(log_name(o, v));
        Ok(())
    }),
    spec!("write_iops_log", [], Str, "write PREFIX_iops.N.log", |o, v| {
        o.write_iops_log = Some(log_name(o, v));
        Ok(())
    }),
    spec!("log_avg_msec", [], Int, "average log entries over this many ms (0: one per I/O)", |o, v| {
        o.log_avg_msec = parse_uint(v, 0, u32::MAX as u64)?;
        Ok(())
    }),
    spec!("log_offset", [], Bool, "logs carry each I/O's offset", |o, v| {
        o.log_offset = b(v)?;
        Ok(())
    }),
    spec!("per_job_logs", [], Bool, "one log per job (default 1; 0: one file for all)", |o, v| {
        o.per_job_logs = b(v)?;
        Ok(())
    }),
    spec!("bwavgtime", [], Int, "bandwidth sample window in ms (default 500)", |o, v| {
        o.bw_avg_msec = parse_uint(v, 1, u32::MAX as u64)?;
        Ok(())
    }),
    spec!("iopsavgtime", [], Int, "IOPS sample window in ms (default 500)", |o, v| {
        o.iops_avg_msec = parse_uint(v, 1, u32::MAX as u64)?;
        Ok(())
    }),
    spec!("cpus_allowed", [], List, "CPUs the job's thread may run on (0-3,6)", |o, v| {
        o.cpus_allowed = Some(parse_cpu_list(v)?);
        Ok(())
    }),
    spec!("cpus_allowed_policy", [], Str, "shared (default): every clone gets all; split: one CPU per clone", |o, v| {
        o.cpus_allowed_policy = match v {
            "shared" => CpuPolicy::Shared,
            "split" => CpuPolicy::Split,
            _ => return Err(format!("'{v}' is not shared or split")),
        };
        Ok(())
    }),
    spec!("open_per_io", [], Bool, "ours: open (hipfile: and register) the file before each I/O, deregister and close after it", |o, v| {
        o.open_per_io = b(v)?;
        Ok(())
    }),
    spec!("buf_register", [], Bool, "ours: hipFileBufRegister the job's buffer (default 1)", |o, v| {
        o.buf_register = b(v)?;
        Ok(())
    }),
    spec!("main_tick", [], Time, "ours: the main thread wakes every T while jobs run, as fio's status loop (default 10ms; 0: never)", |o, v| {
        o.main_tick = parse_time(v)?;
        Ok(())
    }),
];

/// The table entry for `key` (by name or alias; '-' and '_' are the same).
pub fn find(key: &str) -> Option<&'static Spec> {
    let k = key.replace('-', "_");
    SPECS
        .iter()
        .find(|s| s.name == k || s.aliases.contains(&k.as_str()))
}

/// Apply `key[=value]` to `o`. A bare key is `=1` for booleans and the log
/// options (fio's flags); anything else needs a value.
pub fn apply(o: &mut JobOptions, key: &str, value: Option<&str>) -> Result<(), String> {
    let spec = find(key).ok_or_else(|| format!("unknown option '{key}'"))?;
    let v = match value {
        Some(v) => v,
        None if spec.kind == Kind::Bool => "1",
        None if spec.name.starts_with("write_") => "",
        None => return Err(format!("option '{key}' needs a value ({key}=...)")),
    };
    if v.trim_start().starts_with('(') {
        return Err(format!(
            "{key}={v}: arithmetic expressions are not supported"
        ));
    }
    (spec.set)(o, v).map_err(|e| format!("{key}: {e}"))
}

/// `--cmdhelp`: every option with its kind and help, or one option's.
pub fn cmdhelp(which: Option<&str>) -> Result<String, String> {
    let line = |s: &Spec| {
        let names = std::iter::once(s.name)
            .chain(s.aliases.iter().copied())
            .collect::<Vec<_>>()
            .join(", ");
        format!("{names:<36} ({}) {}\n", s.kind.name(), s.help)
    };
    match which {
        Some(k) if k != "all" => find(k)
            .map(line)
            .ok_or_else(|| format!("unknown option '{k}'")),
        _ => Ok(SPECS.iter().map(line).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(kv: &[(&str, Option<&str>)]) -> Result<JobOptions, String> {
        let mut o = JobOptions::default();
        for (k, v) in kv {
            apply(&mut o, k, *v)?;
        }
        Ok(o)
    }

    #[test]
    fn every_option_name_and_alias_is_unique() {
        let mut seen = std::collections::HashSet::new();
        for s in SPECS {
            for n in std::iter::once(s.name).chain(s.aliases.iter().copied()) {
                assert!(seen.insert(n), "{n} appears twice");
            }
        }
    }

    #[test]
    fn defaults_are_fios() {
        let o = JobOptions::default();
        assert_eq!(o.bs, [4096, 4096]);
        assert_eq!(o.rw, Workload::Read);
        assert_eq!(o.iodepth, 1);
        assert_eq!(o.numjobs, 1);
        assert!(o.invalidate && o.randrepeat && o.clat_percentiles);
        assert_eq!(o.percentile_list.len(), 17);
        assert_eq!(o.file_service, FileService::RoundRobin);
        assert_eq!(o.filename_format, "$jobname.$jobnum.$filenum");
    }

    #[test]
    fn aliases_and_dashes_reach_the_same_option() {
        let o = opts(&[("blocksize", Some("64k")), ("readwrite", Some("randread"))]).unwrap();
        assert_eq!(o.bs, [65536, 65536]);
        assert_eq!(o.rw, Workload::RandRead);
        let o = opts(&[("nr-files", Some("3")), ("io_limit", Some("1m"))]).unwrap();
        assert_eq!(o.nrfiles, 3);
        assert_eq!(o.io_size, Some(1 << 20));
    }

    #[test]
    fn bs_takes_separate_read_and_write_sizes() {
        let o = opts(&[("bs", Some("4k,1m"))]).unwrap();
        assert_eq!(o.bs, [4096, 1 << 20]);
        let o = opts(&[("bs", Some(",8k"))]).unwrap();
        assert_eq!(o.bs, [4096, 8192]);
        assert!(opts(&[("bs", Some("0"))]).is_err());
    }

    #[test]
    fn bare_booleans_are_flags_and_other_options_need_values() {
        let o = opts(&[("time_based", None), ("runtime", Some("1"))]).unwrap();
        assert!(o.time_based);
        assert!(opts(&[("size", None)])
            .unwrap_err()
            .contains("needs a value"));
        let o = opts(&[("name", Some("j")), ("write_lat_log", None)]).unwrap();
        assert_eq!(o.write_lat_log.as_deref(), Some("j"));
    }

    #[test]
    fn an_empty_directory_keeps_the_one_given_before() {
        let o = opts(&[("directory", Some("/data")), ("directory", Some(""))]).unwrap();
        assert_eq!(o.directories, ["/data"]);
    }

    #[test]
    fn filenames_split_on_unescaped_colons() {
        let o = opts(&[("filename", Some("/a:/b\\:c:/d"))]).unwrap();
        assert_eq!(o.filenames, ["/a", "/b:c", "/d"]);
    }

    #[test]
    fn engine_names_map_onto_our_engines() {
        let e = |kv: &[(&str, Option<&str>)]| opts(kv).unwrap().engine().unwrap();
        assert_eq!(e(&[("ioengine", Some("psync"))]).engine, Engine::Posix);
        assert_eq!(
            e(&[("ioengine", Some("pvsync2"))]).family,
            EngineFamily::Fio
        );
        assert_eq!(e(&[("ioengine", Some("io_uring"))]).engine, Engine::Raw);
        assert_eq!(e(&[("ioengine", Some("libaio"))]).engine, Engine::Raw);
        let cu = e(&[("ioengine", Some("libcufile"))]);
        assert_eq!(
            (cu.engine, cu.family),
            (Engine::HipfileSync, EngineFamily::FioGpu)
        );
        let cp = e(&[("ioengine", Some("libcufile")), ("cuda_io", Some("posix"))]);
        assert_eq!(cp.engine, Engine::Posix);
        let rp = e(&[("ioengine", Some("libhipfile")), ("rocm_io", Some("posix"))]);
        assert_eq!(rp.engine, Engine::Posix);
        assert!(opts(&[("ioengine", Some("mmap"))]).is_err());
        assert!(
            opts(&[("ioengine", Some("psync")), ("cuda_io", Some("posix"))])
                .unwrap()
                .engine()
                .is_err()
        );
        assert!(opts(&[("rocm_io", Some("cufile"))]).is_err());
    }

    #[test]
    fn direct_defaults_follow_the_engine_name() {
        let d = |eng: &str| {
            let o = opts(&[("ioengine", Some(eng))]).unwrap();
            o.direct_for(o.engine().unwrap())
        };
        assert!(d("raw"));
        assert!(!d("io_uring"), "fio's io_uring defaults to buffered I/O");
        assert!(!d("hipfile-sync"));
    }

    #[test]
    fn mem_takes_fios_names() {
        let m = |v: &str| opts(&[("mem", Some(v))]).unwrap().mem.unwrap();
        assert_eq!(m("cudamalloc"), MemKind::Device);
        assert_eq!(m("malloc"), MemKind::HostMalloc);
        assert_eq!(m("mmap"), MemKind::Host);
        assert_eq!(m("mmaphuge"), MemKind::HostHuge);
        assert_eq!(m("mmaphuge:/hugepages/f"), MemKind::HostHuge);
        assert_eq!(
            opts(&[("iomem", Some("shm"))]).unwrap().mem,
            Some(MemKind::Host)
        );
        assert!(opts(&[("mem", Some("gpu"))]).is_err());
    }

    #[test]
    fn gpu_dev_ids_go_round_robin_over_clones() {
        let o = opts(&[("gpu_dev_ids", Some("0:2:3"))]).unwrap();
        assert_eq!(
            (o.gpu_for(0), o.gpu_for(1), o.gpu_for(2), o.gpu_for(3)),
            (0, 2, 3, 0)
        );
        assert!(opts(&[("gpu_dev_ids", Some("0:x"))]).is_err());
    }

    #[test]
    fn percentile_lists_sort_and_are_bounded() {
        let o = opts(&[("percentile_list", Some("99.9:50:99"))]).unwrap();
        assert_eq!(o.percentile_list, [50.0, 99.0, 99.9]);
        let long = vec!["1"; 21].join(":");
        assert!(opts(&[("percentile_list", Some(long.as_str()))]).is_err());
        assert!(opts(&[("percentile_list", Some("0"))]).is_err());
    }

    #[test]
    fn gtod_reduce_disables_every_clock() {
        let o = opts(&[("gtod_reduce", Some("1"))]).unwrap();
        assert!(o.disable_lat && o.disable_clat && o.disable_slat && o.disable_bw);
    }

    #[test]
    fn file_service_type_takes_a_count() {
        let o = opts(&[("file_service_type", Some("random:8"))]).unwrap();
        assert_eq!(
            (o.file_service, o.file_service_nr),
            (FileService::Random, 8)
        );
        assert!(opts(&[("file_service_type", Some("zipf"))]).is_err());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-2,5,1").unwrap(), [0, 1, 2, 5]);
        assert!(parse_cpu_list("3-1").is_err());
    }

    #[test]
    fn size_takes_a_percentage() {
        let o = opts(&[("size", Some("50%"))]).unwrap();
        assert_eq!((o.size, o.size_percent), (None, Some(50)));
        assert!(opts(&[("size", Some("0"))]).is_err());
        assert!(opts(&[("size", Some("101%"))]).is_err());
    }

    #[test]
    fn errors_are_one_line_and_name_the_option() {
        let cases: &[(&str, &str)] = &[
            ("frobnicate", "1"),
            ("size", "12q"),
            ("bs", "0"),
            ("rw", "sideways"),
            ("iodepth", "0"),
            ("numjobs", "x"),
            ("rwmixread", "101"),
            ("direct", "2"),
            ("verify", "md5"),
            ("ioengine", "spdk"),
            ("size", "(1+2)"),
        ];
        for (k, v) in cases {
            let e = opts(&[(k, Some(v))]).unwrap_err();
            assert!(e.contains(k), "{k}={v}: '{e}' should name the option");
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn job_checks() {
        assert!(opts(&[("time_based", None)]).unwrap().check().is_err());
        let o = opts(&[("ioengine", Some("copy")), ("verify", Some("1"))]).unwrap();
        assert!(o.check().is_err());
        let o = opts(&[("filename", Some("a")), ("nrfiles", Some("2"))]).unwrap();
        assert!(o.check().is_err());
        let o = opts(&[("pre_read", None), ("direct", Some("1"))]).unwrap();
        assert!(o.check().is_err());
    }

    #[test]
    fn cmdhelp_lists_options() {
        assert!(cmdhelp(None).unwrap().contains("nrfiles, nr_files"));
        assert!(cmdhelp(Some("bs")).unwrap().starts_with("bs, blocksize"));
        assert!(cmdhelp(Some("nope")).is_err());
    }
}
