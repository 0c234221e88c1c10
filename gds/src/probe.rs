//! Does GDS work here? Asked of NVIDIA's libcufile in a child process
//! (`hipfile-gds-probe`), which prints one line that the parent parses.
//!
//! The question is whether cuFile has a direct path, not whether it loads:
//! with compatibility mode on, libcufile opens its driver on any machine and
//! then moves data through host memory with POSIX calls (or, as libcufile
//! 1.15 does on a VM without udev, fails every `cuFileHandleRegister` with
//! 5027). So the probe turns compatibility mode off before opening the
//! driver, requires that the driver reports nvidia-fs (a non-zero version) or
//! PCI P2PDMA support, and registers a freshly written `O_DIRECT` file on the
//! filesystem being probed.

use crate::abi::*;
use crate::library::{CuFile, LoadError};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// What the probe found (or, for the last four, what became of it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A direct path exists: the driver opened with compatibility mode off,
    /// and the probe file registered.
    Works { nvfs: (u32, u32), status_flags: u32 },
    /// The library could not be loaded or lacks a function.
    LoadFailed(String),
    /// The library is hipfile-rs's own cuFile front.
    OwnFront,
    /// `cuFileDriverOpen` failed (with compatibility mode off).
    DriverOpenFailed(CuFileError),
    /// `cuFileDriverGetProperties` failed.
    PropertiesFailed(CuFileError),
    /// The driver opened without nvidia-fs and without P2PDMA: compatibility
    /// mode only.
    CompatMode { nvfs: (u32, u32), status_flags: u32 },
    /// The probe file could not be created or written.
    ProbeFile(String),
    /// `cuFileHandleRegister` of the probe file failed.
    RegisterFailed(CuFileError),
    /// The child was still running at the limit and was killed.
    TimedOut(Duration),
    /// The child ended without a result line (crash, signal, exit).
    Died(String),
    /// The child could not be started.
    SpawnFailed(String),
    /// `hipfile-gds-probe` was not found.
    NoHelper(String),
}

/// Prefix of the result line, which sets it apart from anything libcufile
/// itself prints.
pub const LINE_PREFIX: &str = "hipfile-gds-probe:";

impl Outcome {
    /// The result line the child prints.
    pub fn to_line(&self) -> String {
        let body = match self {
            Outcome::Works { nvfs, status_flags } => {
                format!("works {} {} {status_flags}", nvfs.0, nvfs.1)
            }
            Outcome::CompatMode { nvfs, status_flags } => {
                format!("compat {} {} {status_flags}", nvfs.0, nvfs.1)
            }
            Outcome::LoadFailed(m) => format!("load {}", one_line(m)),
            Outcome::OwnFront => "own-front".into(),
            Outcome::DriverOpenFailed(e) => format!("open {} {}", e.err, e.cu_err),
            Outcome::PropertiesFailed(e) => format!("props {} {}", e.err, e.cu_err),
            Outcome::ProbeFile(m) => format!("file {}", one_line(m)),
            Outcome::RegisterFailed(e) => format!("register {} {}", e.err, e.cu_err),
            Outcome::TimedOut(d) => format!("timeout {}", d.as_millis()),
            Outcome::Died(m) => format!("died {}", one_line(m)),
            Outcome::SpawnFailed(m) => format!("spawn {}", one_line(m)),
            Outcome::NoHelper(m) => format!("no-helper {}", one_line(m)),
        };
        format!("{LINE_PREFIX} {body}")
    }

    /// The outcome in the last result line of `stdout`, if there is one.
    pub fn from_output(stdout: &str) -> Option<Outcome> {
        let line = stdout
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(LINE_PREFIX)?.strip_prefix(' '))?;
        let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
        let nums: Vec<i64> = rest
            .split_whitespace()
            .map(|w| w.parse().ok())
            .collect::<Option<_>>()
            .unwrap_or_default();
        let err = || match nums[..] {
            [err, cu_err] => Some(CuFileError {
                err: err as i32,
                cu_err: cu_err as i32,
            }),
            _ => None,
        };
        let props = || match nums[..] {
            [a, b, f] => Some(((a as u32, b as u32), f as u32)),
            _ => None,
        };
        Some(match kind {
            "works" => {
                let (nvfs, status_flags) = props()?;
                Outcome::Works { nvfs, status_flags }
            }
            "compat" => {
                let (nvfs, status_flags) = props()?;
                Outcome::CompatMode { nvfs, status_flags }
            }
            "load" => Outcome::LoadFailed(rest.to_string()),
            "own-front" => Outcome::OwnFront,
            "open" => Outcome::DriverOpenFailed(err()?),
            "props" => Outcome::PropertiesFailed(err()?),
            "file" => Outcome::ProbeFile(rest.to_string()),
            "register" => Outcome::RegisterFailed(err()?),
            "timeout" => Outcome::TimedOut(Duration::from_millis(*nums.first()? as u64)),
            "died" => Outcome::Died(rest.to_string()),
            "spawn" => Outcome::SpawnFailed(rest.to_string()),
            "no-helper" => Outcome::NoHelper(rest.to_string()),
            _ => return None,
        })
    }

    /// Why the engine serves, or why cuFile does, in words for the log.
    pub fn describe(&self) -> String {
        match self {
            Outcome::Works { nvfs, status_flags } => format!(
                "GDS works: the driver opened with compatibility mode off (nvidia-fs {}.{}, \
                 status flags {status_flags:#x}) and an O_DIRECT probe file registered",
                nvfs.0, nvfs.1
            ),
            Outcome::LoadFailed(m) => format!("libcufile could not be loaded: {m}"),
            Outcome::OwnFront => {
                "the libcufile found is hipfile-rs's own cuFile front, not NVIDIA's".into()
            }
            Outcome::DriverOpenFailed(e) => format!(
                "cuFileDriverOpen with compatibility mode off failed with {e}{}",
                if e.err == 5001 {
                    " (nvidia-fs is not loaded)"
                } else {
                    ""
                }
            ),
            Outcome::PropertiesFailed(e) => {
                format!("cuFileDriverGetProperties failed with {e}")
            }
            Outcome::CompatMode { nvfs, status_flags } => format!(
                "cuFile runs in compatibility mode only (nvidia-fs version {}.{}, no PCI P2PDMA; \
                 status flags {status_flags:#x})",
                nvfs.0, nvfs.1
            ),
            Outcome::ProbeFile(m) => format!("the probe file failed: {m}"),
            Outcome::RegisterFailed(e) => format!(
                "cuFileHandleRegister of an O_DIRECT probe file failed with {e}{}",
                if e.err == 5027 {
                    " (libcufile 1.15 answers so where udev is missing, as in most VMs and containers)"
                } else {
                    ""
                }
            ),
            Outcome::TimedOut(d) => format!(
                "the probe (cuFileDriverOpen and a file registration in a child process) did not \
                 finish within {} s and was killed",
                d.as_secs_f64()
            ),
            Outcome::Died(m) => format!("the probe process ended without a result: {m}"),
            Outcome::SpawnFailed(m) => format!("the probe process could not be started: {m}"),
            Outcome::NoHelper(m) => format!("the probe helper was not found: {m}"),
        }
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// The probe itself, run inside `hipfile-gds-probe`: load `lib`, open the
/// driver with compatibility mode off, check its properties, register a new
/// `O_DIRECT` file at `file` (created here, removed before returning).
pub fn run(lib: &Path, file: &Path) -> Outcome {
    let cu = match CuFile::open(lib) {
        Ok(c) => c,
        Err(LoadError::OwnFront) => return Outcome::OwnFront,
        Err(e) => return Outcome::LoadFailed(format!("{}: {e}", lib.display())),
    };
    if let Some(set) = cu.set_parameter_bool {
        // SAFETY: cufile.h's cuFileSetParameterBool(param, value); staged
        // before the driver opens, as the API requires.
        let e = unsafe { set(PARAM_ALLOW_COMPAT_MODE, false) };
        if !e.is_ok() {
            return Outcome::LoadFailed(format!(
                "cuFileSetParameterBool(ALLOW_COMPAT_MODE, false) failed with {e}"
            ));
        }
    }
    // SAFETY: cuFileDriverOpen takes no arguments.
    let e = unsafe { (cu.driver_open)() };
    if !e.is_ok() {
        return Outcome::DriverOpenFailed(e);
    }
    let outcome = probe_open_driver(&cu, file);
    // SAFETY: closes the driver opened above.
    unsafe { (cu.driver_close)() };
    outcome
}

fn probe_open_driver(cu: &CuFile, file: &Path) -> Outcome {
    let mut p = CuFileDrvProps::default();
    // SAFETY: `p` is a live CUfileDrvProps_t (layout of cufile.h 1.15).
    let e = unsafe { (cu.driver_get_properties)(&mut p) };
    if !e.is_ok() {
        return Outcome::PropertiesFailed(e);
    }
    let nvfs = (p.nvfs_major_version, p.nvfs_minor_version);
    let p2p = p.nvfs_dstatusflags & (1 << NVME_P2P_SUPPORTED_BIT) != 0;
    if nvfs == (0, 0) && !p2p {
        return Outcome::CompatMode {
            nvfs,
            status_flags: p.nvfs_dstatusflags,
        };
    }
    let fd = match create_probe_file(file) {
        Ok(fd) => fd,
        Err(m) => return Outcome::ProbeFile(m),
    };
    let mut descr = CuFileDescr {
        kind: HANDLE_TYPE_OPAQUE_FD,
        _pad: 0,
        fd,
        _handle_high: 0,
        fs_ops: std::ptr::null(),
    };
    let mut fh: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: `fh` and `descr` are live locals of cufile.h's types.
    let e = unsafe { (cu.handle_register)(&mut fh, (&mut descr as *mut CuFileDescr).cast()) };
    if e.is_ok() {
        // SAFETY: `fh` was just registered.
        unsafe { (cu.handle_deregister)(fh) };
    }
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    let _ = std::fs::remove_file(file);
    if !e.is_ok() {
        return Outcome::RegisterFailed(e);
    }
    Outcome::Works {
        nvfs,
        status_flags: p.nvfs_dstatusflags,
    }
}

/// Creates `file` with O_DIRECT and writes one aligned 4 KiB block.
fn create_probe_file(file: &Path) -> Result<i32, String> {
    let c = CString::new(file.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: `c` is a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_DIRECT | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return Err(format!(
            "cannot create {} with O_DIRECT: {}",
            file.display(),
            std::io::Error::last_os_error()
        ));
    }
    let layout = std::alloc::Layout::from_size_align(4096, 4096).map_err(|e| e.to_string())?;
    // SAFETY: a non-zero-sized layout.
    let block = unsafe { std::alloc::alloc_zeroed(layout) };
    // SAFETY: `block` is 4096 bytes (or NULL, which write rejects with EFAULT).
    let n = unsafe { libc::pwrite(fd, block.cast(), 4096, 0) };
    let err = std::io::Error::last_os_error();
    if !block.is_null() {
        // SAFETY: allocated above with `layout`.
        unsafe { std::alloc::dealloc(block, layout) };
    }
    if n != 4096 {
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(fd) };
        let _ = std::fs::remove_file(file);
        return Err(format!(
            "cannot write {} with O_DIRECT: {err}",
            file.display()
        ));
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_survives_its_result_line() {
        let e = CuFileError {
            err: 5027,
            cu_err: 0,
        };
        for o in [
            Outcome::Works {
                nvfs: (2, 17),
                status_flags: 0x10,
            },
            Outcome::CompatMode {
                nvfs: (0, 0),
                status_flags: 0,
            },
            Outcome::LoadFailed("dlopen failed: x: cannot open".into()),
            Outcome::OwnFront,
            Outcome::DriverOpenFailed(CuFileError {
                err: 5011,
                cu_err: 3,
            }),
            Outcome::PropertiesFailed(e),
            Outcome::ProbeFile("cannot create /x: Permission denied".into()),
            Outcome::RegisterFailed(e),
            Outcome::TimedOut(Duration::from_millis(1500)),
            Outcome::Died("signal 11".into()),
            Outcome::SpawnFailed("No such file".into()),
            Outcome::NoHelper("looked in /x".into()),
        ] {
            let line = o.to_line();
            let stdout = format!("noise libcufile printed\n{line}\n");
            assert_eq!(Outcome::from_output(&stdout), Some(o), "{line}");
        }
    }

    #[test]
    fn output_without_a_result_line_has_no_outcome() {
        assert_eq!(Outcome::from_output("dlopen error libcuda.so.1\n"), None);
        assert_eq!(
            Outcome::from_output(&format!("{LINE_PREFIX} open 5001\n")),
            None,
            "a truncated line is not a result"
        );
    }

    #[test]
    fn a_5027_registration_failure_is_explained() {
        let d = Outcome::RegisterFailed(CuFileError {
            err: 5027,
            cu_err: 0,
        })
        .describe();
        assert!(d.contains("5027") && d.contains("udev"), "{d}");
    }
}
