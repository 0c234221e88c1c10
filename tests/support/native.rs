//! What the test binaries that build and run native programs share: where the
//! repository, the libraries cargo just built and NVIDIA's cuFile SDK lie, how
//! a C program is compiled against them and how it is run. Each test binary
//! includes this file with `#[path = "../../tests/support/native.rs"] mod native;`.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (every crate that includes this file lies one level below it).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// target/<profile>/deps: where `cargo test` builds the cdylibs next to this
/// test binary (it does not copy them up to target/<profile>, so a library
/// there may be stale).
pub fn deps() -> PathBuf {
    std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

/// [`deps`], checked to hold `lib` (e.g. `libhipfile.so`), with the `lib.0`
/// link that programs load by SONAME.
pub fn deps_with(lib: &str) -> PathBuf {
    let dir = deps();
    let so = dir.join(lib);
    assert!(so.exists(), "{} was not built", so.display());
    let soname = dir.join(format!("{lib}.0"));
    let linked = || std::fs::read_link(&soname).ok().as_deref() == Some(Path::new(lib));
    if !linked() {
        let _ = std::fs::remove_file(&soname);
        // Tests running side by side may both make the link; either one serves.
        if let Err(e) = std::os::unix::fs::symlink(lib, &soname) {
            assert!(linked(), "linking {}: {e}", soname.display());
        }
    }
    dir
}

/// NVIDIA's cuFile headers and library from the PyPI wheels
/// (`HIPFILE_CUFILE_SDK`, else target/cufile-sdk, where
/// scripts/fetch-cufile-sdk.sh unpacks them).
pub fn cufile_sdk() -> PathBuf {
    std::env::var_os("HIPFILE_CUFILE_SDK")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/cufile-sdk"))
}

/// NVIDIA's libcufile 1.15 in [`cufile_sdk`]; a missing one fails the test
/// with how to fetch it.
pub fn nvidia_libcufile() -> PathBuf {
    let lib = cufile_sdk().join("lib/libcufile.so.0");
    assert!(
        lib.is_file(),
        "{} is missing: run scripts/fetch-cufile-sdk.sh (scripts/test.sh does)",
        lib.display()
    );
    lib
}

/// Where tests put their files (`HIPFILE_TEST_DIR`: tmpfs refuses O_DIRECT).
pub fn test_dir() -> String {
    std::env::var("HIPFILE_TEST_DIR").unwrap_or_else(|_| std::env::temp_dir().display().to_string())
}

/// How a C or C++ test program is compiled: warnings are errors, and it is
/// linked to `libs` in `lib_dir`, which it also loads from at run time.
pub struct CBuild<'a> {
    /// `gcc` or `g++`.
    pub cc: &'a str,
    /// `-std=c11`, `-std=c++17`.
    pub std: &'a str,
    /// The headers it is compiled against.
    pub include: &'a Path,
    /// More flags (sanitizers).
    pub extra: &'a [&'a str],
    pub lib_dir: &'a Path,
    /// `-l` flags.
    pub libs: &'a [&'a str],
}

impl CBuild<'_> {
    pub fn compile(&self, src: &Path, exe: &Path) {
        let status = Command::new(self.cc)
            .args([self.std, "-O1", "-g", "-Wall", "-Wextra", "-Werror"])
            .arg("-I")
            .arg(self.include)
            .args(self.extra)
            .arg(src)
            .arg("-o")
            .arg(exe)
            .arg("-L")
            .arg(self.lib_dir)
            .arg(format!("-Wl,-rpath,{}", self.lib_dir.display()))
            .args(self.libs)
            .status()
            .unwrap_or_else(|e| panic!("{} is needed for the C tests: {e}", self.cc));
        assert!(status.success(), "compiling {} failed", src.display());
    }
}

/// Runs `exe` with `env`, loading libraries from `lib_dir` first (cargo's
/// LD_LIBRARY_PATH may name target/<profile>, where an older, uplifted copy
/// can lie); it must exit 0. Echoes its output and returns its stderr.
pub fn run_ok(exe: &Path, args: &[&str], env: &[(&str, &str)], lib_dir: &Path) -> String {
    let out = Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir)
        .envs(env.iter().copied())
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
    stderr.into_owned()
}
