//! File handles, buffers, synchronous and stream-ordered I/O, streams.

use crate::types::CUfileError;
use crate::{boundary, check, engine_error, front, guard, refuse, use_count, STATS};
use hipfile::types::HipFileDescr;
use hipfile_engine::gpu::Stream;
use hipfile_engine::registry::driver;
use hipfile_engine::{OpError, MAX_RW_COUNT};
use std::ffi::{c_int, c_uint, c_void};
use std::time::Instant;

/// `CU_FILE_HANDLE_TYPE_USERSPACE_FS`: a filesystem reached through the
/// descriptor's `fs_ops` (RDMA), which this library has no path for.
const HANDLE_TYPE_USERSPACE_FS: i32 = 3;
/// `CU_FILE_RDMA_REGISTER`: register the buffer with RDMA NICs.
const RDMA_REGISTER: c_int = 1;

/// Registers the open file descriptor in `*descr`.
///
/// # Safety
///
/// `fh` must be NULL or valid for writing a handle; `descr` must be NULL or
/// point to a readable `CUfileDescr_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileHandleRegister(
    fh: *mut *mut c_void,
    descr: *mut HipFileDescr,
) -> CUfileError {
    guard("cuFileHandleRegister", || {
        if !descr.is_null() {
            // SAFETY: non-NULL caller-owned CUfileDescr_t.
            let kind = unsafe { std::ptr::addr_of!((*descr).kind).read_unaligned() };
            if kind == HANDLE_TYPE_USERSPACE_FS {
                return Err(refuse(
                    OpError::IoNotSupported,
                    format_args!(
                        "cuFileHandleRegister: CU_FILE_HANDLE_TYPE_USERSPACE_FS (a filesystem \
                         reached through fs_ops and RDMA) is not supported: this library has no \
                         RDMA path; register the file's descriptor as CU_FILE_HANDLE_TYPE_OPAQUE_FD"
                    ),
                ));
            }
        }
        // SAFETY: the caller's pointers, under the same contract (same layout).
        let r = check(unsafe { hipfile::hipFileHandleRegister(fh, descr) });
        if STATS.collecting() {
            STATS.hdl_register.add(r.is_ok());
        }
        r
    })
}

#[no_mangle]
pub extern "C" fn cuFileHandleDeregister(fh: *mut c_void) {
    boundary("cuFileHandleDeregister", || {
        let known = !fh.is_null() && driver().file(fh as usize).is_some();
        hipfile::hipFileHandleDeregister(fh);
        if STATS.collecting() {
            STATS.hdl_deregister.add(known);
        }
    })
}

#[no_mangle]
pub extern "C" fn cuFileBufRegister(
    buf_ptr_base: *const c_void,
    length: usize,
    flags: c_int,
) -> CUfileError {
    guard("cuFileBufRegister", || {
        let r = if flags & RDMA_REGISTER != 0 {
            Err(refuse(
                OpError::PlatformNotSupported,
                format_args!(
                    "cuFileBufRegister: CU_FILE_RDMA_REGISTER is not supported: this library has \
                     no RDMA path; register without the flag"
                ),
            ))
        } else {
            check(hipfile::hipFileBufRegister(buf_ptr_base, length, flags))
        };
        if STATS.collecting() {
            STATS.buf_register.add(r.is_ok());
        }
        r
    })
}

/// NULL is an invalid value even while the driver is closed (libcufile checks
/// the pointer first; hipFile reports the closed driver first).
#[no_mangle]
pub extern "C" fn cuFileBufDeregister(buf_ptr_base: *const c_void) -> CUfileError {
    guard("cuFileBufDeregister", || {
        let r = if buf_ptr_base.is_null() {
            Err(CUfileError::op(OpError::InvalidValue.code()))
        } else {
            check(hipfile::hipFileBufDeregister(buf_ptr_base))
        };
        if STATS.collecting() {
            STATS.buf_deregister.add(r.is_ok());
        }
        r
    })
}

/// A synchronous read or write through hipFile, counted when statistics run.
fn sync_io(write: bool, run: impl FnOnce() -> isize) -> isize {
    if !STATS.collecting() {
        return run();
    }
    let t = Instant::now();
    let n = run();
    STATS.io(write, n, t.elapsed());
    n
}

#[no_mangle]
pub extern "C" fn cuFileRead(
    fh: *mut c_void,
    buf_ptr_base: *mut c_void,
    size: usize,
    file_offset: i64,
    buf_ptr_offset: i64,
) -> isize {
    front();
    sync_io(false, || {
        hipfile::hipFileRead(fh, buf_ptr_base, size, file_offset, buf_ptr_offset)
    })
}

#[no_mangle]
pub extern "C" fn cuFileWrite(
    fh: *mut c_void,
    buf_ptr_base: *const c_void,
    size: usize,
    file_offset: i64,
    buf_ptr_offset: i64,
) -> isize {
    front();
    sync_io(true, || {
        hipfile::hipFileWrite(fh, buf_ptr_base, size, file_offset, buf_ptr_offset)
    })
}

// ---------------------------------------------------------------------------
// Stream-ordered I/O

/// Waits for the work queued on `stream` (where a GPU runtime is loaded).
fn synchronize(name: &str, stream: *mut c_void) -> Result<(), CUfileError> {
    let gpu = driver().gpu();
    if !gpu.has_devices() {
        return Ok(());
    }
    gpu.stream_synchronize(Stream(stream as usize))
        .map_err(|e| engine_error(name, &e.into()))
}

/// The value a bad stream parameter leaves in `*bytes_p`, as libcufile
/// reports it after execution: −5022 for a negative file offset, −5030 for a
/// negative buffer offset, −5016 for a range beyond the buffer. None when the
/// values are usable (the buffer extent comes from its registration, or
/// from the GPU runtime's allocation for device memory).
fn deferred_error(
    buf: *mut c_void,
    size: usize,
    foff: i64,
    boff: i64,
) -> Result<Option<isize>, CUfileError> {
    if foff < 0 {
        return Ok(Some(-(OpError::InvalidValue.code() as isize)));
    }
    if boff < 0 {
        return Ok(Some(-(OpError::InternalError.code() as isize)));
    }
    let len = driver()
        .resolve_buffer(buf as u64)
        .map_err(|e| engine_error("cuFile stream I/O", &e))?
        .len;
    let size = size.min(MAX_RW_COUNT) as u64;
    let boff = boff as u64;
    if boff >= len || size > len - boff {
        return Ok(Some(-(OpError::InvalidMappingSize.code() as isize)));
    }
    Ok(None)
}

#[allow(clippy::too_many_arguments)]
unsafe fn io_async(
    name: &str,
    write: bool,
    fh: *mut c_void,
    buf: *mut c_void,
    size_p: *mut usize,
    foff_p: *mut i64,
    boff_p: *mut i64,
    bytes_p: *mut isize,
    stream: *mut c_void,
) -> Result<(), CUfileError> {
    let hip = if write {
        hipfile::hipFileWriteAsync
    } else {
        hipfile::hipFileReadAsync
    };
    let null = size_p.is_null()
        || foff_p.is_null()
        || boff_p.is_null()
        || bytes_p.is_null()
        || buf.is_null();
    if use_count() == 0 || null {
        // hipFile's order of checks is cuFile's here: an implicit open, then 5022.
        // SAFETY: the caller's pointers, passed on under the same contract.
        return check(unsafe { hip(fh, buf, size_p, foff_p, boff_p, bytes_p, stream) });
    }
    if driver().file(fh as usize).is_none() {
        return Err(CUfileError::op(OpError::HandleNotRegistered.code()));
    }
    // SAFETY: non-NULL caller storage (checked above).
    let (size, foff, boff) = unsafe { (*size_p, *foff_p, *boff_p) };
    if let Some(v) = deferred_error(buf, size, foff, boff)? {
        // SAFETY: non-NULL caller storage for the result.
        unsafe { *bytes_p = v };
        return Ok(());
    }
    if stream.is_null() {
        // cuFile: the NULL stream makes the call synchronous, after the work
        // already queued on it.
        synchronize(name, stream)?;
        let n = sync_io(write, || {
            if write {
                hipfile::hipFileWrite(fh, buf, size, foff, boff)
            } else {
                hipfile::hipFileRead(fh, buf, size, foff, boff)
            }
        });
        // SAFETY: non-NULL caller storage for the result.
        unsafe { *bytes_p = n };
        return Ok(());
    }
    // SAFETY: the caller's pointers, passed on under the same contract.
    check(unsafe { hip(fh, buf, size_p, foff_p, boff_p, bytes_p, stream) })
}

/// Enqueues a read on `stream`; the result lands in `*bytes_read_p`.
///
/// # Safety
///
/// As cufile.h requires: `size_p`, `file_offset_p`, `buf_ptr_offset_p` and
/// `bytes_read_p` must be NULL or valid host memory that stays valid until
/// the stream has executed the operation (unfixed values are read then); the
/// buffer must stay valid and untouched until then.
#[no_mangle]
pub unsafe extern "C" fn cuFileReadAsync(
    fh: *mut c_void,
    buf_ptr_base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut i64,
    buf_ptr_offset_p: *mut i64,
    bytes_read_p: *mut isize,
    stream: *mut c_void,
) -> CUfileError {
    guard("cuFileReadAsync", || {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            io_async(
                "cuFileReadAsync",
                false,
                fh,
                buf_ptr_base,
                size_p,
                file_offset_p,
                buf_ptr_offset_p,
                bytes_read_p,
                stream,
            )
        }
    })
}

/// Enqueues a write on `stream`; the result lands in `*bytes_written_p`.
///
/// # Safety
///
/// As for [`cuFileReadAsync`].
#[no_mangle]
pub unsafe extern "C" fn cuFileWriteAsync(
    fh: *mut c_void,
    buf_ptr_base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut i64,
    buf_ptr_offset_p: *mut i64,
    bytes_written_p: *mut isize,
    stream: *mut c_void,
) -> CUfileError {
    guard("cuFileWriteAsync", || {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            io_async(
                "cuFileWriteAsync",
                true,
                fh,
                buf_ptr_base,
                size_p,
                file_offset_p,
                buf_ptr_offset_p,
                bytes_written_p,
                stream,
            )
        }
    })
}

/// Synchronises `stream`, then registers it with `flags`.
#[no_mangle]
pub extern "C" fn cuFileStreamRegister(stream: *mut c_void, flags: c_uint) -> CUfileError {
    guard("cuFileStreamRegister", || {
        synchronize("cuFileStreamRegister", stream)?;
        check(hipfile::hipFileStreamRegister(stream, flags))
    })
}

/// Synchronises `stream`, then forgets its registration; a stream that was
/// not registered has nothing to release, which succeeds (as in libcufile).
#[no_mangle]
pub extern "C" fn cuFileStreamDeregister(stream: *mut c_void) -> CUfileError {
    guard("cuFileStreamDeregister", || {
        synchronize("cuFileStreamDeregister", stream)?;
        let known = driver().read().streams.contains_key(&(stream as usize));
        if !known {
            return Ok(());
        }
        check(hipfile::hipFileStreamDeregister(stream))
    })
}
