//! The probe as libhipfile runs it: `hipfile-gds-probe` in a child process,
//! on stand-ins for libcufile that behave each way a real one can
//! (tests/gds/fake_cufile.c), and on NVIDIA's real libcufile 1.15 from the
//! PyPI wheel (scripts/fetch-cufile-sdk.sh), which on a machine without a GPU
//! must be refused in bounded time, without harm to the caller.

#[path = "../../tests/support/native.rs"]
mod native;

use hipfile_gds::abi::CuFileError;
use hipfile_gds::probe::Outcome;
use hipfile_gds::select::probe_in_child;
use native::{nvidia_libcufile, repo};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hipfile-gds-probe"))
}

/// A directory of its own for each test (they run in parallel).
fn scratch(name: &str) -> PathBuf {
    let base = std::env::var_os("HIPFILE_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let d = base.join(format!("gds-probe-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// tests/gds/fake_cufile.c built with -DFAKE_<mode>, as `libcufile.so.0` in `dir`.
fn fake(dir: &Path, mode: &str) -> PathBuf {
    let so = dir.join("libcufile.so.0");
    let status = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-DFAKE_{mode}"))
        .arg(repo().join("tests/gds/fake_cufile.c"))
        .arg("-o")
        .arg(&so)
        .status()
        .expect("gcc is needed for the probe tests");
    assert!(status.success(), "building the {mode} stand-in failed");
    so
}

fn probe(mode: &str, limit: Duration) -> (Outcome, PathBuf) {
    let dir = scratch(mode);
    let lib = fake(&dir, mode);
    (probe_in_child(&helper(), &lib, &dir, limit), dir)
}

/// No probe file is left behind, whatever happened to the child.
fn assert_clean(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with(".hipfile-gds-probe"))
        .collect();
    assert!(
        left.is_empty(),
        "probe files left in {}: {left:?}",
        dir.display()
    );
    let _ = std::fs::remove_dir_all(dir);
}

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn gds_that_works_with_compat_mode_off_is_found() {
    let (o, dir) = probe("WORKS", LIMIT);
    assert_eq!(
        o,
        Outcome::Works {
            nvfs: (2, 17),
            status_flags: 1 << 4
        }
    );
    assert_clean(&dir);
}

#[test]
fn pci_p2pdma_without_nvidia_fs_counts_as_a_direct_path() {
    let (o, dir) = probe("P2P", LIMIT);
    assert!(matches!(o, Outcome::Works { nvfs: (0, 0), .. }), "{o:?}");
    assert_clean(&dir);
}

#[test]
fn driver_open_failure_is_reported_with_its_code() {
    let (o, dir) = probe("OPEN_5001", LIMIT);
    assert_eq!(
        o,
        Outcome::DriverOpenFailed(CuFileError {
            err: 5001,
            cu_err: 0
        })
    );
    assert_clean(&dir);
}

#[test]
fn compatibility_mode_only_is_reported() {
    let (o, dir) = probe("COMPAT", LIMIT);
    assert_eq!(
        o,
        Outcome::CompatMode {
            nvfs: (0, 0),
            status_flags: 0
        }
    );
    assert_clean(&dir);
}

#[test]
fn registration_failing_with_5027_is_reported() {
    let (o, dir) = probe("REG_5027", LIMIT);
    assert_eq!(
        o,
        Outcome::RegisterFailed(CuFileError {
            err: 5027,
            cu_err: 0
        })
    );
    assert_clean(&dir);
}

#[test]
fn a_driver_open_that_never_returns_is_killed_at_the_limit() {
    let limit = Duration::from_millis(500);
    let (o, dir) = probe("HANG", limit);
    assert_eq!(o, Outcome::TimedOut(limit));
    assert_clean(&dir);
}

#[test]
fn a_crash_in_the_library_is_contained_in_the_child() {
    let (o, dir) = probe("CRASH", LIMIT);
    match &o {
        Outcome::Died(why) => assert!(why.contains("SIGSEGV") || why.contains("11"), "{why}"),
        o => panic!("{o:?}"),
    }
    assert_clean(&dir);
}

#[test]
fn hipfile_rs_own_front_is_refused() {
    let (o, dir) = probe("FRONT", LIMIT);
    assert_eq!(o, Outcome::OwnFront);
    assert_clean(&dir);
}

#[test]
fn a_probe_directory_that_cannot_hold_files_is_reported() {
    let dir = scratch("nodir");
    let lib = fake(&dir, "WORKS");
    let o = probe_in_child(&helper(), &lib, &dir.join("missing"), LIMIT);
    assert!(
        matches!(&o, Outcome::ProbeFile(m) if m.contains("missing")),
        "{o:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn real_libcufile_without_a_gpu_is_refused_in_bounded_time() {
    let dir = scratch("real");
    let o = probe_in_child(&helper(), &nvidia_libcufile(), &dir, LIMIT);
    // No libcuda here: the driver cannot open with compatibility mode off.
    assert!(matches!(o, Outcome::DriverOpenFailed(_)), "{o:?}");
    assert_clean(&dir);
}
