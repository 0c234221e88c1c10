//! Parameters: hipFile's table (the same enums, staged while the driver is
//! closed, 5026 while open, reset by the final close), plus cuFile's range
//! query and range check, and the POSIX pool slab arrays.
//!
//! The values describe this library's engine, not libcufile's defaults (for
//! instance `PREFER_IO_URING` reads true: the engine uses io_uring). The POSIX
//! pool slabs are recorded and read back; the engine sizes its own bounce
//! buffers (`HIPFILE_QUEUE_DEPTH`, `HIPFILE_CHUNK_KB`).

use crate::types::CUfileError;
use crate::{check, guard, refuse, use_count};
use hipfile_engine::config::param;
use hipfile_engine::registry::driver;
use hipfile_engine::OpError;
use std::ffi::{c_char, c_int};
use std::sync::{Mutex, MutexGuard};

fn inval() -> CUfileError {
    CUfileError::op(OpError::InvalidValue.code())
}

/// `CUFILE_PARAM_ENV_LOGFILE_PATH`.
const ENV_LOGFILE_PATH: c_int = 1;

/// Settable range of each `size_t` parameter, indexed by
/// `CUFileSizeTConfigParameter_t`. libcufile 1.15's own answers where they
/// describe a limit this engine shares; where the engine's limit differs, the
/// engine's: `EXECUTION_MAX_IO_THREADS` up to 256 workers (0 = the default),
/// `PROPERTIES_IO_BATCHSIZE` up to 1024 entries; the cache and pinned-memory
/// sizes (KiB) up to what `CUfileDrvProps_t`'s `unsigned` fields report.
/// `PROFILE_STATS` has no range (libcufile answers 5022; the level is
/// `cuFileSetStatsLevel`'s).
const RANGES: [Option<(usize, usize)>; hipfile_engine::config::SIZE_T_PARAMS] = [
    None,
    Some((1, 256)),
    Some((0, 256)),
    Some((4, u32::MAX as usize)),
    Some((0, 8)),
    Some((64, 16384)),
    Some((0, u32::MAX as usize)),
    Some((64, 16384)),
    Some((64, u32::MAX as usize)),
    Some((1, 1024)),
    Some((4, usize::MAX >> 10)),
    Some((1, 1000)),
];

fn range(p: c_int) -> Option<(usize, usize)> {
    usize::try_from(p)
        .ok()
        .and_then(|i| RANGES.get(i).copied().flatten())
}

/// # Safety
///
/// `value` must be NULL or valid for writing a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterSizeT(param: c_int, value: *mut usize) -> CUfileError {
    guard("cuFileGetParameterSizeT", || {
        // SAFETY: the caller's pointer, under the same contract.
        check(unsafe { hipfile::hipFileGetParameterSizeT(param, value) })
    })
}

/// # Safety
///
/// `value` must be NULL or valid for writing a `bool`.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterBool(param: c_int, value: *mut bool) -> CUfileError {
    guard("cuFileGetParameterBool", || {
        // SAFETY: the caller's pointer, under the same contract.
        check(unsafe { hipfile::hipFileGetParameterBool(param, value) })
    })
}

/// An unset `ENV_LOGFILE_PATH` has no value to return: 5022, as libcufile
/// answers.
///
/// # Safety
///
/// `desc_str` must be NULL or valid for writing `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterString(
    param: c_int,
    desc_str: *mut c_char,
    len: c_int,
) -> CUfileError {
    guard("cuFileGetParameterString", || {
        if param == ENV_LOGFILE_PATH
            && driver().read().params.strings[param::S_ENV_LOGFILE_PATH].is_empty()
        {
            return Err(inval());
        }
        // SAFETY: the caller's pointer, under the same contract.
        check(unsafe { hipfile::hipFileGetParameterString(param, desc_str, len) })
    })
}

/// Stores the settable range of a `size_t` parameter.
///
/// # Safety
///
/// `min_value` and `max_value` must be NULL or valid for writing a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterMinMaxValue(
    param: c_int,
    min_value: *mut usize,
    max_value: *mut usize,
) -> CUfileError {
    guard("cuFileGetParameterMinMaxValue", || {
        let Some((lo, hi)) = range(param) else {
            return Err(inval());
        };
        if min_value.is_null() || max_value.is_null() {
            return Err(inval());
        }
        // SAFETY: non-NULL caller storage (checked).
        unsafe {
            *min_value = lo;
            *max_value = hi;
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuFileSetParameterSizeT(param: c_int, value: usize) -> CUfileError {
    guard("cuFileSetParameterSizeT", || {
        if let Some((lo, hi)) = range(param) {
            if value < lo || value > hi {
                return Err(refuse(
                    OpError::InvalidValue,
                    format_args!(
                        "cuFileSetParameterSizeT: {value} is outside {lo}..={hi} for parameter \
                         {param} (cuFileGetParameterMinMaxValue)"
                    ),
                ));
            }
        }
        check(hipfile::hipFileSetParameterSizeT(param, value))
    })
}

#[no_mangle]
pub extern "C" fn cuFileSetParameterBool(param: c_int, value: bool) -> CUfileError {
    guard("cuFileSetParameterBool", || {
        check(hipfile::hipFileSetParameterBool(param, value))
    })
}

/// # Safety
///
/// `desc_str` must be NULL or point to a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cuFileSetParameterString(
    param: c_int,
    desc_str: *const c_char,
) -> CUfileError {
    guard("cuFileSetParameterString", || {
        // SAFETY: the caller's pointer, under the same contract.
        check(unsafe { hipfile::hipFileSetParameterString(param, desc_str) })
    })
}

// ---------------------------------------------------------------------------
// POSIX pool slabs

/// libcufile's defaults (`properties.posix_pool_slab_size_kb` / `_count`).
const DEFAULT_SLAB_KB: [usize; 3] = [4, 1024, 16384];
const DEFAULT_SLAB_COUNT: [usize; 3] = [128, 64, 64];
/// More slab classes than any pool needs: a bound for the caller's length.
const MAX_SLABS: usize = 64;

struct Slabs {
    kb: Vec<usize>,
    count: Vec<usize>,
}

fn slabs() -> MutexGuard<'static, Option<Slabs>> {
    static S: Mutex<Option<Slabs>> = Mutex::new(None);
    S.lock().unwrap_or_else(|p| p.into_inner())
}

fn current(s: &mut Option<Slabs>) -> &Slabs {
    s.get_or_insert_with(|| Slabs {
        kb: DEFAULT_SLAB_KB.to_vec(),
        count: DEFAULT_SLAB_COUNT.to_vec(),
    })
}

/// Back to libcufile's defaults (the final driver close).
pub(crate) fn reset_slabs() {
    *slabs() = None;
}

/// Stages the POSIX pool's slab sizes (KiB, whole pages) and counts while the
/// driver is closed.
///
/// # Safety
///
/// `size_values` and `count_values` must be NULL or point to `len` readable
/// `size_t` each.
#[no_mangle]
pub unsafe extern "C" fn cuFileSetParameterPosixPoolSlabArray(
    size_values: *const usize,
    count_values: *const usize,
    len: c_int,
) -> CUfileError {
    guard("cuFileSetParameterPosixPoolSlabArray", || {
        if size_values.is_null() || count_values.is_null() || len <= 0 {
            return Err(inval());
        }
        if len as usize > MAX_SLABS {
            return Err(refuse(
                OpError::InvalidValue,
                format_args!(
                    "cuFileSetParameterPosixPoolSlabArray: {len} slab classes, at most {MAX_SLABS}"
                ),
            ));
        }
        if use_count() > 0 {
            return Err(CUfileError::op(OpError::DriverAlreadyOpen.code()));
        }
        // SAFETY: the caller provides `len` values in each array (non-NULL).
        let (kb, count) = unsafe {
            (
                std::slice::from_raw_parts(size_values, len as usize).to_vec(),
                std::slice::from_raw_parts(count_values, len as usize).to_vec(),
            )
        };
        if let Some(k) = kb.iter().find(|&&k| k == 0 || k % 4 != 0) {
            return Err(refuse(
                OpError::InvalidValue,
                format_args!(
                    "cuFileSetParameterPosixPoolSlabArray: a slab of {k} KiB is not a whole \
                     number of 4 KiB pages"
                ),
            ));
        }
        if count.contains(&0) {
            return Err(refuse(
                OpError::InvalidValue,
                format_args!("cuFileSetParameterPosixPoolSlabArray: a slab count is 0"),
            ));
        }
        *slabs() = Some(Slabs { kb, count });
        Ok(())
    })
}

/// Copies the slab sizes and counts; `len` must be their number.
///
/// # Safety
///
/// `size_values` and `count_values` must be NULL or valid for writing `len`
/// `size_t` each.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterPosixPoolSlabArray(
    size_values: *mut usize,
    count_values: *mut usize,
    len: c_int,
) -> CUfileError {
    guard("cuFileGetParameterPosixPoolSlabArray", || {
        if size_values.is_null() || count_values.is_null() {
            return Err(inval());
        }
        let mut g = slabs();
        let s = current(&mut g);
        if len < 0 || len as usize != s.kb.len() {
            return Err(refuse(
                OpError::InvalidValue,
                format_args!(
                    "cuFileGetParameterPosixPoolSlabArray: len is {len}, the pool has {} slab classes",
                    s.kb.len()
                ),
            ));
        }
        // SAFETY: the caller provides room for `len` values in each array.
        unsafe {
            std::ptr::copy_nonoverlapping(s.kb.as_ptr(), size_values, s.kb.len());
            std::ptr::copy_nonoverlapping(s.count.as_ptr(), count_values, s.count.len());
        }
        Ok(())
    })
}
