//! The parts of NVIDIA's `cufile.h` (1.15) that the passthrough and the probe
//! call, declared here from the header's documented layouts (the header itself
//! is NVIDIA's and is not part of this repository). Handles, streams and the
//! batch structures are passed through as opaque pointers: their layouts equal
//! hipFile's (`CUfileDescr_t`, `CUfileIOParams_t`, `CUfileIOEvents_t`), which
//! the cuFile front's C tests check against the real header.

use std::ffi::{c_char, c_int, c_long, c_uint, c_void};

/// `CUfileError_t`: {`CUfileOpError err`; `CUresult cu_err`}, 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CuFileError {
    pub err: i32,
    pub cu_err: i32,
}

impl CuFileError {
    pub const SUCCESS: CuFileError = CuFileError { err: 0, cu_err: 0 };

    pub fn is_ok(self) -> bool {
        self.err == 0
    }
}

impl std::fmt::Display for CuFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.cu_err != 0 {
            write!(f, "{} (CUDA error {})", self.err, self.cu_err)
        } else {
            write!(f, "{}", self.err)
        }
    }
}

/// `CUfileDrvProps_t` of cufile.h 1.15: 56 bytes. The cache and pinned sizes
/// are `unsigned` (KiB), unlike hipFile's 64-bit fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CuFileDrvProps {
    pub nvfs_major_version: c_uint,
    pub nvfs_minor_version: c_uint,
    pub nvfs_poll_thresh_size: usize,
    pub nvfs_max_direct_io_size: usize,
    pub nvfs_dstatusflags: c_uint,
    pub nvfs_dcontrolflags: c_uint,
    pub fflags: c_uint,
    pub max_device_cache_size: c_uint,
    pub per_buffer_cache_size: c_uint,
    pub max_device_pinned_mem_size: c_uint,
    pub max_batch_io_size: c_uint,
    pub max_batch_io_timeout_msecs: c_uint,
}

const _: () = {
    assert!(std::mem::size_of::<CuFileError>() == 8);
    assert!(std::mem::size_of::<CuFileDrvProps>() == 56);
    assert!(std::mem::offset_of!(CuFileDrvProps, nvfs_dstatusflags) == 24);
    assert!(std::mem::offset_of!(CuFileDrvProps, fflags) == 32);
    assert!(std::mem::offset_of!(CuFileDrvProps, max_batch_io_size) == 48);
};

/// `CUfileDescr_t`: type @0, the handle union (`int fd` / `void *handle`) @8,
/// fs_ops @16; 24 bytes. The union is declared here by its `fd` member, with
/// the padding before it and the pointer's upper half after it spelled out.
#[repr(C)]
pub struct CuFileDescr {
    pub kind: c_int,
    pub _pad: c_int,
    pub fd: c_int,
    pub _handle_high: c_int,
    pub fs_ops: *const c_void,
}

const _: () = {
    assert!(std::mem::size_of::<CuFileDescr>() == 24);
    assert!(std::mem::offset_of!(CuFileDescr, fd) == 8);
    assert!(std::mem::offset_of!(CuFileDescr, fs_ops) == 16);
};

/// `CU_FILE_HANDLE_TYPE_OPAQUE_FD`.
pub const HANDLE_TYPE_OPAQUE_FD: c_int = 1;
/// `CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE` (`CUFileBoolConfigParameter_t`).
pub const PARAM_ALLOW_COMPAT_MODE: c_int = 1;
/// `CU_FILE_NVME_P2P_SUPPORTED`: a bit position of `nvfs.dstatusflags`. Set
/// when the kernel's PCI P2PDMA gives a direct path without nvidia-fs.
pub const NVME_P2P_SUPPORTED_BIT: u32 = 11;

pub type HandleRegisterFn = unsafe extern "C" fn(*mut *mut c_void, *mut c_void) -> CuFileError;
pub type HandleDeregisterFn = unsafe extern "C" fn(*mut c_void);
pub type BufRegisterFn = unsafe extern "C" fn(*const c_void, usize, c_int) -> CuFileError;
pub type BufDeregisterFn = unsafe extern "C" fn(*const c_void) -> CuFileError;
pub type ReadFn = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, i64, i64) -> isize;
pub type WriteFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize, i64, i64) -> isize;
pub type VoidFn = unsafe extern "C" fn() -> CuFileError;
pub type UseCountFn = unsafe extern "C" fn() -> c_long;
pub type GetPropertiesFn = unsafe extern "C" fn(*mut CuFileDrvProps) -> CuFileError;
pub type SetPollModeFn = unsafe extern "C" fn(bool, usize) -> CuFileError;
pub type SetSizeFn = unsafe extern "C" fn(usize) -> CuFileError;
pub type BatchSetUpFn = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> CuFileError;
pub type BatchSubmitFn =
    unsafe extern "C" fn(*mut c_void, c_uint, *mut c_void, c_uint) -> CuFileError;
pub type BatchGetStatusFn = unsafe extern "C" fn(
    *mut c_void,
    c_uint,
    *mut c_uint,
    *mut c_void,
    *mut libc::timespec,
) -> CuFileError;
pub type BatchCancelFn = unsafe extern "C" fn(*mut c_void) -> CuFileError;
pub type BatchDestroyFn = unsafe extern "C" fn(*mut c_void);
pub type AsyncFn = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *mut usize,
    *mut i64,
    *mut i64,
    *mut isize,
    *mut c_void,
) -> CuFileError;
pub type StreamRegisterFn = unsafe extern "C" fn(*mut c_void, c_uint) -> CuFileError;
pub type StreamDeregisterFn = unsafe extern "C" fn(*mut c_void) -> CuFileError;
pub type GetVersionFn = unsafe extern "C" fn(*mut c_int) -> CuFileError;
pub type GetParamSizeTFn = unsafe extern "C" fn(c_int, *mut usize) -> CuFileError;
pub type GetParamBoolFn = unsafe extern "C" fn(c_int, *mut bool) -> CuFileError;
pub type GetParamStringFn = unsafe extern "C" fn(c_int, *mut c_char, c_int) -> CuFileError;
pub type SetParamSizeTFn = unsafe extern "C" fn(c_int, usize) -> CuFileError;
pub type SetParamBoolFn = unsafe extern "C" fn(c_int, bool) -> CuFileError;
pub type SetParamStringFn = unsafe extern "C" fn(c_int, *const c_char) -> CuFileError;
