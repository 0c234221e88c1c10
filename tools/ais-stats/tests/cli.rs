//! ais-stats against real processes: a child that does a known mix of I/O
//! through libhipfile's C entry points (this test binary, run again as
//! `workload_child`), read from outside with `-p`, `-i`, `--json`, `-w` and
//! as `ais-stats PROGRAM`; and the clear failures.

use serde_json::Value;
use std::ffi::c_void;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const AIS: &str = env!("CARGO_BIN_EXE_ais-stats");
const MIB: usize = 1 << 20;
/// The child's file: 4 MiB.
const FILE_BYTES: usize = 4 * MIB;
const THREADS: usize = 4;
const READS_PER_THREAD: usize = 25;
const PHASE2_READS: usize = 5;

fn test_dir() -> String {
    std::env::var("HIPFILE_TEST_DIR").unwrap_or_else(|_| std::env::temp_dir().display().to_string())
}

fn ok(call: &str, e: hipfile::types::HipFileError) {
    assert_eq!(e.err, 0, "{call} failed: {e:?}");
}

fn read(fh: *mut c_void, buf: &mut [u8], size: usize, off: i64) -> isize {
    hipfile::hipFileRead(fh, buf.as_mut_ptr().cast(), size, off, 0)
}

/// The child: a known mix, "ready", wait for a line on stdin, a second
/// phase, exit. Run by the tests below, never on its own.
#[test]
#[ignore = "the child process of the other tests in this file, which run it"]
fn workload_child() {
    use hipfile::types::{HandleUnion, HipFileDescr, HipFileIoEvents, HipFileIoParams};
    let path = format!("{}/ais-stats-child-{}", test_dir(), std::process::id());
    std::fs::write(&path, vec![7u8; FILE_BYTES]).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut d = HipFileDescr {
        kind: 1,
        handle: HandleUnion { fd: f.as_raw_fd() },
        fs_ops: std::ptr::null(),
    };
    let mut fh: *mut c_void = std::ptr::null_mut();
    ok("DriverOpen", hipfile::hipFileDriverOpen());
    // SAFETY: fh and d are live locals.
    ok("HandleRegister", unsafe {
        hipfile::hipFileHandleRegister(&mut fh, &mut d)
    });
    let mut buf = vec![0u8; FILE_BYTES];
    ok(
        "BufRegister",
        hipfile::hipFileBufRegister(buf.as_ptr().cast(), buf.len(), 0),
    );
    // Inline reads (on this thread: 2 workers allow up to 1 MiB inline).
    for i in 0..3 {
        assert_eq!(read(fh, &mut buf, 4096, i * 4096), 4096);
    }
    // A short read at the end of the file: 1000 bytes.
    assert_eq!(read(fh, &mut buf, 4096, (FILE_BYTES - 1000) as i64), 1000);
    // One read through the workers.
    assert_eq!(read(fh, &mut buf, 2 * MIB, 0), (2 * MIB) as isize);
    // Two inline writes of 64 KiB.
    for i in 0..2 {
        let w = hipfile::hipFileWrite(fh, buf.as_ptr().cast(), 64 << 10, i * (64 << 10), 0);
        assert_eq!(w, 64 << 10);
    }
    // Refused before any I/O: a handle that was never registered.
    let bogus = 0x10 as *mut c_void;
    assert!(read(bogus, &mut buf, 4096, 0) < 0);
    // A batch of four 256 KiB reads.
    let mut batch: *mut c_void = std::ptr::null_mut();
    // SAFETY: batch is a live local.
    ok("BatchIOSetUp", unsafe {
        hipfile::hipFileBatchIOSetUp(&mut batch, 4)
    });
    let mut params: Vec<HipFileIoParams> = (0..4)
        .map(|i| HipFileIoParams {
            mode: 1,
            dev_ptr_base: buf.as_mut_ptr().cast(),
            file_offset: (i * (256 << 10)) as i64,
            dev_ptr_offset: (i * (256 << 10)) as i64,
            size: 256 << 10,
            fh,
            opcode: 0,
            cookie: i as *mut c_void,
        })
        .collect();
    // SAFETY: four entries at params, alive until the batch is destroyed.
    ok("BatchIOSubmit", unsafe {
        hipfile::hipFileBatchIOSubmit(batch, 4, params.as_mut_ptr(), 0)
    });
    let mut done = 0;
    while done < 4 {
        let mut ev = [HipFileIoEvents {
            cookie: std::ptr::null_mut(),
            status: 0,
            ret: 0,
        }; 4];
        let mut nr = 4u32;
        // SAFETY: ev holds nr entries; no timeout.
        ok("BatchIOGetStatus", unsafe {
            hipfile::hipFileBatchIOGetStatus(
                batch,
                1,
                &mut nr,
                ev.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        });
        for e in &ev[..nr as usize] {
            assert_eq!(
                (e.status, e.ret),
                (hipfile::batch_status::COMPLETE, 256 << 10)
            );
        }
        done += nr;
    }
    hipfile::hipFileBatchIODestroy(batch);
    // Several threads at once: 8 KiB inline reads, each into its own buffer.
    let fh_addr = fh as usize;
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(move || {
                let mut b = vec![0u8; 8192];
                for i in 0..READS_PER_THREAD {
                    let r = read(fh_addr as *mut c_void, &mut b, 8192, (i * 8192) as i64);
                    assert_eq!(r, 8192);
                }
            });
        }
    });
    if std::env::var_os("AIS_TEST_NOWAIT").is_none() {
        println!("ready");
        std::io::stdout().flush().unwrap();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
    }
    for i in 0..PHASE2_READS {
        assert_eq!(read(fh, &mut buf, 4096, (i * 4096) as i64), 4096);
    }
    if std::env::var_os("AIS_TEST_NO_CLOSE").is_some() {
        // Exit with the driver open, as many programs do.
        std::process::exit(0);
    }
    ok(
        "BufDeregister",
        hipfile::hipFileBufDeregister(buf.as_ptr().cast()),
    );
    hipfile::hipFileHandleDeregister(fh);
    ok("DriverClose", hipfile::hipFileDriverClose());
    if let Some(code) = std::env::var("AIS_TEST_EXIT")
        .ok()
        .and_then(|c| c.parse().ok())
    {
        std::process::exit(code);
    }
}

/// The child's command line, with the environment the counts assume.
fn child_command(level: u32) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--ignored",
        "--exact",
        "workload_child",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .env("HIPFILE_STATS_LEVEL", level.to_string())
    .env("HIPFILE_IO_THREADS", "2")
    .env("HIPFILE_GPU_RUNTIME", "none")
    .env_remove("HIPFILE_CONFIG")
    .env_remove("CUFILE_ENV_PATH_JSON");
    c
}

/// A child that has done phase 1 and waits on its stdin.
struct Waiting {
    child: Child,
}

impl Waiting {
    fn start(level: u32) -> Waiting {
        let mut child = child_command(level)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            let n = out.read_line(&mut line).unwrap();
            assert!(n > 0, "the child ended before phase 1 was done");
            if line.trim() == "ready" {
                break;
            }
        }
        // Keep draining so the child never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Waiting { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Let the child do phase 2 and exit; its exit status.
    fn finish(mut self) -> std::process::ExitStatus {
        let mut stdin = self.child.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        drop(stdin);
        self.child.wait().unwrap()
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ais(args: &[&str]) -> Output {
    Command::new(AIS).args(args).output().unwrap()
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn n(v: &Value, path: &str) -> u64 {
    let mut cur = v;
    for p in path.split('.') {
        cur = &cur[p];
    }
    cur.as_u64().unwrap_or_else(|| panic!("{path} is {cur}"))
}

/// Phase 1 of the child, as the report must show it.
fn assert_phase1(r: &Value, phase2: bool) {
    let extra = if phase2 { PHASE2_READS as u64 } else { 0 };
    let inline_reads = 3 + 1 + (THREADS * READS_PER_THREAD) as u64 + extra;
    let inline_bytes = 3 * 4096 + 1000 + (THREADS * READS_PER_THREAD * 8192) as u64 + extra * 4096;
    assert_eq!(n(r, "calls.read.inline.ops"), inline_reads);
    assert_eq!(n(r, "calls.read.inline.bytes"), inline_bytes);
    assert_eq!(n(r, "calls.read.sync.ops"), 1);
    assert_eq!(n(r, "calls.read.sync.bytes"), (2 * MIB) as u64);
    assert_eq!(n(r, "calls.read.batch.ops"), 4);
    assert_eq!(n(r, "calls.read.batch.bytes"), (MIB) as u64);
    assert_eq!(n(r, "calls.read.async.ops"), 0);
    assert_eq!(n(r, "calls.write.inline.ops"), 2);
    assert_eq!(n(r, "calls.write.inline.bytes"), 2 * (64 << 10));
    assert_eq!(n(r, "calls.read.total.ops"), inline_reads + 1 + 4);
    assert_eq!(n(r, "calls.read.total.errors"), 0);
    assert_eq!(n(r, "events.read_rejected"), 1);
    assert_eq!(n(r, "events.handle_register"), 1);
    assert_eq!(n(r, "events.buf_register"), 1);
    assert_eq!(n(r, "events.buf_register_bytes"), FILE_BYTES as u64);
    assert_eq!(n(r, "events.driver_open"), 1);
    assert_eq!(n(r, "events.batch_setup"), 1);
    assert_eq!(n(r, "events.batch_submit"), 1);
    assert_eq!(n(r, "events.batch_destroy"), 1);
    // The worker read went through the engine: its chunks are in the figures.
    assert!(n(r, "engine.chunks") >= 1, "{}", r["engine"]);
}

#[test]
fn attaching_reports_exact_counts_of_a_running_process() {
    let c = Waiting::start(2);
    let out = ais(&["-p", &c.pid().to_string(), "-i", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = &json_lines(&out)[0];
    assert_eq!(n(r, "pid"), c.pid() as u64);
    assert_eq!(n(r, "level"), 2);
    assert_phase1(r, false);
    // Level 2: request sizes. The 100 threaded 8 KiB reads sit in [8, 16) KiB.
    let sizes = r["calls"]["read"]["inline"]["size_histogram"]
        .as_array()
        .unwrap();
    assert!(
        sizes.contains(&serde_json::json!([
            8192,
            16384,
            THREADS * READS_PER_THREAD
        ])),
        "{sizes:?}"
    );
    assert!(c.finish().success());
}

#[test]
fn a_report_after_exit_includes_everything_the_process_did() {
    let c = Waiting::start(1);
    let pid = c.pid().to_string();
    let reader = Command::new(AIS)
        .args(["-p", &pid, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Release the child only once the reader holds its statistics.
    let fd_dir = format!("/proc/{}/fd", reader.id());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_dir(&fd_dir).unwrap().flatten().any(|e| {
        std::fs::read_link(e.path())
            .is_ok_and(|t| t.to_string_lossy().contains("memfd:hipfile-stats"))
    }) {
        assert!(Instant::now() < deadline, "ais-stats never attached");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(c.finish().success());
    let out = reader.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = &json_lines(&out)[0];
    assert_phase1(r, true);
    assert_eq!(n(r, "events.driver_close"), 1);
    assert_eq!(n(r, "events.handle_deregister"), 1);
    assert_eq!(n(r, "events.buf_deregister"), 1);
    // The engine was dropped at close: no engine runs, its counters stay.
    assert_eq!(n(r, "engine.engines"), 0);
    assert!(n(r, "engine.chunks") >= 1);
    // Level 1 counts no sizes.
    assert!(r["calls"]["read"]["inline"].get("size_histogram").is_none());
}

/// `ais-stats --json CHILD` with the child running through without waiting.
fn ais_program(level: u32, env: &[(&str, &str)]) -> Output {
    ais_program_as(true, level, env)
}

/// `ais-stats [--json] CHILD` with the child running through without waiting.
fn ais_program_as(as_json: bool, level: u32, env: &[(&str, &str)]) -> Output {
    let child = child_command(level);
    let mut args: Vec<String> = as_json.then(|| "--json".to_string()).into_iter().collect();
    args.push(child.get_program().to_string_lossy().into_owned());
    args.extend(child.get_args().map(|a| a.to_string_lossy().into_owned()));
    Command::new(AIS)
        .args(&args)
        .envs(child.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .env("AIS_TEST_NOWAIT", "1")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn running_a_program_reports_at_its_exit_with_its_status() {
    let out = ais_program(3, &[("AIS_TEST_EXIT", "3")]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports = json_lines(&out);
    assert_eq!(reports.len(), 1, "one process used the library");
    let r = &reports[0];
    assert_phase1(r, true);
    // Level 3: everything was host memory.
    let targets = r["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 1);
    assert_eq!(targets[0]["target"], "host");
    assert_eq!(n(&targets[0], "write.ops"), 2);
    let hist = targets[0]["read"]["latency_histogram"].as_array().unwrap();
    let calls: u64 = hist.iter().map(|b| b[2].as_u64().unwrap()).sum();
    assert_eq!(calls, n(&targets[0], "read.ops"));
}

#[test]
fn engine_figures_are_complete_when_a_program_exits_without_closing_the_driver() {
    let out = ais_program(1, &[("AIS_TEST_NO_CLOSE", "1")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = &json_lines(&out)[0];
    assert_eq!(n(r, "events.driver_close"), 0);
    // Copied in at exit: the engine still ran, and its chunks are counted.
    assert_eq!(n(r, "engine.engines"), 1);
    assert!(n(r, "engine.chunks") >= 1, "{}", r["engine"]);
}

#[test]
fn the_report_names_the_posix_backend_that_hipfile_io_backend_asks_for() {
    let env = [("HIPFILE_IO_BACKEND", "posix")];
    let out = ais_program(1, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = &json_lines(&out)[0];
    assert_eq!(r["storage_backend"], "posix", "{r}");
    let why = r["storage_backend_why"].as_str().unwrap();
    assert!(why.contains("HIPFILE_IO_BACKEND=posix"), "{why}");

    let out = ais_program_as(false, 1, &env);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("  storage backend: posix (pread/pwrite on the I/O threads), as HIPFILE_IO_BACKEND=posix asks\n"),
        "{text}"
    );
}

#[test]
fn the_report_names_the_backend_the_process_got_and_why() {
    let out = ais_program(1, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = &json_lines(&out)[0];
    let got = r["storage_backend"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    let why = r["storage_backend_why"].as_str().unwrap();
    // scripts/test.sh says which backend each pass of the suite must get.
    match std::env::var("HIPFILE_TEST_EXPECT_BACKEND").as_deref() {
        Ok("posix") => {
            assert_eq!(got, "posix");
            // io_uring is refused there: the reason names the refused call.
            assert!(why.contains("because io_uring_setup: E"), "{why}");
        }
        Ok("io_uring") => assert_eq!((got, why), ("io_uring", "io_uring")),
        _ => assert!(["io_uring", "posix"].contains(&got), "{got}"),
    }
}

#[test]
fn the_text_report_names_paths_registrations_and_sizes() {
    let c = Waiting::start(2);
    let out = ais(&["-p", &c.pid().to_string(), "-i"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "hipfile statistics of process",
        "read inline",
        "read sync",
        "read batch",
        "write inline",
        "refused before any I/O",
        "storage paths",
        "registrations  files 1 (0 failed, 0 deregistered)",
        "request sizes",
        "8-16K",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    assert!(c.finish().success());
}

#[test]
fn the_live_view_draws_one_frame_per_interval() {
    let c = Waiting::start(1);
    let pid = c.pid().to_string();
    let out = ais(&["-p", &pid, "-w", "0.1", "-n", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("ais-stats  pid").count(), 2, "{text}");
    for want in [
        "frame 1", "frame 2", "GB/s", "IOPS", "p99", "read ", "write ", "calls ", "reads ",
        "chunks ", "so far",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    // Not a terminal: frames are appended, without escape sequences.
    assert!(!text.contains('\x1b'));
    let out = ais(&["-p", &pid, "-w", "0.1", "-n", "2", "--json"]);
    let frames = json_lines(&out);
    assert_eq!(frames.len(), 2);
    assert_eq!(n(&frames[1], "frame"), 2);
    assert!(frames[0]["read"]["bytes_per_s"].is_number());
    assert!(c.finish().success());
}

#[test]
fn statistics_off_means_no_shared_memory_and_a_clear_message() {
    let c = Waiting::start(0);
    let pid = c.pid();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(
        !maps.contains("hipfile-stats"),
        "a region is mapped:\n{maps}"
    );
    let memfds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().contains("memfd:"))
        })
        .count();
    assert_eq!(memfds, 0);
    let out = ais(&["-p", &pid.to_string(), "-i"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("statistics are off"), "{err}");
    assert!(c.finish().success());
}

#[test]
fn a_pid_with_no_process_is_named() {
    let mut gone = Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let out = ais(&["-p", &gone.id().to_string(), "-i"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("no process with pid {}", gone.id())),
        "{err}"
    );
}

#[test]
fn a_process_without_the_library_is_named() {
    let mut cat = Command::new("cat").stdin(Stdio::piped()).spawn().unwrap();
    let out = ais(&["-p", &cat.id().to_string(), "-i"]);
    let _ = cat.kill();
    let _ = cat.wait();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not use hipfile"), "{err}");
}

#[test]
fn a_program_that_never_uses_the_library_is_named() {
    let out = ais(&["true"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without hipfile statistics"), "{err}");
}

#[test]
fn bad_options_exit_with_status_2() {
    assert_eq!(ais(&[]).status.code(), Some(2));
    assert_eq!(ais(&["-i"]).status.code(), Some(2), "-i needs -p");
    assert_eq!(ais(&["-p", "1", "-w", "0"]).status.code(), Some(2));
    assert_eq!(ais(&["-p", "1", "-i", "-w", "1"]).status.code(), Some(2));
}
