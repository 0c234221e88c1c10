//! Builds the C programs in tests/cufile against NVIDIA's real cufile.h (from
//! the PyPI wheel that scripts/fetch-cufile-sdk.sh unpacks into
//! target/cufile-sdk), links them to the libcufile.so that cargo just built,
//! and runs them. A missing header is a failure that says how to fetch it.

#[path = "../../tests/support/native.rs"]
mod native;

use native::{cufile_sdk, deps_with, repo, run_ok, test_dir, CBuild};
use std::path::{Path, PathBuf};
use std::process::Command;

/// NVIDIA's headers and library; a missing header fails the test with how to
/// fetch it.
pub fn sdk() -> PathBuf {
    let sdk = cufile_sdk();
    assert!(
        sdk.join("include/cufile.h").is_file() && sdk.join("include/cuda.h").is_file(),
        "{} lacks include/cufile.h or include/cuda.h: run scripts/fetch-cufile-sdk.sh \
         (scripts/test.sh does); the cuFile front is tested against NVIDIA's real header",
        sdk.display()
    );
    sdk
}

fn lib_dir() -> PathBuf {
    deps_with("libcufile.so")
}

fn compile(src: &str, extra: &[&str], suffix: &str) -> PathBuf {
    let lib = lib_dir();
    let out = lib.join("cufile-c-tests");
    std::fs::create_dir_all(&out).unwrap();
    let stem = Path::new(src).file_stem().unwrap().to_str().unwrap();
    let exe = out.join(format!("{stem}{suffix}"));
    CBuild {
        cc: "gcc",
        std: "-std=c11",
        include: &sdk().join("include"),
        extra,
        lib_dir: &lib,
        libs: &["-lcufile", "-ldl"],
    }
    .compile(&repo().join("tests/cufile").join(src), &exe);
    exe
}

fn run(exe: &Path, args: &[&str]) {
    run_ok(exe, args, &[], &lib_dir());
}

#[test]
fn layouts_match_nvidias_header() {
    run(&compile("layout.c", &[], ""), &[]);
}

#[test]
fn every_function_against_nvidias_header() {
    run(&compile("api.c", &[], ""), &[&test_dir()]);
}

#[test]
fn every_function_under_asan() {
    let exe = compile(
        "api.c",
        &[
            "-fsanitize=address,undefined",
            "-fno-omit-frame-pointer",
            "-fno-sanitize-recover=all",
        ],
        "-asan",
    );
    run(&exe, &[&test_dir()]);
}

/// The library exports cufile.h's functions and the front's marker, nothing
/// else: the hipFile code it contains stays local (cufile/build.rs).
#[test]
fn exports_are_the_cufile_api_only() {
    let so = lib_dir().join("libcufile.so");
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .expect("nm (binutils) is needed");
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect();
    let map = std::fs::read_to_string(repo().join("cufile/libcufile.map")).unwrap();
    let mut want: Vec<String> = map
        .lines()
        .map(str::trim)
        .filter(|l| (l.starts_with("cuFile") || l.starts_with("hipfile_")) && l.ends_with(';'))
        .map(|l| l.trim_end_matches(';').to_string())
        .collect();
    want.sort();
    let mut got = names.clone();
    got.sort();
    assert_eq!(got, want, "exports of {}", so.display());
    // Every function NVIDIA's header declares is exported.
    let header = std::fs::read_to_string(sdk().join("include/cufile.h")).unwrap();
    for line in header.lines() {
        let l = line.trim_start();
        if !(l.starts_with("CUfileError_t cuFile")
            || l.starts_with("ssize_t cuFile")
            || l.starts_with("void cuFile")
            || l.starts_with("long cuFile"))
        {
            continue;
        }
        let name: String = l
            .split_whitespace()
            .nth(1)
            .unwrap()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        assert!(got.contains(&name), "{name} (cufile.h) is not exported");
    }
    let soname = Command::new("readelf").arg("-d").arg(&so).output().unwrap();
    assert!(
        String::from_utf8_lossy(&soname.stdout).contains("Library soname: [libcufile.so.0]"),
        "SONAME is not libcufile.so.0"
    );
}
