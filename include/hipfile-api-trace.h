/*
 * hipfile-api-trace.h: the hipFile API dispatch table (spec/hipfile-abi.md section 4.1).
 *
 * Every exported hipFile function calls through one process-wide table whose
 * layout is fixed: `size` at offset 0, then the 31 function pointers in the
 * order of hipfile.h, pointer i (1-based) at offset 8 * i; 256 bytes on LP64.
 * A profiler that receives the table (rocprofiler-register, library "hipFile")
 * may replace entries to wrap the API.
 *
 * SPDX-License-Identifier: MIT
 */

#ifndef HIPFILE_API_TRACE_H
#define HIPFILE_API_TRACE_H

#include "hipfile.h"

/* Changes only when an existing member changes type, name or position. */
#define HIPFILE_RUNTIME_API_TABLE_MAJOR_VERSION 0

/* Incremented when members are appended; reset when the major version changes. */
#define HIPFILE_RUNTIME_API_TABLE_STEP_VERSION 0

#ifdef __cplusplus
extern "C" {
#endif

/* One pointer type per API function, named PfnHipFile<Name>. */
typedef const char *(*PfnHipFileGetOpErrorString)(hipFileOpError_t status);
typedef hipFileError_t (*PfnHipFileHandleRegister)(hipFileHandle_t *fh, hipFileDescr_t *descr);
typedef void (*PfnHipFileHandleDeregister)(hipFileHandle_t fh);
typedef hipFileError_t (*PfnHipFileBufRegister)(const void *buffer_base, size_t length, int flags);
typedef hipFileError_t (*PfnHipFileBufDeregister)(const void *buffer_base);
typedef ssize_t (*PfnHipFileRead)(hipFileHandle_t fh, void *buffer_base, size_t size, hoff_t file_offset,
                                  hoff_t buffer_offset);
typedef ssize_t (*PfnHipFileWrite)(hipFileHandle_t fh, const void *buffer_base, size_t size, hoff_t file_offset,
                                   hoff_t buffer_offset);
typedef hipFileError_t (*PfnHipFileDriverOpen)(void);
typedef hipFileError_t (*PfnHipFileDriverClose)(void);
typedef int64_t (*PfnHipFileUseCount)(void);
typedef hipFileError_t (*PfnHipFileDriverGetProperties)(hipFileDriverProps_t *props);
typedef hipFileError_t (*PfnHipFileDriverSetPollMode)(bool poll, size_t poll_threshold_size);
typedef hipFileError_t (*PfnHipFileDriverSetMaxDirectIOSize)(size_t max_direct_io_size);
typedef hipFileError_t (*PfnHipFileDriverSetMaxCacheSize)(size_t max_cache_size);
typedef hipFileError_t (*PfnHipFileDriverSetMaxPinnedMemSize)(size_t max_pinned_size);
typedef hipFileError_t (*PfnHipFileBatchIOSetUp)(hipFileBatchHandle_t *batch_idp, unsigned max_nr);
typedef hipFileError_t (*PfnHipFileBatchIOSubmit)(hipFileBatchHandle_t batch_idp, unsigned nr,
                                                  hipFileIOParams_t *iocbp, unsigned flags);
typedef hipFileError_t (*PfnHipFileBatchIOGetStatus)(hipFileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
                                                     hipFileIOEvents_t *iocbp, struct timespec *timeout);
typedef hipFileError_t (*PfnHipFileBatchIOCancel)(hipFileBatchHandle_t batch_idp);
typedef void (*PfnHipFileBatchIODestroy)(hipFileBatchHandle_t batch_idp);
typedef hipFileError_t (*PfnHipFileReadAsync)(hipFileHandle_t fh, void *buffer_base, size_t *size_p,
                                              hoff_t *file_offset_p, hoff_t *buffer_offset_p, ssize_t *bytes_read_p,
                                              hipStream_t stream);
typedef hipFileError_t (*PfnHipFileWriteAsync)(hipFileHandle_t fh, void *buffer_base, size_t *size_p,
                                               hoff_t *file_offset_p, hoff_t *buffer_offset_p,
                                               ssize_t *bytes_written_p, hipStream_t stream);
typedef hipFileError_t (*PfnHipFileStreamRegister)(hipStream_t stream, unsigned flags);
typedef hipFileError_t (*PfnHipFileStreamDeregister)(hipStream_t stream);
typedef hipFileError_t (*PfnHipFileGetVersion)(unsigned *major, unsigned *minor, unsigned *patch);
typedef hipFileError_t (*PfnHipFileGetParameterSizeT)(hipFileSizeTConfigParameter_t param, size_t *value);
typedef hipFileError_t (*PfnHipFileGetParameterBool)(hipFileBoolConfigParameter_t param, bool *value);
typedef hipFileError_t (*PfnHipFileGetParameterString)(hipFileStringConfigParameter_t param, char *desc_str,
                                                       int len);
typedef hipFileError_t (*PfnHipFileSetParameterSizeT)(hipFileSizeTConfigParameter_t param, size_t value);
typedef hipFileError_t (*PfnHipFileSetParameterBool)(hipFileBoolConfigParameter_t param, bool value);
typedef hipFileError_t (*PfnHipFileSetParameterString)(hipFileStringConfigParameter_t param, const char *desc_str);

/*
 * The dispatch table. Rules for changing it: never reorder, rename or retype
 * an existing member; append new members only after incrementing
 * HIPFILE_RUNTIME_API_TABLE_STEP_VERSION, under a comment naming that step.
 */
struct hipFileDispatchTable {
    /* HIPFILE_RUNTIME_API_TABLE_STEP_VERSION == 0 */
    size_t                              size; /* sizeof(struct hipFileDispatchTable) */
    PfnHipFileGetOpErrorString          pfn_hipfile_get_op_error_string;            /* offset   8 */
    PfnHipFileHandleRegister            pfn_hipfile_handle_register;                /* offset  16 */
    PfnHipFileHandleDeregister          pfn_hipfile_handle_deregister;              /* offset  24 */
    PfnHipFileBufRegister               pfn_hipfile_buf_register;                   /* offset  32 */
    PfnHipFileBufDeregister             pfn_hipfile_buf_deregister;                 /* offset  40 */
    PfnHipFileRead                      pfn_hipfile_read;                           /* offset  48 */
    PfnHipFileWrite                     pfn_hipfile_write;                          /* offset  56 */
    PfnHipFileDriverOpen                pfn_hipfile_driver_open;                    /* offset  64 */
    PfnHipFileDriverClose               pfn_hipfile_driver_close;                   /* offset  72 */
    PfnHipFileUseCount                  pfn_hipfile_use_count;                      /* offset  80 */
    PfnHipFileDriverGetProperties       pfn_hipfile_driver_get_properties;          /* offset  88 */
    PfnHipFileDriverSetPollMode         pfn_hipfile_driver_set_poll_mode;           /* offset  96 */
    PfnHipFileDriverSetMaxDirectIOSize  pfn_hipfile_driver_set_max_direct_io_size;  /* offset 104 */
    PfnHipFileDriverSetMaxCacheSize     pfn_hipfile_driver_set_max_cache_size;      /* offset 112 */
    PfnHipFileDriverSetMaxPinnedMemSize pfn_hipfile_driver_set_max_pinned_mem_size; /* offset 120 */
    PfnHipFileBatchIOSetUp              pfn_hipfile_batch_io_set_up;                /* offset 128 */
    PfnHipFileBatchIOSubmit             pfn_hipfile_batch_io_submit;                /* offset 136 */
    PfnHipFileBatchIOGetStatus          pfn_hipfile_batch_io_get_status;            /* offset 144 */
    PfnHipFileBatchIOCancel             pfn_hipfile_batch_io_cancel;                /* offset 152 */
    PfnHipFileBatchIODestroy            pfn_hipfile_batch_io_destroy;               /* offset 160 */
    PfnHipFileReadAsync                 pfn_hipfile_read_async;                     /* offset 168 */
    PfnHipFileWriteAsync                pfn_hipfile_write_async;                    /* offset 176 */
    PfnHipFileStreamRegister            pfn_hipfile_stream_register;                /* offset 184 */
    PfnHipFileStreamDeregister          pfn_hipfile_stream_deregister;              /* offset 192 */
    PfnHipFileGetVersion                pfn_hipfile_get_version;                    /* offset 200 */
    PfnHipFileGetParameterSizeT         pfn_hipfile_get_parameter_size_t;           /* offset 208 */
    PfnHipFileGetParameterBool          pfn_hipfile_get_parameter_bool;             /* offset 216 */
    PfnHipFileGetParameterString        pfn_hipfile_get_parameter_string;           /* offset 224 */
    PfnHipFileSetParameterSizeT         pfn_hipfile_set_parameter_size_t;           /* offset 232 */
    PfnHipFileSetParameterBool          pfn_hipfile_set_parameter_bool;             /* offset 240 */
    PfnHipFileSetParameterString        pfn_hipfile_set_parameter_string;           /* offset 248 */
    /* HIPFILE_RUNTIME_API_TABLE_STEP_VERSION == 1: append new members below this line. */
};

/*
 * The table layout is installed for tools that build or wrap one. libhipfile
 * does not export a table accessor: it exports exactly the 31 API symbols.
 */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HIPFILE_API_TRACE_H */
