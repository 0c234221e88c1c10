//! Properties and parameters (spec §5.8, cuFile semantics): `Set*Parameter`
//! stages values while the driver is closed (5026 while open), `Get*` reads the
//! staged or live value, and the final close resets everything to defaults.

use crate::passthrough::{self, passthrough};
use crate::types::{HipFileDriverProps, HipFileError};
use crate::{guard, inval};
use hipfile_engine::config::{param, BOOL_PARAMS, SIZE_T_PARAMS, STRING_PARAMS};
use hipfile_engine::error::{Error, OpError};
use hipfile_engine::registry::driver;
use std::ffi::{c_char, c_int, CStr};

fn already_open() -> Error {
    Error::Op(OpError::DriverAlreadyOpen)
}

/// Set parameters only while closed and not locked by a DriverSet* call.
fn settable() -> Result<(), Error> {
    let st = driver().read();
    if st.refcount > 0 || st.params_locked {
        return Err(already_open());
    }
    Ok(())
}

fn index(param: c_int, count: usize) -> Result<usize, Error> {
    usize::try_from(param)
        .ok()
        .filter(|&i| i < count)
        .ok_or_else(inval)
}

/// Stores the driver's properties (live values while open, staged ones while
/// closed) in `*props`.
///
/// # Safety
///
/// `props` must be NULL or valid for writing a `hipFileDriverProps_t`.
#[no_mangle]
pub unsafe extern "C" fn hipFileDriverGetProperties(
    props: *mut HipFileDriverProps,
) -> HipFileError {
    passthrough!("hipFileDriverGetProperties", |cu| {
        passthrough::driver_get_properties(cu, props)
    });
    guard("hipFileDriverGetProperties", || {
        if props.is_null() {
            return Err(inval());
        }
        let st = driver().read();
        let p = &st.params;
        let mut control = 0u32;
        if p.bools[param::B_PROPERTIES_USE_POLL_MODE] {
            control |= 1 << 0;
        }
        if p.bools[param::B_PROPERTIES_ALLOW_COMPAT_MODE] {
            control |= 1 << 1;
        }
        // Features: batch (1) and streams (2) always; parallel I/O (3) when enabled.
        let mut features = (1 << 1) | (1 << 2);
        if p.bools[param::B_EXECUTION_PARALLEL_IO] {
            features |= 1 << 3;
        }
        let out = HipFileDriverProps {
            nvfs_major_version: 0,
            nvfs_minor_version: 2,
            nvfs_poll_thresh_size: p.size_t[param::POLLTHRESHOLD_SIZE_KB],
            nvfs_max_direct_io_size: p.size_t[param::PROPERTIES_MAX_DIRECT_IO_SIZE_KB],
            nvfs_driver_status_flags: 0,
            nvfs_driver_control_flags: control,
            feature_flags: features,
            max_device_cache_size: p.size_t[param::PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB],
            per_buffer_cache_size: p.size_t[param::PROPERTIES_PER_BUFFER_CACHE_SIZE_KB],
            max_device_pinned_mem_size: p.size_t[param::PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB],
            max_batch_io_count: p.size_t[param::PROPERTIES_IO_BATCHSIZE].min(u32::MAX as u64)
                as u32,
            max_batch_io_timeout_msecs: p.size_t[param::PROPERTIES_BATCH_IO_TIMEOUT_MS]
                .min(u32::MAX as u64) as u32,
        };
        // SAFETY: props is non-NULL caller storage for the 72-byte struct.
        unsafe { props.write(out) };
        Ok(())
    })
}

/// DriverSet*: update the property; while closed this also locks Set*Parameter
/// until the driver has been opened and closed (cuFile's observed behaviour).
fn driver_set(f: impl FnOnce(&mut hipfile_engine::config::Params)) -> Result<(), Error> {
    let mut st = driver().write();
    f(&mut st.params);
    if st.refcount == 0 {
        st.params_locked = true;
    }
    Ok(())
}

#[no_mangle]
pub extern "C" fn hipFileDriverSetPollMode(poll: bool, poll_threshold_size: usize) -> HipFileError {
    passthrough!("hipFileDriverSetPollMode", |cu| {
        passthrough::driver_set_poll_mode(cu, poll, poll_threshold_size)
    });
    guard("hipFileDriverSetPollMode", || {
        driver_set(|p| {
            p.bools[param::B_PROPERTIES_USE_POLL_MODE] = poll;
            p.size_t[param::POLLTHRESHOLD_SIZE_KB] = poll_threshold_size as u64;
        })
    })
}

#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxDirectIOSize(max_direct_io_size: usize) -> HipFileError {
    passthrough!("hipFileDriverSetMaxDirectIOSize", |cu| {
        passthrough::driver_set_max_direct_io_size(cu, max_direct_io_size)
    });
    guard("hipFileDriverSetMaxDirectIOSize", || {
        driver_set(|p| {
            p.size_t[param::PROPERTIES_MAX_DIRECT_IO_SIZE_KB] = max_direct_io_size as u64
        })
    })
}

#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxCacheSize(max_cache_size: usize) -> HipFileError {
    passthrough!("hipFileDriverSetMaxCacheSize", |cu| {
        passthrough::driver_set_max_cache_size(cu, max_cache_size)
    });
    guard("hipFileDriverSetMaxCacheSize", || {
        driver_set(|p| p.size_t[param::PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB] = max_cache_size as u64)
    })
}

#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxPinnedMemSize(max_pinned_size: usize) -> HipFileError {
    passthrough!("hipFileDriverSetMaxPinnedMemSize", |cu| {
        passthrough::driver_set_max_pinned_mem_size(cu, max_pinned_size)
    });
    guard("hipFileDriverSetMaxPinnedMemSize", || {
        driver_set(|p| {
            p.size_t[param::PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB] = max_pinned_size as u64
        })
    })
}

/// Stores the value of a `size_t` parameter in `*value`.
///
/// # Safety
///
/// `value` must be NULL or valid for writing a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterSizeT(param: c_int, value: *mut usize) -> HipFileError {
    passthrough!("hipFileGetParameterSizeT", |cu| {
        passthrough::get_parameter_size_t(cu, param, value)
    });
    guard("hipFileGetParameterSizeT", || {
        let i = index(param, SIZE_T_PARAMS)?;
        if value.is_null() {
            return Err(inval());
        }
        let v = driver().read().params.size_t[i];
        // SAFETY: value is non-NULL caller storage.
        unsafe { *value = v as usize };
        Ok(())
    })
}

/// Stores the value of a `bool` parameter in `*value`.
///
/// # Safety
///
/// `value` must be NULL or valid for writing a `bool`.
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterBool(param: c_int, value: *mut bool) -> HipFileError {
    passthrough!("hipFileGetParameterBool", |cu| {
        passthrough::get_parameter_bool(cu, param, value)
    });
    guard("hipFileGetParameterBool", || {
        let i = index(param, BOOL_PARAMS)?;
        if value.is_null() {
            return Err(inval());
        }
        let v = driver().read().params.bools[i];
        // SAFETY: value is non-NULL caller storage.
        unsafe { *value = v };
        Ok(())
    })
}

/// Copies a string parameter, NUL-terminated, into `desc_str` (5022 when `len`
/// bytes cannot hold it).
///
/// # Safety
///
/// `desc_str` must be NULL or valid for writing `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterString(
    param: c_int,
    desc_str: *mut c_char,
    len: c_int,
) -> HipFileError {
    passthrough!("hipFileGetParameterString", |cu| {
        passthrough::get_parameter_string(cu, param, desc_str, len)
    });
    guard("hipFileGetParameterString", || {
        let i = index(param, STRING_PARAMS)?;
        if desc_str.is_null() || len <= 0 {
            return Err(inval());
        }
        let v = driver().read().params.strings[i].clone();
        if v.len() + 1 > len as usize {
            return Err(inval());
        }
        // SAFETY: the caller provides `len` bytes at desc_str; v.len() + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(v.as_ptr(), desc_str.cast::<u8>(), v.len());
            *desc_str.add(v.len()) = 0;
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn hipFileSetParameterSizeT(param: c_int, value: usize) -> HipFileError {
    passthrough!("hipFileSetParameterSizeT", |cu| {
        passthrough::set_parameter_size_t(cu, param, value)
    });
    guard("hipFileSetParameterSizeT", || {
        let i = index(param, SIZE_T_PARAMS)?;
        settable()?;
        if i == param::PROPERTIES_IO_BATCHSIZE && (value == 0 || value > 1024) {
            return Err(inval());
        }
        if i == param::PROFILE_STATS {
            // Takes effect now, over HIPFILE_STATS_LEVEL and the file.
            hipfile_engine::stats::set_level(value.min(3) as u32);
        }
        driver().write().params.size_t[i] = value as u64;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn hipFileSetParameterBool(param: c_int, value: bool) -> HipFileError {
    passthrough!("hipFileSetParameterBool", |cu| {
        passthrough::set_parameter_bool(cu, param, value)
    });
    guard("hipFileSetParameterBool", || {
        let i = index(param, BOOL_PARAMS)?;
        settable()?;
        driver().write().params.bools[i] = value;
        Ok(())
    })
}

/// Stages a string parameter while the driver is closed (5026 while open).
///
/// # Safety
///
/// `desc_str` must be NULL or point to a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn hipFileSetParameterString(
    param: c_int,
    desc_str: *const c_char,
) -> HipFileError {
    passthrough!("hipFileSetParameterString", |cu| {
        passthrough::set_parameter_string(cu, param, desc_str)
    });
    guard("hipFileSetParameterString", || {
        let i = index(param, STRING_PARAMS)?;
        if desc_str.is_null() {
            return Err(inval());
        }
        settable()?;
        // SAFETY: desc_str is a non-NULL, NUL-terminated caller string.
        let s = unsafe { CStr::from_ptr(desc_str) }
            .to_str()
            .map_err(|_| inval())?;
        match i {
            param::S_LOGGING_LEVEL => match hipfile_engine::log::parse_level(s) {
                Some(l) => hipfile_engine::log::set_max_level(l),
                None => return Err(inval()),
            },
            // The default logger writes there from now on (an empty string
            // goes back to the environment's or the file's choice).
            param::S_ENV_LOGFILE_PATH => hipfile_engine::log::set_file(Some(s)),
            param::S_LOG_DIR => hipfile_engine::log::set_dir(Some(s)),
            _ => {}
        }
        driver().write().params.strings[i] = s.to_string();
        Ok(())
    })
}
