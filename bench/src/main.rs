//! hipfile-bench: an fio-compatible benchmark for hipfile-rs, and for the
//! limits it works against (raw storage through io_uring, pinned host↔device
//! copies): fio's options and job files, fio's reports (normal, terse, json,
//! json+), fio's per-I/O logs.
//!
//! Exit status: 0 success, 1 an I/O error or a verify mismatch, 2 bad options.

mod cli;
mod diskutil;
mod engines;
mod files;
mod fiojson;
mod job;
mod jobfile;
mod logs;
mod mem;
mod options;
mod pattern;
mod report;
mod stats;
mod status;
mod units;
mod workload;

use cli::{Command, Eta, Invocation};
use fiojson::Extras;
use hipfile_engine::gpu::Gpu;
use hipfile_engine::registry::driver;
use options::{Engine, EngineFamily, JobOptions, MemKind};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const VERSION: &str = "hipfile-bench-0.2.0";

/// Set to use the engine's GPU test double (device memory simulated in host
/// memory, copies on their own threads): exercises the device code paths on a
/// machine without a GPU. Its figures mean nothing.
const TEST_GPU_ENV: &str = "HIPFILE_BENCH_TEST_GPU";

/// Largest buffer one job may ask for (iodepth x bs).
const MAX_JOB_BUFFER: u64 = 64 << 30;

enum Fail {
    /// Bad options or an impossible request: exit 2.
    Usage(String),
    /// The run failed: exit 1.
    Run(String),
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match cli::parse(&args) {
        Ok(Command::Help) => {
            print!("{}", cli::USAGE);
            0
        }
        Ok(Command::Version) => {
            println!("{VERSION}");
            0
        }
        Ok(Command::CmdHelp(which)) => match options::cmdhelp(which.as_deref()) {
            Ok(t) => {
                print!("{t}");
                0
            }
            Err(e) => {
                eprintln!("hipfile-bench: {e}");
                2
            }
        },
        Ok(Command::Run(inv)) => match run(&inv) {
            Ok(()) => 0,
            Err(Fail::Usage(e)) => {
                eprintln!("hipfile-bench: {e}");
                2
            }
            Err(Fail::Run(e)) => {
                eprintln!("hipfile-bench: {e}");
                1
            }
        },
        Err(e) => {
            eprintln!("hipfile-bench: {e} (see --help)");
            2
        }
    };
    std::process::exit(code);
}

/// Notes about choices made and facts found: always on stderr, so the
/// report (stdout or `--output`) is only the report.
fn note(msg: &str) {
    eprintln!("note: {msg}");
}

fn mib(b: u64) -> String {
    units::num2str(b, 4, true, "B")
}

/// The memory a job's buffer lives in.
fn choose_mem(
    o: &JobOptions,
    e: options::EngineChoice,
    gpu: &Arc<dyn Gpu>,
    said: &mut bool,
) -> Result<MemKind, Fail> {
    let has = gpu.has_devices();
    let runtime = gpu.name();
    let need_gpu = |why: &str| {
        Fail::Usage(format!(
            "{why} needs a GPU runtime with devices (found: {runtime})"
        ))
    };
    match e.engine {
        Engine::Raw => {
            if o.mem.is_some_and(|m| m.is_device()) {
                return Err(Fail::Usage(format!(
                    "ioengine={} reads into host memory only; mem=device does not apply",
                    o.ioengine
                )));
            }
            return Ok(o.mem.unwrap_or(MemKind::Host));
        }
        Engine::Copy => {
            if !has {
                return Err(need_gpu("ioengine=copy (host<->device copies)"));
            }
            if o.mem.is_some_and(|m| !m.is_device()) {
                return Err(Fail::Usage(
                    "ioengine=copy copies between pinned host and device memory: mem=host does not apply"
                        .into(),
                ));
            }
            return Ok(MemKind::Device);
        }
        _ => {}
    }
    let chosen = match (o.mem, e.family) {
        (Some(m), _) => m,
        // fio's GPU engines always read into GPU memory.
        (None, EngineFamily::FioGpu) => MemKind::Device,
        // fio's CPU engines read into host memory.
        (None, EngineFamily::Fio) => MemKind::Host,
        (None, EngineFamily::Ours) if has => {
            if !*said {
                note(&format!(
                    "mem=device chosen (GPU runtime {runtime}, {} device(s)); --mem=host for host memory",
                    gpu.device_count()
                ));
                *said = true;
            }
            MemKind::Device
        }
        (None, EngineFamily::Ours) => {
            if !*said {
                note("mem=host chosen: no GPU runtime with devices is present");
                *said = true;
            }
            MemKind::Host
        }
    };
    if chosen.is_device() && !has {
        return Err(need_gpu(&format!("mem=device (ioengine={})", o.ioengine)));
    }
    Ok(chosen)
}

/// One job section resolved, with its clones' plans.
struct Section {
    opts: Arc<JobOptions>,
    def_options: indexmap::IndexMap<String, String>,
    engine: options::EngineChoice,
    groupid: usize,
    wave: usize,
    plans: Vec<job::JobPlan>,
}

fn plan_section(
    def: &cli::JobDef,
    o: JobOptions,
    first_index: usize,
    groupid: usize,
    wave: usize,
    gpu: &Arc<dyn Gpu>,
    said_mem: &mut bool,
) -> Result<Section, Fail> {
    let e = o.engine().map_err(Fail::Usage)?;
    let depth = o.iodepth;
    let name = o.name.clone();
    if e.engine.is_sync() && depth > 1 {
        return Err(Fail::Usage(format!(
            "job '{name}': ioengine={} is synchronous: iodepth={depth} cannot be kept in flight \
             (use numjobs={depth} for {depth} callers, or ioengine=hipfile-batch, hipfile-async or io_uring)",
            o.ioengine
        )));
    }
    let mem = choose_mem(&o, e, gpu, said_mem)?;
    let direct = o.direct_for(e);
    if e.engine == Engine::HipfileAsync
        && gpu.has_devices()
        && o.numjobs * depth > engines::hipfile::MAX_STREAM_OPS
    {
        return Err(Fail::Usage(format!(
            "job '{name}': hipfile-async: numjobs x iodepth = {} exceeds the library's {} stream operations in flight",
            o.numjobs * depth,
            engines::hipfile::MAX_STREAM_OPS
        )));
    }
    if e.engine == Engine::Raw && depth > 32768 {
        return Err(Fail::Usage(format!(
            "job '{name}': iodepth={depth} exceeds io_uring's 32768 entries per ring"
        )));
    }
    let buf = depth * o.max_bs();
    if buf > MAX_JOB_BUFFER {
        return Err(Fail::Usage(format!(
            "job '{name}': iodepth x bs = {} per job is more memory than this tool will allocate ({})",
            mib(buf),
            mib(MAX_JOB_BUFFER)
        )));
    }
    if e.engine == Engine::Copy && (o.open_per_io || !o.buf_register) {
        return Err(Fail::Usage(format!(
            "job '{name}': open_per_io and buf_register apply to file engines, not copy"
        )));
    }
    let ramp_ns = o.ramp_time.map_or(0, |d| d.as_nanos() as u64);
    let deadline_ns = o.runtime.map(|d| d.as_nanos() as u64 + ramp_ns);
    let opts = Arc::new(o);
    let o = &*opts;
    let name = &name;
    let mut plans = Vec::new();
    for clone in 0..o.numjobs {
        let device = o.gpu_for(clone);
        if mem.is_device() && device >= gpu.device_count() {
            return Err(Fail::Usage(format!(
                "job '{name}': GPU {device}: the {} runtime has {} device(s)",
                gpu.name(),
                gpu.device_count()
            )));
        }
        let (files, pass_bytes) = if e.engine == Engine::Copy && o.size.is_some() {
            let size = o.size.unwrap_or(0);
            (
                vec![files::FileSpec {
                    path: String::new(),
                    start: 0,
                    len: size,
                    need: 0,
                }],
                o.io_size.unwrap_or(size),
            )
        } else {
            files::job_files(o, clone).map_err(Fail::Usage)?
        };
        if direct && matches!(e.engine, Engine::Raw | Engine::Posix) {
            let bad =
                o.bs.iter()
                    .map(|&b| ("bs", b))
                    .chain(files.iter().map(|f| ("offset", f.start)))
                    .find(|(_, v)| v % 4096 != 0);
            if let Some((what, v)) = bad {
                return Err(Fail::Usage(format!(
                    "job '{name}': {what} ({v}) is not a multiple of 4096: ioengine={} with O_DIRECT needs aligned I/O (or direct=0)",
                    o.ioengine
                )));
            }
        }
        let seed = match (o.randrepeat, o.randseed) {
            (_, Some(s)) => s ^ clone,
            (true, None) => 0x5eed_0000_0000_0000 ^ ((first_index as u64) << 20) ^ clone,
            (false, None) => {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos() as u64
                    ^ clone
            }
        };
        let nfiles = files.len();
        let shape = workload::Shape {
            regions: files.iter().map(|f| (f.start, f.len)).collect(),
            bs: o.bs,
            read_pct: o.rw.read_percent(o.rwmixread),
            random: o.rw.is_random(),
            norandommap: o.norandommap,
            service: o.file_service,
            per_turn: o.file_service_nr,
            open_limit: o.openfiles.map_or(nfiles, |n| n as usize),
            pass_bytes,
            passes: if o.time_based { None } else { Some(o.loops) },
            seed,
        };
        plans.push(job::JobPlan {
            index: first_index + clone as usize,
            clone,
            opts: opts.clone(),
            engine: e.engine,
            mem,
            device,
            direct,
            depth: depth as usize,
            files,
            shape,
            ramp_ns,
            deadline_ns,
            gpu: gpu.clone(),
        });
    }
    Ok(Section {
        def_options: def.shown_options(),
        opts: opts.clone(),
        engine: e,
        groupid,
        wave,
        plans,
    })
}

fn rusage() -> libc::rusage {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is a live rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru
}

fn tv_ns(t: libc::timeval) -> u64 {
    t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000
}

fn cpu_between(a: &libc::rusage, b: &libc::rusage, wall: Duration) -> report::Cpu {
    let wall_ns = wall.as_nanos().max(1) as f64;
    report::Cpu {
        usr_pct: tv_ns(b.ru_utime).saturating_sub(tv_ns(a.ru_utime)) as f64 * 100.0 / wall_ns,
        sys_pct: tv_ns(b.ru_stime).saturating_sub(tv_ns(a.ru_stime)) as f64 * 100.0 / wall_ns,
        ctx: ((b.ru_nvcsw + b.ru_nivcsw) - (a.ru_nvcsw + a.ru_nivcsw)).max(0) as u64,
        majf: (b.ru_majflt - a.ru_majflt).max(0) as u64,
        minf: (b.ru_minflt - a.ru_minflt).max(0) as u64,
    }
}

/// Where the report goes.
struct Output {
    file: Option<std::fs::File>,
}

impl Output {
    fn write(&mut self, text: &str) -> Result<(), Fail> {
        let r = match &mut self.file {
            Some(f) => f.write_all(text.as_bytes()).and_then(|_| f.flush()),
            None => {
                let mut o = std::io::stdout().lock();
                o.write_all(text.as_bytes()).and_then(|_| o.flush())
            }
        };
        r.map_err(|e| Fail::Run(format!("writing the report: {e}")))
    }
}

/// The page-cache state of each file range before a wave (pre_read or
/// invalidate first, as the jobs ask), as (resident, total) pages per path.
fn prepare_cache(sections: &[&Section]) -> BTreeMap<String, Option<(u64, u64)>> {
    // One range per path: from the lowest start to the highest end any job uses.
    let mut ranges: BTreeMap<String, (u64, u64, bool, bool)> = BTreeMap::new();
    for s in sections {
        if s.engine.engine == Engine::Copy {
            continue;
        }
        for p in &s.plans {
            for f in &p.files {
                let e = ranges.entry(f.path.clone()).or_insert((
                    f.start,
                    f.start + f.len,
                    false,
                    false,
                ));
                e.0 = e.0.min(f.start);
                e.1 = e.1.max(f.start + f.len);
                e.2 |= s.opts.pre_read;
                e.3 |= s.opts.invalidate && !s.opts.pre_read;
            }
        }
    }
    let mut kept_by_tmpfs = 0usize;
    let mut out = BTreeMap::new();
    for (path, (start, end, pre_read, invalidate)) in ranges {
        let len = end - start;
        if pre_read {
            if let Err(e) = pattern::pre_read(&path, start, len) {
                note(&format!("pre_read {path}: {e}"));
            }
        } else if invalidate {
            match pattern::invalidate(&path, start, len) {
                Ok(Some(c)) if c.resident_pages > 0 => kept_by_tmpfs += 1,
                Ok(_) => {}
                Err(e) => note(&format!("invalidate {path}: {e}")),
            }
        }
        let st = pattern::residency(&path, start, len).map(|c| (c.resident_pages, c.total_pages));
        out.insert(path, st);
    }
    if kept_by_tmpfs > 0 {
        note(&format!(
            "invalidate: the kernel kept pages of {kept_by_tmpfs} file(s) in the page cache \
             (tmpfs, or pages in use): reads of those come from memory"
        ));
    }
    out
}

/// Read back what the jobs wrote with verify=1 and check it (not timed).
/// Only the written ranges are dropped from the page cache first, so a
/// read-only run leaves the cache as it found it.
fn read_back(path: &str, ranges: &[(u64, u64)]) -> Result<u64, Fail> {
    let fd = files::open(path, false, false).map_err(Fail::Run)?;
    for &(s, e) in ranges {
        // SAFETY: fd is ours.
        unsafe {
            libc::posix_fadvise(
                fd,
                s as libc::off_t,
                (e - s) as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            )
        };
    }
    let mut buf = vec![0u8; 8 << 20];
    let mut checked = 0u64;
    let mut res = Ok(());
    'all: for &(s, e) in ranges {
        let mut pos = s;
        while pos < e {
            let n = ((e - pos) as usize).min(buf.len());
            match engines::pread_full(fd, buf.as_mut_ptr(), n, pos) {
                Ok(got) if got == n => {}
                Ok(got) => {
                    res = Err(Fail::Run(format!(
                        "verify: {path} ends at {} but bytes were written up to {e}",
                        pos + got as u64
                    )));
                    break 'all;
                }
                Err(err) => {
                    res = Err(Fail::Run(format!("verify read-back of {path}: {err}")));
                    break 'all;
                }
            }
            if let Some((off, got, want)) = pattern::check(&buf[..n], pos) {
                res = Err(Fail::Run(format!(
                    "verify: data mismatch in {path} at offset {off} ({off:#x}) after writing: read {got:#04x}, expected {want:#04x}"
                )));
                break 'all;
            }
            checked += n as u64;
            pos += n as u64;
        }
    }
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    res.map(|_| checked)
}

fn merge_ranges(mut r: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    r.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, e) in r {
        match out.last_mut() {
            Some(l) if s <= l.1 => l.1 = l.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

fn header_lines(sections: &[Section], jobs: usize) -> String {
    let mut out = String::new();
    for s in sections {
        let o = &s.opts;
        let b = |v: u64| units::num2str(v, 4, true, "B");
        out.push_str(&format!(
            "{}: (g={}): rw={}, bs=(R) {}-{}, (W) {}-{}, (T) {}-{}, ioengine={}, iodepth={}\n",
            o.name,
            s.groupid,
            o.rw.name(),
            b(o.bs[0]),
            b(o.bs[0]),
            b(o.bs[1]),
            b(o.bs[1]),
            b(o.bs[1]),
            b(o.bs[1]),
            o.ioengine,
            o.iodepth
        ));
        if o.numjobs > 1 {
            out.push_str("...\n");
        }
    }
    out.push_str(&format!(
        "{VERSION}\nStarting {jobs} thread{}\n",
        if jobs == 1 { "" } else { "s" }
    ));
    out
}

fn job_letter(o: &JobOptions) -> char {
    let c = match o.rw.read_percent(o.rwmixread) {
        100 => 'r',
        0 => 'w',
        _ => 'm',
    };
    if o.rw.is_random() {
        c
    } else {
        c.to_ascii_uppercase()
    }
}

/// Everything the reports need about one finished (or running) job.
struct Finished {
    stats: stats::JobStats,
    runtime_ns: u64,
    verified_bytes: u64,
    fixed_buffers: Option<bool>,
}

struct Context<'a> {
    sections: &'a [Section],
    gpu_name: String,
    global_options: indexmap::IndexMap<String, String>,
    residency: BTreeMap<String, Option<(u64, u64)>>,
    created: BTreeMap<String, u64>,
    /// The library's storage backend, once the driver is open.
    storage_backend: Option<&'static str>,
}

impl Context<'_> {
    fn job_report(
        &self,
        s: &Section,
        p: &job::JobPlan,
        f: &Finished,
        cpu: report::Cpu,
    ) -> report::Unit {
        let o = &s.opts;
        let (mut res, mut tot, mut known) = (0u64, 0u64, true);
        if p.engine != Engine::Copy {
            for file in &p.files {
                match self.residency.get(&file.path).copied().flatten() {
                    Some((r, t)) => {
                        res += r;
                        tot += t;
                    }
                    None => known = false,
                }
            }
        }
        let pct = (known && tot > 0).then(|| 100.0 * res as f64 / tot as f64);
        let given = &o.ioengine;
        report::Unit {
            name: o.name.clone(),
            groupid: s.groupid,
            members: 1,
            group_reporting: o.group_reporting,
            description: o.description.clone(),
            options: s.def_options.clone(),
            stats: f.stats.clone(),
            job_runtime_ns: f.runtime_ns,
            iodepth: o.iodepth,
            pct: report::Percentiles {
                clat: o.clat_percentiles,
                lat: o.lat_percentiles,
                slat: o.slat_percentiles,
                list: o.percentile_list.clone(),
            },
            cpu,
            extras: Extras {
                ioengine: p.engine.name().into(),
                ioengine_as: (given != p.engine.name()).then(|| given.clone()),
                mem: p.mem.name().into(),
                gpu_runtime: self.gpu_name.clone(),
                direct: p.direct,
                iodepth: o.iodepth,
                bs: o.max_bs(),
                bytes_per_pass: p.shape.pass_bytes,
                files: if p.engine == Engine::Copy {
                    0
                } else {
                    p.files.len() as u64
                },
                buf_registered: p.engine.uses_hipfile() && o.buf_register,
                open_per_io: o.open_per_io,
                verify: o.verify,
                verified_bytes: f.verified_bytes,
                created_bytes: p
                    .files
                    .iter()
                    .map(|x| self.created.get(&x.path).copied().unwrap_or(0))
                    .sum(),
                cache_resident_pct: pct,
                cache: if p.engine == Engine::Copy {
                    "none (no file I/O)".into()
                } else if p.direct {
                    "bypassed (O_DIRECT)".into()
                } else {
                    fiojson::cache_word(pct).into()
                },
                fixed_buffers: f.fixed_buffers,
                storage_backend: self
                    .storage_backend
                    .filter(|_| p.engine.uses_hipfile())
                    .map(String::from),
                ..Extras::default()
            },
        }
    }
}

/// All units folded into one `hipfile` summary.
fn total_extras(units: &[report::Unit]) -> Extras {
    let mut t = units.first().map(|u| u.extras.clone()).unwrap_or_default();
    let first = t.clone();
    let same = |f: fn(&Extras) -> &String| units.iter().all(|u| f(&u.extras) == f(&first));
    if !same(|e| &e.ioengine) {
        t.ioengine = "mixed".into();
        t.ioengine_as = None;
    }
    if !same(|e| &e.mem) {
        t.mem = "mixed".into();
    }
    t.files = units.iter().map(|u| u.extras.files).sum();
    t.bytes_per_pass = units.iter().map(|u| u.extras.bytes_per_pass).sum();
    t.verified_bytes = units.iter().map(|u| u.extras.verified_bytes).sum();
    t.created_bytes = units.iter().map(|u| u.extras.created_bytes).sum();
    t.read_gbps = units.iter().map(|u| u.extras.read_gbps).sum();
    t.write_gbps = units.iter().map(|u| u.extras.write_gbps).sum();
    t.gbps = t.read_gbps + t.write_gbps;
    let pcts: Vec<f64> = units
        .iter()
        .filter_map(|u| u.extras.cache_resident_pct)
        .collect();
    t.cache_resident_pct = (pcts.len() == units.len() && !pcts.is_empty())
        .then(|| pcts.iter().sum::<f64>() / pcts.len() as f64);
    if !same(|e| &e.cache) {
        t.cache = fiojson::cache_word(t.cache_resident_pct).into();
    }
    t.storage_backend = units.iter().find_map(|u| u.extras.storage_backend.clone());
    t
}

struct Reporter<'a> {
    inv: &'a Invocation,
    out: Output,
}

impl Reporter<'_> {
    fn emit(
        &mut self,
        jobs: &[report::Unit],
        disks: &[diskutil::Usage],
        global_options: &indexmap::IndexMap<String, String>,
        elapsed_s: u64,
    ) -> Result<(), Fail> {
        let f = self.inv.global.formats;
        let units = report::units(jobs);
        let groups = report::group_runs(&units);
        let inp = report::Inputs {
            units: &units,
            groups: &groups,
            disks,
            global_options,
            version: VERSION,
            json_plus: f.json_plus,
            elapsed_s,
            total: total_extras(&units),
        };
        // fio's order when formats are combined: terse, json, normal.
        if f.terse {
            self.out
                .write(&report::terse(&inp, self.inv.global.terse_version))?;
        }
        if f.json {
            self.out
                .write(&fiojson::to_string_pretty(&report::json(&inp)))?;
        }
        if f.normal {
            self.out.write(&report::normal(&inp))?;
        }
        Ok(())
    }
}

fn run(inv: &Invocation) -> Result<(), Fail> {
    let mut resolved = Vec::new();
    for d in &inv.jobs {
        let o = d.resolve().map_err(Fail::Usage)?;
        if inv.global.readonly && o.rw.has_writes() {
            return Err(Fail::Usage(format!(
                "job '{}': rw={} writes, and --readonly forbids writes",
                o.name,
                o.rw.name()
            )));
        }
        resolved.push(o);
    }
    if inv.global.showcmd {
        println!("{}", cli::showcmd(inv));
        return Ok(());
    }
    if std::env::var_os(TEST_GPU_ENV).is_some_and(|v| v != "0" && !v.is_empty()) {
        driver().set_gpu_override(Some(Arc::new(hipfile_engine::gpu::testgpu::TestGpu::new(
            1,
        ))));
        note(&format!(
            "{TEST_GPU_ENV}: using the GPU test double (simulated device memory): figures are meaningless"
        ));
    }
    let gpu = driver().gpu();

    // Plans: groups and waves (a stonewall waits for everything before it).
    let mut sections: Vec<Section> = Vec::new();
    let mut said_mem = false;
    let (mut groupid, mut wave, mut index) = (0usize, 0usize, 0usize);
    for (n, (def, o)) in inv.jobs.iter().zip(resolved).enumerate() {
        if n > 0 && (o.stonewall || o.new_group) {
            groupid += 1;
        }
        if n > 0 && o.stonewall {
            wave += 1;
        }
        let numjobs = o.numjobs as usize;
        sections.push(plan_section(
            def,
            o,
            index,
            groupid,
            wave,
            &gpu,
            &mut said_mem,
        )?);
        index += numjobs;
    }
    if inv.global.parse_only {
        return Ok(());
    }
    let total_jobs = index;
    files::raise_open_file_limit();

    // Lay out the files every job needs, all at once.
    let mut need: BTreeMap<String, u64> = BTreeMap::new();
    let mut allow_create = true;
    for s in &sections {
        if s.engine.engine == Engine::Copy {
            continue;
        }
        allow_create &= s.opts.allow_file_create;
        for p in &s.plans {
            for f in &p.files {
                let e = need.entry(f.path.clone()).or_insert(0);
                *e = (*e).max(f.need);
            }
        }
    }
    let existed: BTreeMap<String, u64> = need
        .keys()
        .map(|p| (p.clone(), pattern::file_size(p).ok().flatten().unwrap_or(0)))
        .collect();
    let t = Instant::now();
    let layout = files::lay_out(&need, allow_create).map_err(Fail::Run)?;
    if layout.bytes > 0 {
        note(&format!(
            "laid out {} file(s) ({} created, {} extended): {} of the data pattern in {:.1} s",
            layout.created + layout.extended,
            layout.created,
            layout.extended,
            mib(layout.bytes),
            t.elapsed().as_secs_f64()
        ));
    }
    let created: BTreeMap<String, u64> = need
        .iter()
        .map(|(p, &n)| (p.clone(), n.saturating_sub(existed[p])))
        .filter(|(_, n)| *n > 0)
        .collect();
    if sections.iter().any(|s| s.opts.verify) && layout.bytes == 0 {
        note("verify assumes the files hold hipfile-bench's pattern (files it created do)");
    }
    if sections
        .iter()
        .any(|s| s.opts.rw.has_writes() && !s.opts.verify && s.engine.engine != Engine::Copy)
    {
        note("writes with verify=0 do not keep the files' pattern; rewrite with verify=1 before verifying reads");
    }

    let out_file = match &inv.global.output {
        Some(p) => Some(
            std::fs::File::create(p)
                .map_err(|e| Fail::Run(format!("--output {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let mut rep = Reporter {
        inv,
        out: Output { file: out_file },
    };
    if inv.global.formats.normal {
        rep.out.write(&header_lines(&sections, total_jobs))?;
    }

    let uses_hipfile = sections.iter().any(|s| s.engine.engine.uses_hipfile());
    let mut storage_backend = None;
    if uses_hipfile {
        engines::hipfile::driver_open().map_err(Fail::Run)?;
        if let Some(e) = hipfile_engine::registry::driver().engine() {
            // The driver-open line's words: the backend and why.
            let c = hipfile_engine::storage::choice(e.config().io_backend);
            note(&format!("storage backend: {}", c.why));
            storage_backend = Some(c.backend.name());
        }
    }
    let mut ctx = Context {
        sections: &sections,
        gpu_name: gpu.name().to_string(),
        global_options: cli::shown(&inv.global_options),
        residency: BTreeMap::new(),
        created,
        storage_backend,
    };
    let result = run_waves(inv, &mut ctx, &mut rep);
    if uses_hipfile {
        if let Err(e) = engines::hipfile::driver_close() {
            note(&e);
        }
    }
    let (reports, disks, elapsed_s, outcomes) = result?;

    // Checks and files after the run.
    let mut written: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for o in outcomes.iter() {
        for (path, r) in &o.written {
            written.entry(path.clone()).or_default().extend(r);
        }
    }
    let mut back = 0u64;
    for (path, r) in written {
        back += read_back(&path, &merge_ranges(r))?;
    }
    if sections.iter().any(|s| s.opts.verify) {
        let read: u64 = reports
            .iter()
            .filter(|r| r.extras.verify)
            .map(|r| r.stats.dirs[0].bytes)
            .sum();
        let paused = outcomes.iter().map(|o| o.verify_ns).max().unwrap_or(0);
        note(&format!(
            "verify: OK ({} read checked during the run, {} written and read back; {:.3} s of checking not timed)",
            mib(read),
            mib(back),
            paused as f64 / 1e9
        ));
    }
    if outcomes.iter().any(|o| o.fixed_buffers == Some(false)) {
        note("io_uring buffer registration refused: plain READ/WRITE used");
    }
    write_logs(&sections, &outcomes)?;
    for s in &sections {
        if !s.opts.unlink || s.engine.engine == Engine::Copy {
            continue;
        }
        for p in &s.plans {
            for f in &p.files {
                if std::fs::metadata(&f.path).is_ok_and(|m| m.is_file()) {
                    let _ = std::fs::remove_file(&f.path);
                }
            }
        }
    }
    rep.emit(&reports, &disks, &ctx.global_options, elapsed_s)
}

fn write_logs(sections: &[Section], outcomes: &[job::JobOutcome]) -> Result<(), Fail> {
    let plans: Vec<&job::JobPlan> = sections.iter().flat_map(|s| s.plans.iter()).collect();
    // A run replaces earlier logs of the same names.
    for (p, o) in plans.iter().zip(outcomes) {
        let num = p.opts.per_job_logs.then_some(p.index + 1);
        for l in &o.logs {
            let _ = std::fs::remove_file(l.file_name(num));
        }
    }
    for (p, o) in plans.iter().zip(outcomes) {
        let num = p.opts.per_job_logs.then_some(p.index + 1);
        logs::write(&o.logs, num, p.opts.log_offset).map_err(Fail::Run)?;
    }
    Ok(())
}

type WaveResults = (
    Vec<report::Unit>,
    Vec<diskutil::Usage>,
    u64,
    Vec<job::JobOutcome>,
);

fn run_waves(inv: &Invocation, ctx: &mut Context, rep: &mut Reporter) -> Result<WaveResults, Fail> {
    let sections = ctx.sections;
    let waves = sections.iter().map(|s| s.wave).max().unwrap_or(0) + 1;
    let t_run = Instant::now();
    let mut reports = Vec::new();
    let mut outcomes = Vec::new();
    let mut disk_totals: Vec<diskutil::Usage> = Vec::new();
    for w in 0..waves {
        let wave: Vec<&Section> = sections.iter().filter(|s| s.wave == w).collect();
        ctx.residency.extend(prepare_cache(&wave));
        let plans: Vec<(&Section, &job::JobPlan)> = wave
            .iter()
            .flat_map(|s| s.plans.iter().map(move |p| (*s, p)))
            .collect();
        let disks = diskutil::watch(
            plans
                .iter()
                .flat_map(|(_, p)| p.files.iter().map(|f| f.path.as_str()))
                .filter(|p| !p.is_empty()),
        );
        let n = plans.len();
        let start = Barrier::new(n + 1);
        // Every job finishes its I/O before any tears down: freeing device
        // memory (cuMemFree synchronises the device) while another job's
        // stream operations wait in the library can deadlock the CUDA context.
        let finish = Barrier::new(n);
        let lives: Vec<job::Live> = (0..n).map(|_| job::Live::default()).collect();
        let tick = wave
            .first()
            .map_or(Duration::from_millis(10), |s| s.opts.main_tick);
        let eta_on = match inv.global.eta {
            Eta::Always => true,
            Eta::Never => false,
            // SAFETY: isatty only inspects a descriptor.
            Eta::Auto => (unsafe { libc::isatty(2) }) == 1,
        };
        let mut status_err = Ok(());
        let (results, ru0, ru1, wall) = std::thread::scope(|s| {
            let handles: Vec<_> = plans
                .iter()
                .zip(&lives)
                .map(|((_, p), live)| {
                    let (start, finish) = (&start, &finish);
                    std::thread::Builder::new()
                        .name(format!("job{}", p.index))
                        .spawn_scoped(s, move || job::run(p, start, finish, live))
                        .expect("spawning a job thread")
                })
                .collect();
            start.wait();
            let ru0 = rusage();
            let t0 = Instant::now();
            // While the jobs run the main thread wakes every `main_tick`, as
            // fio's status loop does (it sleeps 10 ms at a time). On a VM
            // whose idle vCPUs are slow to wake, a waker beside a reader is
            // not neutral, so the bench keeps fio's process structure.
            let watching = eta_on || inv.global.status_interval.is_some();
            let wake = if tick.is_zero() && watching {
                Duration::from_millis(10)
            } else {
                tick
            };
            if !wake.is_zero() {
                let mut eta = status::Eta::new();
                let mut next_eta = t0 + inv.global.eta_interval;
                let mut next_newline = inv.global.eta_newline.map(|d| t0 + d);
                let mut next_status = inv.global.status_interval.map(|d| t0 + d);
                let mut last = (t0, [0u64; 2]);
                while !handles.iter().all(|h| h.is_finished()) {
                    std::thread::sleep(wake);
                    let now = Instant::now();
                    if eta_on && now >= next_eta && now.duration_since(t0) >= Duration::from_secs(1)
                    {
                        next_eta = now + inv.global.eta_interval;
                        if next_newline.is_some_and(|t| now >= t) {
                            eta.newline_next();
                            next_newline = inv.global.eta_newline.map(|d| now + d);
                        }
                        let p = progress(&plans, &lives, t0, &mut last, &handles);
                        eta.show(&p);
                    }
                    if next_status.is_some_and(|t| now >= t) {
                        next_status = inv.global.status_interval.map(|d| now + d);
                        eta.clear();
                        let snaps: Vec<Option<stats::JobStats>> = lives
                            .iter()
                            .map(|l| l.snapshot(Duration::from_secs(1)))
                            .collect();
                        let cpu = cpu_between(&ru0, &rusage(), t0.elapsed());
                        let jobs: Vec<report::Unit> = plans
                            .iter()
                            .zip(snaps)
                            .map(|((s, p), st)| {
                                let st = st.unwrap_or_default();
                                let run = st.dirs.iter().map(|d| d.runtime_ns).max().unwrap_or(0);
                                let f = Finished {
                                    stats: st,
                                    runtime_ns: run,
                                    verified_bytes: 0,
                                    fixed_buffers: None,
                                };
                                ctx.job_report(s, p, &f, cpu)
                            })
                            .collect();
                        let mut live_jobs = reports.clone();
                        live_jobs.extend(jobs);
                        if let Err(e) = rep.emit(
                            &live_jobs,
                            &[],
                            &ctx.global_options,
                            t_run.elapsed().as_secs(),
                        ) {
                            status_err = Err(e);
                        }
                    }
                }
                eta.clear();
            }
            let results: Vec<Result<job::JobOutcome, job::JobError>> = handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(job::JobError::Io("job thread panicked".into())))
                })
                .collect();
            let wall = t0.elapsed();
            (results, ru0, rusage(), wall)
        });
        status_err?;
        let cpu = cpu_between(&ru0, &ru1, wall);
        let mut first_err: Option<String> = None;
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(out) => {
                    let (s, p) = plans[i];
                    let f = Finished {
                        stats: out.stats.clone(),
                        runtime_ns: out.runtime_ns,
                        verified_bytes: if s.opts.verify {
                            out.stats.dirs[0].bytes
                        } else {
                            0
                        },
                        fixed_buffers: out.fixed_buffers,
                    };
                    reports.push(ctx.job_report(s, p, &f, cpu));
                    outcomes.push(out);
                }
                Err(e) => {
                    let msg = format!("job '{}': {e}", plans[i].1.opts.name);
                    if first_err.is_none() {
                        first_err = Some(msg);
                    } else {
                        eprintln!("hipfile-bench: {msg}");
                    }
                }
            }
        }
        if let Some(e) = first_err {
            return Err(Fail::Run(e));
        }
        let wall_ms = wall.as_millis() as u64;
        for d in disks.iter().flat_map(|d| d.usage(wall_ms)) {
            match disk_totals.iter_mut().find(|t| t.name == d.name) {
                Some(t) => {
                    t.figures.add(&d.figures);
                    if let (Some(a), Some(b)) = (t.aggregate.as_mut(), d.aggregate) {
                        a.add(&b);
                    }
                }
                None => disk_totals.push(d),
            }
        }
        if reports.iter().any(|r| r.stats.total_ios() == 0)
            && plans.iter().any(|(_, p)| p.ramp_ns > 0)
        {
            note("a job finished every I/O within ramp_time: nothing was measured for it");
        }
    }
    Ok((
        reports,
        disk_totals,
        t_run.elapsed().as_secs().max(1),
        outcomes,
    ))
}

/// The status line's figures now.
fn progress(
    plans: &[(&Section, &job::JobPlan)],
    lives: &[job::Live],
    t0: Instant,
    last: &mut (Instant, [u64; 2]),
    handles: &[std::thread::ScopedJoinHandle<'_, Result<job::JobOutcome, job::JobError>>],
) -> status::Progress {
    use std::sync::atomic::Ordering;
    let now = Instant::now();
    let bytes = [
        lives
            .iter()
            .map(|l| l.read_bytes.load(Ordering::Relaxed))
            .sum::<u64>(),
        lives
            .iter()
            .map(|l| l.write_bytes.load(Ordering::Relaxed))
            .sum::<u64>(),
    ];
    let dt = now.duration_since(last.0).as_secs_f64().max(1e-9);
    let rate = [
        (bytes[0] - last.1[0]) as f64 / dt,
        (bytes[1] - last.1[1]) as f64 / dt,
    ];
    *last = (now, bytes);
    let elapsed = now.duration_since(t0).as_secs_f64();
    // Done share: by time for time-limited jobs, else by bytes.
    let mut fracs = Vec::new();
    for (_, p) in plans {
        let f = match (p.deadline_ns, p.shape.passes) {
            (Some(d), _) => (elapsed * 1e9 / d as f64).min(1.0),
            (None, Some(n)) => {
                let planned = p.shape.pass_bytes * n;
                if planned == 0 {
                    1.0
                } else {
                    (bytes[0] + bytes[1]) as f64 / (planned as f64 * plans.len() as f64)
                }
            }
            _ => 0.0,
        };
        fracs.push(f.min(1.0));
    }
    let frac = fracs.iter().sum::<f64>() / fracs.len().max(1) as f64;
    let eta_s = if frac > 0.0 {
        (elapsed / frac - elapsed).max(0.0) as u64
    } else {
        0
    };
    let states: String = plans
        .iter()
        .zip(handles)
        .map(|((s, _), h)| {
            if h.is_finished() {
                '_'
            } else {
                job_letter(&s.opts)
            }
        })
        .collect();
    let bs = plans.first().map_or([1, 1], |(s, _)| s.opts.bs);
    status::Progress {
        running: handles.iter().filter(|h| !h.is_finished()).count(),
        files: plans.iter().map(|(_, p)| p.files.len()).sum(),
        states,
        done_frac: frac,
        rate,
        iops: [rate[0] / bs[0].max(1) as f64, rate[1] / bs[1].max(1) as f64],
        eta_s,
    }
}
