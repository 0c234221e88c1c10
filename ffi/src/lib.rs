//! `libhipfile`: the hipFile C ABI (include/hipfile.h) over `hipfile-engine`.
//!
//! A thin, total wrapper: every entry point runs inside one panic boundary
//! (`errors::boundary`), checks NULL and enum ranges first, and reports engine
//! errors through one map of the spec's return conventions (`errors.rs`).
//! Raw pointers are converted here only.

#![allow(non_snake_case)]

mod asyncio;
mod errors;
mod params;
pub mod passthrough;
pub mod types;

use hipfile_engine::batch::{self, Batch, BatchEntry};
use hipfile_engine::error::{Error, OpError};
use hipfile_engine::fast;
use hipfile_engine::gpu::MemKind;
use hipfile_engine::pipeline::{Direction, IoRequest};
use hipfile_engine::registry::{driver, BufferUse, IoLookup, ResolvedBuffer};
use hipfile_engine::stats::{self, Event};
use hipfile_engine::{log_warn, MAX_RW_COUNT};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::Arc;
use std::time::Duration;
use types::*;

pub use errors::op_error_string;
pub use errors::{boundary, Unavailable};
pub(crate) use errors::{guard, guard_ssize};
use passthrough::passthrough;

const HANDLE_TYPE_OPAQUE_FD: i32 = 1;
const BATCH_MODE: i32 = 1;

fn inval() -> Error {
    Error::Op(OpError::InvalidValue)
}

/// Count `r` in the process statistics as `ok` or `err`, and pass it on.
fn counted<T>(r: Result<T, Error>, ok: Event, err: Event) -> Result<T, Error> {
    stats::event(if r.is_ok() { ok } else { err });
    r
}

// ---------------------------------------------------------------------------
// 1. Error strings

#[no_mangle]
pub extern "C" fn hipFileGetOpErrorString(status: c_int) -> *const c_char {
    op_error_string(status).as_ptr()
}

// ---------------------------------------------------------------------------
// 2–3. File handles

/// Registers `fd`. A descriptor that is not open (the −1 of a failed `open()`, or
/// one already closed) fails the probe with 5030, as upstream's does (spec §5.3
/// step 3, HDL-05); the log line then says what was wrong with it. The check
/// costs nothing on success: −1 is screened without a system call, any other
/// descriptor only after the probe failed.
fn register_descriptor(fd: c_int) -> Result<usize, Error> {
    if fd < 0 {
        log_warn!("{}", bad_descriptor_message(fd, libc::EBADF));
        return Err(OpError::InternalError.into());
    }
    let r = driver().register_handle(fd);
    if r == Err(OpError::InternalError.into()) {
        if let Some(errno) = closed_descriptor_errno(fd) {
            log_warn!("{}", bad_descriptor_message(fd, errno));
        }
    }
    r
}

/// The errno that says `fd` is not an open descriptor, or None when it is open.
fn closed_descriptor_errno(fd: c_int) -> Option<c_int> {
    // SAFETY: F_GETFD only reads the descriptor's flags; any int may be passed.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0 {
        return None;
    }
    Some(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EBADF),
    )
}

fn bad_descriptor_message(fd: c_int, errno: c_int) -> String {
    let why = std::io::Error::from_raw_os_error(errno);
    let hint = if fd < 0 {
        "a failed open() returns -1: check its result before registering"
    } else {
        "it was never opened or is already closed"
    };
    format!(
        "hipFileHandleRegister: fd {fd} is not an open file descriptor ({why}); {hint}; \
         returning hipFileInternalError (5030)"
    )
}

/// Registers an open file descriptor (`hipFileDescr_t` of type OpaqueFD) and
/// stores the new handle in `*fh`.
///
/// # Safety
///
/// `fh` must be NULL or valid for writing a handle; `descr` must be NULL or point
/// to a readable `hipFileDescr_t`.
#[no_mangle]
pub unsafe extern "C" fn hipFileHandleRegister(
    fh: *mut *mut c_void,
    descr: *mut HipFileDescr,
) -> HipFileError {
    passthrough!("hipFileHandleRegister", |cu| {
        passthrough::handle_register(cu, fh, descr.cast())
    });
    guard("hipFileHandleRegister", || {
        if fh.is_null() || descr.is_null() {
            return Err(inval());
        }
        // SAFETY: descr is non-NULL and points to a caller-owned hipFileDescr_t.
        let kind = unsafe { std::ptr::addr_of!((*descr).kind).read_unaligned() };
        if kind != HANDLE_TYPE_OPAQUE_FD {
            return Err(OpError::IoNotSupported.into());
        }
        // SAFETY: as above; for OpaqueFD the union holds an int.
        let fd = unsafe { (*descr).handle.fd };
        let h = counted(
            register_descriptor(fd),
            Event::HandleRegister,
            Event::HandleRegisterError,
        )?;
        // SAFETY: fh is non-NULL and points to caller storage for a handle.
        unsafe { *fh = h as *mut c_void };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn hipFileHandleDeregister(fh: *mut c_void) {
    passthrough!("hipFileHandleDeregister", |cu| {
        passthrough::handle_deregister(cu, fh)
    });
    boundary("hipFileHandleDeregister", || {
        if !fh.is_null() {
            driver().deregister_handle(fh as usize);
            stats::event(Event::HandleDeregister);
        }
    })
}

// ---------------------------------------------------------------------------
// 4–5. Buffers

#[no_mangle]
pub extern "C" fn hipFileBufRegister(
    buffer_base: *const c_void,
    length: usize,
    flags: c_int,
) -> HipFileError {
    passthrough!("hipFileBufRegister", |cu| {
        passthrough::buf_register(cu, buffer_base, length, flags)
    });
    guard("hipFileBufRegister", || {
        let r = driver().register_buffer(buffer_base as u64, length as u64, flags);
        if r == Err(OpError::MemoryAlreadyRegistered.into()) {
            log_warn!(
                "hipFileBufRegister: a buffer at {buffer_base:p} is already registered; \
                 deregister it before registering it again (hipFileMemoryAlreadyRegistered, 5023)"
            );
        }
        if r.is_ok() {
            stats::event_add(Event::BufRegisterBytes, length as u64);
        }
        counted(r, Event::BufRegister, Event::BufRegisterError)
    })
}

#[no_mangle]
pub extern "C" fn hipFileBufDeregister(buffer_base: *const c_void) -> HipFileError {
    passthrough!("hipFileBufDeregister", |cu| {
        passthrough::buf_deregister(cu, buffer_base)
    });
    guard("hipFileBufDeregister", || {
        let d = driver();
        if d.use_count() == 0 {
            return Err(OpError::DriverClosing.into());
        }
        if buffer_base.is_null() {
            return Err(inval());
        }
        let r = d.deregister_buffer(buffer_base as u64);
        if r == Err(OpError::MemoryNotRegistered.into()) {
            log_warn!(
                "hipFileBufDeregister: {buffer_base:p} is not the base address of a registered \
                 buffer (hipFileMemoryNotRegistered, 5024)"
            );
        }
        counted(r, Event::BufDeregister, Event::BufDeregisterError)
    })
}

// ---------------------------------------------------------------------------
// 6–7. Synchronous I/O

/// Validate a transfer the way every backend does (spec §5.5 "Parameter
/// validation", after the MAX_RW_COUNT clamp), and describe it.
pub(crate) fn prepare(
    fh: *mut c_void,
    buffer_base: *const c_void,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
    dir: Direction,
) -> Result<(IoRequest, ResolvedBuffer), Error> {
    let mut found = driver().lookup_io(fh as usize, buffer_base as u64);
    prepare_found(
        &mut found,
        buffer_base,
        size,
        file_offset,
        buffer_offset,
        dir,
    )
}

/// [`prepare`] with the registry's answer for the call already read
/// ([`hipfile_engine::registry::Driver::lookup_io`]); takes the file and the
/// buffer out of `found` and leaves the engine.
fn prepare_found(
    found: &mut IoLookup,
    buffer_base: *const c_void,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
    dir: Direction,
) -> Result<(IoRequest, ResolvedBuffer), Error> {
    let file = found
        .file
        .take()
        .ok_or(Error::Op(OpError::HandleNotRegistered))?;
    if buffer_base.is_null() || file_offset < 0 || buffer_offset < 0 {
        return Err(inval());
    }
    let size = size.min(MAX_RW_COUNT);
    let buf = driver().resolve_found_buffer(buffer_base as u64, found.buffer.take())?;
    let boff = buffer_offset as u64;
    if boff >= buf.len || size as u64 > buf.len - boff {
        return Err(inval());
    }
    if (file_offset as u64)
        .checked_add(size as u64)
        .is_none_or(|e| e > i64::MAX as u64)
    {
        return Err(inval());
    }
    if let MemKind::Device { .. } = buf.info.kind {
        if found
            .engine
            .as_ref()
            .is_some_and(|e| !e.config().allow_compat_mode)
        {
            // Our engine is the compatibility (bounce) path; no direct path exists here.
            log_warn!("device I/O refused: HIPFILE_ALLOW_COMPAT_MODE=false and no direct path is available");
            return Err(OpError::InternalError.into());
        }
    }
    let req = IoRequest::new(
        file,
        dir,
        buf.mem.offset(boff as usize),
        size,
        file_offset as u64,
    );
    Ok((req, buf))
}

fn sync_io(
    name: &str,
    fh: *mut c_void,
    buffer_base: *const c_void,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
    dir: Direction,
) -> isize {
    guard_ssize(name, || {
        // A thread's repeated small page-cache read of one file into one
        // host buffer: one pread (hipfile_engine::fast).
        if dir == Direction::Read {
            if let Some(n) = fast::try_read(
                fh as usize,
                buffer_base as u64,
                size,
                file_offset,
                buffer_offset,
            ) {
                return Ok(n);
            }
        }
        let stamp = fast::stamp();
        // One registry read for the engine, the handle and the buffer.
        let mut found = driver().lookup_io(fh as usize, buffer_base as u64);
        if found.engine.is_none() {
            // Upstream (and cuFile, as observed): −1 with EINVAL while closed.
            return Err(Error::Os(libc::EINVAL));
        }
        let (req, buf) = prepare_found(
            &mut found,
            buffer_base,
            size,
            file_offset,
            buffer_offset,
            dir,
        )
        .inspect_err(|_| {
            stats::event(match dir {
                Direction::Read => Event::ReadRejected,
                Direction::Write => Event::WriteRejected,
            })
        })?;
        let Some(engine) = found.engine else {
            return Err(Error::Os(libc::EINVAL)); // (checked above)
        };
        if req.size == 0 {
            return Ok(0);
        }
        // A host buffer's read may be remembered for the next.
        let host_read =
            dir == Direction::Read && matches!(buf.mem, hipfile_engine::pipeline::Memory::Host(_));
        let file = host_read.then(|| req.file.clone());
        let buf_len = buf.len;
        // The registration moves into the guard: no second reference to count.
        let _busy = BufferUse::new(buf.reg);
        // SAFETY: the caller's buffer covers the request (the C contract;
        // registered and device ranges were checked by `prepare`).
        let r = unsafe { engine.transfer(req) };
        match (&file, &r) {
            (Some(f), Ok(n)) if *n > 0 => {
                fast::remember(stamp, fh as usize, buffer_base as u64, buf_len, &engine, f)
            }
            _ => fast::forget(),
        }
        if r == Err(Error::Os(libc::EFAULT)) && !engine.gpu().has_devices() {
            log_warn!(
                "{name}: the buffer is not accessible host memory; if it is device memory, \
                 no GPU runtime is loaded"
            );
        }
        r
    })
}

#[no_mangle]
pub extern "C" fn hipFileRead(
    fh: *mut c_void,
    buffer_base: *mut c_void,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
) -> isize {
    passthrough!("hipFileRead", |cu| {
        passthrough::read(cu, fh, buffer_base, size, file_offset, buffer_offset)
    });
    sync_io(
        "hipFileRead",
        fh,
        buffer_base,
        size,
        file_offset,
        buffer_offset,
        Direction::Read,
    )
}

#[no_mangle]
pub extern "C" fn hipFileWrite(
    fh: *mut c_void,
    buffer_base: *const c_void,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
) -> isize {
    passthrough!("hipFileWrite", |cu| {
        passthrough::write(cu, fh, buffer_base, size, file_offset, buffer_offset)
    });
    sync_io(
        "hipFileWrite",
        fh,
        buffer_base,
        size,
        file_offset,
        buffer_offset,
        Direction::Write,
    )
}

// ---------------------------------------------------------------------------
// 8–10. Driver lifecycle

#[no_mangle]
pub extern "C" fn hipFileDriverOpen() -> HipFileError {
    passthrough!("hipFileDriverOpen", |cu| { passthrough::driver_open(cu) });
    guard("hipFileDriverOpen", || {
        let r = driver().open();
        if r.is_ok() {
            stats::event(Event::DriverOpen);
        }
        r
    })
}

#[no_mangle]
pub extern "C" fn hipFileDriverClose() -> HipFileError {
    passthrough!("hipFileDriverClose", |cu| { passthrough::driver_close(cu) });
    guard("hipFileDriverClose", || {
        let r = driver().close();
        if r.is_ok() {
            stats::event(Event::DriverClose);
        }
        r
    })
}

#[no_mangle]
pub extern "C" fn hipFileUseCount() -> i64 {
    passthrough!("hipFileUseCount", |cu| { passthrough::use_count(cu) });
    boundary("hipFileUseCount", || driver().use_count())
}

// ---------------------------------------------------------------------------
// 11–15, 26–31: properties and parameters (params.rs)

pub use params::*;

// ---------------------------------------------------------------------------
// 16–20. Batch I/O

/// The batch behind a handle. Any other value, NULL included, gives 5022
/// whether the driver is open or not, as upstream's batch implementation does
/// (libcufile answers 5030 before the driver is open, and success for
/// `Cancel(NULL)`; the README's notes on the spec say why we follow upstream).
fn batch_of(name: &str, h: *mut c_void) -> Result<Arc<Batch>, Error> {
    let b = driver().read().batches.get(&(h as usize)).cloned();
    b.ok_or_else(|| {
        log_warn!(
            "{name}: {h:p} is not a batch handle from hipFileBatchIOSetUp, or it was \
             destroyed (hipFileBatchIODestroy, or the final hipFileDriverClose)"
        );
        inval()
    })
}

/// Creates a batch context for up to `max_nr` outstanding entries and stores its
/// handle in `*batch_idp`.
///
/// # Safety
///
/// `batch_idp` must be NULL or valid for writing a handle.
#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOSetUp(
    batch_idp: *mut *mut c_void,
    max_nr: c_uint,
) -> HipFileError {
    passthrough!("hipFileBatchIOSetUp", |cu| {
        passthrough::batch_set_up(cu, batch_idp, max_nr)
    });
    guard("hipFileBatchIOSetUp", || {
        if batch_idp.is_null() {
            return Err(inval());
        }
        let d = driver();
        let limit = d.read().params.size_t[hipfile_engine::config::param::PROPERTIES_IO_BATCHSIZE];
        if max_nr == 0 || max_nr as u64 > limit {
            return Err(inval());
        }
        let b = Batch::new(max_nr as usize);
        let h = hipfile_engine::registry::new_handle();
        d.write().batches.insert(h, b);
        stats::event(Event::BatchSetup);
        // SAFETY: batch_idp is non-NULL caller storage for a handle.
        unsafe { *batch_idp = h as *mut c_void };
        Ok(())
    })
}

/// Submits `nr` entries; all are validated before any starts.
///
/// # Safety
///
/// `iocbp` must be NULL or point to `nr` readable `hipFileIOParams_t`. Each entry's
/// buffer must stay valid, and must not be otherwise accessed, until the entry's
/// event has been returned by `hipFileBatchIOGetStatus` or the batch is canceled
/// or destroyed.
#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOSubmit(
    batch_idp: *mut c_void,
    nr: c_uint,
    iocbp: *mut HipFileIoParams,
    _flags: c_uint,
) -> HipFileError {
    passthrough!("hipFileBatchIOSubmit", |cu| {
        passthrough::batch_submit(cu, batch_idp, nr, iocbp, _flags)
    });
    guard("hipFileBatchIOSubmit", || {
        let b = batch_of("hipFileBatchIOSubmit", batch_idp)?;
        if nr == 0 {
            return Ok(());
        }
        if iocbp.is_null() {
            return Err(inval());
        }
        if nr as usize > b.capacity_left() {
            return Err(OpError::BatchFull.into());
        }
        let engine = driver().engine().ok_or_else(inval)?;
        // SAFETY: the caller passes `nr` entries at iocbp; they are copied first
        // (all-or-nothing validation before anything starts).
        let params: Vec<HipFileIoParams> =
            unsafe { std::slice::from_raw_parts(iocbp, nr as usize) }.to_vec();
        let mut entries = Vec::with_capacity(params.len());
        for p in &params {
            if p.mode != BATCH_MODE {
                return Err(inval());
            }
            let dir = match p.opcode {
                0 => Direction::Read,
                1 => Direction::Write,
                _ => return Err(inval()),
            };
            let (req, buf) = prepare(
                p.fh,
                p.dev_ptr_base,
                p.size,
                p.file_offset,
                p.dev_ptr_offset,
                dir,
            )?;
            entries.push(BatchEntry {
                req,
                cookie: p.cookie as usize,
                hold: Some(Box::new(BufferUse::new(buf.reg))),
            });
        }
        counted(
            stats::with_api(stats::Api::Batch, || {
                // SAFETY: each entry's buffer stays valid until its event is reaped
                // (the C contract); `hold` keeps a registration busy until then.
                unsafe { b.submit(&engine, entries) }
            }),
            Event::BatchSubmit,
            Event::BatchSubmitError,
        )
    })
}

/// Waits for at least `min_nr` finished entries (bounded by `timeout`) and copies
/// up to `*nr` events to `iocbp`, setting `*nr` to their number.
///
/// # Safety
///
/// `nr` must be NULL or valid for reading and writing; `iocbp` must be NULL or
/// valid for writing `*nr` events; `timeout` must be NULL or point to a readable
/// `timespec`.
#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOGetStatus(
    batch_idp: *mut c_void,
    min_nr: c_uint,
    nr: *mut c_uint,
    iocbp: *mut HipFileIoEvents,
    timeout: *mut libc::timespec,
) -> HipFileError {
    passthrough!("hipFileBatchIOGetStatus", |cu| {
        passthrough::batch_get_status(cu, batch_idp, min_nr, nr, iocbp, timeout)
    });
    guard("hipFileBatchIOGetStatus", || {
        let b = batch_of("hipFileBatchIOGetStatus", batch_idp)?;
        if nr.is_null() {
            return Err(inval());
        }
        // SAFETY: nr is non-NULL caller storage.
        let max = unsafe { *nr };
        if (max > 0 && iocbp.is_null()) || min_nr > max {
            return Err(inval());
        }
        let timeout = if timeout.is_null() {
            None
        } else {
            // SAFETY: non-NULL caller-provided timespec.
            let t = unsafe { *timeout };
            if t.tv_sec < 0 || t.tv_nsec < 0 || t.tv_nsec >= 1_000_000_000 {
                return Err(inval());
            }
            Some(Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
        };
        if max == 0 {
            return Ok(());
        }
        let events = b.get_status(min_nr as usize, max as usize, timeout);
        for (i, e) in events.iter().enumerate() {
            // SAFETY: i < *nr entries, which the caller provides at iocbp.
            unsafe {
                *iocbp.add(i) = HipFileIoEvents {
                    cookie: e.cookie as *mut c_void,
                    status: e.status,
                    ret: e.ret as usize,
                };
            }
        }
        // SAFETY: nr is non-NULL caller storage.
        unsafe { *nr = events.len() as c_uint };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn hipFileBatchIOCancel(batch_idp: *mut c_void) -> HipFileError {
    passthrough!("hipFileBatchIOCancel", |cu| {
        passthrough::batch_cancel(cu, batch_idp)
    });
    guard("hipFileBatchIOCancel", || {
        batch_of("hipFileBatchIOCancel", batch_idp)?.cancel();
        stats::event(Event::BatchCancel);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn hipFileBatchIODestroy(batch_idp: *mut c_void) {
    passthrough!("hipFileBatchIODestroy", |cu| {
        passthrough::batch_destroy(cu, batch_idp)
    });
    boundary("hipFileBatchIODestroy", || {
        if batch_idp.is_null() {
            return;
        }
        let b = driver().write().batches.remove(&(batch_idp as usize));
        if let Some(b) = b {
            // Wait for running entries: their buffers are in use by the kernel.
            b.cancel();
            stats::event(Event::BatchDestroy);
        }
    })
}

/// Re-exported so tests can name statuses.
pub use batch::status as batch_status;

// ---------------------------------------------------------------------------
// 21–24. Stream I/O (asyncio.rs)

pub use asyncio::*;

// ---------------------------------------------------------------------------
// 25. Version

/// Stores the library version in each non-NULL argument.
///
/// # Safety
///
/// Each pointer must be NULL or valid for writing an `unsigned`.
#[no_mangle]
pub unsafe extern "C" fn hipFileGetVersion(
    major: *mut c_uint,
    minor: *mut c_uint,
    patch: *mut c_uint,
) -> HipFileError {
    guard("hipFileGetVersion", || {
        let (a, b, c) = hipfile_engine::VERSION;
        // SAFETY: each pointer is written only when non-NULL (caller storage).
        unsafe {
            if !major.is_null() {
                *major = a;
            }
            if !minor.is_null() {
                *minor = b;
            }
            if !patch.is_null() {
                *patch = c;
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minus_one_descriptor_is_5030_and_the_message_blames_the_open() {
        assert_eq!(register_descriptor(-1), Err(OpError::InternalError.into()));
        let m = bad_descriptor_message(-1, libc::EBADF);
        assert!(m.contains("fd -1 is not an open file descriptor"), "{m}");
        assert!(m.contains("os error 9"), "{m}");
        assert!(m.contains("a failed open() returns -1"), "{m}");
    }

    #[test]
    fn unopened_descriptor_is_recognised_and_named() {
        // Far above any descriptor this process has open (a closed one could be
        // reused by a test running alongside).
        let fd = 987_654;
        assert_eq!(closed_descriptor_errno(fd), Some(libc::EBADF));
        let m = bad_descriptor_message(fd, libc::EBADF);
        assert!(
            m.contains("fd 987654 is not an open file descriptor"),
            "{m}"
        );
        assert!(m.contains("never opened or is already closed"), "{m}");
    }

    #[test]
    fn open_descriptor_is_not_called_closed() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert_eq!(
            closed_descriptor_errno(std::os::fd::AsRawFd::as_raw_fd(&f)),
            None
        );
    }
}
