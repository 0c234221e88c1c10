//! `libhipfile`: the hipFile C ABI (include/hipfile.h) over `hipfile-engine`.
//!
//! A thin, total wrapper: every entry point catches panics, checks NULL and
//! enum ranges first, and maps engine errors to the spec's return conventions
//! in one place (`to_error`, `to_ssize`). Raw pointers are converted here only.

#![allow(non_snake_case)]
// The entry points are `unsafe extern "C"` by nature; their contract is the header's.
#![allow(clippy::missing_safety_doc)]

mod asyncio;
mod errors;
mod params;
pub mod types;

use hipfile_engine::batch::{self, Batch, BatchEntry};
use hipfile_engine::error::{Error, OpError};
use hipfile_engine::gpu::MemKind;
use hipfile_engine::pipeline::{Direction, IoRequest};
use hipfile_engine::registry::{driver, BufferUse, ResolvedBuffer};
use hipfile_engine::stats::{self, Event};
use hipfile_engine::{log_warn, MAX_RW_COUNT};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;
use types::*;

pub use errors::op_error_string;

const HANDLE_TYPE_OPAQUE_FD: i32 = 1;
const BATCH_MODE: i32 = 1;

/// Set in a child process after fork(): the worker threads, rings and GPU
/// contexts did not survive the fork, so the library refuses to be used there
/// (cuFile's rule) instead of deadlocking on state owned by absent threads.
static FORKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static ATFORK: std::sync::Once = std::sync::Once::new();

extern "C" fn in_fork_child() {
    FORKED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Refuse calls in a forked child; install the fork hook on first use.
fn fork_check(name: &str) -> Result<(), Error> {
    if FORKED.load(std::sync::atomic::Ordering::Relaxed) {
        // Plain write(2): the child must not take locks the parent's threads held.
        let msg = format!("hipfile: ERROR: {name} called in a child after fork(); hipFile state does not survive fork (open files in the child after exec, or before initialising)\n");
        // SAFETY: writing a byte buffer to stderr.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        return Err(OpError::InternalError.into());
    }
    ATFORK.call_once(|| {
        // SAFETY: registering a plain extern "C" function as the child handler.
        unsafe { libc::pthread_atfork(None, None, Some(in_fork_child)) };
        // The C library's logger, unless the host process has one.
        hipfile_engine::log::install_default();
    });
    Ok(())
}

/// Run `f`, turning a panic into `{5030}` (a panic never crosses the C ABI).
fn guard(name: &str, f: impl FnOnce() -> Result<(), Error>) -> HipFileError {
    if let Err(e) = fork_check(name) {
        return to_error(&e);
    }
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => HipFileError::SUCCESS,
        Ok(Err(e)) => to_error(&e),
        Err(_) => {
            log_warn!("{name}: internal panic caught; returning hipFileInternalError");
            HipFileError::op(OpError::InternalError.code())
        }
    }
}

/// Engine error → `hipFileError_t` (spec §5.2).
pub fn to_error(e: &Error) -> HipFileError {
    use hipfile_engine::gpu::GpuError;
    match e {
        Error::Op(op) => HipFileError::op(op.code()),
        Error::Gpu(GpuError::Driver { code, .. }) => HipFileError {
            err: OpError::HipDriverError.code(),
            hip_drv_err: *code,
        },
        Error::Gpu(GpuError::InvalidValue(_)) => HipFileError::op(OpError::InvalidValue.code()),
        Error::Gpu(GpuError::NotPresent(_)) => HipFileError::op(OpError::DeviceNotFound.code()),
        Error::Os(errno) => {
            log_warn!("system error {errno} reported as hipFileInternalError");
            HipFileError::op(OpError::InternalError.code())
        }
    }
}

/// Engine result → `ssize_t` (spec §5.2): bytes; −1 with errno; −hipFileOpError;
/// −hipError for GPU runtime failures (except invalid value, which is −5022).
fn to_ssize(r: Result<usize, Error>) -> isize {
    use hipfile_engine::gpu::GpuError;
    match r {
        Ok(n) => n as isize,
        Err(Error::Os(errno)) => {
            // SAFETY: errno is thread-local; writing it is what a libc function does.
            unsafe { *libc::__errno_location() = errno };
            -1
        }
        Err(Error::Op(op)) => -(op.code() as isize),
        Err(Error::Gpu(GpuError::Driver { code, .. })) if code != 1 => -(code as isize),
        Err(Error::Gpu(GpuError::NotPresent(_))) => -(OpError::DeviceNotFound.code() as isize),
        Err(Error::Gpu(_)) => -(OpError::InvalidValue.code() as isize),
    }
}

fn guard_ssize(name: &str, f: impl FnOnce() -> Result<usize, Error>) -> isize {
    if let Err(e) = fork_check(name) {
        return to_ssize(Err(e));
    }
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => to_ssize(r),
        Err(_) => {
            log_warn!("{name}: internal panic caught; returning -hipFileInternalError");
            -(OpError::InternalError.code() as isize)
        }
    }
}

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

#[no_mangle]
pub unsafe extern "C" fn hipFileHandleRegister(
    fh: *mut *mut c_void,
    descr: *mut HipFileDescr,
) -> HipFileError {
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
            driver().register_handle(fd),
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
    if fork_check("hipFileHandleDeregister").is_err() {
        return;
    }
    let _ = catch_unwind(|| {
        if !fh.is_null() {
            driver().deregister_handle(fh as usize);
            stats::event(Event::HandleDeregister);
        }
    });
}

// ---------------------------------------------------------------------------
// 4–5. Buffers

#[no_mangle]
pub extern "C" fn hipFileBufRegister(
    buffer_base: *const c_void,
    length: usize,
    flags: c_int,
) -> HipFileError {
    guard("hipFileBufRegister", || {
        let r = driver().register_buffer(buffer_base as u64, length as u64, flags);
        if r.is_ok() {
            stats::event_add(Event::BufRegisterBytes, length as u64);
        }
        counted(r, Event::BufRegister, Event::BufRegisterError)
    })
}

#[no_mangle]
pub extern "C" fn hipFileBufDeregister(buffer_base: *const c_void) -> HipFileError {
    guard("hipFileBufDeregister", || {
        let d = driver();
        if d.use_count() == 0 {
            return Err(OpError::DriverClosing.into());
        }
        if buffer_base.is_null() {
            return Err(inval());
        }
        counted(
            d.deregister_buffer(buffer_base as u64),
            Event::BufDeregister,
            Event::BufDeregisterError,
        )
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
    let d = driver();
    let file = d
        .file(fh as usize)
        .ok_or(Error::Op(OpError::HandleNotRegistered))?;
    if buffer_base.is_null() || file_offset < 0 || buffer_offset < 0 {
        return Err(inval());
    }
    let size = size.min(MAX_RW_COUNT);
    let buf = d.resolve_buffer(buffer_base as u64)?;
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
        let cfg = d.engine().map(|e| e.config().clone());
        if cfg.is_some_and(|c| !c.allow_compat_mode) {
            // Our engine is the compatibility (bounce) path; no direct path exists here.
            log_warn!("device I/O refused: HIPFILE_ALLOW_COMPAT_MODE=false and no direct path is available");
            return Err(OpError::InternalError.into());
        }
    }
    let req = IoRequest {
        file,
        dir,
        mem: buf.mem.offset(boff as usize),
        size,
        file_offset: file_offset as u64,
        cancel: None,
        durable: false,
    };
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
        let d = driver();
        let Some(engine) = d.engine() else {
            // Upstream (and cuFile, as observed): −1 with EINVAL while closed.
            return Err(Error::Os(libc::EINVAL));
        };
        let (req, buf) = prepare(fh, buffer_base, size, file_offset, buffer_offset, dir)
            .inspect_err(|_| {
                stats::event(match dir {
                    Direction::Read => Event::ReadRejected,
                    Direction::Write => Event::WriteRejected,
                })
            })?;
        if req.size == 0 {
            return Ok(0);
        }
        let _busy = BufferUse::new(buf.reg.clone());
        let r = engine.transfer(req);
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
    if fork_check("hipFileUseCount").is_err() {
        return -1;
    }
    catch_unwind(|| driver().use_count()).unwrap_or(-1)
}

// ---------------------------------------------------------------------------
// 11–15, 26–31: properties and parameters (params.rs)

pub use params::*;

// ---------------------------------------------------------------------------
// 16–20. Batch I/O

fn batch_of(h: *mut c_void) -> Result<Arc<Batch>, Error> {
    driver()
        .read()
        .batches
        .get(&(h as usize))
        .cloned()
        .ok_or_else(inval)
}

#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOSetUp(
    batch_idp: *mut *mut c_void,
    max_nr: c_uint,
) -> HipFileError {
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
        let h = Arc::as_ptr(&b) as usize;
        d.write().batches.insert(h, b);
        stats::event(Event::BatchSetup);
        // SAFETY: batch_idp is non-NULL caller storage for a handle.
        unsafe { *batch_idp = h as *mut c_void };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOSubmit(
    batch_idp: *mut c_void,
    nr: c_uint,
    iocbp: *mut HipFileIoParams,
    _flags: c_uint,
) -> HipFileError {
    guard("hipFileBatchIOSubmit", || {
        let b = batch_of(batch_idp)?;
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
            stats::with_api(stats::Api::Batch, || b.submit(&engine, entries)),
            Event::BatchSubmit,
            Event::BatchSubmitError,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOGetStatus(
    batch_idp: *mut c_void,
    min_nr: c_uint,
    nr: *mut c_uint,
    iocbp: *mut HipFileIoEvents,
    timeout: *mut libc::timespec,
) -> HipFileError {
    guard("hipFileBatchIOGetStatus", || {
        let b = batch_of(batch_idp)?;
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
    guard("hipFileBatchIOCancel", || {
        batch_of(batch_idp)?.cancel();
        stats::event(Event::BatchCancel);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn hipFileBatchIODestroy(batch_idp: *mut c_void) {
    if fork_check("hipFileBatchIODestroy").is_err() {
        return;
    }
    let _ = catch_unwind(|| {
        if batch_idp.is_null() {
            return;
        }
        let b = driver().write().batches.remove(&(batch_idp as usize));
        if let Some(b) = b {
            // Wait for running entries: their buffers are in use by the kernel.
            b.cancel();
            stats::event(Event::BatchDestroy);
        }
    });
}

/// Re-exported so tests can name statuses.
pub use batch::status as batch_status;

// ---------------------------------------------------------------------------
// 21–24. Stream I/O (asyncio.rs)

pub use asyncio::*;

// ---------------------------------------------------------------------------
// 25. Version

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
