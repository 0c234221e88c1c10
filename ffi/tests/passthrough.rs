//! libhipfile's backend choice from a C program (tests/gds/passthrough.c):
//! `HIPFILE_BACKEND=cufile` sends the calls to the libcufile named by
//! `HIPFILE_CUFILE_LIB` (a stand-in that answers each call in its own way, or
//! NVIDIA's real libcufile 1.15 from the PyPI wheel), translated; where that
//! library cannot serve, or where GDS does not work (`auto` on this machine,
//! which has no nvidia-fs), the engine serves and the log says why.

#[path = "../../tests/support/native.rs"]
mod native;

use native::{deps_with, nvidia_libcufile, repo};
use std::path::{Path, PathBuf};
use std::process::Command;

fn lib_dir() -> PathBuf {
    deps_with("libhipfile.so")
}

fn out_dir() -> PathBuf {
    let d = lib_dir().join("passthrough-tests");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn gcc(args: &[&std::ffi::OsStr]) {
    let status = Command::new("gcc")
        .args(args)
        .status()
        .expect("gcc is needed for the passthrough tests");
    assert!(status.success(), "gcc {args:?} failed");
}

/// The C program, built once per test (tests run in parallel, so each has
/// its own output name).
fn program(name: &str) -> PathBuf {
    let exe = out_dir().join(format!("passthrough-{name}"));
    let lib = lib_dir();
    gcc(&[
        "-std=c11".as_ref(),
        "-Wall".as_ref(),
        "-Wextra".as_ref(),
        "-Werror".as_ref(),
        "-I".as_ref(),
        repo().join("include").as_os_str(),
        repo().join("tests/gds/passthrough.c").as_os_str(),
        "-o".as_ref(),
        exe.as_os_str(),
        "-L".as_ref(),
        lib.as_os_str(),
        "-lhipfile".as_ref(),
        format!("-Wl,-rpath,{}", lib.display()).as_ref(),
    ]);
    exe
}

fn answering_libcufile() -> PathBuf {
    let so = out_dir().join("libcufile-answers.so");
    gcc(&[
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-DFAKE_ANSWERS".as_ref(),
        repo().join("tests/gds/fake_cufile.c").as_os_str(),
        "-o".as_ref(),
        so.as_os_str(),
    ]);
    so
}

/// Runs the program in `mode`; returns the library's log: its stderr and the
/// file `CUFILE_LOGFILE_PATH` names (libhipfile honours cuFile's variable too).
fn run(exe: &Path, mode: &str, env: &[(&str, &Path)], backend: &str) -> String {
    let logfile = out_dir().join(format!("cufile-{mode}-{backend}.log"));
    let _ = std::fs::remove_file(&logfile);
    let out = Command::new(exe)
        .arg(mode)
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("HIPFILE_BACKEND", backend)
        .env("HIPFILE_LOG_LEVEL", "info")
        // NVIDIA's libcufile logs to ./cufile.log unless told otherwise.
        .env("CUFILE_LOGFILE_PATH", &logfile)
        .env_remove("HIPFILE_CUFILE_LIB")
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{mode} with HIPFILE_BACKEND={backend} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stderr + &std::fs::read_to_string(&logfile).unwrap_or_default()
}

#[test]
fn forced_cufile_sends_every_call_there_translated() {
    let lib = answering_libcufile();
    let log = run(
        &program("answers"),
        "answers",
        &[("HIPFILE_CUFILE_LIB", &lib)],
        "cufile",
    );
    assert!(
        log.contains("backend: NVIDIA cuFile passthrough (HIPFILE_BACKEND=cufile"),
        "{log}"
    );
}

#[test]
fn forced_cufile_reaches_nvidias_real_library() {
    let lib = nvidia_libcufile();
    run(
        &program("nvidia"),
        "nvidia",
        &[("HIPFILE_CUFILE_LIB", &lib)],
        "cufile",
    );
}

#[test]
fn forced_cufile_without_a_library_is_logged_as_an_error_and_the_engine_serves() {
    let log = run(
        &program("missing"),
        "engine",
        &[(
            "HIPFILE_CUFILE_LIB",
            Path::new("/nonexistent/libcufile.so.0"),
        )],
        "cufile",
    );
    assert!(
        log.lines().any(|l| l.contains("ERROR")
            && l.contains("backend: HIPFILE_BACKEND=cufile cannot be honoured")),
        "{log}"
    );
}

#[test]
fn auto_without_nvidia_fs_serves_from_the_engine_and_says_why() {
    if Path::new("/proc/driver/nvidia-fs").exists() {
        panic!("this test needs a machine without nvidia-fs; this one has it");
    }
    let lib = answering_libcufile();
    let log = run(
        &program("auto"),
        "engine",
        &[("HIPFILE_CUFILE_LIB", &lib)],
        "auto",
    );
    assert!(log.contains("backend: engine"), "{log}");
    assert!(log.contains("nvidia-fs is not loaded"), "{log}");
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("backend:") && !l.contains("storage backend:"))
            .count(),
        1,
        "the decision is logged once: {log}"
    );
}

#[test]
fn engine_choice_never_loads_libcufile() {
    let lib = answering_libcufile();
    let log = run(
        &program("engine"),
        "engine",
        &[("HIPFILE_CUFILE_LIB", &lib)],
        "engine",
    );
    assert!(
        log.contains("backend: engine (HIPFILE_BACKEND=engine)"),
        "{log}"
    );
}
