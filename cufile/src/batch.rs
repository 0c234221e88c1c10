//! Batch I/O: hipFile's batches, with cuFile's answers where they differ
//! (set-up before the driver is open fails with 5030; `Cancel(NULL)`
//! succeeds).
//!
//! Each submitted entry's cookie is swapped for a slot number of this batch
//! on the way in and swapped back on the way out, so that the front knows,
//! for every event it hands out, whether the entry read or wrote and when it
//! was submitted (the statistics need both; a `CUfileIOEvents_t` carries
//! neither). The slots are allocated at set-up, one per entry the batch can
//! hold, so submitting allocates nothing.

use crate::types::CUfileError;
use crate::{boundary, check, guard, refuse, use_count, STATS};
use hipfile::types::{HipFileIoEvents, HipFileIoParams};
use hipfile_engine::OpError;
use std::collections::HashMap;
use std::ffi::{c_uint, c_void};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// `CUFILE_WRITE`.
const OPCODE_WRITE: i32 = 1;
/// `CUFILE_COMPLETE`.
const STATUS_COMPLETE: u32 = 0x10;

struct Entry {
    cookie: usize,
    write: bool,
    submitted: Instant,
}

struct Slots {
    entries: Vec<Option<Entry>>,
    free: Vec<usize>,
}

struct FrontBatch {
    slots: Mutex<Slots>,
}

impl FrontBatch {
    fn new(max_nr: usize) -> FrontBatch {
        FrontBatch {
            slots: Mutex::new(Slots {
                entries: (0..max_nr).map(|_| None).collect(),
                free: (0..max_nr).rev().collect(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

type Batches = HashMap<usize, Arc<FrontBatch>>;

fn batches() -> MutexGuard<'static, Batches> {
    static B: std::sync::LazyLock<Mutex<Batches>> = std::sync::LazyLock::new(Default::default);
    B.lock().unwrap_or_else(|p| p.into_inner())
}

fn lookup(h: *mut c_void) -> Option<Arc<FrontBatch>> {
    batches().get(&(h as usize)).cloned()
}

/// After the final driver close, which destroyed every batch.
pub(crate) fn forget_all() {
    batches().clear();
}

/// Creates a batch for up to `max_nr` entries.
///
/// # Safety
///
/// `batch_idp` must be NULL or valid for writing a handle.
#[no_mangle]
pub unsafe extern "C" fn cuFileBatchIOSetUp(
    batch_idp: *mut *mut c_void,
    max_nr: c_uint,
) -> CUfileError {
    guard("cuFileBatchIOSetUp", || {
        let r = if use_count() == 0 {
            Err(refuse(
                OpError::InternalError,
                format_args!(
                    "cuFileBatchIOSetUp: the driver is not open (cuFileDriverOpen, or a handle \
                     registration, opens it)"
                ),
            ))
        } else {
            // SAFETY: the caller's pointer, under the same contract.
            check(unsafe { hipfile::hipFileBatchIOSetUp(batch_idp, max_nr) })
        };
        if r.is_ok() {
            // SAFETY: hipFile stored the new handle in the caller's storage.
            let h = unsafe { *batch_idp };
            batches().insert(h as usize, Arc::new(FrontBatch::new(max_nr as usize)));
        }
        if STATS.collecting() {
            STATS.batch_setup.add(r.is_ok());
        }
        r
    })
}

/// Submits `nr` entries (validated all together before any starts).
///
/// # Safety
///
/// `iocbp` must be NULL or point to `nr` readable `CUfileIOParams_t`; each
/// entry's buffer must stay valid and untouched until its event has been
/// returned, or the batch canceled or destroyed.
#[no_mangle]
pub unsafe extern "C" fn cuFileBatchIOSubmit(
    batch_idp: *mut c_void,
    nr: c_uint,
    iocbp: *mut HipFileIoParams,
    flags: c_uint,
) -> CUfileError {
    guard("cuFileBatchIOSubmit", || {
        let t = Instant::now();
        let r = submit(batch_idp, nr, iocbp, flags);
        if STATS.collecting() {
            STATS.batch_submitted(r.is_ok(), nr as u64, t.elapsed());
        }
        r
    })
}

fn submit(
    batch_idp: *mut c_void,
    nr: c_uint,
    iocbp: *mut HipFileIoParams,
    flags: c_uint,
) -> Result<(), CUfileError> {
    let b = match lookup(batch_idp) {
        Some(b) if nr > 0 && !iocbp.is_null() => b,
        // hipFile answers these (unknown handle, nothing to submit, NULL array).
        // SAFETY: the caller's pointers, under the same contract.
        _ => return check(unsafe { hipfile::hipFileBatchIOSubmit(batch_idp, nr, iocbp, flags) }),
    };
    // SAFETY: the caller passes `nr` entries at iocbp; they are copied, so the
    // caller's array is never changed.
    let mut params: Vec<HipFileIoParams> =
        unsafe { std::slice::from_raw_parts(iocbp, nr as usize) }.to_vec();
    let mut slots = b.lock();
    if params.len() > slots.free.len() {
        return Err(CUfileError::op(OpError::BatchFull.code()));
    }
    let now = Instant::now();
    let taken: Vec<usize> = (0..params.len()).filter_map(|_| slots.free.pop()).collect();
    for (p, &i) in params.iter_mut().zip(&taken) {
        slots.entries[i] = Some(Entry {
            cookie: p.cookie as usize,
            write: p.opcode == OPCODE_WRITE,
            submitted: now,
        });
        p.cookie = (i + 1) as *mut c_void;
    }
    // The slots lock is held across the submit: an entry can complete, and
    // its event be asked for, before the call returns.
    // SAFETY: `params` holds `nr` entries with the caller's buffers and handles.
    let r =
        check(unsafe { hipfile::hipFileBatchIOSubmit(batch_idp, nr, params.as_mut_ptr(), flags) });
    if r.is_err() {
        for i in taken {
            slots.entries[i] = None;
            slots.free.push(i);
        }
    }
    r
}

/// Waits for at least `min_nr` finished entries (bounded by `timeout`) and
/// copies up to `*nr` events to `iocbp`, with the caller's cookies.
///
/// # Safety
///
/// `nr` must be NULL or valid for reading and writing; `iocbp` NULL or valid
/// for writing `*nr` events; `timeout` NULL or a readable `timespec`.
#[no_mangle]
pub unsafe extern "C" fn cuFileBatchIOGetStatus(
    batch_idp: *mut c_void,
    min_nr: c_uint,
    nr: *mut c_uint,
    iocbp: *mut HipFileIoEvents,
    timeout: *mut libc::timespec,
) -> CUfileError {
    guard("cuFileBatchIOGetStatus", || {
        // SAFETY: the caller's pointers, under the same contract.
        check(unsafe { hipfile::hipFileBatchIOGetStatus(batch_idp, min_nr, nr, iocbp, timeout) })?;
        let Some(b) = lookup(batch_idp) else {
            return Ok(());
        };
        // SAFETY: hipFile succeeded, so `nr` is valid and holds the event count.
        let n = unsafe { *nr } as usize;
        if n == 0 {
            return Ok(());
        }
        // SAFETY: hipFile wrote `n` events at iocbp.
        let events = unsafe { std::slice::from_raw_parts_mut(iocbp, n) };
        let mut slots = b.lock();
        let collecting = STATS.collecting();
        for ev in events {
            let i = (ev.cookie as usize).wrapping_sub(1);
            let Some(entry) = slots.entries.get_mut(i).and_then(Option::take) else {
                continue;
            };
            slots.free.push(i);
            ev.cookie = entry.cookie as *mut c_void;
            if collecting {
                let complete = ev.status == STATUS_COMPLETE;
                let bytes = if complete { ev.ret as u64 } else { 0 };
                STATS.batch_event(entry.write, complete, bytes, entry.submitted.elapsed());
            }
        }
        Ok(())
    })
}

/// Cancels what has not started and waits for what has; NULL is nothing to
/// cancel (libcufile answers success).
#[no_mangle]
pub extern "C" fn cuFileBatchIOCancel(batch_idp: *mut c_void) -> CUfileError {
    guard("cuFileBatchIOCancel", || {
        if batch_idp.is_null() {
            return Ok(());
        }
        let r = check(hipfile::hipFileBatchIOCancel(batch_idp));
        if STATS.collecting() {
            STATS.batch_cancel.add(r.is_ok());
        }
        r
    })
}

#[no_mangle]
pub extern "C" fn cuFileBatchIODestroy(batch_idp: *mut c_void) {
    boundary("cuFileBatchIODestroy", || {
        let known = batches().remove(&(batch_idp as usize)).is_some();
        hipfile::hipFileBatchIODestroy(batch_idp);
        if STATS.collecting() && !batch_idp.is_null() {
            STATS.batch_destroy.add(known);
        }
    })
}
