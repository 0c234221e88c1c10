//! Builds the C programs in tests/c against include/hipfile.h, links them to
//! the libhipfile.so that cargo just built, and runs them. Each program prints
//! one line per failed check and exits non-zero on failure.

#[path = "../../tests/support/native.rs"]
mod native;

use native::{deps_with, repo, run_ok, test_dir, CBuild};
use std::path::{Path, PathBuf};
use std::process::Command;

fn lib_dir() -> PathBuf {
    deps_with("libhipfile.so")
}

fn compile(src: &str, cxx: bool) -> PathBuf {
    compile_with(src, cxx, &[], "")
}

/// The same program built with AddressSanitizer, UBSan and LeakSanitizer: the
/// C side is instrumented and malloc/free are checked across the library.
fn compile_asan(src: &str) -> PathBuf {
    compile_with(
        src,
        false,
        &[
            "-fsanitize=address,undefined",
            "-fno-omit-frame-pointer",
            "-fno-sanitize-recover=all",
        ],
        "-asan",
    )
}

fn compile_with(src: &str, cxx: bool, extra: &[&str], suffix: &str) -> PathBuf {
    let lib = lib_dir();
    let out_dir = lib.join("c-tests");
    std::fs::create_dir_all(&out_dir).unwrap();
    let stem = Path::new(src).file_stem().unwrap().to_str().unwrap();
    let exe = out_dir.join(format!("{stem}{suffix}"));
    let (cc, std) = if cxx {
        ("g++", "-std=c++17")
    } else {
        ("gcc", "-std=c11")
    };
    CBuild {
        cc,
        std,
        include: &repo().join("include"),
        extra,
        lib_dir: &lib,
        libs: &["-lhipfile", "-lpthread"],
    }
    .compile(&repo().join("tests/c").join(src), &exe);
    exe
}

fn run(exe: &Path, args: &[&str]) {
    run_env(exe, args, &[]);
}

/// Runs `exe`, which must exit 0, and returns its stderr.
fn run_env(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    run_ok(exe, args, env, &lib_dir())
}

#[test]
fn c_layout() {
    run(&compile("layout.c", false), &[]);
}

#[test]
fn cxx_layout() {
    run(&compile("layout_cxx.cpp", true), &[]);
}

#[test]
fn c_invalid_args() {
    run(&compile("invalid_args.c", false), &[&test_dir()]);
}

#[test]
fn c_roundtrip() {
    run(&compile("roundtrip.c", false), &[&test_dir()]);
}

#[test]
fn c_lifecycle_stress_and_fork() {
    run(&compile("lifecycle.c", false), &[&test_dir(), "3"]);
}

#[test]
fn c_fork_children_get_a_fresh_library() {
    run(&compile("fork.c", false), &[&test_dir()]);
}

#[test]
fn c_fork_under_asan() {
    run(&compile_asan("fork.c"), &[&test_dir()]);
}

#[test]
fn c_invalid_args_under_asan() {
    run(&compile_asan("invalid_args.c"), &[&test_dir()]);
}

#[test]
fn c_roundtrip_under_asan() {
    run(&compile_asan("roundtrip.c"), &[&test_dir()]);
}

#[test]
fn c_lifecycle_under_asan() {
    run(&compile_asan("lifecycle.c"), &[&test_dir(), "2"]);
}

#[test]
fn c_bad_files() {
    run(&compile("bad_files.c", false), &[&test_dir()]);
}

/// The round trip on a "filesystem without O_DIRECT": an LD_PRELOAD shim makes
/// every O_DIRECT open fail with EINVAL, so the library runs page-cache only.
#[test]
fn c_roundtrip_without_o_direct() {
    let lib = lib_dir();
    let shim = lib.join("c-tests").join("shim_no_odirect.so");
    std::fs::create_dir_all(shim.parent().unwrap()).unwrap();
    let status = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&shim)
        .arg(repo().join("tests/c/shim_no_odirect.c"))
        .arg("-ldl")
        .status()
        .unwrap();
    assert!(status.success(), "building the shim failed");
    let exe = compile("roundtrip.c", false);
    run_env(
        &exe,
        &[&test_dir()],
        &[("LD_PRELOAD", shim.to_str().unwrap())],
    );
}

/// Each user mistake of tests/c/messages.c leaves a log line that names it: the
/// descriptor and its errno, the buffer, the batch handle.
#[test]
fn c_messages_name_the_mistake() {
    let exe = compile("messages.c", false);
    let log = run_env(&exe, &[&test_dir()], &[("HIPFILE_LOG_LEVEL", "warn")]);
    for want in [
        "hipFileHandleRegister: fd -1 is not an open file descriptor (Bad file descriptor",
        "a failed open() returns -1",
        "is not an open file descriptor (Bad file descriptor (os error 9)); it was never opened or is already closed",
        "is already registered; deregister it before registering it again (hipFileMemoryAlreadyRegistered, 5023)",
        "is not the base address of a registered buffer (hipFileMemoryNotRegistered, 5024)",
        "hipFileBatchIOCancel: 0x",
        "is not a batch handle from hipFileBatchIOSetUp",
    ] {
        assert!(log.contains(want), "no log line containing {want:?} in:\n{log}");
    }
}

/// Data safety: concurrent durable writes with another process fsyncing the
/// same file, O_APPEND set after registration, stale file and batch handles
/// over 10,000 cycles, a half-unreadable source buffer, unmapped buffer
/// registrations and a huge worker count (tests/c/data_safety.c).
#[test]
fn c_data_safety() {
    run(&compile("data_safety.c", false), &[&test_dir()]);
}

/// Four threads writing, reading and batch-reading their own regions of one
/// file through a buffered and an O_DIRECT handle while a fifth evicts pages,
/// every read checked against a model (tests/c/concurrent.c): once with the
/// machine's worker count, once with six workers (four may read storage, so
/// a buffered read's cold pieces are found wave by wave) and 64 KiB chunks.
#[test]
fn c_concurrent() {
    let exe = compile("concurrent.c", false);
    run_env(&exe, &[&test_dir()], &[("HIPFILE_TEST_SECONDS", "4")]);
    run_env(
        &exe,
        &[&test_dir()],
        &[
            ("HIPFILE_TEST_SECONDS", "4"),
            ("HIPFILE_IO_THREADS", "6"),
            ("HIPFILE_CHUNK_KB", "64"),
        ],
    );
}

/// Run a C program with `env` (and without a configuration file unless
/// `env` names one); its pid (first line "pid P") and stdout.
fn run_config_log(args: &[&str], env: &[(&str, &str)]) -> (u32, String) {
    // Compiled once: tests running side by side must not rewrite a running program.
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let exe = EXE.get_or_init(|| compile("config_log.c", false));
    let out = Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .env_remove("HIPFILE_CONFIG")
        .env_remove("CUFILE_ENV_PATH_JSON")
        .env_remove("HIPFILE_LOG_LEVEL")
        .env_remove("CUFILE_LOGGING_LEVEL")
        .env_remove("CUFILE_LOGFILE_PATH")
        .env("HIPFILE_GPU_RUNTIME", "none")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "config_log {args:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = stdout
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("pid "))
        .and_then(|p| p.parse().ok())
        .expect("the program prints its pid first");
    (pid, stdout)
}

fn scratch(name: &str) -> String {
    let p = format!("{}/{name}-{}", test_dir(), std::process::id());
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn c_log_file_parameter_gets_one_line_per_event_with_time_pid_and_thread() {
    let log = scratch("hipfile-param.log");
    let (pid, _) = run_config_log(&["param", &log], &[]);
    let text = std::fs::read_to_string(&log).expect("the log file was written");
    let _ = std::fs::remove_file(&log);
    let engine = text
        .lines()
        .find(|l| l.contains("INFO hipfile: engine:"))
        .unwrap_or_else(|| panic!("no engine start line in:\n{text}"));
    // 2026-12-04T10:11:12.345678Z [pid=P tid=T] INFO hipfile: engine: ...
    let (ts, rest) = engine.split_once(' ').unwrap();
    assert_eq!(ts.len(), 27, "{ts}");
    assert!(ts.ends_with('Z') && ts.as_bytes()[10] == b'T', "{ts}");
    assert!(rest.starts_with(&format!("[pid={pid} tid=")), "{rest}");
}

#[test]
fn c_log_dir_parameter_gets_a_file_per_process() {
    let dir = scratch("hipfile-paramdir");
    std::fs::create_dir_all(&dir).unwrap();
    let (pid, _) = run_config_log(&["dir", &dir], &[]);
    let log = format!("{dir}/hipfile.{pid}.log");
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{log}: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(text.contains("INFO hipfile: engine:"), "{text}");
}

#[test]
fn c_an_unknown_log_level_is_reported() {
    let log = scratch("hipfile-level.log");
    run_config_log(
        &["open"],
        &[
            ("HIPFILE_LOG_LEVEL", "verbose"),
            ("CUFILE_LOGFILE_PATH", &log),
        ],
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(
        text.contains("HIPFILE_LOG_LEVEL=\"verbose\" is not a log level"),
        "{text}"
    );
}

#[test]
fn c_a_configuration_file_sets_parameter_defaults_logging_and_reports_its_problems() {
    let dir = scratch("hipfile-logdir");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = scratch("cufile.json");
    std::fs::write(
        &cfg,
        format!(
            "{{\n  // as cuFile's sample: comments are allowed\n  \"logging\": {{ \"dir\": \"{dir}\", \"level\": \"INFO\" }},\n  \"properties\": {{ \"io_batchsize\": 32 }},\n  \"execution\": {{ \"max_io_threads\": \"four\" }},\n  \"no_such_section\": {{ \"x\": 1 }}\n}}\n"
        ),
    )
    .unwrap();
    let (pid, _) = run_config_log(&["batchsize", "32"], &[("HIPFILE_CONFIG", &cfg)]);
    let log = format!("{dir}/hipfile.{pid}.log");
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{log}: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&cfg);
    assert!(
        text.contains(&format!(
            "{cfg}:5: execution.max_io_threads: \"four\" is not an unsigned integer"
        )),
        "{text}"
    );
    assert!(
        text.contains("unknown settings (ignored): no_such_section.x (line 6)"),
        "{text}"
    );
    assert!(text.contains("INFO hipfile: engine:"), "{text}");
}
