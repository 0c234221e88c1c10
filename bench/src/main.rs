//! hipfile-bench: an fio-compatible benchmark for hipfile-rs, and for the
//! limits it works against (raw storage through io_uring, pinned host↔device
//! copies), with fio's option names, normal output and JSON structure.
//!
//! Exit status: 0 success, 1 an I/O error or a verify mismatch, 2 bad options.

mod engines;
mod job;
mod json;
mod mem;
mod opts;
mod pattern;
mod report;
mod stats;

use hipfile_engine::gpu::Gpu;
use hipfile_engine::registry::driver;
use opts::{Command, IoEngine, MemChoice, Options, OutputFormat};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const VERSION: &str = "hipfile-bench-0.2.0";

/// Set to use the engine's GPU test double (device memory simulated in host
/// memory, copies on their own threads): exercises the device code paths on a
/// machine without a GPU. Its figures mean nothing.
const TEST_GPU_ENV: &str = "HIPFILE_BENCH_TEST_GPU";

enum Fail {
    /// Bad options or an impossible request: exit 2.
    Usage(String),
    /// The run failed: exit 1.
    Run(String),
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match opts::parse(&args) {
        Ok(Command::Help) => {
            print!("{}", opts::USAGE);
            0
        }
        Ok(Command::Version) => {
            println!("{VERSION}");
            0
        }
        Ok(Command::Run(o)) => match run(&o) {
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

/// Notes about choices made and facts found: to stdout beside a normal report,
/// to stderr when stdout carries JSON.
struct Notes {
    json: bool,
}

impl Notes {
    fn say(&self, msg: &str) {
        if self.json {
            eprintln!("note: {msg}");
        } else {
            println!("note: {msg}");
        }
    }
}

fn mib(b: u64) -> String {
    report::human(b as f64, 1024.0) + "B"
}

/// Memory kind for the run (the brief's rules: device when a GPU is present).
fn choose_mem(o: &Options, gpu: &Arc<dyn Gpu>, notes: &Notes) -> Result<MemChoice, Fail> {
    let has = gpu.has_devices();
    let runtime = gpu.name();
    match o.ioengine {
        IoEngine::Raw => {
            if o.mem == Some(MemChoice::Device) {
                notes.say("ioengine=raw never involves the GPU: using host memory");
            }
            Ok(MemChoice::Host)
        }
        IoEngine::Copy => {
            if !has {
                return Err(Fail::Usage(format!(
                    "ioengine=copy measures host<->device copies and needs a GPU runtime with devices (found: {runtime})"
                )));
            }
            if o.mem == Some(MemChoice::Host) {
                return Err(Fail::Usage(
                    "ioengine=copy copies between pinned host and device memory: --mem=host does not apply".into(),
                ));
            }
            Ok(MemChoice::Device)
        }
        _ => match o.mem {
            Some(MemChoice::Device) if !has => Err(Fail::Usage(format!(
                "--mem=device: no GPU runtime with devices is present (GPU runtime: {runtime})"
            ))),
            Some(m) => Ok(m),
            None if has => {
                notes.say(&format!(
                    "mem=device chosen (GPU runtime {runtime}, {} device(s)); --mem=host for host memory",
                    gpu.device_count()
                ));
                Ok(MemChoice::Device)
            }
            None => {
                notes.say("mem=host chosen: no GPU runtime with devices is present");
                Ok(MemChoice::Host)
            }
        },
    }
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

fn open_file(path: &str, writes: bool, direct: bool) -> Result<i32, Fail> {
    let c = std::ffi::CString::new(path)
        .map_err(|_| Fail::Usage("--filename contains a NUL byte".into()))?;
    let mut flags = if writes { libc::O_RDWR } else { libc::O_RDONLY } | libc::O_CLOEXEC;
    if direct {
        flags |= libc::O_DIRECT;
    }
    // SAFETY: NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        let hint = if direct && e.raw_os_error() == Some(libc::EINVAL) {
            " (the filesystem refuses O_DIRECT; try --direct=0)"
        } else {
            ""
        };
        return Err(Fail::Run(format!("open {path}: {e}{hint}")));
    }
    Ok(fd)
}

/// Read back what the jobs wrote and check it against the pattern (not timed).
fn read_back(path: &str, ranges: &[(u64, u64)]) -> Result<u64, Fail> {
    let fd = open_file(path, false, false)?;
    // Drop what the writes left in the page cache, so the check reads storage where it can.
    // SAFETY: fd is ours.
    unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
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
                        "verify: the file ends at {} but {} bytes were written up to {e}",
                        pos + got as u64,
                        e - pos
                    )));
                    break 'all;
                }
                Err(err) => {
                    res = Err(Fail::Run(format!("verify read-back: {err}")));
                    break 'all;
                }
            }
            if let Some((off, got, want)) = pattern::check(&buf[..n], pos) {
                res = Err(Fail::Run(format!(
                    "verify: data mismatch at file offset {off} ({off:#x}) after writing: read {got:#04x}, expected {want:#04x}"
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

/// The `\r` progress line on stderr (only while stdout is a terminal).
fn progress_loop(
    stop: &AtomicBool,
    progress: &[job::Progress],
    planned_bytes: Option<u64>,
    planned_ns: Option<u64>,
) {
    let t0 = Instant::now();
    let mut last = (0u64, 0u64);
    let mut last_t = t0;
    let mut printed = false;
    let mut next = t0 + Duration::from_millis(500);
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(50));
        let now = Instant::now();
        if now < next {
            continue;
        }
        next = now + Duration::from_millis(500);
        let r: u64 = progress
            .iter()
            .map(|p| p.read_bytes.load(Ordering::Relaxed))
            .sum();
        let w: u64 = progress
            .iter()
            .map(|p| p.write_bytes.load(Ordering::Relaxed))
            .sum();
        let dt = now.duration_since(last_t).as_secs_f64().max(1e-9);
        let (rbw, wbw) = ((r - last.0) as f64 / dt, (w - last.1) as f64 / dt);
        last = (r, w);
        last_t = now;
        if now.duration_since(t0) < Duration::from_secs(1) {
            continue; // runs shorter than a second get no progress line
        }
        let elapsed = now.duration_since(t0).as_secs_f64();
        let frac = match (planned_ns, planned_bytes) {
            (Some(ns), _) => (elapsed * 1e9 / ns as f64).min(1.0),
            (None, Some(b)) if b > 0 => ((r + w) as f64 / b as f64).min(1.0),
            _ => 0.0,
        };
        let eta = if frac > 0.0 {
            elapsed / frac - elapsed
        } else {
            0.0
        };
        eprint!(
            "\rJobs: {}: [{:.1}% done] [r={}B/s, w={}B/s] [eta {:02}m:{:02}s]   ",
            progress.len(),
            frac * 100.0,
            report::human(rbw, 1024.0),
            report::human(wbw, 1024.0),
            (eta as u64) / 60,
            (eta as u64) % 60
        );
        let _ = std::io::stderr().flush();
        printed = true;
    }
    if printed {
        eprint!("\r{:78}\r", "");
        let _ = std::io::stderr().flush();
    }
}

fn run(o: &Options) -> Result<(), Fail> {
    let notes = Notes {
        json: o.output_format == OutputFormat::Json,
    };
    if std::env::var_os(TEST_GPU_ENV).is_some_and(|v| v != "0" && !v.is_empty()) {
        driver().set_gpu_override(Some(Arc::new(hipfile_engine::gpu::testgpu::TestGpu::new(
            1,
        ))));
        notes.say(&format!(
            "{TEST_GPU_ENV}: using the GPU test double (simulated device memory): figures are meaningless"
        ));
    }
    let gpu = driver().gpu();
    let mem = choose_mem(o, &gpu, &notes)?;
    if mem == MemChoice::Device && o.gpu >= gpu.device_count() {
        return Err(Fail::Usage(format!(
            "--gpu={}: the {} runtime has {} device(s)",
            o.gpu,
            gpu.name(),
            gpu.device_count()
        )));
    }
    let direct = o.direct();
    let has_writes = o.rw.has_writes();

    // Size: as given, else what the file holds from the offset on.
    let fsize = pattern::file_size(&o.filename)
        .map_err(|e| Fail::Run(format!("stat {}: {e}", o.filename)))?;
    let size = match (o.size, fsize) {
        (Some(s), _) => s,
        (None, Some(f)) if f > o.offset => f - o.offset,
        (None, _) => {
            return Err(Fail::Usage(format!(
                "--size is required: {} does not exist or holds nothing past --offset",
                o.filename
            )))
        }
    };
    let numjobs = o.numjobs as u64;
    let bs = o.bs;
    // Each job gets an equal share (sequential: its own region), whole blocks
    // where the share allows: 1 GiB, 3 jobs, 1 MiB blocks → 341 MiB each.
    let mut per_job = size / numjobs;
    if per_job >= bs {
        per_job -= per_job % bs;
    }
    if per_job == 0 {
        return Err(Fail::Usage(format!(
            "--size={size} is too small for --numjobs={numjobs}"
        )));
    }
    if !o.rw.is_random() && per_job * numjobs < size {
        notes.say(&format!(
            "{} of --size left unused: each of {numjobs} job(s) covers {} (whole blocks of --bs)",
            mib(size - per_job * numjobs),
            mib(per_job)
        ));
    }
    if direct && matches!(o.ioengine, IoEngine::Raw | IoEngine::Posix) {
        let bad = [
            ("--bs", bs),
            ("--offset", o.offset),
            ("the per-job size", per_job),
        ]
        .into_iter()
        .find(|(_, v)| v % 4096 != 0);
        if let Some((what, v)) = bad {
            return Err(Fail::Usage(format!(
                "{what} ({v}) is not a multiple of 4096: ioengine={} with O_DIRECT needs aligned I/O (or --direct=0)",
                o.ioengine.name()
            )));
        }
    }

    let mut depth = o.iodepth as usize;
    if o.ioengine.is_sync() && depth > 1 {
        notes.say(&format!(
            "ioengine={} is synchronous: one I/O in flight per job (iodepth={} ignored; use --numjobs)",
            o.ioengine.name(),
            o.iodepth
        ));
        depth = 1;
    }
    if o.ioengine == IoEngine::HipfileBatch && depth > engines::hipfile::MAX_BATCH_ENTRIES {
        notes.say(&format!(
            "hipfile-batch: iodepth capped at {} (the batch size limit)",
            engines::hipfile::MAX_BATCH_ENTRIES
        ));
        depth = engines::hipfile::MAX_BATCH_ENTRIES;
    }
    if o.ioengine == IoEngine::HipfileAsync
        && gpu.has_devices()
        && numjobs * depth as u64 > engines::hipfile::MAX_STREAM_OPS
    {
        return Err(Fail::Usage(format!(
            "hipfile-async: --numjobs x --iodepth = {} exceeds the library's {} stream operations in flight",
            numjobs * depth as u64,
            engines::hipfile::MAX_STREAM_OPS
        )));
    }
    let buf_bytes = depth as u64 * bs;
    if buf_bytes > (64u64 << 30) {
        return Err(Fail::Usage(format!(
            "--iodepth x --bs = {} per job is more memory than this tool will allocate (64 GiB)",
            mib(buf_bytes)
        )));
    }

    // The data file.
    let mut extras = report::Extras {
        ioengine: o.ioengine.name().into(),
        mem: mem.name().into(),
        gpu_runtime: gpu.name().into(),
        direct,
        iodepth: depth,
        verify: o.verify,
        ..Default::default()
    };
    if o.ioengine != IoEngine::Copy {
        let end = o.offset + size;
        let t = Instant::now();
        let wrote = pattern::ensure_file(&o.filename, end)
            .map_err(|e| Fail::Run(format!("creating {}: {e}", o.filename)))?;
        if wrote > 0 {
            notes.say(&format!(
                "{} {}: wrote {} of the data pattern ({:.1} s, buffered, fdatasync)",
                if fsize.is_some() {
                    "extended"
                } else {
                    "created"
                },
                o.filename,
                mib(wrote),
                t.elapsed().as_secs_f64()
            ));
        }
        extras.created_bytes = wrote;
        if o.verify && wrote == 0 {
            notes
                .say("verify assumes the file holds hipfile-bench's pattern (files it created do)");
        }
        if has_writes && !o.verify {
            notes.say("writes with --verify=0 do not keep the file's pattern; rewrite with --verify=1 before verifying reads");
        }
        if o.invalidate {
            match pattern::invalidate(&o.filename, o.offset, size) {
                Ok(Some(c)) if c.resident_pages > 0 => {
                    notes.say(&format!(
                        "invalidate: the kernel kept {} of {} pages ({:.1}%) of the range in the page cache \
                         (tmpfs, or pages in use): reads of those come from memory",
                        c.resident_pages,
                        c.total_pages,
                        c.percent()
                    ));
                    extras.cache_resident_pct = Some(c.percent());
                }
                Ok(Some(c)) => {
                    notes.say(
                        "invalidate: the range's page cache was dropped (none of it resident)",
                    );
                    extras.cache_resident_pct = Some(c.percent());
                }
                Ok(None) => notes.say("invalidate: could not check what the page cache kept"),
                Err(e) => notes.say(&format!("invalidate failed: {e}")),
            }
        }
    }

    let fd = if o.ioengine == IoEngine::Copy {
        -1
    } else {
        open_file(&o.filename, has_writes, direct)?
    };
    let mut fh = 0usize;
    if o.ioengine.uses_hipfile() {
        engines::hipfile::driver_open().map_err(Fail::Run)?;
        if let Some(e) = hipfile_engine::registry::driver().engine() {
            notes.say(&format!("storage backend: {}", e.storage_backend()));
        }
        match engines::hipfile::handle_register(fd) {
            Ok(h) => fh = h,
            Err(e) => {
                let _ = engines::hipfile::driver_close();
                // SAFETY: fd is ours.
                unsafe { libc::close(fd) };
                return Err(Fail::Run(e));
            }
        }
    }

    let ramp_ns = o.ramp_time.map_or(0, |d| d.as_nanos() as u64);
    let runtime_ns = o.runtime.map(|d| d.as_nanos() as u64);
    let plan = job::Plan {
        engine: o.ioengine,
        mem,
        gpu: gpu.clone(),
        device: o.gpu,
        fd,
        fh,
        depth,
        bs,
        read_pct: o.rw.read_percent(o.rwmixread),
        random: o.rw.is_random(),
        range_start: o.offset,
        range_len: size,
        per_job,
        passes: if o.time_based {
            None
        } else {
            Some(o.loops as u64)
        },
        ramp_ns,
        deadline_ns: runtime_ns.map(|r| r + ramp_ns),
        verify: o.verify,
        aligned: bs % 4096 == 0 && o.offset % 4096 == 0,
        huge_pages: o.iomem_huge,
        fixedbufs: o.fixedbufs,
    };

    // Run: every job sets up, then all start together.
    let progress: Vec<job::Progress> = (0..numjobs).map(|_| job::Progress::default()).collect();
    let start = Barrier::new(numjobs as usize + 1);
    // All jobs finish their I/O before any tears down: freeing device memory
    // (cuMemFree synchronises the device) while another job's stream ops are
    // parked on the library deadlocks the CUDA context (seen on the H200).
    let finish = Barrier::new(numjobs as usize);
    let stop = AtomicBool::new(false);
    // SAFETY: isatty only inspects a descriptor.
    let tty = unsafe { libc::isatty(1) } == 1;
    let planned_bytes = Some(per_job * numjobs * if o.time_based { 1 } else { o.loops as u64 });
    let planned_ns = runtime_ns.map(|r| r + ramp_ns);
    let (results, ru0, ru1, wall) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..numjobs as usize)
            .map(|i| {
                let (plan, start, finish, p) = (&plan, &start, &finish, &progress[i]);
                std::thread::Builder::new()
                    .name(format!("job{i}"))
                    .spawn_scoped(s, move || job::run(plan, i, start, finish, p))
                    .expect("spawning a job thread")
            })
            .collect();
        start.wait();
        let ru0 = rusage();
        let t0 = Instant::now();
        let prog =
            tty.then(|| s.spawn(|| progress_loop(&stop, &progress, planned_bytes, planned_ns)));
        // While the jobs run, wake every `--main_tick` as fio's main thread
        // does (its status loop sleeps 10 ms at a time). On a VM whose idle
        // vCPUs are slow to wake this is not neutral: a plain O_DIRECT pread
        // loop ran at 1.51–1.57 GB/s alone and at 2.00–2.28 with a 10 ms
        // waker beside it (2-core dev VM, bench/RESULTS.md), so the bench
        // keeps fio's process structure in this respect.
        if !o.main_tick.is_zero() {
            while !handles.iter().all(|h| h.is_finished()) {
                std::thread::sleep(o.main_tick);
            }
        }
        let results: Vec<Result<job::JobOutcome, job::JobError>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(job::JobError::Io("job thread panicked".into())))
            })
            .collect();
        let wall = t0.elapsed();
        let ru1 = rusage();
        stop.store(true, Ordering::Release);
        if let Some(p) = prog {
            let _ = p.join();
        }
        (results, ru0, ru1, wall)
    });

    if o.ioengine.uses_hipfile() {
        engines::hipfile::handle_deregister(fh);
        if let Err(e) = engines::hipfile::driver_close() {
            notes.say(&e);
        }
    }
    if fd >= 0 {
        // SAFETY: fd is ours; the jobs are done with it.
        unsafe {
            if has_writes {
                libc::fdatasync(fd);
            }
            libc::close(fd);
        }
    }

    let mut outcomes = Vec::new();
    let mut first_err: Option<String> = None;
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(out) => outcomes.push(out),
            Err(e) => {
                let msg = format!("job {i}: {e}");
                if first_err.is_none() {
                    first_err = Some(msg.clone());
                } else {
                    eprintln!("hipfile-bench: {msg}");
                }
            }
        }
    }
    if let Some(e) = first_err {
        return Err(Fail::Run(e));
    }

    // Verification totals, and the read-back of what was written.
    if o.verify {
        let read_bytes: u64 = outcomes.iter().map(|j| j.read.bytes).sum();
        let mut ranges: Vec<(u64, u64)> = outcomes
            .iter()
            .filter_map(|j| j.written.as_ref())
            .flat_map(|w| w.ranges())
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (s, e) in ranges {
            match merged.last_mut() {
                Some(l) if s <= l.1 => l.1 = l.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        let back = read_back(&o.filename, &merged)?;
        extras.verified_bytes = read_bytes + back;
        let paused: u64 = outcomes.iter().map(|j| j.verify_ns).max().unwrap_or(0);
        notes.say(&format!(
            "verify: OK ({} read checked during the run, {} written and read back; {:.3} s of checking not timed)",
            mib(read_bytes),
            mib(back),
            paused as f64 / 1e9
        ));
    }
    extras.fixed_buffers = outcomes.iter().find_map(|j| j.fixed_buffers);
    if extras.fixed_buffers == Some(false) {
        notes.say("raw: io_uring buffer registration refused: plain READ/WRITE used");
    }
    if ramp_ns > 0 && outcomes.iter().all(|j| j.read.ios + j.write.ios == 0) {
        notes.say("every I/O finished within --ramp_time: nothing was measured");
    }

    // CPU over the run, process-wide.
    let wall_ns = wall.as_nanos().max(1) as f64;
    let cpu = report::Cpu {
        usr_pct: (tv_ns(ru1.ru_utime).saturating_sub(tv_ns(ru0.ru_utime))) as f64 * 100.0 / wall_ns,
        sys_pct: (tv_ns(ru1.ru_stime).saturating_sub(tv_ns(ru0.ru_stime))) as f64 * 100.0 / wall_ns,
        ctx: ((ru1.ru_nvcsw + ru1.ru_nivcsw) - (ru0.ru_nvcsw + ru0.ru_nivcsw)).max(0) as u64,
        majf: (ru1.ru_majflt - ru0.ru_majflt).max(0) as u64,
        minf: (ru1.ru_minflt - ru0.ru_minflt).max(0) as u64,
    };

    // Fold into the reported units.
    let mut all = report::Unit {
        name: o.name.clone(),
        jobs: outcomes.len(),
        read: stats::DirStats::new(),
        write: stats::DirStats::new(),
        runtime_ns: 0,
        share_pct: [100.0, 100.0],
    };
    for j in &outcomes {
        all.read.merge(&j.read);
        all.write.merge(&j.write);
        all.runtime_ns = all.runtime_ns.max(j.runtime_ns);
    }
    let group_bw = [
        all.read.bw_bytes(all.runtime_ns),
        all.write.bw_bytes(all.runtime_ns),
    ];
    let share = |bw: f64, g: f64| if g > 0.0 { 100.0 * bw / g } else { 0.0 };
    let units: Vec<report::Unit> = if o.group_reporting || outcomes.len() == 1 {
        vec![report::Unit {
            name: o.name.clone(),
            jobs: outcomes.len(),
            read: all.read.clone(),
            write: all.write.clone(),
            runtime_ns: all.runtime_ns,
            share_pct: [100.0, 100.0],
        }]
    } else {
        outcomes
            .iter()
            .map(|j| report::Unit {
                name: o.name.clone(),
                jobs: 1,
                read: j.read.clone(),
                write: j.write.clone(),
                runtime_ns: j.runtime_ns,
                share_pct: [
                    share(j.read.bw_bytes(j.runtime_ns), group_bw[0]),
                    share(j.write.bw_bytes(j.runtime_ns), group_bw[1]),
                ],
            })
            .collect()
    };
    let rep = report::Report {
        units: &units,
        all: &all,
        job_runtimes_ns: outcomes.iter().map(|j| j.runtime_ns).collect(),
        job_bw: [
            outcomes
                .iter()
                .map(|j| j.read.bw_bytes(j.runtime_ns))
                .collect(),
            outcomes
                .iter()
                .map(|j| j.write.bw_bytes(j.runtime_ns))
                .collect(),
        ],
        cpu,
        extras: &extras,
        options: &o.given,
        version: VERSION,
    };
    let text = match o.output_format {
        OutputFormat::Normal => report::normal(&rep),
        OutputFormat::Json => report::json(&rep).to_pretty(2),
    };
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
    Ok(())
}
