//! cuFile's C layouts (cufile.h 1.15) that differ from hipFile's, declared
//! here; `tests/cufile/layout.c` checks every size and offset against
//! NVIDIA's header. The file descriptor, batch parameter and batch event
//! structures have hipFile's layouts exactly, so the front passes them to the
//! hipFile entry points as they are (also checked there).

use std::ffi::c_uint;

/// `CUfileError_t`: {`CUfileOpError err`; `CUresult cu_err`}, 8 bytes: the
/// layout, the codes and (on CUDA) the driver code of `hipFileError_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CUfileError {
    pub err: i32,
    pub cu_err: i32,
}

impl CUfileError {
    pub const SUCCESS: CUfileError = CUfileError { err: 0, cu_err: 0 };

    pub fn op(code: i32) -> CUfileError {
        CUfileError {
            err: code,
            cu_err: 0,
        }
    }
}

impl From<hipfile::types::HipFileError> for CUfileError {
    fn from(e: hipfile::types::HipFileError) -> Self {
        CUfileError {
            err: e.err,
            cu_err: e.hip_drv_err,
        }
    }
}

/// `CUfileDrvProps_t`, 56 bytes: hipFile's properties with `unsigned` sizes
/// (KiB) and cuFile's field names.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUfileDrvProps {
    pub major_version: c_uint,
    pub minor_version: c_uint,
    pub poll_thresh_size: usize,
    pub max_direct_io_size: usize,
    pub dstatusflags: c_uint,
    pub dcontrolflags: c_uint,
    pub fflags: c_uint,
    pub max_device_cache_size: c_uint,
    pub per_buffer_cache_size: c_uint,
    pub max_device_pinned_mem_size: c_uint,
    pub max_batch_io_size: c_uint,
    pub max_batch_io_timeout_msecs: c_uint,
}

/// `CUfileOpCounter_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUfileOpCounter {
    pub ok: u64,
    pub err: u64,
}

/// `CUfileStatsLevel1_t`, 512 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUfileStatsLevel1 {
    pub read_ops: CUfileOpCounter,
    pub write_ops: CUfileOpCounter,
    pub hdl_register_ops: CUfileOpCounter,
    pub hdl_deregister_ops: CUfileOpCounter,
    pub buf_register_ops: CUfileOpCounter,
    pub buf_deregister_ops: CUfileOpCounter,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_bw_bytes_per_sec: u64,
    pub write_bw_bytes_per_sec: u64,
    pub read_lat_avg_us: u64,
    pub write_lat_avg_us: u64,
    pub read_ops_per_sec: u64,
    pub write_ops_per_sec: u64,
    pub read_lat_sum_us: u64,
    pub write_lat_sum_us: u64,
    pub batch_submit_ops: CUfileOpCounter,
    pub batch_complete_ops: CUfileOpCounter,
    pub batch_setup_ops: CUfileOpCounter,
    pub batch_cancel_ops: CUfileOpCounter,
    pub batch_destroy_ops: CUfileOpCounter,
    pub batch_enqueued_ops: CUfileOpCounter,
    pub batch_posix_enqueued_ops: CUfileOpCounter,
    pub batch_processed_ops: CUfileOpCounter,
    pub batch_posix_processed_ops: CUfileOpCounter,
    pub batch_nvfs_submit_ops: CUfileOpCounter,
    pub batch_p2p_submit_ops: CUfileOpCounter,
    pub batch_aio_submit_ops: CUfileOpCounter,
    pub batch_iouring_submit_ops: CUfileOpCounter,
    pub batch_mixed_io_submit_ops: CUfileOpCounter,
    pub batch_total_submit_ops: CUfileOpCounter,
    pub batch_read_bytes: u64,
    pub batch_write_bytes: u64,
    pub batch_read_bw_bytes: u64,
    pub batch_write_bw_bytes: u64,
    pub batch_submit_lat_avg_us: u64,
    pub batch_completion_lat_avg_us: u64,
    pub batch_submit_ops_per_sec: u64,
    pub batch_complete_ops_per_sec: u64,
    pub batch_submit_lat_sum_us: u64,
    pub batch_completion_lat_sum_us: u64,
    pub last_batch_read_bytes: u64,
    pub last_batch_write_bytes: u64,
}

/// Buckets of the size histograms of `CUfileStatsLevel2_t`.
pub const HIST_BUCKETS: usize = 32;

/// `CUfileStatsLevel2_t`, 1024 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUfileStatsLevel2 {
    pub basic: CUfileStatsLevel1,
    pub read_size_kb_hist: [u64; HIST_BUCKETS],
    pub write_size_kb_hist: [u64; HIST_BUCKETS],
}

/// `CUFILE_GPU_UUID_LEN`.
pub const GPU_UUID_LEN: usize = 16;
/// The per-GPU array length of `CUfileStatsLevel3_t`.
pub const MAX_GPUS: usize = 16;

/// `CUfilePerGpuStats_t`, 248 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUfilePerGpuStats {
    pub uuid: [u8; GPU_UUID_LEN],
    pub read_bytes: u64,
    pub read_bw_bytes_per_sec: u64,
    pub read_utilization: u64,
    pub read_duration_us: u64,
    pub n_total_reads: u64,
    pub n_p2p_reads: u64,
    pub n_nvfs_reads: u64,
    pub n_posix_reads: u64,
    pub n_unaligned_reads: u64,
    pub n_dr_reads: u64,
    pub n_sparse_regions: u64,
    pub n_inline_regions: u64,
    pub n_reads_err: u64,
    pub writes_bytes: u64,
    pub write_bw_bytes_per_sec: u64,
    pub write_utilization: u64,
    pub write_duration_us: u64,
    pub n_total_writes: u64,
    pub n_p2p_writes: u64,
    pub n_nvfs_writes: u64,
    pub n_posix_writes: u64,
    pub n_unaligned_writes: u64,
    pub n_dr_writes: u64,
    pub n_writes_err: u64,
    pub n_mmap: u64,
    pub n_mmap_ok: u64,
    pub n_mmap_err: u64,
    pub n_mmap_free: u64,
    pub reg_bytes: u64,
}

/// `CUfileStatsLevel3_t`, 5000 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CUfileStatsLevel3 {
    pub detailed: CUfileStatsLevel2,
    pub num_gpus: u32,
    pub per_gpu_stats: [CUfilePerGpuStats; MAX_GPUS],
}

impl Default for CUfileStatsLevel3 {
    fn default() -> Self {
        CUfileStatsLevel3 {
            detailed: CUfileStatsLevel2::default(),
            num_gpus: 0,
            per_gpu_stats: [CUfilePerGpuStats::default(); MAX_GPUS],
        }
    }
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<CUfileError>() == 8);
    assert!(size_of::<CUfileDrvProps>() == 56);
    assert!(offset_of!(CUfileDrvProps, dstatusflags) == 24);
    assert!(offset_of!(CUfileDrvProps, fflags) == 32);
    assert!(offset_of!(CUfileDrvProps, max_batch_io_size) == 48);
    assert!(offset_of!(CUfileDrvProps, max_batch_io_timeout_msecs) == 52);
    assert!(size_of::<CUfileStatsLevel1>() == 512);
    assert!(offset_of!(CUfileStatsLevel1, batch_submit_ops) == 176);
    assert!(offset_of!(CUfileStatsLevel1, batch_read_bytes) == 416);
    assert!(offset_of!(CUfileStatsLevel1, last_batch_write_bytes) == 504);
    assert!(size_of::<CUfileStatsLevel2>() == 1024);
    assert!(size_of::<CUfilePerGpuStats>() == 248);
    assert!(offset_of!(CUfilePerGpuStats, read_bytes) == 16);
    assert!(offset_of!(CUfilePerGpuStats, writes_bytes) == 120);
    assert!(offset_of!(CUfilePerGpuStats, n_mmap) == 208);
    assert!(offset_of!(CUfilePerGpuStats, reg_bytes) == 240);
    assert!(size_of::<CUfileStatsLevel3>() == 5000);
    assert!(offset_of!(CUfileStatsLevel3, num_gpus) == 1024);
    assert!(offset_of!(CUfileStatsLevel3, per_gpu_stats) == 1032);
    // The structures passed through to hipFile unchanged.
    assert!(size_of::<hipfile::types::HipFileDescr>() == 24);
    assert!(size_of::<hipfile::types::HipFileIoParams>() == 64);
    assert!(size_of::<hipfile::types::HipFileIoEvents>() == 24);
};
