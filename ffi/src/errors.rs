//! `hipFileGetOpErrorString`: one fixed English sentence per code.

use std::ffi::CStr;

/// The sentence for `status` (the header's doc comment for each value).
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
        5023 => c"device pointer already registered",
        5024 => c"device pointer lookup failure",
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
