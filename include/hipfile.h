/*
 * hipfile.h: public C API of hipfile-rs (libhipfile.so).
 *
 * Source- and ABI-compatible with AMD hipFile's include/hipfile.h, header
 * version 0.2.0 (ROCm/hipFile branch develop). Every type, enumerator value,
 * macro and struct layout below is part of that contract; see
 * spec/hipfile-abi.md sections 1 to 3. Platform: Linux, LP64.
 *
 * SPDX-License-Identifier: MIT
 */

#ifndef HIPFILE_H
#define HIPFILE_H

/*
 * HIP types (hipError_t, hipStream_t).
 *
 * When HIP's own header is available and usable it is included, exactly as
 * upstream does. HIP's header refuses to compile unless a HIP platform is
 * selected (__HIP_PLATFORM_AMD__ or __HIP_PLATFORM_NVIDIA__, which hipcc, the
 * CMake hip:: targets and clang -x hip define), so it is only included when one
 * is. Otherwise, or when the user defines HIPFILE_NO_HIP_HEADERS, a minimal
 * declaration of the two types is provided. It is ABI-identical to HIP's: a
 * 4-byte C enum with HIP's values, and a pointer to the opaque struct
 * ihipStream_t.
 */
#if !defined(HIPFILE_NO_HIP_HEADERS) && defined(__has_include)
#if __has_include(<hip/hip_runtime_api.h>)
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_NVIDIA__) || defined(__HIP_PLATFORM_HCC__) || \
    defined(__HIP_PLATFORM_NVCC__) || defined(__HIP__) || defined(__HIPCC__)
#define HIPFILE_USES_HIP_HEADERS_ 1
#endif
#endif
#endif

#if defined(HIPFILE_USES_HIP_HEADERS_)
#include <hip/hip_runtime_api.h>
#undef HIPFILE_USES_HIP_HEADERS_
#elif !defined(HIP_INCLUDE_HIP_HIP_RUNTIME_API_H) && !defined(HIPFILE_HIP_FALLBACK_TYPES_)
#define HIPFILE_HIP_FALLBACK_TYPES_ 1
/* Subset of HIP's hipError_t: the values hipFile reports. Same numbers as HIP. */
typedef enum hipError_t {
    hipSuccess           = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory  = 2,
    hipErrorNotFound     = 500,
    hipErrorUnknown      = 999
} hipError_t;
/* HIP stream handle; NULL is the default (null) stream. */
typedef struct ihipStream_t *hipStream_t;
#endif

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h> /* llabs(), used by IS_HIPFILE_ERR and HIPFILE_ERRSTR */
#include <sys/types.h> /* off_t, ssize_t */
#ifdef _WIN32
#include <BaseTsd.h>  /* SSIZE_T */
#include <winsock2.h> /* struct sockaddr */
#else
#include <sys/socket.h> /* struct sockaddr */
#endif
#include <time.h> /* struct timespec */

/* <time.h> defines struct timespec for C11 and POSIX; a strict C99 compile
 * does not, so declare the tag at file scope for the prototypes below. */
struct timespec;

#if defined(__GNUC__)
#define HIPFILE_API __attribute__((visibility("default")))
#else
#define HIPFILE_API
#endif

/* Marks hipFileError_t [[nodiscard]] where the language has the attribute
 * (C++17, C23). Not part of the API: #undef'd at the end of this header. */
#if (defined(__cplusplus) && __cplusplus >= 201703L) || \
    (!defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 202311L)
#define __HIPFILE_NODISCARD [[nodiscard]]
#else
#define __HIPFILE_NODISCARD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Version
 * ------------------------------------------------------------------------- */

#define HIPFILE_VERSION_MAJOR 0
#define HIPFILE_VERSION_MINOR 2
#define HIPFILE_VERSION_PATCH 0

/* ---------------------------------------------------------------------------
 * Scalar types
 * ------------------------------------------------------------------------- */

/* File offset type: off_t on POSIX (8 bytes on LP64). */
#ifdef _WIN32
typedef __int64 hoff_t;
typedef SSIZE_T ssize_t; /* <BaseTsd.h>, included above */
#else
typedef off_t hoff_t;
#endif

/* ---------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------- */

#define HIPFILE_BASE_ERR 5000

/*
 * hipFile operation status. Numerically identical to cuFile's CUfileOpError.
 * 5021 and 5032 are intentionally unused. A return of -1 from hipFileRead or
 * hipFileWrite is a POSIX error (see errno), not one of these.
 */
typedef enum hipFileOpError {
    hipFileSuccess                 = 0,
    hipFileDriverNotInitialized    = HIPFILE_BASE_ERR + 1,  /* 5001 */
    hipFileDriverInvalidProps      = HIPFILE_BASE_ERR + 2,  /* 5002 */
    hipFileDriverUnsupportedLimit  = HIPFILE_BASE_ERR + 3,  /* 5003 */
    hipFileDriverVersionMismatch   = HIPFILE_BASE_ERR + 4,  /* 5004 */
    hipFileDriverVersionReadError  = HIPFILE_BASE_ERR + 5,  /* 5005 */
    hipFileDriverClosing           = HIPFILE_BASE_ERR + 6,  /* 5006 */
    hipFilePlatformNotSupported    = HIPFILE_BASE_ERR + 7,  /* 5007 */
    hipFileIONotSupported          = HIPFILE_BASE_ERR + 8,  /* 5008 */
    hipFileDeviceNotSupported      = HIPFILE_BASE_ERR + 9,  /* 5009 */
    hipFileDriverError             = HIPFILE_BASE_ERR + 10, /* 5010 */
    hipFileHipDriverError          = HIPFILE_BASE_ERR + 11, /* 5011: see hip_drv_err */
    hipFileHipPointerInvalid       = HIPFILE_BASE_ERR + 12, /* 5012 */
    hipFileHipMemoryTypeInvalid    = HIPFILE_BASE_ERR + 13, /* 5013 */
    hipFileHipPointerRangeError    = HIPFILE_BASE_ERR + 14, /* 5014 */
    hipFileHipContextMismatch      = HIPFILE_BASE_ERR + 15, /* 5015 */
    hipFileInvalidMappingSize      = HIPFILE_BASE_ERR + 16, /* 5016 */
    hipFileInvalidMappingRange     = HIPFILE_BASE_ERR + 17, /* 5017 */
    hipFileInvalidFileType         = HIPFILE_BASE_ERR + 18, /* 5018 */
    hipFileInvalidFileOpenFlag     = HIPFILE_BASE_ERR + 19, /* 5019 */
    hipFileDIONotSet               = HIPFILE_BASE_ERR + 20, /* 5020 */
    /* 5021 unused */
    hipFileInvalidValue            = HIPFILE_BASE_ERR + 22, /* 5022 */
    hipFileMemoryAlreadyRegistered = HIPFILE_BASE_ERR + 23, /* 5023 */
    hipFileMemoryNotRegistered     = HIPFILE_BASE_ERR + 24, /* 5024 */
    hipFilePermissionDenied        = HIPFILE_BASE_ERR + 25, /* 5025 */
    hipFileDriverAlreadyOpen       = HIPFILE_BASE_ERR + 26, /* 5026 */
    hipFileHandleNotRegistered     = HIPFILE_BASE_ERR + 27, /* 5027 */
    hipFileHandleAlreadyRegistered = HIPFILE_BASE_ERR + 28, /* 5028 */
    hipFileDeviceNotFound          = HIPFILE_BASE_ERR + 29, /* 5029 */
    hipFileInternalError           = HIPFILE_BASE_ERR + 30, /* 5030 */
    hipFileGetNewFDFailed          = HIPFILE_BASE_ERR + 31, /* 5031 */
    /* 5032 unused */
    hipFileDriverSetupError        = HIPFILE_BASE_ERR + 33, /* 5033 */
    hipFileIODisabled              = HIPFILE_BASE_ERR + 34, /* 5034 */
    hipFileBatchSubmitFailed       = HIPFILE_BASE_ERR + 35, /* 5035 */
    hipFileGPUMemoryPinningFailed  = HIPFILE_BASE_ERR + 36, /* 5036 */
    hipFileBatchFull               = HIPFILE_BASE_ERR + 37, /* 5037 */
    hipFileAsyncNotSupported       = HIPFILE_BASE_ERR + 38, /* 5038 */
    hipFileIOMaxError              = HIPFILE_BASE_ERR + 39  /* 5039: end marker, never returned */
} hipFileOpError_t;

/*
 * Result of most calls, returned by value (8 bytes, alignment 4).
 * Success is {hipFileSuccess, hipSuccess}; a HIP runtime failure is
 * {hipFileHipDriverError, <hipError_t>}; any other error is {<code>, hipSuccess}.
 */
typedef struct __HIPFILE_NODISCARD hipFileError {
    hipFileOpError_t err;         /* hipFile status */
    hipError_t       hip_drv_err; /* HIP runtime status when err == hipFileHipDriverError */
} hipFileError_t;

/*
 * True if x (a hipFileOpError_t, or a negative ssize_t return of hipFileRead or
 * hipFileWrite) is a hipFile error code: |x| > HIPFILE_BASE_ERR.
 * Upstream spells this abs(x); llabs((long long)x) gives the same result for
 * every int and every ssize_t these functions return, without -Wabsolute-value
 * warnings (or int truncation) when x is an ssize_t.
 */
#define IS_HIPFILE_ERR(x) (llabs((long long)(x)) > HIPFILE_BASE_ERR)

/* Description of x, which may be a negative ssize_t return of hipFileRead/Write. */
#define HIPFILE_ERRSTR(x) hipFileGetOpErrorString((hipFileOpError_t)llabs((long long)(x)))

/* True if the hipFileError_t e carries a HIP runtime error. */
#ifndef IS_HIP_DRV_ERR
#define IS_HIP_DRV_ERR(e) ((e).err == hipFileHipDriverError)
#endif

/* The hipError_t part of the hipFileError_t e. */
#ifndef HIP_DRV_ERR
#define HIP_DRV_ERR(e) ((e).hip_drv_err)
#endif

/* ---------------------------------------------------------------------------
 * Driver properties
 *
 * The enumerators of the three flag enums are bit POSITIONS: the bitmask
 * fields of hipFileDriverProps_t hold (1 << enumerator).
 * ------------------------------------------------------------------------- */

/* Filesystems and storage protocols supported (bit positions; 10 is reserved for YRCloudFile). */
typedef enum hipFileDriverStatusFlags {
    hipFileLustreSupported       = 0,
    hipFileWekaFSSupported       = 1,
    hipFileNFSSupported          = 2,
    hipFileGPFSSupported         = 3,
    hipFileNVMeSupported         = 4,
    hipFileNVMeoFSupported       = 5,
    hipFileSCSISupported         = 6,
    hipFileScaleFluxCSDSupported = 7,
    hipFileNVMeshSupported       = 8,
    hipFileBeeGFSSupported       = 9,
    /* 10 reserved (YRCloudFile) */
    hipFileNVMeP2PSupported      = 11,
    hipFileScatefsSupported      = 12
} hipFileDriverStatusFlags_t;

/* Driver control settings (bit positions). */
typedef enum hipFileDriverControlFlags {
    hipFileUsePollMode     = 0,
    hipFileAllowCompatMode = 1
} hipFileDriverControlFlags_t;

/* Features supported (bit positions). */
typedef enum hipFileFeatureFlags {
    hipFileDynRoutingSupported = 0,
    hipFileBatchIOSupported    = 1,
    hipFileStreamsSupported    = 2,
    hipFileParallelIOSupported = 3
} hipFileFeatureFlags_t;

/*
 * Driver properties (72 bytes, alignment 8). Sizes are in KiB.
 * Not layout-compatible with cuFile's CUfileDrvProps_t.
 */
typedef struct hipFileDriverProps {
    struct {
        unsigned major_version;        /* offset 0 */
        unsigned minor_version;        /* offset 4 */
        uint64_t poll_thresh_size;     /* offset 8: KiB; poll at or below this size in poll mode */
        uint64_t max_direct_io_size;   /* offset 16: KiB */
        unsigned driver_status_flags;  /* offset 24: bits of hipFileDriverStatusFlags_t */
        unsigned driver_control_flags; /* offset 28: bits of hipFileDriverControlFlags_t */
    } nvfs;
    unsigned feature_flags;              /* offset 32: bits of hipFileFeatureFlags_t */
    uint64_t max_device_cache_size;      /* offset 40: KiB */
    uint64_t per_buffer_cache_size;      /* offset 48: KiB */
    uint64_t max_device_pinned_mem_size; /* offset 56: KiB */
    unsigned max_batch_io_count;         /* offset 64: entries per batch */
    unsigned max_batch_io_timeout_msecs; /* offset 68: ms */
} hipFileDriverProps_t;

/* ---------------------------------------------------------------------------
 * RDMA and user-space filesystems (declared for compatibility; unused on AMD)
 * ------------------------------------------------------------------------- */

/* 16 bytes. */
typedef struct hipFileRDMAInfo {
    int         version;  /* offset 0 */
    int         desc_len; /* offset 4 */
    const char *desc_str; /* offset 8 */
} hipFileRDMAInfo_t;

/* hipFileBufRegister flags (recorded, not used). */
#define HIPFILE_RDMA_REGISTER         1
#define HIPFILE_RDMA_RELAXED_ORDERING (1 << 1)

/* User-space filesystem operations (40 bytes: five function pointers). */
typedef struct hipFileFSOps {
    const char *(*fs_type)(void *handle);
    int (*getRDMADeviceList)(void *handle, struct sockaddr **hostaddrs);
    int (*getRDMADevicePriority)(void *handle, char *buf, size_t size, hoff_t offset, struct sockaddr *hostaddr);
    ssize_t (*read)(void *handle, char *buf, size_t size, hoff_t offset, hipFileRDMAInfo_t *rdma_info);
    ssize_t (*write)(void *handle, const char *buf, size_t size, hoff_t offset, hipFileRDMAInfo_t *rdma_info);
} hipFileFSOps_t;

/* ---------------------------------------------------------------------------
 * File handles
 * ------------------------------------------------------------------------- */

/* Kind of handle in hipFileDescr_t. Only OpaqueFD is supported on Linux. */
typedef enum hipFileFileHandleType {
    hipFileHandleTypeOpaqueFD    = 1, /* POSIX file descriptor in handle.fd */
    hipFileHandleTypeOpaqueWin32 = 2, /* Windows HANDLE in handle.hFile */
    hipFileHandleTypeUserspaceFS = 3  /* user-space filesystem: handle.fd plus fs_ops */
} hipFileFileHandleType_t;

/* File description passed to hipFileHandleRegister (24 bytes, alignment 8). */
typedef struct hipFileDescr {
    hipFileFileHandleType_t type; /* offset 0 */
    union {
        int   fd;
        void *hFile;
    } handle;                     /* offset 8 */
    const hipFileFSOps_t *fs_ops; /* offset 16: ignored for OpaqueFD */
} hipFileDescr_t;

/* Opaque registered-file handle. */
typedef void *hipFileHandle_t;

/* ---------------------------------------------------------------------------
 * Batch IO
 * ------------------------------------------------------------------------- */

typedef enum hipFileOpcode {
    hipFileBatchRead  = 0,
    hipFileBatchWrite = 1
} hipFileOpcode_t;

/* Status of one batch operation (real bit flags). */
typedef enum hipFileStatus {
    hipFileWaiting  = 1 << 0, /* 0x01 */
    hipFilePending  = 1 << 1, /* 0x02 */
    hipFileInvalid  = 1 << 2, /* 0x04 */
    hipFileCanceled = 1 << 3, /* 0x08 */
    hipFileComplete = 1 << 4, /* 0x10 */
    hipFileTimeout  = 1 << 5, /* 0x20 */
    hipFileFailed   = 1 << 6  /* 0x40 */
} hipFileStatus_t;

typedef enum hipFileBatchMode {
    hipFileBatch = 1
} hipFileBatchMode_t;

/* One batch request (64 bytes, alignment 8). mode must stay the first field. */
typedef struct hipFileIOParams {
    hipFileBatchMode_t mode; /* offset 0 */
    union {
        struct {
            void   *devPtr_base;   /* offset 8: registered buffer base */
            int64_t file_offset;   /* offset 16 */
            int64_t devPtr_offset; /* offset 24: offset into the buffer */
            size_t  size;          /* offset 32: bytes */
        } batch;
    } u;
    hipFileHandle_t fh;     /* offset 40 */
    hipFileOpcode_t opcode; /* offset 48 */
    void           *cookie; /* offset 56: returned in hipFileIOEvents_t */
} hipFileIOParams_t;

/* One completion event (24 bytes, alignment 8). */
typedef struct hipFileIOEvents {
    void           *cookie; /* offset 0 */
    hipFileStatus_t status; /* offset 8 */
    size_t          ret;    /* offset 16: bytes, or a negative error stored as (size_t)(ssize_t) */
} hipFileIOEvents_t;

/* Opaque batch handle. */
typedef void *hipFileBatchHandle_t;

/* ---------------------------------------------------------------------------
 * Stream registration flags (hipFileStreamRegister)
 *
 * A parameter whose flag is set is read at submission; a parameter whose flag
 * is clear is read through the caller's pointer when the operation executes.
 * ------------------------------------------------------------------------- */

#define HIPFILE_STREAM_FIXED_BUF_OFFSET    1
#define HIPFILE_STREAM_FIXED_FILE_OFFSET   2
#define HIPFILE_STREAM_FIXED_FILE_SIZE     4
#define HIPFILE_STREAM_PAGE_ALIGNED_INPUTS 8
#define HIPFILE_STREAM_FLAGS_MASK          0xf

/* ---------------------------------------------------------------------------
 * Configuration parameters (0-based ordinals, mirroring cuFile's CUFILE_PARAM_*)
 * ------------------------------------------------------------------------- */

typedef enum hipFileSizeTConfigParameter_t {
    hipFileParamProfileStats                       = 0,
    hipFileParamExecutionMaxIOQueueDepth           = 1,
    hipFileParamExecutionMaxIOThreads              = 2,
    hipFileParamExecutionMinIOThresholdSizeKB      = 3,
    hipFileParamExecutionMaxRequestParallelism     = 4,
    hipFileParamPropertiesMaxDirectIOSizeKB        = 5,
    hipFileParamPropertiesMaxDeviceCacheSizeKB     = 6,
    hipFileParamPropertiesPerBufferCacheSizeKB     = 7,
    hipFileParamPropertiesMaxDevicePinnedMemSizeKB = 8,
    hipFileParamPropertiesIOBatchsize              = 9,
    hipFileParamPollthresholdSizeKB                = 10,
    hipFileParamPropertiesBatchIOTimeoutMs         = 11
} hipFileSizeTConfigParameter_t;

typedef enum hipFileBoolConfigParameter_t {
    hipFileParamPropertiesUsePollMode       = 0,
    hipFileParamPropertiesAllowCompatMode   = 1,
    hipFileParamForceCompatMode             = 2,
    hipFileParamFsMiscApiCheckAggressive    = 3,
    hipFileParamExecutionParallelIO         = 4,
    hipFileParamProfileNvtx                 = 5,
    hipFileParamPropertiesAllowSystemMemory = 6,
    hipFileParamUsePcip2pdma                = 7,
    hipFileParamPreferIOUring               = 8,
    hipFileParamForceOdirectMode            = 9,
    hipFileParamSkipTopologyDetection       = 10,
    hipFileParamStreamMemopsBypass          = 11
} hipFileBoolConfigParameter_t;

typedef enum hipFileStringConfigParameter_t {
    hipFileParamLoggingLevel   = 0,
    hipFileParamEnvLogfilePath = 1,
    hipFileParamLogDir         = 2
} hipFileStringConfigParameter_t;

/* ---------------------------------------------------------------------------
 * Functions, in dispatch-table order (hipfile-api-trace.h).
 *
 * ssize_t returns of hipFileRead/hipFileWrite: >= 0 bytes transferred (short
 * at end of file; at most 0x7ffff000 per call, larger sizes are clamped);
 * -1 with errno set for a system error; <= -5001 the negated hipFileOpError_t;
 * any other negative value is a negated hipError_t.
 * ------------------------------------------------------------------------- */

/* 1. Fixed English description of status ("Unknown hipFile error" for unknown values). */
HIPFILE_API const char *hipFileGetOpErrorString(hipFileOpError_t status);

/* 2. Register an open file (descr->type must be hipFileHandleTypeOpaqueFD) and return its handle in *fh.
 *    Initialises the library (use count 0 -> 1) when it succeeds. */
HIPFILE_API hipFileError_t hipFileHandleRegister(hipFileHandle_t *fh, hipFileDescr_t *descr);

/* 3. Deregister a file handle. The caller's descriptor stays open. NULL or unknown handles are ignored. */
HIPFILE_API void hipFileHandleDeregister(hipFileHandle_t fh);

/* 4. Register a buffer (device or host memory) of length bytes. flags: HIPFILE_RDMA_*. */
HIPFILE_API hipFileError_t hipFileBufRegister(const void *buffer_base, size_t length, int flags);

/* 5. Deregister a buffer registered at exactly buffer_base. */
HIPFILE_API hipFileError_t hipFileBufDeregister(const void *buffer_base);

/* 6. Read size bytes at file_offset into buffer_base + buffer_offset. */
HIPFILE_API ssize_t hipFileRead(hipFileHandle_t fh, void *buffer_base, size_t size, hoff_t file_offset,
                                hoff_t buffer_offset);

/* 7. Write size bytes from buffer_base + buffer_offset at file_offset. */
HIPFILE_API ssize_t hipFileWrite(hipFileHandle_t fh, const void *buffer_base, size_t size, hoff_t file_offset,
                                 hoff_t buffer_offset);

/* 8. Open the driver: increments the use count. */
HIPFILE_API hipFileError_t hipFileDriverOpen(void);

/* 9. Close the driver: decrements the use count; at zero every registration is released. */
HIPFILE_API hipFileError_t hipFileDriverClose(void);

/* 10. Current use count (reference count) of the driver. */
HIPFILE_API int64_t hipFileUseCount(void);

/* 11. Current driver properties. */
HIPFILE_API hipFileError_t hipFileDriverGetProperties(hipFileDriverProps_t *props);

/* 12. Enable or disable poll mode; poll_threshold_size in KiB. */
HIPFILE_API hipFileError_t hipFileDriverSetPollMode(bool poll, size_t poll_threshold_size);

/* 13. Maximum direct IO size, in KiB. */
HIPFILE_API hipFileError_t hipFileDriverSetMaxDirectIOSize(size_t max_direct_io_size);

/* 14. Maximum bounce-buffer cache size, in KiB. */
HIPFILE_API hipFileError_t hipFileDriverSetMaxCacheSize(size_t max_cache_size);

/* 15. Maximum pinned memory size, in KiB. */
HIPFILE_API hipFileError_t hipFileDriverSetMaxPinnedMemSize(size_t max_pinned_size);

/* 16. Create a batch context accepting up to max_nr outstanding operations. */
HIPFILE_API hipFileError_t hipFileBatchIOSetUp(hipFileBatchHandle_t *batch_idp, unsigned max_nr);

/* 17. Submit nr operations (all or nothing). flags is reserved (0). */
HIPFILE_API hipFileError_t hipFileBatchIOSubmit(hipFileBatchHandle_t batch_idp, unsigned nr, hipFileIOParams_t *iocbp,
                                                unsigned flags);

/* 18. Collect at least min_nr and at most *nr completed operations into iocbp; *nr is set to the number
 *     returned. timeout NULL waits without limit; a zero timeout never blocks. */
HIPFILE_API hipFileError_t hipFileBatchIOGetStatus(hipFileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
                                                   hipFileIOEvents_t *iocbp, struct timespec *timeout);

/* 19. Cancel the batch's outstanding operations (best effort). */
HIPFILE_API hipFileError_t hipFileBatchIOCancel(hipFileBatchHandle_t batch_idp);

/* 20. Cancel outstanding work and free the batch context. NULL is ignored. */
HIPFILE_API void hipFileBatchIODestroy(hipFileBatchHandle_t batch_idp);

/* 21. Enqueue a read on stream. Parameters are read through the pointers at submission or at execution,
 *     depending on the stream's registration flags; *bytes_read_p holds the result once the stream has
 *     reached the operation. A NULL stream is the default stream (not synchronous). */
HIPFILE_API hipFileError_t hipFileReadAsync(hipFileHandle_t fh, void *buffer_base, size_t *size_p,
                                            hoff_t *file_offset_p, hoff_t *buffer_offset_p, ssize_t *bytes_read_p,
                                            hipStream_t stream);

/* 22. Enqueue a write on stream; see hipFileReadAsync. */
HIPFILE_API hipFileError_t hipFileWriteAsync(hipFileHandle_t fh, void *buffer_base, size_t *size_p,
                                             hoff_t *file_offset_p, hoff_t *buffer_offset_p,
                                             ssize_t *bytes_written_p, hipStream_t stream);

/* 23. Register stream with HIPFILE_STREAM_* flags (bits outside HIPFILE_STREAM_FLAGS_MASK are rejected). */
HIPFILE_API hipFileError_t hipFileStreamRegister(hipStream_t stream, unsigned flags);

/* 24. Deregister a registered stream. */
HIPFILE_API hipFileError_t hipFileStreamDeregister(hipStream_t stream);

/* 25. Library version; any argument may be NULL. */
HIPFILE_API hipFileError_t hipFileGetVersion(unsigned *major, unsigned *minor, unsigned *patch);

/* 26-28. Read a configuration parameter: the staged value while the driver is closed, the applied
 *        value while it is open. desc_str receives a NUL-terminated string of at most len bytes. */
HIPFILE_API hipFileError_t hipFileGetParameterSizeT(hipFileSizeTConfigParameter_t param, size_t *value);
HIPFILE_API hipFileError_t hipFileGetParameterBool(hipFileBoolConfigParameter_t param, bool *value);
HIPFILE_API hipFileError_t hipFileGetParameterString(hipFileStringConfigParameter_t param, char *desc_str, int len);

/* 29-31. Stage a configuration parameter. Only while the driver is closed (else hipFileDriverAlreadyOpen);
 *        applied at the next open, reset to defaults by the final close. */
HIPFILE_API hipFileError_t hipFileSetParameterSizeT(hipFileSizeTConfigParameter_t param, size_t value);
HIPFILE_API hipFileError_t hipFileSetParameterBool(hipFileBoolConfigParameter_t param, bool value);
HIPFILE_API hipFileError_t hipFileSetParameterString(hipFileStringConfigParameter_t param, const char *desc_str);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* Not part of the public API. */
#undef __HIPFILE_NODISCARD

#endif /* HIPFILE_H */
