//! Engine errors and the hipFile operation codes they map to.

use crate::gpu::GpuError;
use std::fmt;

/// `hipFileOpError_t` values (identical to cuFile's `CUfileOpError`).
/// 5021 and 5032 are intentionally unused, as upstream.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpError {
    Success = 0,
    DriverNotInitialized = 5001,
    DriverInvalidProps = 5002,
    DriverUnsupportedLimit = 5003,
    DriverVersionMismatch = 5004,
    DriverVersionReadError = 5005,
    DriverClosing = 5006,
    PlatformNotSupported = 5007,
    IoNotSupported = 5008,
    DeviceNotSupported = 5009,
    DriverError = 5010,
    HipDriverError = 5011,
    HipPointerInvalid = 5012,
    HipMemoryTypeInvalid = 5013,
    HipPointerRangeError = 5014,
    HipContextMismatch = 5015,
    InvalidMappingSize = 5016,
    InvalidMappingRange = 5017,
    InvalidFileType = 5018,
    InvalidFileOpenFlag = 5019,
    DioNotSet = 5020,
    InvalidValue = 5022,
    MemoryAlreadyRegistered = 5023,
    MemoryNotRegistered = 5024,
    PermissionDenied = 5025,
    DriverAlreadyOpen = 5026,
    HandleNotRegistered = 5027,
    HandleAlreadyRegistered = 5028,
    DeviceNotFound = 5029,
    InternalError = 5030,
    GetNewFdFailed = 5031,
    DriverSetupError = 5033,
    IoDisabled = 5034,
    BatchSubmitFailed = 5035,
    GpuMemoryPinningFailed = 5036,
    BatchFull = 5037,
    AsyncNotSupported = 5038,
    IoMaxError = 5039,
}

impl OpError {
    pub fn code(self) -> i32 {
        self as i32
    }
}

/// What can go wrong in the engine. Each variant maps to exactly one C return
/// convention (see `ffi`): `Os` → −1 with errno, `Op` → −code, `Gpu` → 5011/−hipError.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A system call failed with this errno (positive).
    Os(i32),
    /// A hipFile-level error.
    Op(OpError),
    /// The GPU runtime failed.
    Gpu(GpuError),
}

/// HIP and CUDA both number "invalid value" 1 (`hipErrorInvalidValue`,
/// `CUDA_ERROR_INVALID_VALUE`), so as a negative `ssize_t` it would read as −1,
/// the return that means "see errno".
const GPU_INVALID_VALUE: i32 = 1;

/// The C API's error conventions (spec §5.2), in one place:
///
/// | engine error | `hipFileError_t` | negative `ssize_t` |
/// |---|---|---|
/// | `Op(code)` | `{code, 0}` | −code |
/// | `Gpu(Driver { code })` | `{5011, code}` | −code; −5022 for code 1 |
/// | `Gpu(InvalidValue)` | `{5022, 0}` | −5022 |
/// | `Gpu(NotPresent)` | `{5029, 0}` | −5029 |
/// | `Os(errno)` | `{5030, 0}` (logged) | −errno (see `negative_code`) |
impl Error {
    /// The `hipFileError_t` fields `{err, hip_drv_err}` this error is reported as.
    /// A system error has no code of its own there: it becomes 5030, and the
    /// caller logs the errno.
    pub fn status(&self) -> (OpError, i32) {
        match self {
            Error::Op(op) => (*op, 0),
            Error::Gpu(GpuError::Driver { code, .. }) => (OpError::HipDriverError, *code),
            Error::Gpu(GpuError::InvalidValue(_)) => (OpError::InvalidValue, 0),
            Error::Gpu(GpuError::NotPresent(_)) => (OpError::DeviceNotFound, 0),
            Error::Os(_) => (OpError::InternalError, 0),
        }
    }

    /// This error as a negative `ssize_t`: −hipFileOpError, −(GPU runtime code)
    /// (−5022 for the runtime's "invalid value", which would otherwise read as −1),
    /// or −errno for a system error. Batch entries report −errno as it is (spec
    /// §5.7); `hipFileRead`/`Write` return −1 and set errno, and stream operations
    /// store −1, so those callers replace a system error's value themselves.
    pub fn negative_code(&self) -> i64 {
        match self {
            Error::Os(errno) => -(*errno as i64),
            Error::Gpu(GpuError::Driver { code, .. }) if *code == GPU_INVALID_VALUE => {
                -(OpError::InvalidValue.code() as i64)
            }
            Error::Gpu(GpuError::Driver { code, .. }) => -(*code as i64),
            e => -(e.status().0.code() as i64),
        }
    }

    pub fn last_os() -> Error {
        Error::Os(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }
}

impl From<OpError> for Error {
    fn from(e: OpError) -> Self {
        Error::Op(e)
    }
}

impl From<GpuError> for Error {
    fn from(e: GpuError) -> Self {
        Error::Gpu(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Os(errno) => write!(
                f,
                "{} (errno {errno})",
                std::io::Error::from_raw_os_error(*errno)
            ),
            Error::Op(op) => write!(f, "{op:?} ({})", op.code()),
            Error::Gpu(g) => write!(f, "GPU runtime: {g}"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    fn driver(code: i32) -> Error {
        Error::Gpu(GpuError::Driver { call: "test", code })
    }

    #[test]
    fn gpu_invalid_value_code_is_minus_5022_not_minus_1() {
        assert_eq!(driver(1).negative_code(), -5022);
        assert_eq!(
            Error::Gpu(GpuError::InvalidValue("x")).negative_code(),
            -5022
        );
    }

    #[test]
    fn gpu_driver_error_is_5011_with_its_code_and_minus_its_code() {
        assert_eq!(driver(999).status(), (OpError::HipDriverError, 999));
        assert_eq!(driver(999).negative_code(), -999);
        assert_eq!(driver(1).status(), (OpError::HipDriverError, 1));
    }

    #[test]
    fn missing_gpu_runtime_is_device_not_found() {
        let e = Error::Gpu(GpuError::NotPresent("none".into()));
        assert_eq!(e.status(), (OpError::DeviceNotFound, 0));
        assert_eq!(e.negative_code(), -5029);
    }

    #[test]
    fn op_error_is_its_code_both_ways() {
        let e = Error::Op(OpError::HandleNotRegistered);
        assert_eq!(e.status(), (OpError::HandleNotRegistered, 0));
        assert_eq!(e.negative_code(), -5027);
    }

    #[test]
    fn system_error_is_internal_error_or_minus_errno() {
        let e = Error::Os(libc::EIO);
        assert_eq!(e.status(), (OpError::InternalError, 0));
        assert_eq!(e.negative_code(), -(libc::EIO as i64));
    }
}
