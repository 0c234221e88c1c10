//! Which backend serves libhipfile's calls: the engine, or NVIDIA's libcufile.
//!
//! `HIPFILE_BACKEND` = `auto` (default), `engine` or `cufile`:
//!
//! - `engine`: libcufile is never loaded.
//! - `cufile`: NVIDIA's libcufile serves whenever it can be loaded, without
//!   the probe (the user vouches that GDS works, e.g. PCI P2PDMA without
//!   nvidia-fs, which `auto` does not detect); if it cannot be loaded, the
//!   engine serves and the log says why, at error level.
//! - `auto`: libcufile serves only when it is installed, nvidia-fs is loaded
//!   (`/proc/driver/nvidia-fs` or a `/dev/nvidia-fs*` node), and the probe, run
//!   in a child process with a time limit ([`PROBE_LIMIT`]), found a direct
//!   path on the probe directory's filesystem (`HIPFILE_GDS_PROBE_DIR`, else
//!   the current directory). The checks run in that order and stop at the
//!   first that fails, so a machine without libcufile or nvidia-fs never
//!   starts a child.
//!
//! The decision is made once per process, at the first call that needs it,
//! and logged once with its reason (info level; error level when `cufile` was
//! asked for and cannot be honoured).

use crate::child::{self, ChildOutcome};
use crate::library::{self, CuFile};
use crate::probe::Outcome;
use hipfile_engine::{log_error, log_info, log_warn};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// `HIPFILE_BACKEND`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Auto,
    Engine,
    CuFile,
}

impl Choice {
    /// The value of `HIPFILE_BACKEND` (case-insensitive); unset or empty is
    /// `auto`, anything else unknown is `auto` with a warning.
    pub fn parse(value: Option<&str>) -> Choice {
        match value.map(str::trim) {
            None | Some("") => Choice::Auto,
            Some(v) if v.eq_ignore_ascii_case("auto") => Choice::Auto,
            Some(v) if v.eq_ignore_ascii_case("engine") => Choice::Engine,
            Some(v) if v.eq_ignore_ascii_case("cufile") => Choice::CuFile,
            Some(v) => {
                log_warn!(
                    "HIPFILE_BACKEND={v:?} is not one of \"auto\", \"engine\", \"cufile\"; using auto"
                );
                Choice::Auto
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    Engine,
    /// NVIDIA's libcufile at this path.
    CuFile(PathBuf),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub backend: Backend,
    pub reason: String,
    /// `cufile` was asked for and cannot be honoured (logged as an error).
    pub overruled: bool,
}

impl Decision {
    fn engine(reason: impl Into<String>) -> Decision {
        Decision {
            backend: Backend::Engine,
            reason: reason.into(),
            overruled: false,
        }
    }
}

/// What the decision looks at, as functions so that tests can stand in for
/// the machine. Each is called at most once, and only when needed.
pub struct Facts<'a> {
    /// NVIDIA's libcufile, if installed.
    pub library: &'a dyn Fn() -> Option<PathBuf>,
    /// nvidia-fs is loaded.
    pub nvidia_fs: &'a dyn Fn() -> bool,
    /// The probe's verdict on the library at this path.
    pub probe: &'a dyn Fn(&Path) -> Outcome,
}

/// The decision for `choice` on the machine `facts` describes.
pub fn decide(choice: Choice, facts: &Facts<'_>) -> Decision {
    if choice == Choice::Engine {
        return Decision::engine("HIPFILE_BACKEND=engine");
    }
    let Some(lib) = (facts.library)() else {
        let why = "no NVIDIA libcufile found (HIPFILE_CUFILE_LIB, $CUDA_HOME, /usr/local/cuda, \
                   the system library directories)";
        return Decision {
            overruled: choice == Choice::CuFile,
            ..Decision::engine(why)
        };
    };
    if choice == Choice::CuFile {
        return Decision {
            reason: format!("HIPFILE_BACKEND=cufile: {}", lib.display()),
            backend: Backend::CuFile(lib),
            overruled: false,
        };
    }
    if !(facts.nvidia_fs)() {
        return Decision::engine(format!(
            "{} is installed, but nvidia-fs is not loaded (no /proc/driver/nvidia-fs, no \
             /dev/nvidia-fs*), so cuFile would run in compatibility mode",
            lib.display()
        ));
    }
    match (facts.probe)(&lib) {
        o @ Outcome::Works { .. } => Decision {
            reason: format!("{}: {}", lib.display(), o.describe()),
            backend: Backend::CuFile(lib),
            overruled: false,
        },
        o => Decision::engine(format!("{}: {}", lib.display(), o.describe())),
    }
}

/// How long the probe may take: `cuFileDriverOpen` takes seconds on hosts
/// with many PCI devices (topology discovery), and never returns where newer
/// libcufile spins on a missing `/proc/modules`.
pub const PROBE_LIMIT: Duration = Duration::from_secs(20);

/// nvidia-fs is loaded: its proc entry or a device node exists under `root`.
pub fn nvidia_fs_present(root: &Path) -> bool {
    if root.join("proc/driver/nvidia-fs").exists() {
        return true;
    }
    std::fs::read_dir(root.join("dev")).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("nvidia-fs"))
    })
}

/// The directory of the object (shared library or program) this code is in.
fn own_dir() -> Option<PathBuf> {
    // SAFETY: Dl_info is plain data; all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let addr = own_dir as *const libc::c_void;
    // SAFETY: `addr` is a function of this object; `info` is a live out-parameter.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated file name owned by the loader.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes()));
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    path.parent().map(Path::to_path_buf)
}

/// Where `hipfile-gds-probe` is looked for, relative to the library holding
/// this code: `<libdir>/hipfile/` as `make install` lays it out, then the
/// library's own directory (the build tree, `.carry/`).
pub fn helper_candidates(dir: &Path) -> [PathBuf; 2] {
    [
        dir.join("hipfile").join("hipfile-gds-probe"),
        dir.join("hipfile-gds-probe"),
    ]
}

fn find_helper() -> Result<PathBuf, String> {
    let dir = own_dir().ok_or("dladdr cannot name the library holding libhipfile's code")?;
    let cands = helper_candidates(&dir);
    cands.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        format!(
            "looked for {} and {}",
            cands[0].display(),
            cands[1].display()
        )
    })
}

/// Runs the probe helper on `lib` with a fresh file in `dir`, for at most
/// `limit`, and removes the file whatever became of the child.
pub fn probe_in_child(helper: &Path, lib: &Path, dir: &Path, limit: Duration) -> Outcome {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let file = dir.join(format!(".hipfile-gds-probe-{}-{nanos}", std::process::id()));
    let mut cmd = Command::new(helper);
    cmd.arg("--lib").arg(lib).arg("--file").arg(&file);
    // libcufile writes `cufile.log` into the current directory unless told
    // otherwise: the probe's goes next to the probe file and is removed with it.
    let log = file.with_extension("log");
    let own_log = std::env::var_os("CUFILE_LOGFILE_PATH").is_none();
    if own_log {
        cmd.env("CUFILE_LOGFILE_PATH", &log);
    }
    let o = child::run(cmd, limit);
    let _ = std::fs::remove_file(&file);
    if own_log {
        let _ = std::fs::remove_file(&log);
    }
    match o {
        ChildOutcome::Exited {
            stdout,
            stderr,
            status,
        } => Outcome::from_output(&stdout).unwrap_or_else(|| {
            let last = stderr.lines().last().unwrap_or("").trim();
            Outcome::Died(match status {
                Some(s) => format!("{s}; last words: {last:?}"),
                None => format!("reaped elsewhere; last words: {last:?}"),
            })
        }),
        ChildOutcome::TimedOut { .. } => Outcome::TimedOut(limit),
        ChildOutcome::SpawnFailed(e) => Outcome::SpawnFailed(format!("{}: {e}", helper.display())),
    }
}

/// The real machine's facts and the decision, made and logged once by the
/// caller. For `Backend::CuFile` the library is loaded here, in this process;
/// if that fails the engine serves.
pub fn select() -> (Decision, Option<CuFile>) {
    let var = |k: &str| std::env::var(k).ok();
    let choice = Choice::parse(var("HIPFILE_BACKEND").as_deref());
    let library = || library::find(&var);
    let nvidia_fs = || nvidia_fs_present(Path::new("/"));
    let probe = |lib: &Path| {
        let helper = match find_helper() {
            Ok(h) => h,
            Err(e) => return Outcome::NoHelper(e),
        };
        let dir = var("HIPFILE_GDS_PROBE_DIR")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        probe_in_child(&helper, lib, &dir, PROBE_LIMIT)
    };
    let mut d = decide(
        choice,
        &Facts {
            library: &library,
            nvidia_fs: &nvidia_fs,
            probe: &probe,
        },
    );
    let mut lib = None;
    if let Backend::CuFile(path) = &d.backend {
        match CuFile::open(path) {
            Ok(cu) => lib = Some(cu),
            Err(e) => {
                d = Decision {
                    overruled: choice == Choice::CuFile,
                    ..Decision::engine(format!("{}: {e}", path.display()))
                }
            }
        }
    }
    match (&d.backend, d.overruled) {
        (Backend::CuFile(_), _) => {
            log_info!("backend: NVIDIA cuFile passthrough ({})", d.reason)
        }
        (Backend::Engine, true) => log_error!(
            "backend: HIPFILE_BACKEND=cufile cannot be honoured, the engine serves: {}",
            d.reason
        ),
        (Backend::Engine, false) => log_info!("backend: engine ({})", d.reason),
    }
    (d, lib)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::CuFileError;
    use std::cell::Cell;

    const LIB: &str = "/usr/local/cuda/lib64/libcufile.so.0";

    /// A machine with libcufile at LIB, nvidia-fs as given, and a probe that
    /// answers `outcome` (and counts its calls).
    fn machine(lib: bool, nvidia_fs: bool, outcome: Outcome, choice: Choice) -> (Decision, usize) {
        let calls = Cell::new(0);
        let library = || lib.then(|| PathBuf::from(LIB));
        let nvfs = || nvidia_fs;
        let probe = |_: &Path| {
            calls.set(calls.get() + 1);
            outcome.clone()
        };
        let d = decide(
            choice,
            &Facts {
                library: &library,
                nvidia_fs: &nvfs,
                probe: &probe,
            },
        );
        (d, calls.get())
    }

    fn works() -> Outcome {
        Outcome::Works {
            nvfs: (2, 17),
            status_flags: 1 << 4,
        }
    }

    #[test]
    fn gds_that_works_is_used() {
        let (d, probes) = machine(true, true, works(), Choice::Auto);
        assert_eq!(d.backend, Backend::CuFile(PathBuf::from(LIB)));
        assert_eq!(probes, 1);
        assert!(d.reason.contains("nvidia-fs 2.17"), "{}", d.reason);
    }

    #[test]
    fn absent_library_means_engine_without_a_probe() {
        let (d, probes) = machine(false, true, works(), Choice::Auto);
        assert_eq!(d.backend, Backend::Engine);
        assert_eq!(probes, 0);
        assert!(d.reason.contains("no NVIDIA libcufile"), "{}", d.reason);
        assert!(!d.overruled);
    }

    #[test]
    fn missing_nvidia_fs_means_engine_without_a_probe() {
        let (d, probes) = machine(true, false, works(), Choice::Auto);
        assert_eq!(d.backend, Backend::Engine);
        assert_eq!(probes, 0);
        assert!(d.reason.contains("nvidia-fs is not loaded"), "{}", d.reason);
    }

    #[test]
    fn driver_open_failure_means_engine() {
        let e = CuFileError {
            err: 5001,
            cu_err: 0,
        };
        let (d, _) = machine(true, true, Outcome::DriverOpenFailed(e), Choice::Auto);
        assert_eq!(d.backend, Backend::Engine);
        assert!(d.reason.contains("cuFileDriverOpen"), "{}", d.reason);
        assert!(d.reason.contains("5001"), "{}", d.reason);
    }

    #[test]
    fn compat_mode_means_engine() {
        let o = Outcome::CompatMode {
            nvfs: (0, 0),
            status_flags: 0,
        };
        let (d, _) = machine(true, true, o, Choice::Auto);
        assert_eq!(d.backend, Backend::Engine);
        assert!(d.reason.contains("compatibility mode"), "{}", d.reason);
    }

    #[test]
    fn registration_failing_with_5027_means_engine() {
        let e = CuFileError {
            err: 5027,
            cu_err: 0,
        };
        let (d, _) = machine(true, true, Outcome::RegisterFailed(e), Choice::Auto);
        assert_eq!(d.backend, Backend::Engine);
        assert!(
            d.reason.contains("cuFileHandleRegister") && d.reason.contains("5027"),
            "{}",
            d.reason
        );
    }

    #[test]
    fn a_probe_that_hangs_means_engine() {
        let (d, _) = machine(
            true,
            true,
            Outcome::TimedOut(Duration::from_secs(20)),
            Choice::Auto,
        );
        assert_eq!(d.backend, Backend::Engine);
        assert!(
            d.reason.contains("did not finish within 20 s"),
            "{}",
            d.reason
        );
    }

    #[test]
    fn a_probe_that_crashes_means_engine() {
        let (d, _) = machine(
            true,
            true,
            Outcome::Died("signal: 11 (SIGSEGV)".into()),
            Choice::Auto,
        );
        assert_eq!(d.backend, Backend::Engine);
    }

    #[test]
    fn engine_choice_looks_at_nothing() {
        let (d, probes) = machine(true, true, works(), Choice::Engine);
        assert_eq!(d.backend, Backend::Engine);
        assert_eq!(probes, 0);
        assert_eq!(d.reason, "HIPFILE_BACKEND=engine");
    }

    #[test]
    fn cufile_choice_skips_the_probe() {
        let (d, probes) = machine(
            true,
            false,
            Outcome::TimedOut(Duration::ZERO),
            Choice::CuFile,
        );
        assert_eq!(d.backend, Backend::CuFile(PathBuf::from(LIB)));
        assert_eq!(probes, 0);
    }

    #[test]
    fn cufile_choice_without_a_library_is_overruled() {
        let (d, _) = machine(false, true, works(), Choice::CuFile);
        assert_eq!(d.backend, Backend::Engine);
        assert!(d.overruled);
    }

    #[test]
    fn backend_values_parse_case_insensitively() {
        assert_eq!(Choice::parse(None), Choice::Auto);
        assert_eq!(Choice::parse(Some("")), Choice::Auto);
        assert_eq!(Choice::parse(Some("Engine")), Choice::Engine);
        assert_eq!(Choice::parse(Some("CUFILE")), Choice::CuFile);
        assert_eq!(Choice::parse(Some("gds")), Choice::Auto);
    }

    #[test]
    fn nvidia_fs_is_seen_through_proc_or_dev() {
        let root = std::env::temp_dir().join(format!("hipfile-gds-root-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("dev")).unwrap();
        std::fs::create_dir_all(root.join("proc/driver")).unwrap();
        assert!(!nvidia_fs_present(&root));
        std::fs::write(root.join("dev/nvidia-fs3"), b"").unwrap();
        assert!(nvidia_fs_present(&root));
        std::fs::remove_file(root.join("dev/nvidia-fs3")).unwrap();
        std::fs::write(root.join("proc/driver/nvidia-fs"), b"").unwrap();
        assert!(nvidia_fs_present(&root));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_helper_is_looked_for_in_the_install_layout_first() {
        let c = helper_candidates(Path::new("/usr/local/lib"));
        assert_eq!(
            c[0],
            PathBuf::from("/usr/local/lib/hipfile/hipfile-gds-probe")
        );
        assert_eq!(c[1], PathBuf::from("/usr/local/lib/hipfile-gds-probe"));
    }
}
