//! C layouts of `include/hipfile.h` (spec §2). Enum-typed fields are plain
//! integers: C may pass any value, and they are validated, never transmuted.

use std::ffi::c_void;

/// `hipFileError_t`: {err, hip_drv_err}, 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HipFileError {
    pub err: i32,
    pub hip_drv_err: i32,
}

impl HipFileError {
    pub const SUCCESS: HipFileError = HipFileError {
        err: 0,
        hip_drv_err: 0,
    };
    pub fn op(code: i32) -> HipFileError {
        HipFileError {
            err: code,
            hip_drv_err: 0,
        }
    }
}

/// `hipFileDescr_t`, 24 bytes: type @0, handle union @8, fs_ops @16.
#[repr(C)]
pub struct HipFileDescr {
    pub kind: i32,
    pub handle: HandleUnion,
    pub fs_ops: *const c_void,
}

#[repr(C)]
pub union HandleUnion {
    pub fd: i32,
    pub h_file: *mut c_void,
}

/// `hipFileDriverProps_t`, 72 bytes (spec §2.5).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HipFileDriverProps {
    pub nvfs_major_version: u32,
    pub nvfs_minor_version: u32,
    pub nvfs_poll_thresh_size: u64,
    pub nvfs_max_direct_io_size: u64,
    pub nvfs_driver_status_flags: u32,
    pub nvfs_driver_control_flags: u32,
    pub feature_flags: u32,
    pub max_device_cache_size: u64,
    pub per_buffer_cache_size: u64,
    pub max_device_pinned_mem_size: u64,
    pub max_batch_io_count: u32,
    pub max_batch_io_timeout_msecs: u32,
}

/// `hipFileIOParams_t`, 64 bytes (spec §2.8).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HipFileIoParams {
    pub mode: i32,
    pub dev_ptr_base: *mut c_void,
    pub file_offset: i64,
    pub dev_ptr_offset: i64,
    pub size: usize,
    pub fh: *mut c_void,
    pub opcode: i32,
    pub cookie: *mut c_void,
}

/// `hipFileIOEvents_t`, 24 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HipFileIoEvents {
    pub cookie: *mut c_void,
    pub status: u32,
    pub ret: usize,
}

const _: () = {
    assert!(std::mem::size_of::<HipFileError>() == 8);
    assert!(std::mem::size_of::<HipFileDescr>() == 24);
    assert!(std::mem::size_of::<HipFileDriverProps>() == 72);
    assert!(std::mem::offset_of!(HipFileDriverProps, feature_flags) == 32);
    assert!(std::mem::offset_of!(HipFileDriverProps, max_device_cache_size) == 40);
    assert!(std::mem::offset_of!(HipFileDriverProps, max_batch_io_count) == 64);
    assert!(std::mem::size_of::<HipFileIoParams>() == 64);
    assert!(std::mem::offset_of!(HipFileIoParams, fh) == 40);
    assert!(std::mem::offset_of!(HipFileIoParams, cookie) == 56);
    assert!(std::mem::size_of::<HipFileIoEvents>() == 24);
    assert!(std::mem::offset_of!(HipFileIoEvents, ret) == 16);
};
