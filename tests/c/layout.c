/*
 * layout.c: the ABI of include/hipfile.h and include/hipfile-api-trace.h,
 * checked at compile time against spec/hipfile-abi.md sections 1, 2, 3 and 4.1.
 *
 * Every struct size, alignment and field offset, every enumerator value and
 * every macro of the spec is a _Static_assert, and each of the 31 prototypes
 * is compared (through _Generic, which does not evaluate its operand, so no
 * library is needed) with a function-pointer type spelled out here from the
 * spec. A few macro behaviours are checked at run time. Needs no library:
 *
 *   cc -std=c11 -Wall -Wextra -Werror -pedantic -I include tests/c/layout.c -o /tmp/layout && /tmp/layout
 *
 * Platform: Linux, LP64.
 */

#include "hipfile-api-trace.h"
#include "hipfile.h" /* a second include must be harmless */

#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- run-time check helper ------------------------------------------------ */

static int g_passed;
static int g_failed;

#define CHECK(cond, fmt, ...)                                                           \
    do {                                                                                \
        if (cond) {                                                                     \
            g_passed++;                                                                 \
        } else {                                                                        \
            g_failed++;                                                                 \
            printf("%s:%d: FAIL: %s: " fmt "\n", __FILE__, __LINE__, #cond, __VA_ARGS__); \
        }                                                                               \
    } while (0)

/* ---- compile-time helpers ------------------------------------------------- */

#define SA(cond) _Static_assert(cond, #cond)
#define SA_SIZE(type, n) _Static_assert(sizeof(type) == (n), "sizeof(" #type ") == " #n)
#define SA_ALIGN(type, n) _Static_assert(alignof(type) == (n), "alignof(" #type ") == " #n)
#define SA_OFF(type, member, off) \
    _Static_assert(offsetof(type, member) == (off), "offsetof(" #type ", " #member ") == " #off)
#define SA_MSIZE(type, member, n) \
    _Static_assert(sizeof(((type *)0)->member) == (n), "sizeof(" #type "." #member ") == " #n)
#define SA_VAL(name, v) _Static_assert((name) == (v), #name " == " #v)
/* `fn` has exactly the function type `ptype` points to. */
#define SA_PROTO(fn, ptype) _Static_assert(_Generic(&fn, ptype: 1, default: 0), #fn " prototype")

/* ---- section 1: macros ----------------------------------------------------- */

/* The version and flag macros must work in #if (plain integer constants). */
#if HIPFILE_VERSION_MAJOR != 0 || HIPFILE_VERSION_MINOR != 2 || HIPFILE_VERSION_PATCH != 0
#error "hipfile.h version must be 0.2.0"
#endif
#if HIPFILE_BASE_ERR != 5000
#error "HIPFILE_BASE_ERR must be 5000"
#endif
#if HIPFILE_RDMA_REGISTER != 1 || HIPFILE_RDMA_RELAXED_ORDERING != 2
#error "HIPFILE_RDMA_* values"
#endif
#if HIPFILE_STREAM_FIXED_BUF_OFFSET != 1 || HIPFILE_STREAM_FIXED_FILE_OFFSET != 2 || \
    HIPFILE_STREAM_FIXED_FILE_SIZE != 4 || HIPFILE_STREAM_PAGE_ALIGNED_INPUTS != 8 || HIPFILE_STREAM_FLAGS_MASK != 0xf
#error "HIPFILE_STREAM_* values"
#endif
#if HIPFILE_RUNTIME_API_TABLE_MAJOR_VERSION != 0 || HIPFILE_RUNTIME_API_TABLE_STEP_VERSION != 0
#error "dispatch table version must be 0.0"
#endif
#if !defined(IS_HIPFILE_ERR) || !defined(HIPFILE_ERRSTR) || !defined(IS_HIP_DRV_ERR) || !defined(HIP_DRV_ERR)
#error "error macros missing"
#endif
#if !defined(HIPFILE_API)
#error "HIPFILE_API missing"
#endif
#ifdef __HIPFILE_NODISCARD
#error "__HIPFILE_NODISCARD must be #undef'd at the end of hipfile.h"
#endif

SA_VAL(HIPFILE_RDMA_RELAXED_ORDERING, 1 << 1);
SA_VAL(HIPFILE_STREAM_FIXED_BUF_OFFSET | HIPFILE_STREAM_FIXED_FILE_OFFSET | HIPFILE_STREAM_FIXED_FILE_SIZE |
           HIPFILE_STREAM_PAGE_ALIGNED_INPUTS,
       HIPFILE_STREAM_FLAGS_MASK);

/* ---- section 2.1: scalar and handle types ---------------------------------- */

SA_SIZE(hoff_t, 8);
SA((hoff_t)-1 < 0); /* signed */
SA_SIZE(ssize_t, 8);
SA_SIZE(hipError_t, 4);
SA_SIZE(hipStream_t, 8);
SA_SIZE(hipFileHandle_t, 8);
SA_SIZE(hipFileBatchHandle_t, 8);
SA(_Generic((hipFileHandle_t)0, void *: 1, default: 0));
SA(_Generic((hipFileBatchHandle_t)0, void *: 1, default: 0));
SA(_Generic((hoff_t)0, off_t: 1, default: 0));
SA_VAL(hipSuccess, 0);
SA_VAL(hipErrorInvalidValue, 1);
SA_VAL(hipErrorOutOfMemory, 2);
SA_VAL(hipErrorNotFound, 500);
SA_VAL(hipErrorUnknown, 999);

/* Every C enum of the API is a 4-byte int. */
SA_SIZE(hipFileOpError_t, 4);
SA_SIZE(hipFileDriverStatusFlags_t, 4);
SA_SIZE(hipFileDriverControlFlags_t, 4);
SA_SIZE(hipFileFeatureFlags_t, 4);
SA_SIZE(hipFileFileHandleType_t, 4);
SA_SIZE(hipFileOpcode_t, 4);
SA_SIZE(hipFileStatus_t, 4);
SA_SIZE(hipFileBatchMode_t, 4);
SA_SIZE(hipFileSizeTConfigParameter_t, 4);
SA_SIZE(hipFileBoolConfigParameter_t, 4);
SA_SIZE(hipFileStringConfigParameter_t, 4);

/* Tag names are part of the source API. */
SA_SIZE(enum hipFileOpError, 4);
SA_SIZE(struct hipFileError, 8);
SA_SIZE(enum hipFileDriverStatusFlags, 4);
SA_SIZE(enum hipFileDriverControlFlags, 4);
SA_SIZE(enum hipFileFeatureFlags, 4);
SA_SIZE(struct hipFileDriverProps, 72);
SA_SIZE(struct hipFileRDMAInfo, 16);
SA_SIZE(struct hipFileFSOps, 40);
SA_SIZE(enum hipFileFileHandleType, 4);
SA_SIZE(struct hipFileDescr, 24);
SA_SIZE(enum hipFileOpcode, 4);
SA_SIZE(enum hipFileStatus, 4);
SA_SIZE(enum hipFileBatchMode, 4);
SA_SIZE(struct hipFileIOParams, 64);
SA_SIZE(struct hipFileIOEvents, 24);
SA_SIZE(enum hipFileSizeTConfigParameter_t, 4);
SA_SIZE(enum hipFileBoolConfigParameter_t, 4);
SA_SIZE(enum hipFileStringConfigParameter_t, 4);

/* ---- section 2.2: hipFileOpError_t ----------------------------------------- */

SA_VAL(hipFileSuccess, 0);
SA_VAL(hipFileDriverNotInitialized, 5001);
SA_VAL(hipFileDriverInvalidProps, 5002);
SA_VAL(hipFileDriverUnsupportedLimit, 5003);
SA_VAL(hipFileDriverVersionMismatch, 5004);
SA_VAL(hipFileDriverVersionReadError, 5005);
SA_VAL(hipFileDriverClosing, 5006);
SA_VAL(hipFilePlatformNotSupported, 5007);
SA_VAL(hipFileIONotSupported, 5008);
SA_VAL(hipFileDeviceNotSupported, 5009);
SA_VAL(hipFileDriverError, 5010);
SA_VAL(hipFileHipDriverError, 5011);
SA_VAL(hipFileHipPointerInvalid, 5012);
SA_VAL(hipFileHipMemoryTypeInvalid, 5013);
SA_VAL(hipFileHipPointerRangeError, 5014);
SA_VAL(hipFileHipContextMismatch, 5015);
SA_VAL(hipFileInvalidMappingSize, 5016);
SA_VAL(hipFileInvalidMappingRange, 5017);
SA_VAL(hipFileInvalidFileType, 5018);
SA_VAL(hipFileInvalidFileOpenFlag, 5019);
SA_VAL(hipFileDIONotSet, 5020);
SA_VAL(hipFileInvalidValue, 5022);
SA_VAL(hipFileMemoryAlreadyRegistered, 5023);
SA_VAL(hipFileMemoryNotRegistered, 5024);
SA_VAL(hipFilePermissionDenied, 5025);
SA_VAL(hipFileDriverAlreadyOpen, 5026);
SA_VAL(hipFileHandleNotRegistered, 5027);
SA_VAL(hipFileHandleAlreadyRegistered, 5028);
SA_VAL(hipFileDeviceNotFound, 5029);
SA_VAL(hipFileInternalError, 5030);
SA_VAL(hipFileGetNewFDFailed, 5031);
SA_VAL(hipFileDriverSetupError, 5033);
SA_VAL(hipFileIODisabled, 5034);
SA_VAL(hipFileBatchSubmitFailed, 5035);
SA_VAL(hipFileGPUMemoryPinningFailed, 5036);
SA_VAL(hipFileBatchFull, 5037);
SA_VAL(hipFileAsyncNotSupported, 5038);
SA_VAL(hipFileIOMaxError, 5039);

/* ---- section 2.3: hipFileError_t ------------------------------------------- */

SA_SIZE(hipFileError_t, 8);
SA_ALIGN(hipFileError_t, 4);
SA_OFF(hipFileError_t, err, 0);
SA_MSIZE(hipFileError_t, err, 4);
SA_OFF(hipFileError_t, hip_drv_err, 4);
SA_MSIZE(hipFileError_t, hip_drv_err, 4);
SA(_Generic(((hipFileError_t *)0)->err, hipFileOpError_t: 1, default: 0));
SA(_Generic(((hipFileError_t *)0)->hip_drv_err, hipError_t: 1, default: 0));

/* ---- section 2.4: driver flag enums (bit positions) ------------------------ */

SA_VAL(hipFileLustreSupported, 0);
SA_VAL(hipFileWekaFSSupported, 1);
SA_VAL(hipFileNFSSupported, 2);
SA_VAL(hipFileGPFSSupported, 3);
SA_VAL(hipFileNVMeSupported, 4);
SA_VAL(hipFileNVMeoFSupported, 5);
SA_VAL(hipFileSCSISupported, 6);
SA_VAL(hipFileScaleFluxCSDSupported, 7);
SA_VAL(hipFileNVMeshSupported, 8);
SA_VAL(hipFileBeeGFSSupported, 9);
SA_VAL(hipFileNVMeP2PSupported, 11);
SA_VAL(hipFileScatefsSupported, 12);
SA_VAL(hipFileUsePollMode, 0);
SA_VAL(hipFileAllowCompatMode, 1);
SA_VAL(hipFileDynRoutingSupported, 0);
SA_VAL(hipFileBatchIOSupported, 1);
SA_VAL(hipFileStreamsSupported, 2);
SA_VAL(hipFileParallelIOSupported, 3);

/* ---- section 2.5: hipFileDriverProps_t ------------------------------------- */

SA_SIZE(hipFileDriverProps_t, 72);
SA_ALIGN(hipFileDriverProps_t, 8);
SA_OFF(hipFileDriverProps_t, nvfs.major_version, 0);
SA_MSIZE(hipFileDriverProps_t, nvfs.major_version, 4);
SA_OFF(hipFileDriverProps_t, nvfs.minor_version, 4);
SA_MSIZE(hipFileDriverProps_t, nvfs.minor_version, 4);
SA_OFF(hipFileDriverProps_t, nvfs.poll_thresh_size, 8);
SA_MSIZE(hipFileDriverProps_t, nvfs.poll_thresh_size, 8);
SA_OFF(hipFileDriverProps_t, nvfs.max_direct_io_size, 16);
SA_MSIZE(hipFileDriverProps_t, nvfs.max_direct_io_size, 8);
SA_OFF(hipFileDriverProps_t, nvfs.driver_status_flags, 24);
SA_MSIZE(hipFileDriverProps_t, nvfs.driver_status_flags, 4);
SA_OFF(hipFileDriverProps_t, nvfs.driver_control_flags, 28);
SA_MSIZE(hipFileDriverProps_t, nvfs.driver_control_flags, 4);
SA_OFF(hipFileDriverProps_t, feature_flags, 32);
SA_MSIZE(hipFileDriverProps_t, feature_flags, 4);
SA_OFF(hipFileDriverProps_t, max_device_cache_size, 40);
SA_MSIZE(hipFileDriverProps_t, max_device_cache_size, 8);
SA_OFF(hipFileDriverProps_t, per_buffer_cache_size, 48);
SA_MSIZE(hipFileDriverProps_t, per_buffer_cache_size, 8);
SA_OFF(hipFileDriverProps_t, max_device_pinned_mem_size, 56);
SA_MSIZE(hipFileDriverProps_t, max_device_pinned_mem_size, 8);
SA_OFF(hipFileDriverProps_t, max_batch_io_count, 64);
SA_MSIZE(hipFileDriverProps_t, max_batch_io_count, 4);
SA_OFF(hipFileDriverProps_t, max_batch_io_timeout_msecs, 68);
SA_MSIZE(hipFileDriverProps_t, max_batch_io_timeout_msecs, 4);
SA(_Generic(((hipFileDriverProps_t *)0)->nvfs.major_version, unsigned: 1, default: 0));
SA(_Generic(((hipFileDriverProps_t *)0)->nvfs.poll_thresh_size, uint64_t: 1, default: 0));
SA(_Generic(((hipFileDriverProps_t *)0)->max_device_pinned_mem_size, uint64_t: 1, default: 0));
SA(_Generic(((hipFileDriverProps_t *)0)->max_batch_io_timeout_msecs, unsigned: 1, default: 0));

/* ---- section 2.6: file descriptor types ------------------------------------ */

SA_VAL(hipFileHandleTypeOpaqueFD, 1);
SA_VAL(hipFileHandleTypeOpaqueWin32, 2);
SA_VAL(hipFileHandleTypeUserspaceFS, 3);
SA_SIZE(hipFileDescr_t, 24);
SA_ALIGN(hipFileDescr_t, 8);
SA_OFF(hipFileDescr_t, type, 0);
SA_MSIZE(hipFileDescr_t, type, 4);
SA_OFF(hipFileDescr_t, handle, 8);
SA_MSIZE(hipFileDescr_t, handle, 8);
SA_OFF(hipFileDescr_t, handle.fd, 8);
SA_MSIZE(hipFileDescr_t, handle.fd, 4);
SA_OFF(hipFileDescr_t, handle.hFile, 8);
SA_MSIZE(hipFileDescr_t, handle.hFile, 8);
SA_OFF(hipFileDescr_t, fs_ops, 16);
SA_MSIZE(hipFileDescr_t, fs_ops, 8);
SA(_Generic(((hipFileDescr_t *)0)->handle.fd, int: 1, default: 0));
SA(_Generic(((hipFileDescr_t *)0)->handle.hFile, void *: 1, default: 0));
SA(_Generic(((hipFileDescr_t *)0)->fs_ops, const hipFileFSOps_t *: 1, default: 0));

/* ---- section 2.7: RDMA and user-space filesystem types --------------------- */

SA_SIZE(hipFileRDMAInfo_t, 16);
SA_ALIGN(hipFileRDMAInfo_t, 8);
SA_OFF(hipFileRDMAInfo_t, version, 0);
SA_OFF(hipFileRDMAInfo_t, desc_len, 4);
SA_OFF(hipFileRDMAInfo_t, desc_str, 8);
SA(_Generic(((hipFileRDMAInfo_t *)0)->desc_str, const char *: 1, default: 0));

SA_SIZE(hipFileFSOps_t, 40);
SA_ALIGN(hipFileFSOps_t, 8);
SA_OFF(hipFileFSOps_t, fs_type, 0);
SA_OFF(hipFileFSOps_t, getRDMADeviceList, 8);
SA_OFF(hipFileFSOps_t, getRDMADevicePriority, 16);
SA_OFF(hipFileFSOps_t, read, 24);
SA_OFF(hipFileFSOps_t, write, 32);
SA(_Generic(((hipFileFSOps_t *)0)->fs_type, const char *(*)(void *): 1, default: 0));
SA(_Generic(((hipFileFSOps_t *)0)->getRDMADeviceList, int (*)(void *, struct sockaddr **): 1, default: 0));
SA(_Generic(((hipFileFSOps_t *)0)->getRDMADevicePriority,
            int (*)(void *, char *, size_t, hoff_t, struct sockaddr *): 1,
            default: 0));
SA(_Generic(((hipFileFSOps_t *)0)->read, ssize_t (*)(void *, char *, size_t, hoff_t, hipFileRDMAInfo_t *): 1,
            default: 0));
SA(_Generic(((hipFileFSOps_t *)0)->write,
            ssize_t (*)(void *, const char *, size_t, hoff_t, hipFileRDMAInfo_t *): 1,
            default: 0));

/* ---- section 2.8: batch types ---------------------------------------------- */

SA_VAL(hipFileBatchRead, 0);
SA_VAL(hipFileBatchWrite, 1);
SA_VAL(hipFileWaiting, 0x01);
SA_VAL(hipFilePending, 0x02);
SA_VAL(hipFileInvalid, 0x04);
SA_VAL(hipFileCanceled, 0x08);
SA_VAL(hipFileComplete, 0x10);
SA_VAL(hipFileTimeout, 0x20);
SA_VAL(hipFileFailed, 0x40);
SA_VAL(hipFileBatch, 1);

SA_SIZE(hipFileIOParams_t, 64);
SA_ALIGN(hipFileIOParams_t, 8);
SA_OFF(hipFileIOParams_t, mode, 0);
SA_MSIZE(hipFileIOParams_t, mode, 4);
SA_OFF(hipFileIOParams_t, u, 8);
SA_MSIZE(hipFileIOParams_t, u, 32);
SA_OFF(hipFileIOParams_t, u.batch.devPtr_base, 8);
SA_MSIZE(hipFileIOParams_t, u.batch.devPtr_base, 8);
SA_OFF(hipFileIOParams_t, u.batch.file_offset, 16);
SA_MSIZE(hipFileIOParams_t, u.batch.file_offset, 8);
SA_OFF(hipFileIOParams_t, u.batch.devPtr_offset, 24);
SA_MSIZE(hipFileIOParams_t, u.batch.devPtr_offset, 8);
SA_OFF(hipFileIOParams_t, u.batch.size, 32);
SA_MSIZE(hipFileIOParams_t, u.batch.size, 8);
SA_OFF(hipFileIOParams_t, fh, 40);
SA_MSIZE(hipFileIOParams_t, fh, 8);
SA_OFF(hipFileIOParams_t, opcode, 48);
SA_MSIZE(hipFileIOParams_t, opcode, 4);
SA_OFF(hipFileIOParams_t, cookie, 56);
SA_MSIZE(hipFileIOParams_t, cookie, 8);
SA(_Generic(((hipFileIOParams_t *)0)->mode, hipFileBatchMode_t: 1, default: 0));
SA(_Generic(((hipFileIOParams_t *)0)->u.batch.devPtr_base, void *: 1, default: 0));
SA(_Generic(((hipFileIOParams_t *)0)->u.batch.file_offset, int64_t: 1, default: 0));
SA(_Generic(((hipFileIOParams_t *)0)->u.batch.devPtr_offset, int64_t: 1, default: 0));
SA(_Generic(((hipFileIOParams_t *)0)->u.batch.size, size_t: 1, default: 0));
SA(_Generic(((hipFileIOParams_t *)0)->fh, hipFileHandle_t: 1, default: 0));
SA(_Generic(((hipFileIOParams_t *)0)->opcode, hipFileOpcode_t: 1, default: 0));
SA(_Generic(((hipFileIOParams_t *)0)->cookie, void *: 1, default: 0));

SA_SIZE(hipFileIOEvents_t, 24);
SA_ALIGN(hipFileIOEvents_t, 8);
SA_OFF(hipFileIOEvents_t, cookie, 0);
SA_MSIZE(hipFileIOEvents_t, cookie, 8);
SA_OFF(hipFileIOEvents_t, status, 8);
SA_MSIZE(hipFileIOEvents_t, status, 4);
SA_OFF(hipFileIOEvents_t, ret, 16);
SA_MSIZE(hipFileIOEvents_t, ret, 8);
SA(_Generic(((hipFileIOEvents_t *)0)->status, hipFileStatus_t: 1, default: 0));
SA(_Generic(((hipFileIOEvents_t *)0)->ret, size_t: 1, default: 0));

/* ---- section 2.9: configuration parameter enums ---------------------------- */

SA_VAL(hipFileParamProfileStats, 0);
SA_VAL(hipFileParamExecutionMaxIOQueueDepth, 1);
SA_VAL(hipFileParamExecutionMaxIOThreads, 2);
SA_VAL(hipFileParamExecutionMinIOThresholdSizeKB, 3);
SA_VAL(hipFileParamExecutionMaxRequestParallelism, 4);
SA_VAL(hipFileParamPropertiesMaxDirectIOSizeKB, 5);
SA_VAL(hipFileParamPropertiesMaxDeviceCacheSizeKB, 6);
SA_VAL(hipFileParamPropertiesPerBufferCacheSizeKB, 7);
SA_VAL(hipFileParamPropertiesMaxDevicePinnedMemSizeKB, 8);
SA_VAL(hipFileParamPropertiesIOBatchsize, 9);
SA_VAL(hipFileParamPollthresholdSizeKB, 10);
SA_VAL(hipFileParamPropertiesBatchIOTimeoutMs, 11);

SA_VAL(hipFileParamPropertiesUsePollMode, 0);
SA_VAL(hipFileParamPropertiesAllowCompatMode, 1);
SA_VAL(hipFileParamForceCompatMode, 2);
SA_VAL(hipFileParamFsMiscApiCheckAggressive, 3);
SA_VAL(hipFileParamExecutionParallelIO, 4);
SA_VAL(hipFileParamProfileNvtx, 5);
SA_VAL(hipFileParamPropertiesAllowSystemMemory, 6);
SA_VAL(hipFileParamUsePcip2pdma, 7);
SA_VAL(hipFileParamPreferIOUring, 8);
SA_VAL(hipFileParamForceOdirectMode, 9);
SA_VAL(hipFileParamSkipTopologyDetection, 10);
SA_VAL(hipFileParamStreamMemopsBypass, 11);

SA_VAL(hipFileParamLoggingLevel, 0);
SA_VAL(hipFileParamEnvLogfilePath, 1);
SA_VAL(hipFileParamLogDir, 2);

/* ---- section 3: the 31 prototypes, spelled out from the spec ---------------- */

SA_PROTO(hipFileGetOpErrorString, const char *(*)(hipFileOpError_t));
SA_PROTO(hipFileHandleRegister, hipFileError_t (*)(void **, hipFileDescr_t *));
SA_PROTO(hipFileHandleDeregister, void (*)(void *));
SA_PROTO(hipFileBufRegister, hipFileError_t (*)(const void *, size_t, int));
SA_PROTO(hipFileBufDeregister, hipFileError_t (*)(const void *));
SA_PROTO(hipFileRead, ssize_t (*)(void *, void *, size_t, off_t, off_t));
SA_PROTO(hipFileWrite, ssize_t (*)(void *, const void *, size_t, off_t, off_t));
SA_PROTO(hipFileDriverOpen, hipFileError_t (*)(void));
SA_PROTO(hipFileDriverClose, hipFileError_t (*)(void));
SA_PROTO(hipFileUseCount, int64_t (*)(void));
SA_PROTO(hipFileDriverGetProperties, hipFileError_t (*)(hipFileDriverProps_t *));
SA_PROTO(hipFileDriverSetPollMode, hipFileError_t (*)(bool, size_t));
SA_PROTO(hipFileDriverSetMaxDirectIOSize, hipFileError_t (*)(size_t));
SA_PROTO(hipFileDriverSetMaxCacheSize, hipFileError_t (*)(size_t));
SA_PROTO(hipFileDriverSetMaxPinnedMemSize, hipFileError_t (*)(size_t));
SA_PROTO(hipFileBatchIOSetUp, hipFileError_t (*)(void **, unsigned));
SA_PROTO(hipFileBatchIOSubmit, hipFileError_t (*)(void *, unsigned, hipFileIOParams_t *, unsigned));
SA_PROTO(hipFileBatchIOGetStatus,
         hipFileError_t (*)(void *, unsigned, unsigned *, hipFileIOEvents_t *, struct timespec *));
SA_PROTO(hipFileBatchIOCancel, hipFileError_t (*)(void *));
SA_PROTO(hipFileBatchIODestroy, void (*)(void *));
SA_PROTO(hipFileReadAsync, hipFileError_t (*)(void *, void *, size_t *, off_t *, off_t *, ssize_t *, hipStream_t));
SA_PROTO(hipFileWriteAsync, hipFileError_t (*)(void *, void *, size_t *, off_t *, off_t *, ssize_t *, hipStream_t));
SA_PROTO(hipFileStreamRegister, hipFileError_t (*)(hipStream_t, unsigned));
SA_PROTO(hipFileStreamDeregister, hipFileError_t (*)(hipStream_t));
SA_PROTO(hipFileGetVersion, hipFileError_t (*)(unsigned *, unsigned *, unsigned *));
SA_PROTO(hipFileGetParameterSizeT, hipFileError_t (*)(hipFileSizeTConfigParameter_t, size_t *));
SA_PROTO(hipFileGetParameterBool, hipFileError_t (*)(hipFileBoolConfigParameter_t, bool *));
SA_PROTO(hipFileGetParameterString, hipFileError_t (*)(hipFileStringConfigParameter_t, char *, int));
SA_PROTO(hipFileSetParameterSizeT, hipFileError_t (*)(hipFileSizeTConfigParameter_t, size_t));
SA_PROTO(hipFileSetParameterBool, hipFileError_t (*)(hipFileBoolConfigParameter_t, bool));
SA_PROTO(hipFileSetParameterString, hipFileError_t (*)(hipFileStringConfigParameter_t, const char *));

/* ---- section 4.1: dispatch table ------------------------------------------- */

#define SA_TABLE(member, index, ptype)                                                          \
    _Static_assert(offsetof(struct hipFileDispatchTable, member) == 8 * (index),                \
                   #member " at offset 8*" #index);                                             \
    _Static_assert(_Generic(((struct hipFileDispatchTable *)0)->member, ptype: 1, default: 0), \
                   #member " has type " #ptype)

SA_SIZE(struct hipFileDispatchTable, 256);
SA_ALIGN(struct hipFileDispatchTable, 8);
SA_OFF(struct hipFileDispatchTable, size, 0);
SA(_Generic(((struct hipFileDispatchTable *)0)->size, size_t: 1, default: 0));
SA_TABLE(pfn_hipfile_get_op_error_string, 1, PfnHipFileGetOpErrorString);
SA_TABLE(pfn_hipfile_handle_register, 2, PfnHipFileHandleRegister);
SA_TABLE(pfn_hipfile_handle_deregister, 3, PfnHipFileHandleDeregister);
SA_TABLE(pfn_hipfile_buf_register, 4, PfnHipFileBufRegister);
SA_TABLE(pfn_hipfile_buf_deregister, 5, PfnHipFileBufDeregister);
SA_TABLE(pfn_hipfile_read, 6, PfnHipFileRead);
SA_TABLE(pfn_hipfile_write, 7, PfnHipFileWrite);
SA_TABLE(pfn_hipfile_driver_open, 8, PfnHipFileDriverOpen);
SA_TABLE(pfn_hipfile_driver_close, 9, PfnHipFileDriverClose);
SA_TABLE(pfn_hipfile_use_count, 10, PfnHipFileUseCount);
SA_TABLE(pfn_hipfile_driver_get_properties, 11, PfnHipFileDriverGetProperties);
SA_TABLE(pfn_hipfile_driver_set_poll_mode, 12, PfnHipFileDriverSetPollMode);
SA_TABLE(pfn_hipfile_driver_set_max_direct_io_size, 13, PfnHipFileDriverSetMaxDirectIOSize);
SA_TABLE(pfn_hipfile_driver_set_max_cache_size, 14, PfnHipFileDriverSetMaxCacheSize);
SA_TABLE(pfn_hipfile_driver_set_max_pinned_mem_size, 15, PfnHipFileDriverSetMaxPinnedMemSize);
SA_TABLE(pfn_hipfile_batch_io_set_up, 16, PfnHipFileBatchIOSetUp);
SA_TABLE(pfn_hipfile_batch_io_submit, 17, PfnHipFileBatchIOSubmit);
SA_TABLE(pfn_hipfile_batch_io_get_status, 18, PfnHipFileBatchIOGetStatus);
SA_TABLE(pfn_hipfile_batch_io_cancel, 19, PfnHipFileBatchIOCancel);
SA_TABLE(pfn_hipfile_batch_io_destroy, 20, PfnHipFileBatchIODestroy);
SA_TABLE(pfn_hipfile_read_async, 21, PfnHipFileReadAsync);
SA_TABLE(pfn_hipfile_write_async, 22, PfnHipFileWriteAsync);
SA_TABLE(pfn_hipfile_stream_register, 23, PfnHipFileStreamRegister);
SA_TABLE(pfn_hipfile_stream_deregister, 24, PfnHipFileStreamDeregister);
SA_TABLE(pfn_hipfile_get_version, 25, PfnHipFileGetVersion);
SA_TABLE(pfn_hipfile_get_parameter_size_t, 26, PfnHipFileGetParameterSizeT);
SA_TABLE(pfn_hipfile_get_parameter_bool, 27, PfnHipFileGetParameterBool);
SA_TABLE(pfn_hipfile_get_parameter_string, 28, PfnHipFileGetParameterString);
SA_TABLE(pfn_hipfile_set_parameter_size_t, 29, PfnHipFileSetParameterSizeT);
SA_TABLE(pfn_hipfile_set_parameter_bool, 30, PfnHipFileSetParameterBool);
SA_TABLE(pfn_hipfile_set_parameter_string, 31, PfnHipFileSetParameterString);

/* Each exported function has exactly its table slot's type. */
SA_PROTO(hipFileGetOpErrorString, PfnHipFileGetOpErrorString);
SA_PROTO(hipFileHandleRegister, PfnHipFileHandleRegister);
SA_PROTO(hipFileHandleDeregister, PfnHipFileHandleDeregister);
SA_PROTO(hipFileBufRegister, PfnHipFileBufRegister);
SA_PROTO(hipFileBufDeregister, PfnHipFileBufDeregister);
SA_PROTO(hipFileRead, PfnHipFileRead);
SA_PROTO(hipFileWrite, PfnHipFileWrite);
SA_PROTO(hipFileDriverOpen, PfnHipFileDriverOpen);
SA_PROTO(hipFileDriverClose, PfnHipFileDriverClose);
SA_PROTO(hipFileUseCount, PfnHipFileUseCount);
SA_PROTO(hipFileDriverGetProperties, PfnHipFileDriverGetProperties);
SA_PROTO(hipFileDriverSetPollMode, PfnHipFileDriverSetPollMode);
SA_PROTO(hipFileDriverSetMaxDirectIOSize, PfnHipFileDriverSetMaxDirectIOSize);
SA_PROTO(hipFileDriverSetMaxCacheSize, PfnHipFileDriverSetMaxCacheSize);
SA_PROTO(hipFileDriverSetMaxPinnedMemSize, PfnHipFileDriverSetMaxPinnedMemSize);
SA_PROTO(hipFileBatchIOSetUp, PfnHipFileBatchIOSetUp);
SA_PROTO(hipFileBatchIOSubmit, PfnHipFileBatchIOSubmit);
SA_PROTO(hipFileBatchIOGetStatus, PfnHipFileBatchIOGetStatus);
SA_PROTO(hipFileBatchIOCancel, PfnHipFileBatchIOCancel);
SA_PROTO(hipFileBatchIODestroy, PfnHipFileBatchIODestroy);
SA_PROTO(hipFileReadAsync, PfnHipFileReadAsync);
SA_PROTO(hipFileWriteAsync, PfnHipFileWriteAsync);
SA_PROTO(hipFileStreamRegister, PfnHipFileStreamRegister);
SA_PROTO(hipFileStreamDeregister, PfnHipFileStreamDeregister);
SA_PROTO(hipFileGetVersion, PfnHipFileGetVersion);
SA_PROTO(hipFileGetParameterSizeT, PfnHipFileGetParameterSizeT);
SA_PROTO(hipFileGetParameterBool, PfnHipFileGetParameterBool);
SA_PROTO(hipFileGetParameterString, PfnHipFileGetParameterString);
SA_PROTO(hipFileSetParameterSizeT, PfnHipFileSetParameterSizeT);
SA_PROTO(hipFileSetParameterBool, PfnHipFileSetParameterBool);
SA_PROTO(hipFileSetParameterString, PfnHipFileSetParameterString);


/* ---- run-time checks of the function-like macros --------------------------- */

int main(void)
{
    /* IS_HIPFILE_ERR: |x| > 5000, so it accepts both codes and negated ssize_t returns. */
    CHECK(IS_HIPFILE_ERR(hipFileInvalidValue), "%d", (int)IS_HIPFILE_ERR(hipFileInvalidValue));
    CHECK(IS_HIPFILE_ERR(-5022), "%d", (int)IS_HIPFILE_ERR(-5022));
    CHECK(IS_HIPFILE_ERR(5001), "%d", (int)IS_HIPFILE_ERR(5001));
    CHECK(!IS_HIPFILE_ERR(5000), "%d", (int)IS_HIPFILE_ERR(5000));
    CHECK(!IS_HIPFILE_ERR(-5000), "%d", (int)IS_HIPFILE_ERR(-5000));
    CHECK(!IS_HIPFILE_ERR(0), "%d", (int)IS_HIPFILE_ERR(0));
    CHECK(!IS_HIPFILE_ERR(-1), "%d", (int)IS_HIPFILE_ERR(-1));
    CHECK(!IS_HIPFILE_ERR(-999), "%d", (int)IS_HIPFILE_ERR(-999));

    {
        hipFileError_t drv  = {hipFileHipDriverError, hipErrorOutOfMemory};
        hipFileError_t ok   = {hipFileSuccess, hipSuccess};
        hipFileError_t inv  = {hipFileInvalidValue, hipSuccess};
        hipFileError_t *pdrv = &drv;
        CHECK(IS_HIP_DRV_ERR(drv), "err=%d", (int)drv.err);
        CHECK(!IS_HIP_DRV_ERR(ok), "err=%d", (int)ok.err);
        CHECK(!IS_HIP_DRV_ERR(inv), "err=%d", (int)inv.err);
        CHECK(IS_HIP_DRV_ERR(*pdrv), "err=%d", (int)pdrv->err); /* macro argument is parenthesised */
        CHECK(HIP_DRV_ERR(drv) == hipErrorOutOfMemory, "%d", (int)HIP_DRV_ERR(drv));
        CHECK(HIP_DRV_ERR(ok) == hipSuccess, "%d", (int)HIP_DRV_ERR(ok));
    }

    /* The byte image of a hipFileError_t is {int32 err, int32 hip_drv_err}, native-endian. */
    {
        hipFileError_t e = {hipFileBatchFull, hipErrorUnknown};
        int32_t        raw[2];
        memcpy(raw, &e, sizeof raw);
        CHECK(raw[0] == 5037 && raw[1] == 999, "raw = {%d, %d}", (int)raw[0], (int)raw[1]);
    }

    /* A negative error stored in hipFileIOEvents_t.ret round-trips through ssize_t. */
    {
        hipFileIOEvents_t ev;
        memset(&ev, 0, sizeof ev);
        ev.ret = (size_t)(ssize_t)-5022;
        CHECK((ssize_t)ev.ret == -5022, "%zd", (ssize_t)ev.ret);
    }

    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
