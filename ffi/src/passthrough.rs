//! The cuFile passthrough: where NVIDIA's GPUDirect Storage works, every
//! hipFile call of this process goes to NVIDIA's libcufile instead of the
//! engine.
//!
//! `hipfile_gds::select` decides once, at the first call that needs a
//! backend, and logs why (`HIPFILE_BACKEND`, the probe; see that crate). The
//! choice holds for the life of the process: handles, buffers, batches and
//! streams registered with one backend mean nothing to the other.
//!
//! The translation is thin because cufile.h and hipfile.h agree on almost
//! everything: the error struct (`{err, cu_err}` / `{err, hip_drv_err}`, the
//! same codes; on NVIDIA the engine also reports CUDA driver codes in
//! `hip_drv_err`), the descriptor, batch parameter and event layouts, the
//! stream flags, the parameter enums, and the `ssize_t` conventions, whose
//! errno cuFile sets on this same thread. Only the driver properties differ
//! (cuFile's sizes are `unsigned`), and are copied field by field.

use crate::errors::{boundary, Unavailable};
use crate::types::{HipFileDriverProps, HipFileError, HipFileIoEvents, HipFileIoParams};
use hipfile_engine::error::OpError;
use hipfile_engine::log_warn;
use hipfile_gds::abi::{CuFileDrvProps, CuFileError};
use hipfile_gds::CuFile;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

/// NVIDIA's libcufile when it serves this process; None when the engine does.
static ACTIVE: OnceLock<Option<CuFile>> = OnceLock::new();

/// Makes the engine serve this process without looking for libcufile. For
/// hipfile-rs's cuFile front, which is itself a libcufile and must never hand
/// its calls to another.
pub fn engine_only() {
    let _ = ACTIVE.set(None);
}

fn active() -> Option<&'static CuFile> {
    ACTIVE.get_or_init(|| hipfile_gds::select().1).as_ref()
}

impl<T: Unavailable> Unavailable for Option<T> {
    fn unavailable() -> Self {
        Some(T::unavailable())
    }
}

/// Runs `f` on libcufile (inside the panic boundary) when the passthrough
/// serves this process; None when the engine does.
pub(crate) fn route<T: Unavailable>(name: &str, f: impl FnOnce(&'static CuFile) -> T) -> Option<T> {
    // Decided for the engine: nothing can panic here, so no boundary (a
    // 4 KiB page-cache read costs about 1 µs; each step of the entry counts).
    if let Some(None) = ACTIVE.get() {
        return None;
    }
    boundary(name, || active().map(f))
}

/// At the top of an entry point: return libcufile's answer when it serves.
macro_rules! passthrough {
    ($name:expr, |$cu:ident| $call:expr) => {
        if let Some(r) = $crate::passthrough::route($name, |$cu| $call) {
            return r;
        }
    };
}
pub(crate) use passthrough;

pub(crate) fn err(e: CuFileError) -> HipFileError {
    HipFileError {
        err: e.err,
        hip_drv_err: e.cu_err,
    }
}

fn missing(name: &str) -> HipFileError {
    log_warn!("{name}: this libcufile predates the parameter API (libcufile 1.14)");
    HipFileError::op(OpError::InternalError.code())
}

// Every function below passes the caller's pointers on unchanged, under the
// contract of the hipFile entry point that calls it: cufile.h's types have
// hipfile.h's layouts (checked by the cuFile front's C tests).

pub(crate) fn handle_register(
    cu: &CuFile,
    fh: *mut *mut c_void,
    descr: *mut c_void,
) -> HipFileError {
    // SAFETY: see above.
    err(unsafe { (cu.handle_register)(fh, descr) })
}

pub(crate) fn handle_deregister(cu: &CuFile, fh: *mut c_void) {
    // SAFETY: see above.
    unsafe { (cu.handle_deregister)(fh) }
}

pub(crate) fn buf_register(
    cu: &CuFile,
    base: *const c_void,
    len: usize,
    flags: c_int,
) -> HipFileError {
    // SAFETY: see above.
    err(unsafe { (cu.buf_register)(base, len, flags) })
}

pub(crate) fn buf_deregister(cu: &CuFile, base: *const c_void) -> HipFileError {
    // SAFETY: see above.
    err(unsafe { (cu.buf_deregister)(base) })
}

pub(crate) fn read(
    cu: &CuFile,
    fh: *mut c_void,
    buf: *mut c_void,
    size: usize,
    foff: i64,
    boff: i64,
) -> isize {
    // SAFETY: see above.
    unsafe { (cu.read)(fh, buf, size, foff, boff) }
}

pub(crate) fn write(
    cu: &CuFile,
    fh: *mut c_void,
    buf: *const c_void,
    size: usize,
    foff: i64,
    boff: i64,
) -> isize {
    // SAFETY: see above.
    unsafe { (cu.write)(fh, buf, size, foff, boff) }
}

pub(crate) fn driver_open(cu: &CuFile) -> HipFileError {
    // SAFETY: no arguments.
    err(unsafe { (cu.driver_open)() })
}

pub(crate) fn driver_close(cu: &CuFile) -> HipFileError {
    // SAFETY: no arguments.
    err(unsafe { (cu.driver_close)() })
}

pub(crate) fn use_count(cu: &CuFile) -> i64 {
    // c_long is i64 on LP64 Linux, the only ABI cufile.h targets.
    // SAFETY: no arguments.
    unsafe { (cu.use_count)() }
}

/// `CUfileDrvProps_t` → `hipFileDriverProps_t`, field by field (cuFile's
/// `unsigned` sizes widen to hipFile's 64-bit ones).
pub(crate) fn driver_get_properties(cu: &CuFile, props: *mut HipFileDriverProps) -> HipFileError {
    if props.is_null() {
        return HipFileError::op(OpError::InvalidValue.code());
    }
    let mut p = CuFileDrvProps::default();
    // SAFETY: `p` is a live CUfileDrvProps_t.
    let e = unsafe { (cu.driver_get_properties)(&mut p) };
    if !e.is_ok() {
        return err(e);
    }
    let out = HipFileDriverProps {
        nvfs_major_version: p.nvfs_major_version,
        nvfs_minor_version: p.nvfs_minor_version,
        nvfs_poll_thresh_size: p.nvfs_poll_thresh_size as u64,
        nvfs_max_direct_io_size: p.nvfs_max_direct_io_size as u64,
        nvfs_driver_status_flags: p.nvfs_dstatusflags,
        nvfs_driver_control_flags: p.nvfs_dcontrolflags,
        feature_flags: p.fflags,
        max_device_cache_size: p.max_device_cache_size as u64,
        per_buffer_cache_size: p.per_buffer_cache_size as u64,
        max_device_pinned_mem_size: p.max_device_pinned_mem_size as u64,
        max_batch_io_count: p.max_batch_io_size,
        max_batch_io_timeout_msecs: p.max_batch_io_timeout_msecs,
    };
    // SAFETY: non-NULL caller storage for a hipFileDriverProps_t.
    unsafe { props.write(out) };
    HipFileError::SUCCESS
}

pub(crate) fn driver_set_poll_mode(cu: &CuFile, poll: bool, threshold: usize) -> HipFileError {
    // SAFETY: plain values.
    err(unsafe { (cu.driver_set_poll_mode)(poll, threshold) })
}

pub(crate) fn driver_set_max_direct_io_size(cu: &CuFile, kb: usize) -> HipFileError {
    // SAFETY: plain value.
    err(unsafe { (cu.driver_set_max_direct_io_size)(kb) })
}

pub(crate) fn driver_set_max_cache_size(cu: &CuFile, kb: usize) -> HipFileError {
    // SAFETY: plain value.
    err(unsafe { (cu.driver_set_max_cache_size)(kb) })
}

pub(crate) fn driver_set_max_pinned_mem_size(cu: &CuFile, kb: usize) -> HipFileError {
    // SAFETY: plain value.
    err(unsafe { (cu.driver_set_max_pinned_mem_size)(kb) })
}

pub(crate) fn batch_set_up(cu: &CuFile, batch: *mut *mut c_void, max_nr: c_uint) -> HipFileError {
    // SAFETY: see above.
    err(unsafe { (cu.batch_io_set_up)(batch, max_nr) })
}

pub(crate) fn batch_submit(
    cu: &CuFile,
    batch: *mut c_void,
    nr: c_uint,
    params: *mut HipFileIoParams,
    flags: c_uint,
) -> HipFileError {
    // SAFETY: see above (CUfileIOParams_t has hipFileIOParams_t's layout).
    err(unsafe { (cu.batch_io_submit)(batch, nr, params.cast(), flags) })
}

pub(crate) fn batch_get_status(
    cu: &CuFile,
    batch: *mut c_void,
    min_nr: c_uint,
    nr: *mut c_uint,
    events: *mut HipFileIoEvents,
    timeout: *mut libc::timespec,
) -> HipFileError {
    // SAFETY: see above (CUfileIOEvents_t has hipFileIOEvents_t's layout).
    err(unsafe { (cu.batch_io_get_status)(batch, min_nr, nr, events.cast(), timeout) })
}

pub(crate) fn batch_cancel(cu: &CuFile, batch: *mut c_void) -> HipFileError {
    // SAFETY: see above.
    err(unsafe { (cu.batch_io_cancel)(batch) })
}

pub(crate) fn batch_destroy(cu: &CuFile, batch: *mut c_void) {
    // SAFETY: see above.
    unsafe { (cu.batch_io_destroy)(batch) }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn io_async(
    cu: &CuFile,
    write: bool,
    fh: *mut c_void,
    buf: *mut c_void,
    size_p: *mut usize,
    foff_p: *mut i64,
    boff_p: *mut i64,
    bytes_p: *mut isize,
    stream: *mut c_void,
) -> HipFileError {
    let f = if write { cu.write_async } else { cu.read_async };
    // SAFETY: see above; hipStream_t and CUstream are both the runtime's stream pointer.
    err(unsafe { f(fh, buf, size_p, foff_p, boff_p, bytes_p, stream) })
}

pub(crate) fn stream_register(cu: &CuFile, stream: *mut c_void, flags: c_uint) -> HipFileError {
    // SAFETY: see above.
    err(unsafe { (cu.stream_register)(stream, flags) })
}

pub(crate) fn stream_deregister(cu: &CuFile, stream: *mut c_void) -> HipFileError {
    // SAFETY: see above.
    err(unsafe { (cu.stream_deregister)(stream) })
}

pub(crate) fn get_parameter_size_t(cu: &CuFile, param: c_int, value: *mut usize) -> HipFileError {
    match cu.get_parameter_size_t {
        // SAFETY: see above.
        Some(f) => err(unsafe { f(param, value) }),
        None => missing("hipFileGetParameterSizeT"),
    }
}

pub(crate) fn get_parameter_bool(cu: &CuFile, param: c_int, value: *mut bool) -> HipFileError {
    match cu.get_parameter_bool {
        // SAFETY: see above.
        Some(f) => err(unsafe { f(param, value) }),
        None => missing("hipFileGetParameterBool"),
    }
}

pub(crate) fn get_parameter_string(
    cu: &CuFile,
    param: c_int,
    s: *mut c_char,
    len: c_int,
) -> HipFileError {
    match cu.get_parameter_string {
        // SAFETY: see above.
        Some(f) => err(unsafe { f(param, s, len) }),
        None => missing("hipFileGetParameterString"),
    }
}

pub(crate) fn set_parameter_size_t(cu: &CuFile, param: c_int, value: usize) -> HipFileError {
    match cu.set_parameter_size_t {
        // SAFETY: plain values.
        Some(f) => err(unsafe { f(param, value) }),
        None => missing("hipFileSetParameterSizeT"),
    }
}

pub(crate) fn set_parameter_bool(cu: &CuFile, param: c_int, value: bool) -> HipFileError {
    match cu.set_parameter_bool {
        // SAFETY: plain values.
        Some(f) => err(unsafe { f(param, value) }),
        None => missing("hipFileSetParameterBool"),
    }
}

pub(crate) fn set_parameter_string(cu: &CuFile, param: c_int, s: *const c_char) -> HipFileError {
    match cu.set_parameter_string {
        // SAFETY: see above.
        Some(f) => err(unsafe { f(param, s) }),
        None => missing("hipFileSetParameterString"),
    }
}
