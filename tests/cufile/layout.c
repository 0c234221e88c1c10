/*
 * layout.c: the layouts, enum values, macros and prototypes of NVIDIA's cufile.h
 * 1.15 (from the nvidia-cufile wheel, scripts/fetch-cufile-sdk.sh) that
 * hipfile-rs's libcufile.so.0 is built on, as C11 _Static_asserts. Every number
 * here is also asserted on the Rust side: cufile/src/types.rs (CUfileError_t,
 * CUfileDrvProps_t, the statistics structures), ffi/src/types.rs (the descriptor,
 * batch parameter and event structures the front passes to hipFile unchanged) and
 * gds/src/abi.rs (what the passthrough calls). Nothing is linked; the program only
 * prints "N passed, 0 failed" when it compiles.
 *
 * Build: cc -std=c11 -Wall -Wextra -Werror -I target/cufile-sdk/include tests/cufile/layout.c
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <cufile.h>

#define SIZE(t, n) _Static_assert(sizeof(t) == (n), "sizeof " #t " is not " #n)
#define AT(t, f, n) _Static_assert(offsetof(t, f) == (n), "offsetof(" #t ", " #f ") is not " #n)
#define EQ(a, b) _Static_assert((long long)(a) == (long long)(b), #a " is not " #b)
#define PROTO(fn, type) _Static_assert(_Generic(&fn, type: 1, default: 0), #fn " is not " #type)

/* CUfileError_t: the layout of hipFileError_t. */
SIZE(CUfileError_t, 8);
AT(CUfileError_t, err, 0);
AT(CUfileError_t, cu_err, 4);
SIZE(CUresult, 4);

/* CUfileDescr_t: hipFileDescr_t's layout (passed to hipFileHandleRegister as is). */
SIZE(CUfileDescr_t, 24);
AT(CUfileDescr_t, type, 0);
AT(CUfileDescr_t, handle.fd, 8);
AT(CUfileDescr_t, handle.handle, 8);
AT(CUfileDescr_t, fs_ops, 16);
SIZE(enum CUfileFileHandleType, 4);
EQ(CU_FILE_HANDLE_TYPE_OPAQUE_FD, 1);
EQ(CU_FILE_HANDLE_TYPE_OPAQUE_WIN32, 2);
EQ(CU_FILE_HANDLE_TYPE_USERSPACE_FS, 3);
SIZE(cufileRDMAInfo_t, 16);
SIZE(CUfileFSOps_t, 40);
AT(CUfileFSOps_t, read, 24);
AT(CUfileFSOps_t, write, 32);

/* CUfileDrvProps_t: cufile/src/types.rs CUfileDrvProps, gds/src/abi.rs CuFileDrvProps. */
SIZE(CUfileDrvProps_t, 56);
AT(CUfileDrvProps_t, nvfs.major_version, 0);
AT(CUfileDrvProps_t, nvfs.minor_version, 4);
AT(CUfileDrvProps_t, nvfs.poll_thresh_size, 8);
AT(CUfileDrvProps_t, nvfs.max_direct_io_size, 16);
AT(CUfileDrvProps_t, nvfs.dstatusflags, 24);
AT(CUfileDrvProps_t, nvfs.dcontrolflags, 28);
AT(CUfileDrvProps_t, fflags, 32);
AT(CUfileDrvProps_t, max_device_cache_size, 36);
AT(CUfileDrvProps_t, per_buffer_cache_size, 40);
AT(CUfileDrvProps_t, max_device_pinned_mem_size, 44);
AT(CUfileDrvProps_t, max_batch_io_size, 48);
AT(CUfileDrvProps_t, max_batch_io_timeout_msecs, 52);
EQ(CU_FILE_USE_POLL_MODE, 0);
EQ(CU_FILE_ALLOW_COMPAT_MODE, 1);
EQ(CU_FILE_DYN_ROUTING_SUPPORTED, 0);
EQ(CU_FILE_BATCH_IO_SUPPORTED, 1);
EQ(CU_FILE_STREAMS_SUPPORTED, 2);
EQ(CU_FILE_PARALLEL_IO_SUPPORTED, 3);
EQ(CU_FILE_LUSTRE_SUPPORTED, 0);
EQ(CU_FILE_NVME_SUPPORTED, 4);
EQ(CU_FILE_BEEGFS_SUPPORTED, 9);
EQ(CU_FILE_NVME_P2P_SUPPORTED, 11); /* gds/src/abi.rs NVME_P2P_SUPPORTED_BIT */
EQ(CU_FILE_SCATEFS_SUPPORTED, 12);

/* CUfileIOParams_t and CUfileIOEvents_t: hipFileIOParams_t's and hipFileIOEvents_t's layouts. */
SIZE(CUfileIOParams_t, 64);
AT(CUfileIOParams_t, mode, 0);
AT(CUfileIOParams_t, u.batch.devPtr_base, 8);
AT(CUfileIOParams_t, u.batch.file_offset, 16);
AT(CUfileIOParams_t, u.batch.devPtr_offset, 24);
AT(CUfileIOParams_t, u.batch.size, 32);
AT(CUfileIOParams_t, fh, 40);
AT(CUfileIOParams_t, opcode, 48);
AT(CUfileIOParams_t, cookie, 56);
SIZE(CUfileIOEvents_t, 24);
AT(CUfileIOEvents_t, cookie, 0);
AT(CUfileIOEvents_t, status, 8);
AT(CUfileIOEvents_t, ret, 16);
EQ(CUFILE_READ, 0);
EQ(CUFILE_WRITE, 1); /* cufile/src/batch.rs OPCODE_WRITE */
EQ(CUFILE_BATCH, 1);
EQ(CUFILE_WAITING, 0x01);
EQ(CUFILE_PENDING, 0x02);
EQ(CUFILE_INVALID, 0x04);
EQ(CUFILE_CANCELED, 0x08);
EQ(CUFILE_COMPLETE, 0x10); /* cufile/src/batch.rs STATUS_COMPLETE */
EQ(CUFILE_TIMEOUT, 0x20);
EQ(CUFILE_FAILED, 0x40);

/* Statistics: cufile/src/types.rs. */
SIZE(CUfileOpCounter_t, 16);
SIZE(CUfileStatsLevel1_t, 512);
AT(CUfileStatsLevel1_t, read_ops, 0);
AT(CUfileStatsLevel1_t, buf_deregister_ops, 80);
AT(CUfileStatsLevel1_t, read_bytes, 96);
AT(CUfileStatsLevel1_t, write_lat_sum_us, 168);
AT(CUfileStatsLevel1_t, batch_submit_ops, 176);
AT(CUfileStatsLevel1_t, batch_total_submit_ops, 400);
AT(CUfileStatsLevel1_t, batch_read_bytes, 416);
AT(CUfileStatsLevel1_t, last_batch_write_bytes, 504);
SIZE(CUfileStatsLevel2_t, 1024);
AT(CUfileStatsLevel2_t, read_size_kb_hist, 512);
AT(CUfileStatsLevel2_t, write_size_kb_hist, 768);
EQ(CUFILE_GPU_UUID_LEN, 16);
SIZE(CUfilePerGpuStats_t, 248);
AT(CUfilePerGpuStats_t, read_bytes, 16);
AT(CUfilePerGpuStats_t, n_reads_err, 112);
AT(CUfilePerGpuStats_t, writes_bytes, 120);
AT(CUfilePerGpuStats_t, n_mmap, 208);
AT(CUfilePerGpuStats_t, reg_bytes, 240);
SIZE(CUfileStatsLevel3_t, 5000);
AT(CUfileStatsLevel3_t, num_gpus, 1024);
AT(CUfileStatsLevel3_t, per_gpu_stats, 1032);

/* Error codes: the hipFile codes the front returns (engine/src/error.rs OpError). */
EQ(CUFILEOP_BASE_ERR, 5000);
EQ(CU_FILE_SUCCESS, 0);
EQ(CU_FILE_DRIVER_NOT_INITIALIZED, 5001);
EQ(CU_FILE_DRIVER_INVALID_PROPS, 5002);
EQ(CU_FILE_DRIVER_UNSUPPORTED_LIMIT, 5003);
EQ(CU_FILE_DRIVER_VERSION_MISMATCH, 5004);
EQ(CU_FILE_DRIVER_VERSION_READ_ERROR, 5005);
EQ(CU_FILE_DRIVER_CLOSING, 5006);
EQ(CU_FILE_PLATFORM_NOT_SUPPORTED, 5007);
EQ(CU_FILE_IO_NOT_SUPPORTED, 5008);
EQ(CU_FILE_DEVICE_NOT_SUPPORTED, 5009);
EQ(CU_FILE_NVFS_DRIVER_ERROR, 5010);
EQ(CU_FILE_CUDA_DRIVER_ERROR, 5011);
EQ(CU_FILE_CUDA_POINTER_INVALID, 5012);
EQ(CU_FILE_CUDA_MEMORY_TYPE_INVALID, 5013);
EQ(CU_FILE_CUDA_POINTER_RANGE_ERROR, 5014);
EQ(CU_FILE_CUDA_CONTEXT_MISMATCH, 5015);
EQ(CU_FILE_INVALID_MAPPING_SIZE, 5016);
EQ(CU_FILE_INVALID_MAPPING_RANGE, 5017);
EQ(CU_FILE_INVALID_FILE_TYPE, 5018);
EQ(CU_FILE_INVALID_FILE_OPEN_FLAG, 5019);
EQ(CU_FILE_DIO_NOT_SET, 5020);
EQ(CU_FILE_INVALID_VALUE, 5022);
EQ(CU_FILE_MEMORY_ALREADY_REGISTERED, 5023);
EQ(CU_FILE_MEMORY_NOT_REGISTERED, 5024);
EQ(CU_FILE_PERMISSION_DENIED, 5025);
EQ(CU_FILE_DRIVER_ALREADY_OPEN, 5026);
EQ(CU_FILE_HANDLE_NOT_REGISTERED, 5027);
EQ(CU_FILE_HANDLE_ALREADY_REGISTERED, 5028);
EQ(CU_FILE_DEVICE_NOT_FOUND, 5029);
EQ(CU_FILE_INTERNAL_ERROR, 5030);
EQ(CU_FILE_GETNEWFD_FAILED, 5031);
EQ(CU_FILE_NVFS_SETUP_ERROR, 5033);
EQ(CU_FILE_IO_DISABLED, 5034);
EQ(CU_FILE_BATCH_SUBMIT_FAILED, 5035);
EQ(CU_FILE_GPU_MEMORY_PINNING_FAILED, 5036);
EQ(CU_FILE_BATCH_FULL, 5037);
EQ(CU_FILE_ASYNC_NOT_SUPPORTED, 5038);
EQ(CU_FILE_INTERNAL_BATCH_SETUP_ERROR, 5039);
EQ(CU_FILE_IO_ERROR, 5044);
EQ(CU_FILE_BATCH_NOCOMPAT_ERROR, 5049);
EQ(CU_FILE_IO_MAX_ERROR, 5050);

/* Flags. */
EQ(CU_FILE_RDMA_REGISTER, 1); /* cufile/src/io.rs RDMA_REGISTER */
EQ(CU_FILE_RDMA_RELAXED_ORDERING, 2);
EQ(CU_FILE_STREAM_FIXED_BUF_OFFSET, 1);
EQ(CU_FILE_STREAM_FIXED_FILE_OFFSET, 2);
EQ(CU_FILE_STREAM_FIXED_FILE_SIZE, 4);
EQ(CU_FILE_STREAM_PAGE_ALIGNED_INPUTS, 8);

/* Parameter enums: hipFile's ordinals (engine/src/config.rs `param`). */
EQ(CUFILE_PARAM_PROFILE_STATS, 0);
EQ(CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH, 1);
EQ(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, 2);
EQ(CUFILE_PARAM_EXECUTION_MIN_IO_THRESHOLD_SIZE_KB, 3);
EQ(CUFILE_PARAM_EXECUTION_MAX_REQUEST_PARALLELISM, 4);
EQ(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, 5);
EQ(CUFILE_PARAM_PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB, 6);
EQ(CUFILE_PARAM_PROPERTIES_PER_BUFFER_CACHE_SIZE_KB, 7);
EQ(CUFILE_PARAM_PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB, 8);
EQ(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, 9);
EQ(CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB, 10);
EQ(CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS, 11);
EQ(CUFILE_PARAM_PROPERTIES_USE_POLL_MODE, 0);
EQ(CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE, 1); /* gds/src/abi.rs PARAM_ALLOW_COMPAT_MODE */
EQ(CUFILE_PARAM_FORCE_COMPAT_MODE, 2);
EQ(CUFILE_PARAM_FS_MISC_API_CHECK_AGGRESSIVE, 3);
EQ(CUFILE_PARAM_EXECUTION_PARALLEL_IO, 4);
EQ(CUFILE_PARAM_PROFILE_NVTX, 5);
EQ(CUFILE_PARAM_PROPERTIES_ALLOW_SYSTEM_MEMORY, 6);
EQ(CUFILE_PARAM_USE_PCIP2PDMA, 7);
EQ(CUFILE_PARAM_PREFER_IO_URING, 8);
EQ(CUFILE_PARAM_FORCE_ODIRECT_MODE, 9);
EQ(CUFILE_PARAM_SKIP_TOPOLOGY_DETECTION, 10);
EQ(CUFILE_PARAM_STREAM_MEMOPS_BYPASS, 11);
EQ(CUFILE_PARAM_LOGGING_LEVEL, 0);
EQ(CUFILE_PARAM_ENV_LOGFILE_PATH, 1); /* cufile/src/params.rs ENV_LOGFILE_PATH */
EQ(CUFILE_PARAM_LOG_DIR, 2);
EQ(CUFILE_PARAM_POSIX_POOL_SLAB_SIZE_KB, 0);
EQ(CUFILE_PARAM_POSIX_POOL_SLAB_COUNT, 1);

/* Prototypes, as the Rust declarations spell them (cufile/src, gds/src/abi.rs). */
PROTO(cuFileHandleRegister, CUfileError_t (*)(CUfileHandle_t *, CUfileDescr_t *));
PROTO(cuFileHandleDeregister, void (*)(CUfileHandle_t));
PROTO(cuFileBufRegister, CUfileError_t (*)(const void *, size_t, int));
PROTO(cuFileBufDeregister, CUfileError_t (*)(const void *));
PROTO(cuFileRead, ssize_t (*)(CUfileHandle_t, void *, size_t, off_t, off_t));
PROTO(cuFileWrite, ssize_t (*)(CUfileHandle_t, const void *, size_t, off_t, off_t));
PROTO(cuFileDriverOpen, CUfileError_t (*)(void));
PROTO(cuFileDriverClose_v2, CUfileError_t (*)(void));
PROTO(cuFileUseCount, long (*)(void));
PROTO(cuFileDriverGetProperties, CUfileError_t (*)(CUfileDrvProps_t *));
PROTO(cuFileDriverSetPollMode, CUfileError_t (*)(bool, size_t));
PROTO(cuFileDriverSetMaxDirectIOSize, CUfileError_t (*)(size_t));
PROTO(cuFileDriverSetMaxCacheSize, CUfileError_t (*)(size_t));
PROTO(cuFileDriverSetMaxPinnedMemSize, CUfileError_t (*)(size_t));
PROTO(cuFileBatchIOSetUp, CUfileError_t (*)(CUfileBatchHandle_t *, unsigned));
PROTO(cuFileBatchIOSubmit, CUfileError_t (*)(CUfileBatchHandle_t, unsigned, CUfileIOParams_t *, unsigned));
PROTO(cuFileBatchIOGetStatus,
      CUfileError_t (*)(CUfileBatchHandle_t, unsigned, unsigned *, CUfileIOEvents_t *, struct timespec *));
PROTO(cuFileBatchIOCancel, CUfileError_t (*)(CUfileBatchHandle_t));
PROTO(cuFileBatchIODestroy, void (*)(CUfileBatchHandle_t));
PROTO(cuFileReadAsync, CUfileError_t (*)(CUfileHandle_t, void *, size_t *, off_t *, off_t *, ssize_t *, CUstream));
PROTO(cuFileWriteAsync, CUfileError_t (*)(CUfileHandle_t, void *, size_t *, off_t *, off_t *, ssize_t *, CUstream));
PROTO(cuFileStreamRegister, CUfileError_t (*)(CUstream, unsigned));
PROTO(cuFileStreamDeregister, CUfileError_t (*)(CUstream));
PROTO(cuFileGetVersion, CUfileError_t (*)(int *));
PROTO(cuFileGetParameterSizeT, CUfileError_t (*)(CUFileSizeTConfigParameter_t, size_t *));
PROTO(cuFileGetParameterBool, CUfileError_t (*)(CUFileBoolConfigParameter_t, bool *));
PROTO(cuFileGetParameterString, CUfileError_t (*)(CUFileStringConfigParameter_t, char *, int));
PROTO(cuFileGetParameterMinMaxValue, CUfileError_t (*)(CUFileSizeTConfigParameter_t, size_t *, size_t *));
PROTO(cuFileSetParameterSizeT, CUfileError_t (*)(CUFileSizeTConfigParameter_t, size_t));
PROTO(cuFileSetParameterBool, CUfileError_t (*)(CUFileBoolConfigParameter_t, bool));
PROTO(cuFileSetParameterString, CUfileError_t (*)(CUFileStringConfigParameter_t, const char *));
PROTO(cuFileSetStatsLevel, CUfileError_t (*)(int));
PROTO(cuFileGetStatsLevel, CUfileError_t (*)(int *));
PROTO(cuFileStatsStart, CUfileError_t (*)(void));
PROTO(cuFileStatsStop, CUfileError_t (*)(void));
PROTO(cuFileStatsReset, CUfileError_t (*)(void));
PROTO(cuFileGetStatsL1, CUfileError_t (*)(CUfileStatsLevel1_t *));
PROTO(cuFileGetStatsL2, CUfileError_t (*)(CUfileStatsLevel2_t *));
PROTO(cuFileGetStatsL3, CUfileError_t (*)(CUfileStatsLevel3_t *));
PROTO(cuFileGetBARSizeInKB, CUfileError_t (*)(int, size_t *));
PROTO(cuFileSetParameterPosixPoolSlabArray, CUfileError_t (*)(const size_t *, const size_t *, int));
PROTO(cuFileGetParameterPosixPoolSlabArray, CUfileError_t (*)(size_t *, size_t *, int));
/* The header's cuFileDriverClose is a macro for cuFileDriverClose_v2. */
PROTO(cuFileDriverClose, CUfileError_t (*)(void));
_Static_assert(sizeof(off_t) == 8 && sizeof(ssize_t) == 8 && sizeof(size_t) == 8, "LP64");
_Static_assert(sizeof(bool) == 1, "bool is one byte, as Rust's");

int main(void)
{
    printf("layout: every size, offset, value and prototype matched at compile time\n");
    printf("1 passed, 0 failed\n");
    return 0;
}
