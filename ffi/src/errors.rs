//! What the C ABI returns when a call cannot do its work: the conversions from
//! engine errors to the spec's return conventions (§5.2; the table itself is
//! `hipfile_engine::error::Error::status`/`negative_code`), the fixed sentence
//! for each code, and the one panic boundary every entry point runs inside.

use crate::types::HipFileError;
use hipfile_engine::error::{Error, OpError};
use hipfile_engine::log_warn;
use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The sentence for `status` (`hipFileGetOpErrorString`). Buffers may be host or
/// device memory (the project accepts both), so the registration codes speak of
/// buffers, not device pointers.
pub fn op_error_string(status: i32) -> &'static CStr {
    match status {
        0 => c"hipFile success",
        5001 => c"hipFile driver is not initialized",
        5002 => c"invalid property",
        5003 => c"property range error",
        5004 => c"hipFile driver version mismatch",
        5005 => c"hipFile driver version read error",
        5006 => c"hipFile driver is closing",
        5007 => c"platform not supported",
        5008 => c"hipFile IO not supported",
        5009 => c"device not supported",
        5010 => c"hipFile kernel driver error",
        5011 => c"GPU driver error: Inspect hip_drv_err for the HIP error code",
        5012 => c"invalid device pointer",
        5013 => c"invalid pointer memory type",
        5014 => c"pointer range exceeds allocated address range",
        5015 => c"GPU context mismatch",
        5016 => c"access beyond maximum pinned size",
        5017 => c"access beyond mapped size",
        5018 => c"unsupported file type",
        5019 => c"unsupported file open flags",
        5020 => c"file descriptor is not opened with O_DIRECT",
        5022 => c"invalid arguments",
        5023 => c"buffer already registered",
        5024 => c"buffer not registered",
        5025 => c"permission denied",
        5026 => c"hipFile driver is already open",
        5027 => c"file descriptor is not registered",
        5028 => c"file descriptor is already registered",
        5029 => c"GPU device not found",
        5030 => c"internal error",
        5031 => c"failed to obtain new file descriptor",
        5033 => c"hipFile driver setup error",
        5034 => c"hipFile IO disabled",
        5035 => c"failed to submit batch operation",
        5036 => c"failed to pin GPU memory",
        5037 => c"batch is full",
        5038 => c"asynchronous IO not supported",
        5039 => c"IO max error",
        _ => c"Unknown hipFile error",
    }
}

/// Engine error → `hipFileError_t`. A system error has no code of its own there
/// (it becomes 5030), so its errno goes to the log, with the call's name.
pub(crate) fn to_error(name: &str, e: &Error) -> HipFileError {
    if let Error::Os(errno) = e {
        log_warn!(
            "{name}: {}; reported as hipFileInternalError (5030)",
            std::io::Error::from_raw_os_error(*errno)
        );
    }
    let (err, hip_drv_err) = e.status();
    HipFileError {
        err: err.code(),
        hip_drv_err,
    }
}

/// Engine result → the `ssize_t` of `hipFileRead`/`hipFileWrite`: bytes, or −1
/// with errno set for a system error, or `Error::negative_code`.
pub(crate) fn to_ssize(r: Result<usize, Error>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(Error::Os(errno)) => {
            // SAFETY: errno is thread-local; writing it is what a libc function does.
            unsafe { *libc::__errno_location() = errno };
            -1
        }
        Err(e) => e.negative_code() as isize,
    }
}

/// What an entry point returns when it cannot run at all: after a panic inside it.
pub trait Unavailable {
    fn unavailable() -> Self;
}

impl Unavailable for HipFileError {
    fn unavailable() -> Self {
        HipFileError::op(OpError::InternalError.code())
    }
}

/// `ssize_t` returns (`hipFileRead`/`hipFileWrite`).
impl Unavailable for isize {
    fn unavailable() -> Self {
        -(OpError::InternalError.code() as isize)
    }
}

/// `hipFileUseCount` (spec §5.1: −1 when the count cannot be read).
impl Unavailable for i64 {
    fn unavailable() -> Self {
        -1
    }
}

/// The `void` entry points (deregistration and batch destruction).
impl Unavailable for () {
    fn unavailable() -> Self {}
}

/// The boundary every entry point runs inside: runs `f`, and turns a panic
/// into `T::unavailable()` with a log line, so that no panic unwinds into C.
/// (A forked child is served by a fresh driver: see `hipfile_engine::fork`.)
pub fn boundary<T: Unavailable>(name: &str, f: impl FnOnce() -> T) -> T {
    // The C library's logger, unless the host process set one (a Rust
    // program that links the library routes our lines through its own).
    static LOGGER: std::sync::Once = std::sync::Once::new();
    LOGGER.call_once(|| {
        hipfile_engine::log::install_default();
    });
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(no message)");
            log_warn!("{name}: internal error (panic: {what}); the call failed, please report it");
            T::unavailable()
        }
    }
}

/// `boundary` for the entry points that return `hipFileError_t`.
pub(crate) fn guard(name: &str, f: impl FnOnce() -> Result<(), Error>) -> HipFileError {
    boundary(name, || match f() {
        Ok(()) => HipFileError::SUCCESS,
        Err(e) => to_error(name, &e),
    })
}

/// `boundary` for the entry points that return `ssize_t`.
pub(crate) fn guard_ssize(name: &str, f: impl FnOnce() -> Result<usize, Error>) -> isize {
    boundary(name, || to_ssize(f()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipfile_engine::gpu::GpuError;

    fn gpu(code: i32) -> Error {
        Error::Gpu(GpuError::Driver { call: "test", code })
    }

    fn errno() -> i32 {
        // SAFETY: reading this thread's errno.
        unsafe { *libc::__errno_location() }
    }

    #[test]
    fn sync_system_error_is_minus_1_with_errno() {
        assert_eq!(to_ssize(Err(Error::Os(libc::ENOSPC))), -1);
        assert_eq!(errno(), libc::ENOSPC);
    }

    #[test]
    fn sync_gpu_invalid_value_is_minus_5022() {
        assert_eq!(to_ssize(Err(gpu(1))), -5022);
    }

    #[test]
    fn sync_gpu_error_is_minus_its_code() {
        assert_eq!(to_ssize(Err(gpu(999))), -999);
    }

    #[test]
    fn sync_op_error_is_minus_its_code() {
        assert_eq!(to_ssize(Err(OpError::HandleNotRegistered.into())), -5027);
    }

    #[test]
    fn sync_gpu_errors_match_the_batch_convention() {
        for e in [
            gpu(1),
            gpu(2),
            gpu(999),
            Error::Gpu(GpuError::InvalidValue("x")),
        ] {
            let batch = hipfile_engine::batch::negative_code(&e);
            assert_eq!(to_ssize(Err(e)) as i64, batch);
        }
    }

    #[test]
    fn gpu_error_becomes_5011_with_its_code() {
        assert_eq!(
            to_error("t", &gpu(700)),
            HipFileError {
                err: 5011,
                hip_drv_err: 700
            }
        );
    }

    #[test]
    fn system_error_becomes_5030() {
        assert_eq!(
            to_error("t", &Error::Os(libc::EBADF)),
            HipFileError::op(5030)
        );
    }

    #[test]
    fn panic_becomes_5030_for_hipfile_error_returns() {
        assert_eq!(
            boundary("t", || -> HipFileError { panic!("boom") }),
            HipFileError::op(5030)
        );
    }

    #[test]
    fn panic_becomes_minus_5030_for_ssize_returns() {
        assert_eq!(boundary("t", || -> isize { panic!("boom") }), -5030);
    }

    #[test]
    fn panic_becomes_minus_1_for_the_use_count() {
        assert_eq!(boundary("t", || -> i64 { panic!("boom") }), -1);
    }

    #[test]
    fn panic_in_a_void_entry_point_returns() {
        boundary("t", || -> () {
            std::panic::panic_any(String::from("boom"))
        });
    }

    #[test]
    fn guard_passes_success_and_errors_through() {
        assert_eq!(guard("t", || Ok(())), HipFileError::SUCCESS);
        assert_eq!(
            guard("t", || Err(OpError::BatchFull.into())),
            HipFileError::op(5037)
        );
        assert_eq!(guard_ssize("t", || Ok(42)), 42);
    }

    #[test]
    fn registration_codes_do_not_say_device_pointer() {
        for code in [5023, 5024] {
            let s = op_error_string(code).to_str().unwrap();
            assert!(s.contains("buffer") && !s.contains("device"), "{code}: {s}");
        }
    }
}
