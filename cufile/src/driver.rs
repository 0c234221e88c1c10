//! Driver lifecycle, properties, version, BAR size and the statistics calls.

use crate::types::*;
use crate::{boundary, check, engine_error, guard, refuse, use_count, CUFILE_VERSION, STATS};
use hipfile::types::HipFileDriverProps;
use hipfile_engine::gpu::GpuError;
use hipfile_engine::registry::driver;
use hipfile_engine::{log_debug, Error, OpError};
use std::ffi::{c_int, c_long};

#[no_mangle]
pub extern "C" fn cuFileDriverOpen() -> CUfileError {
    guard("cuFileDriverOpen", || check(hipfile::hipFileDriverOpen()))
}

/// The close both exported names share. After the final close the front's
/// own state goes too: statistics, POSIX pool slabs, batch bookkeeping.
fn close(name: &str) -> CUfileError {
    guard(name, || {
        check(hipfile::hipFileDriverClose())?;
        if use_count() == 0 {
            STATS.stop();
            STATS.reset();
            crate::params::reset_slabs();
            crate::batch::forget_all();
        }
        Ok(())
    })
}

/// The name libcufile exports for binaries built against old headers.
#[no_mangle]
pub extern "C" fn cuFileDriverClose() -> CUfileError {
    close("cuFileDriverClose")
}

/// What `cuFileDriverClose` names in cufile.h (a macro), so what programs
/// built against the header import.
#[no_mangle]
pub extern "C" fn cuFileDriverClose_v2() -> CUfileError {
    close("cuFileDriverClose_v2")
}

#[no_mangle]
pub extern "C" fn cuFileUseCount() -> c_long {
    boundary("cuFileUseCount", || hipfile::hipFileUseCount() as c_long)
}

/// hipFile's properties in cuFile's layout. nvidia-fs is reported absent
/// (version 0.0, no status flags): this library never uses it.
///
/// # Safety
///
/// `props` must be NULL or valid for writing a `CUfileDrvProps_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileDriverGetProperties(props: *mut CUfileDrvProps) -> CUfileError {
    guard("cuFileDriverGetProperties", || {
        if props.is_null() {
            return Err(CUfileError::op(OpError::InvalidValue.code()));
        }
        let mut h = HipFileDriverProps::default();
        // SAFETY: `h` is a live hipFileDriverProps_t.
        check(unsafe { hipfile::hipFileDriverGetProperties(&mut h) })?;
        let narrow = |what: &str, v: u64| {
            u32::try_from(v).map_err(|_| {
                refuse(
                    OpError::DriverInvalidProps,
                    format_args!(
                        "cuFileDriverGetProperties: {what} is {v} KiB, more than the unsigned \
                         field of CUfileDrvProps_t holds"
                    ),
                )
            })
        };
        let out = CUfileDrvProps {
            major_version: 0,
            minor_version: 0,
            poll_thresh_size: h.nvfs_poll_thresh_size as usize,
            max_direct_io_size: h.nvfs_max_direct_io_size as usize,
            dstatusflags: 0,
            dcontrolflags: h.nvfs_driver_control_flags,
            fflags: h.feature_flags,
            max_device_cache_size: narrow("max_device_cache_size", h.max_device_cache_size)?,
            per_buffer_cache_size: narrow("per_buffer_cache_size", h.per_buffer_cache_size)?,
            max_device_pinned_mem_size: narrow(
                "max_device_pinned_mem_size",
                h.max_device_pinned_mem_size,
            )?,
            max_batch_io_size: h.max_batch_io_count,
            max_batch_io_timeout_msecs: h.max_batch_io_timeout_msecs,
        };
        // SAFETY: non-NULL caller storage for a CUfileDrvProps_t.
        unsafe { props.write(out) };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuFileDriverSetPollMode(poll: bool, poll_threshold_size: usize) -> CUfileError {
    guard("cuFileDriverSetPollMode", || {
        check(hipfile::hipFileDriverSetPollMode(poll, poll_threshold_size))
    })
}

#[no_mangle]
pub extern "C" fn cuFileDriverSetMaxDirectIOSize(max_direct_io_size: usize) -> CUfileError {
    guard("cuFileDriverSetMaxDirectIOSize", || {
        check(hipfile::hipFileDriverSetMaxDirectIOSize(max_direct_io_size))
    })
}

#[no_mangle]
pub extern "C" fn cuFileDriverSetMaxCacheSize(max_cache_size: usize) -> CUfileError {
    guard("cuFileDriverSetMaxCacheSize", || {
        check(hipfile::hipFileDriverSetMaxCacheSize(max_cache_size))
    })
}

#[no_mangle]
pub extern "C" fn cuFileDriverSetMaxPinnedMemSize(max_pinned_size: usize) -> CUfileError {
    guard("cuFileDriverSetMaxPinnedMemSize", || {
        check(hipfile::hipFileDriverSetMaxPinnedMemSize(max_pinned_size))
    })
}

/// Stores 1000 · major + 10 · minor of the cufile.h version implemented (1150).
///
/// # Safety
///
/// `version` must be NULL or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetVersion(version: *mut c_int) -> CUfileError {
    guard("cuFileGetVersion", || {
        if version.is_null() {
            return Err(CUfileError::op(OpError::InvalidValue.code()));
        }
        // SAFETY: non-NULL caller storage for an int.
        unsafe { *version = CUFILE_VERSION };
        Ok(())
    })
}

/// BAR1 size of CUDA device `gpu_index` in KiB: from the PCI device's sysfs
/// `resource` file, else from NVML (`bar.rs` says why both).
///
/// # Safety
///
/// `bar_size` must be NULL or valid for writing a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetBARSizeInKB(
    gpu_index: c_int,
    bar_size: *mut usize,
) -> CUfileError {
    guard("cuFileGetBARSizeInKB", || {
        if bar_size.is_null() {
            return Err(CUfileError::op(OpError::InvalidValue.code()));
        }
        let gpu = driver().gpu();
        if gpu.name() != "cuda" || gpu_index < 0 || gpu_index >= gpu.device_count() {
            return Err(refuse(
                OpError::InvalidValue,
                format_args!(
                    "cuFileGetBARSizeInKB: GPU {gpu_index} is not a CUDA device here ({} with {} \
                     device(s))",
                    gpu.name(),
                    gpu.device_count()
                ),
            ));
        }
        let bus = pci_bus_id(gpu_index)
            .map_err(|e| engine_error("cuFileGetBARSizeInKB", &Error::Gpu(e)))?;
        let (bytes, source) = crate::bar::bar1_bytes(&bus).map_err(|why| {
            refuse(
                OpError::InternalError,
                format_args!(
                    "cuFileGetBARSizeInKB: cannot learn BAR1 of GPU {gpu_index} ({bus}): {why}"
                ),
            )
        })?;
        log_debug!(
            "cuFileGetBARSizeInKB: GPU {gpu_index} ({bus}): BAR1 {bytes} bytes, from {source}"
        );
        // SAFETY: non-NULL caller storage for a size_t.
        unsafe { *bar_size = (bytes >> 10) as usize };
        Ok(())
    })
}

/// The PCI bus id (`0000:3b:00.0`, sysfs's spelling) of CUDA device `ordinal`.
/// The engine has loaded the CUDA driver library (its runtime is "cuda").
fn pci_bus_id(ordinal: c_int) -> Result<String, GpuError> {
    use cudarc::driver::sys;
    let check = |call: &'static str, r: sys::CUresult| {
        if r == sys::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(GpuError::Driver {
                call,
                code: r as i32,
            })
        }
    };
    let mut dev: sys::CUdevice = 0;
    // SAFETY: libcuda is loaded and initialised (the engine's CUDA runtime is
    // active); `dev` is a live out-parameter.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut dev, ordinal)
    })?;
    let mut buf = [0 as std::ffi::c_char; 64];
    // SAFETY: `buf` holds 64 bytes, the length passed.
    check("cuDeviceGetPCIBusId", unsafe {
        sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, dev)
    })?;
    // SAFETY: the driver wrote a NUL-terminated string into `buf`.
    let id = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Ok(id.to_string_lossy().to_ascii_lowercase())
}

// ---------------------------------------------------------------------------
// Statistics (stats.rs says what is counted)

fn driver_open() -> Result<(), CUfileError> {
    if use_count() == 0 {
        return Err(CUfileError::op(OpError::DriverNotInitialized.code()));
    }
    Ok(())
}

#[no_mangle]
pub extern "C" fn cuFileSetStatsLevel(level: c_int) -> CUfileError {
    guard("cuFileSetStatsLevel", || {
        if !(0..=3).contains(&level) {
            return Err(refuse(
                OpError::InvalidValue,
                format_args!("cuFileSetStatsLevel: level {level} is not 0, 1, 2 or 3"),
            ));
        }
        STATS.set_level(level);
        Ok(())
    })
}

/// # Safety
///
/// `level` must be NULL or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsLevel(level: *mut c_int) -> CUfileError {
    guard("cuFileGetStatsLevel", || {
        if level.is_null() {
            return Err(CUfileError::op(OpError::InvalidValue.code()));
        }
        // SAFETY: non-NULL caller storage for an int.
        unsafe { *level = STATS.level() };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuFileStatsStart() -> CUfileError {
    guard("cuFileStatsStart", || {
        driver_open()?;
        if STATS.level() == 0 {
            return Err(refuse(
                OpError::InvalidValue,
                format_args!(
                    "cuFileStatsStart: the statistics level is 0; set it with cuFileSetStatsLevel first"
                ),
            ));
        }
        STATS.start();
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuFileStatsStop() -> CUfileError {
    guard("cuFileStatsStop", || {
        driver_open()?;
        STATS.stop();
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuFileStatsReset() -> CUfileError {
    guard("cuFileStatsReset", || {
        driver_open()?;
        STATS.reset();
        Ok(())
    })
}

/// Checks shared by the three getters: a destination, an open driver, and a
/// level at least `need`.
fn stats_ready<T>(name: &str, p: *mut T, need: i32) -> Result<(), CUfileError> {
    if p.is_null() {
        return Err(CUfileError::op(OpError::InvalidValue.code()));
    }
    driver_open()?;
    if STATS.level() < need {
        return Err(refuse(
            OpError::InvalidValue,
            format_args!(
                "{name}: the statistics level is {}; level {need} statistics need \
                 cuFileSetStatsLevel({need}) or more",
                STATS.level()
            ),
        ));
    }
    Ok(())
}

/// # Safety
///
/// `stats` must be NULL or valid for writing a `CUfileStatsLevel1_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsL1(stats: *mut CUfileStatsLevel1) -> CUfileError {
    guard("cuFileGetStatsL1", || {
        stats_ready("cuFileGetStatsL1", stats, 1)?;
        // SAFETY: non-NULL caller storage (checked).
        unsafe { stats.write(STATS.level1()) };
        Ok(())
    })
}

/// # Safety
///
/// `stats` must be NULL or valid for writing a `CUfileStatsLevel2_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsL2(stats: *mut CUfileStatsLevel2) -> CUfileError {
    guard("cuFileGetStatsL2", || {
        stats_ready("cuFileGetStatsL2", stats, 2)?;
        // SAFETY: non-NULL caller storage (checked).
        unsafe { stats.write(STATS.level2()) };
        Ok(())
    })
}

/// # Safety
///
/// `stats` must be NULL or valid for writing a `CUfileStatsLevel3_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsL3(stats: *mut CUfileStatsLevel3) -> CUfileError {
    guard("cuFileGetStatsL3", || {
        stats_ready("cuFileGetStatsL3", stats, 3)?;
        let gpus = driver().gpu().device_count().clamp(0, MAX_GPUS as i32) as u32;
        let out = CUfileStatsLevel3 {
            detailed: STATS.level2(),
            num_gpus: gpus,
            ..CUfileStatsLevel3::default()
        };
        // SAFETY: non-NULL caller storage (checked).
        unsafe { stats.write(out) };
        Ok(())
    })
}
