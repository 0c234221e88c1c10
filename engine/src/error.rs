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

impl Error {
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
