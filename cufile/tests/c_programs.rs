//! Builds the C programs in tests/cufile against NVIDIA's real cufile.h (from
//! the PyPI wheel that scripts/fetch-cufile-sdk.sh unpacks into
//! target/cufile-sdk), links them to the libcufile.so that cargo just built,
//! and runs them. A missing header is a failure that says how to fetch it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// NVIDIA's headers and library (`HIPFILE_CUFILE_SDK`, else target/cufile-sdk).
pub fn sdk() -> PathBuf {
    let sdk = std::env::var_os("HIPFILE_CUFILE_SDK")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/cufile-sdk"));
    assert!(
        sdk.join("include/cufile.h").is_file() && sdk.join("include/cuda.h").is_file(),
        "{} lacks include/cufile.h or include/cuda.h: run scripts/fetch-cufile-sdk.sh \
         (scripts/test.sh does); the cuFile front is tested against NVIDIA's real header",
        sdk.display()
    );
    sdk
}

/// target/<profile>/deps, where `cargo test` built libcufile.so, with the
/// `libcufile.so.0` link that programs load by SONAME.
fn lib_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
        assert!(
            dir.join("libcufile.so").exists(),
            "libcufile.so was not built"
        );
        let soname = dir.join("libcufile.so.0");
        if std::fs::read_link(&soname).ok().as_deref() != Some(Path::new("libcufile.so")) {
            let _ = std::fs::remove_file(&soname);
            std::os::unix::fs::symlink("libcufile.so", &soname).unwrap();
        }
        dir
    })
    .clone()
}

fn compile(src: &str, extra: &[&str], suffix: &str) -> PathBuf {
    let lib = lib_dir();
    let out = lib.join("cufile-c-tests");
    std::fs::create_dir_all(&out).unwrap();
    let stem = Path::new(src).file_stem().unwrap().to_str().unwrap();
    let exe = out.join(format!("{stem}{suffix}"));
    let status = Command::new("gcc")
        .args(["-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(sdk().join("include"))
        .args(extra)
        .arg(repo().join("tests/cufile").join(src))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg("-lcufile")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-ldl")
        .status()
        .expect("gcc is needed for the C tests");
    assert!(status.success(), "compiling {src} failed");
    exe
}

fn run(exe: &Path, args: &[&str]) {
    let out = Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "{} failed ({}):\n{stdout}\n{stderr}",
        exe.display(),
        out.status
    );
}

fn tmp_dir() -> String {
    std::env::var("HIPFILE_TEST_DIR").unwrap_or_else(|_| std::env::temp_dir().display().to_string())
}

#[test]
fn layouts_match_nvidias_header() {
    run(&compile("layout.c", &[], ""), &[]);
}

#[test]
fn every_function_against_nvidias_header() {
    run(&compile("api.c", &[], ""), &[&tmp_dir()]);
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
    run(&exe, &[&tmp_dir()]);
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
