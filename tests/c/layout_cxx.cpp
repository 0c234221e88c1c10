// layout_cxx.cpp: include/hipfile.h and include/hipfile-api-trace.h used from C++.
//
// The key layout facts of layout.c, as C++ static_asserts, to prove that the
// headers compile as C++ (extern "C", [[nodiscard]] on hipFileError_t) and give
// C++ code the same ABI as C code. Needs no library:
//
//   c++ -std=c++17 -Wall -Wextra -Werror -pedantic -I include tests/c/layout_cxx.cpp -o /tmp/layout_cxx && /tmp/layout_cxx

#include "hipfile-api-trace.h"
#include "hipfile.h"

#include <cstddef>
#include <cstdio>
#include <type_traits>

#if __cplusplus < 201703L
#error "compile as C++17 or later"
#endif
#ifdef __HIPFILE_NODISCARD
#error "__HIPFILE_NODISCARD must be #undef'd at the end of hipfile.h"
#endif

#define SA(cond) static_assert(cond, #cond)
#define SA_LAYOUT(type, size, align)                                      \
    static_assert(sizeof(type) == (size), "sizeof(" #type ") == " #size); \
    static_assert(alignof(type) == (align), "alignof(" #type ") == " #align)
#define SA_OFF(type, member, off) \
    static_assert(offsetof(type, member) == (off), "offsetof(" #type ", " #member ") == " #off)
#define SA_SAME(a, b) static_assert(std::is_same<a, b>::value, #a " is " #b)
#define SA_PROTO(fn, ptype) SA_SAME(decltype(&fn), ptype)

// Version and flag macros.
SA(HIPFILE_VERSION_MAJOR == 0 && HIPFILE_VERSION_MINOR == 2 && HIPFILE_VERSION_PATCH == 0);
SA(HIPFILE_BASE_ERR == 5000);
SA(HIPFILE_RDMA_REGISTER == 1 && HIPFILE_RDMA_RELAXED_ORDERING == 2);
SA(HIPFILE_STREAM_FIXED_BUF_OFFSET == 1 && HIPFILE_STREAM_FIXED_FILE_OFFSET == 2 &&
   HIPFILE_STREAM_FIXED_FILE_SIZE == 4 && HIPFILE_STREAM_PAGE_ALIGNED_INPUTS == 8 && HIPFILE_STREAM_FLAGS_MASK == 0xf);
SA(HIPFILE_RUNTIME_API_TABLE_MAJOR_VERSION == 0 && HIPFILE_RUNTIME_API_TABLE_STEP_VERSION == 0);

// Scalar types.
SA(sizeof(hoff_t) == 8 && std::is_signed<hoff_t>::value);
SA(sizeof(hipError_t) == 4 && sizeof(hipStream_t) == 8);
SA_SAME(hipFileHandle_t, void *);
SA_SAME(hipFileBatchHandle_t, void *);
SA(hipSuccess == 0 && hipErrorInvalidValue == 1 && hipErrorOutOfMemory == 2 && hipErrorNotFound == 500 &&
   hipErrorUnknown == 999);

// Enums: 4 bytes; a sample of values from every enum.
SA(sizeof(hipFileOpError_t) == 4 && sizeof(hipFileStatus_t) == 4 && sizeof(hipFileOpcode_t) == 4);
SA(sizeof(hipFileSizeTConfigParameter_t) == 4 && sizeof(hipFileBoolConfigParameter_t) == 4 &&
   sizeof(hipFileStringConfigParameter_t) == 4);
SA(hipFileSuccess == 0 && hipFileDriverNotInitialized == 5001 && hipFileHipDriverError == 5011 &&
   hipFileInvalidFileOpenFlag == 5019 && hipFileDIONotSet == 5020 && hipFileInvalidValue == 5022 &&
   hipFileHandleNotRegistered == 5027 && hipFileInternalError == 5030 && hipFileGetNewFDFailed == 5031 &&
   hipFileDriverSetupError == 5033 && hipFileBatchFull == 5037 && hipFileIOMaxError == 5039);
SA(hipFileLustreSupported == 0 && hipFileBeeGFSSupported == 9 && hipFileNVMeP2PSupported == 11 &&
   hipFileScatefsSupported == 12);
SA(hipFileUsePollMode == 0 && hipFileAllowCompatMode == 1);
SA(hipFileDynRoutingSupported == 0 && hipFileParallelIOSupported == 3);
SA(hipFileHandleTypeOpaqueFD == 1 && hipFileHandleTypeOpaqueWin32 == 2 && hipFileHandleTypeUserspaceFS == 3);
SA(hipFileBatchRead == 0 && hipFileBatchWrite == 1 && hipFileBatch == 1);
SA(hipFileWaiting == 0x01 && hipFilePending == 0x02 && hipFileInvalid == 0x04 && hipFileCanceled == 0x08 &&
   hipFileComplete == 0x10 && hipFileTimeout == 0x20 && hipFileFailed == 0x40);
SA(hipFileParamProfileStats == 0 && hipFileParamPropertiesIOBatchsize == 9 &&
   hipFileParamPropertiesBatchIOTimeoutMs == 11);
SA(hipFileParamPropertiesUsePollMode == 0 && hipFileParamForceOdirectMode == 9 &&
   hipFileParamStreamMemopsBypass == 11);
SA(hipFileParamLoggingLevel == 0 && hipFileParamEnvLogfilePath == 1 && hipFileParamLogDir == 2);

// Structs.
SA_LAYOUT(hipFileError_t, 8, 4);
SA_OFF(hipFileError_t, err, 0);
SA_OFF(hipFileError_t, hip_drv_err, 4);

SA_LAYOUT(hipFileDriverProps_t, 72, 8);
SA_OFF(hipFileDriverProps_t, nvfs, 0);
SA_OFF(hipFileDriverProps_t, feature_flags, 32);
SA_OFF(hipFileDriverProps_t, max_device_cache_size, 40);
SA_OFF(hipFileDriverProps_t, per_buffer_cache_size, 48);
SA_OFF(hipFileDriverProps_t, max_device_pinned_mem_size, 56);
SA_OFF(hipFileDriverProps_t, max_batch_io_count, 64);
SA_OFF(hipFileDriverProps_t, max_batch_io_timeout_msecs, 68);
// The unnamed nvfs struct, through its type.
using Nvfs = decltype(hipFileDriverProps_t::nvfs);
SA(sizeof(Nvfs) == 32);
SA_OFF(Nvfs, major_version, 0);
SA_OFF(Nvfs, minor_version, 4);
SA_OFF(Nvfs, poll_thresh_size, 8);
SA_OFF(Nvfs, max_direct_io_size, 16);
SA_OFF(Nvfs, driver_status_flags, 24);
SA_OFF(Nvfs, driver_control_flags, 28);

SA_LAYOUT(hipFileRDMAInfo_t, 16, 8);
SA_OFF(hipFileRDMAInfo_t, desc_str, 8);
SA_LAYOUT(hipFileFSOps_t, 40, 8);
SA_OFF(hipFileFSOps_t, fs_type, 0);
SA_OFF(hipFileFSOps_t, getRDMADeviceList, 8);
SA_OFF(hipFileFSOps_t, getRDMADevicePriority, 16);
SA_OFF(hipFileFSOps_t, read, 24);
SA_OFF(hipFileFSOps_t, write, 32);

SA_LAYOUT(hipFileDescr_t, 24, 8);
SA_OFF(hipFileDescr_t, type, 0);
SA_OFF(hipFileDescr_t, handle, 8);
SA_OFF(hipFileDescr_t, fs_ops, 16);

SA_LAYOUT(hipFileIOParams_t, 64, 8);
SA_OFF(hipFileIOParams_t, mode, 0);
SA_OFF(hipFileIOParams_t, u, 8);
SA_OFF(hipFileIOParams_t, fh, 40);
SA_OFF(hipFileIOParams_t, opcode, 48);
SA_OFF(hipFileIOParams_t, cookie, 56);
using Batch = decltype(hipFileIOParams_t::u.batch);
SA(sizeof(Batch) == 32);
SA_OFF(Batch, devPtr_base, 0);
SA_OFF(Batch, file_offset, 8);
SA_OFF(Batch, devPtr_offset, 16);
SA_OFF(Batch, size, 24);

SA_LAYOUT(hipFileIOEvents_t, 24, 8);
SA_OFF(hipFileIOEvents_t, cookie, 0);
SA_OFF(hipFileIOEvents_t, status, 8);
SA_OFF(hipFileIOEvents_t, ret, 16);
SA_SAME(decltype(hipFileIOEvents_t::ret), size_t);

// All 31 functions have the types of their dispatch-table slots, and the slots sit at 8 * index.
SA_LAYOUT(hipFileDispatchTable, 256, 8);
SA_OFF(hipFileDispatchTable, size, 0);
#define SA_SLOT(fn, member, index, ptype)                                      \
    SA_PROTO(fn, ptype);                                                       \
    SA_SAME(decltype(hipFileDispatchTable::member), ptype);                    \
    static_assert(offsetof(hipFileDispatchTable, member) == 8 * (index), #member)
SA_SLOT(hipFileGetOpErrorString, pfn_hipfile_get_op_error_string, 1, PfnHipFileGetOpErrorString);
SA_SLOT(hipFileHandleRegister, pfn_hipfile_handle_register, 2, PfnHipFileHandleRegister);
SA_SLOT(hipFileHandleDeregister, pfn_hipfile_handle_deregister, 3, PfnHipFileHandleDeregister);
SA_SLOT(hipFileBufRegister, pfn_hipfile_buf_register, 4, PfnHipFileBufRegister);
SA_SLOT(hipFileBufDeregister, pfn_hipfile_buf_deregister, 5, PfnHipFileBufDeregister);
SA_SLOT(hipFileRead, pfn_hipfile_read, 6, PfnHipFileRead);
SA_SLOT(hipFileWrite, pfn_hipfile_write, 7, PfnHipFileWrite);
SA_SLOT(hipFileDriverOpen, pfn_hipfile_driver_open, 8, PfnHipFileDriverOpen);
SA_SLOT(hipFileDriverClose, pfn_hipfile_driver_close, 9, PfnHipFileDriverClose);
SA_SLOT(hipFileUseCount, pfn_hipfile_use_count, 10, PfnHipFileUseCount);
SA_SLOT(hipFileDriverGetProperties, pfn_hipfile_driver_get_properties, 11, PfnHipFileDriverGetProperties);
SA_SLOT(hipFileDriverSetPollMode, pfn_hipfile_driver_set_poll_mode, 12, PfnHipFileDriverSetPollMode);
SA_SLOT(hipFileDriverSetMaxDirectIOSize, pfn_hipfile_driver_set_max_direct_io_size, 13,
        PfnHipFileDriverSetMaxDirectIOSize);
SA_SLOT(hipFileDriverSetMaxCacheSize, pfn_hipfile_driver_set_max_cache_size, 14, PfnHipFileDriverSetMaxCacheSize);
SA_SLOT(hipFileDriverSetMaxPinnedMemSize, pfn_hipfile_driver_set_max_pinned_mem_size, 15,
        PfnHipFileDriverSetMaxPinnedMemSize);
SA_SLOT(hipFileBatchIOSetUp, pfn_hipfile_batch_io_set_up, 16, PfnHipFileBatchIOSetUp);
SA_SLOT(hipFileBatchIOSubmit, pfn_hipfile_batch_io_submit, 17, PfnHipFileBatchIOSubmit);
SA_SLOT(hipFileBatchIOGetStatus, pfn_hipfile_batch_io_get_status, 18, PfnHipFileBatchIOGetStatus);
SA_SLOT(hipFileBatchIOCancel, pfn_hipfile_batch_io_cancel, 19, PfnHipFileBatchIOCancel);
SA_SLOT(hipFileBatchIODestroy, pfn_hipfile_batch_io_destroy, 20, PfnHipFileBatchIODestroy);
SA_SLOT(hipFileReadAsync, pfn_hipfile_read_async, 21, PfnHipFileReadAsync);
SA_SLOT(hipFileWriteAsync, pfn_hipfile_write_async, 22, PfnHipFileWriteAsync);
SA_SLOT(hipFileStreamRegister, pfn_hipfile_stream_register, 23, PfnHipFileStreamRegister);
SA_SLOT(hipFileStreamDeregister, pfn_hipfile_stream_deregister, 24, PfnHipFileStreamDeregister);
SA_SLOT(hipFileGetVersion, pfn_hipfile_get_version, 25, PfnHipFileGetVersion);
SA_SLOT(hipFileGetParameterSizeT, pfn_hipfile_get_parameter_size_t, 26, PfnHipFileGetParameterSizeT);
SA_SLOT(hipFileGetParameterBool, pfn_hipfile_get_parameter_bool, 27, PfnHipFileGetParameterBool);
SA_SLOT(hipFileGetParameterString, pfn_hipfile_get_parameter_string, 28, PfnHipFileGetParameterString);
SA_SLOT(hipFileSetParameterSizeT, pfn_hipfile_set_parameter_size_t, 29, PfnHipFileSetParameterSizeT);
SA_SLOT(hipFileSetParameterBool, pfn_hipfile_set_parameter_bool, 30, PfnHipFileSetParameterBool);
SA_SLOT(hipFileSetParameterString, pfn_hipfile_set_parameter_string, 31, PfnHipFileSetParameterString);

// A few prototypes spelled out independently of the typedefs.
SA_PROTO(hipFileRead, ssize_t (*)(void *, void *, size_t, off_t, off_t));
SA_PROTO(hipFileUseCount, int64_t (*)());
SA_PROTO(hipFileBatchIOGetStatus,
         hipFileError_t (*)(void *, unsigned, unsigned *, hipFileIOEvents_t *, struct timespec *));
SA_PROTO(hipFileReadAsync, hipFileError_t (*)(void *, void *, size_t *, off_t *, off_t *, ssize_t *, hipStream_t));

// hipFileError_t is an aggregate usable from C++ exactly as from C.
SA(std::is_trivially_copyable<hipFileError_t>::value && std::is_standard_layout<hipFileError_t>::value);
SA(std::is_standard_layout<hipFileIOParams_t>::value && std::is_standard_layout<hipFileDispatchTable>::value);

int main()
{
    int passed = 0;
    int failed = 0;

    constexpr hipFileError_t drv{hipFileHipDriverError, hipErrorOutOfMemory};
    if (IS_HIP_DRV_ERR(drv) && HIP_DRV_ERR(drv) == hipErrorOutOfMemory) {
        passed++;
    } else {
        failed++;
        std::printf("%s:%d: FAIL: IS_HIP_DRV_ERR/HIP_DRV_ERR: err=%d hip=%d\n", __FILE__, __LINE__,
                    static_cast<int>(drv.err), static_cast<int>(drv.hip_drv_err));
    }
    if (IS_HIPFILE_ERR(-5022) && !IS_HIPFILE_ERR(5000) && !IS_HIPFILE_ERR(-1)) {
        passed++;
    } else {
        failed++;
        std::printf("%s:%d: FAIL: IS_HIPFILE_ERR: %d %d %d\n", __FILE__, __LINE__, int(IS_HIPFILE_ERR(-5022)),
                    int(IS_HIPFILE_ERR(5000)), int(IS_HIPFILE_ERR(-1)));
    }

    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
