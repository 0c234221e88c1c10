//! The CUDA runtime: the driver API through `cudarc`'s `sys` level, loaded at
//! run time (`dynamic-loading`), so that a machine without `libcuda` still
//! loads the library and simply gets `NotPresent`.
//!
//! cudarc panics when `libcuda` is missing or lacks one of the entry points
//! of its bindings (CUDA 12.8 here). [`CudaGpu::load`] therefore asks the
//! driver for its version first (with `libloading`, which never panics), then
//! runs cudarc's own probes inside `catch_unwind`; once `culib()` has loaded,
//! no later call can panic. (A `panic = "abort"` build would make
//! `catch_unwind` useless; the version check is what keeps the common case,
//! an old driver, from panicking at all.)
//!
//! Contexts: one retained primary context per device, retained lazily on
//! first use (retaining creates the context, which costs device memory, so an
//! unused device is never touched). Every method makes the right context
//! current before the driver calls that need one:
//! - a thread that called `bind_thread(d)` (an engine worker) keeps `d`'s
//!   context current; a thread-local remembers it, so its calls on `d` cost
//!   no driver call at all;
//! - any other thread (a user's) gets the needed context made current for the
//!   duration of the call and its own current context restored afterwards, so
//!   the library never changes which device a user's thread is on.
//!
//! Handles: `Stream(s)` is the `CUstream` value (0 is the legacy NULL stream
//! of the current context; 1 and 2 are `CU_STREAM_LEGACY` and
//! `CU_STREAM_PER_THREAD`); `Event(e)` is the `CUevent` value. An event is
//! created in the calling thread's current context, so create it on a thread
//! bound to the device of the streams it will be recorded on.

use super::{
    CopyDesc, DevPtr, Event, Gpu, GpuError, GpuResult, HtodCopy, MemKind, PtrInfo, Stream,
};
use cudarc::driver::sys;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

/// The CUDA version of the bindings cudarc was built with (feature `cuda-12080`).
const BINDINGS_VERSION: c_int = 12080;

static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// (instance, context, device) that `bind_thread` made current on this thread.
    static BOUND: Cell<(u64, usize, i32)> = const { Cell::new((0, 0, 0)) };
}

fn check(call: &'static str, r: sys::CUresult) -> GpuResult<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::Driver {
            call,
            code: r as i32,
        })
    }
}

/// The device address of registered (mapped) host memory, in the current context.
///
/// # Safety
/// `host` must lie in memory registered with `host_register` (DEVICEMAP).
unsafe fn mapped(host: *const c_void) -> GpuResult<sys::CUdeviceptr> {
    let mut d: sys::CUdeviceptr = 0;
    // SAFETY: the caller's promise; out-pointer to a live local.
    check("cuMemHostGetDevicePointer_v2", unsafe {
        sys::cuMemHostGetDevicePointer_v2(&mut d, host as *mut c_void, 0)
    })?;
    Ok(d)
}

fn is_code(e: &GpuError, r: sys::CUresult) -> bool {
    matches!(e, GpuError::Driver { code, .. } if *code == r as i32)
}

/// Stream handles that mean "the current context's stream" rather than a stream object.
fn is_context_relative(stream: Stream) -> bool {
    stream.0 <= 2
}

#[derive(Clone, Copy)]
struct StreamInfo {
    device: i32,
    ctx: usize,
}

/// Attributes read by one `cuPointerGetAttributes` call.
#[derive(Default)]
struct RawAttrs {
    mem_type: u32,
    ordinal: i32,
    range_start: u64,
    range_bytes: usize,
    /// The driver writes a boolean; zeroed 8 bytes read right whether it
    /// writes 1 or 4 of them.
    managed: u64,
}

/// The one attribute a batch of host-to-device copies uses for every copy:
/// the source is read in stream order (a bounce slot is filled before the
/// call), from host to device memory.
pub fn htod_batch_attributes() -> sys::CUmemcpyAttributes {
    sys::CUmemcpyAttributes {
        srcAccessOrder: sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
        srcLocHint: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
            id: 0,
        },
        dstLocHint: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: 0,
        },
        flags: 0,
    }
}

/// The described-copy kernel (`place.ptx`), NUL-terminated for `cuModuleLoadData`.
const PLACE_PTX: &str = concat!(include_str!("place.ptx"), "\0");
/// Its entry point.
const PLACE_ENTRY: &std::ffi::CStr = c"hipfile_place";
/// Threads per block of the place kernel.
const PLACE_BLOCK: c_uint = 256;
/// Blocks per multiprocessor: two blocks of 256 threads keep a copy of a
/// few MiB memory-bound without waiting on one block's tail.
const PLACE_BLOCKS_PER_SM: c_int = 2;

/// The place kernel loaded into one context.
#[derive(Clone, Copy)]
struct PlaceKernel {
    module: usize,
    func: usize,
    grid: c_uint,
}

/// The CUDA driver runtime.
pub struct CudaGpu {
    id: u64,
    /// `CUdevice` handle of each ordinal.
    devices: Vec<sys::CUdevice>,
    /// Retained primary context of each ordinal, 0 until first use.
    ctxs: Box<[AtomicUsize]>,
    retain_lock: Mutex<()>,
    /// Streams created by `stream_create`.
    streams: RwLock<HashMap<usize, StreamInfo>>,
    /// False once `cuMemcpyBatchAsync` said it is not supported here: copies
    /// are then queued one by one.
    batch_copies: AtomicBool,
    /// The place kernel of each context it was loaded into (by context).
    kernels: Mutex<HashMap<usize, PlaceKernel>>,
}

/// Refuse drivers older than the bindings before cudarc can panic on a missing
/// entry point. Returns Ok when `libcuda` cannot be opened here: cudarc's
/// own search (more names) then decides.
fn check_driver_version() -> GpuResult<()> {
    type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
    // The Linux names cudarc tries, in its order, so both find the same file.
    for name in [
        "libcuda.so",
        "libcuda.so.12",
        "libcuda.so.11",
        "libcuda.so.10",
        "libcuda.so.1",
    ] {
        // SAFETY: loading libcuda runs only the driver's own initialisers.
        let lib = match unsafe { libloading::Library::new(name) } {
            Ok(lib) => lib,
            Err(_) => continue,
        };
        // SAFETY: `cuDriverGetVersion(int*)` has had this signature since CUDA 2.2.
        let get: libloading::Symbol<GetVersion> = match unsafe { lib.get(b"cuDriverGetVersion\0") }
        {
            Ok(f) => f,
            Err(_) => {
                return Err(GpuError::NotPresent(format!(
                    "{name} has no cuDriverGetVersion"
                )))
            }
        };
        let mut version: c_int = 0;
        // SAFETY: the out-pointer is a live local; the call needs no cuInit.
        let r = unsafe { get(&mut version) };
        if r == 0 && version < BINDINGS_VERSION {
            return Err(GpuError::NotPresent(format!(
                "CUDA driver {}.{} is older than {}.{}, which the bindings need",
                version / 1000,
                version % 1000 / 10,
                BINDINGS_VERSION / 1000,
                BINDINGS_VERSION % 1000 / 10
            )));
        }
        return Ok(());
    }
    Ok(())
}

impl CudaGpu {
    /// Load `libcuda`, initialise the driver and count devices. Never panics.
    pub fn load() -> Result<CudaGpu, GpuError> {
        check_driver_version()?;
        // SAFETY: `is_culib_present` only tries to open libcuda; it can panic
        // (caught here) when a library lacks an entry point.
        match std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }) {
            Ok(true) => {}
            Ok(false) => return Err(GpuError::NotPresent("libcuda not found".into())),
            Err(_) => {
                return Err(GpuError::NotPresent(
                    "libcuda lacks entry points of CUDA 12.8 (driver too old?)".into(),
                ))
            }
        }
        // Force cudarc's lazy load of every entry point now, where a panic is
        // caught; after this succeeds every `sys::` call finds its symbol.
        let loaded = std::panic::catch_unwind(|| {
            // SAFETY: as above: it only opens libcuda and resolves symbols.
            unsafe { sys::culib() };
        });
        if loaded.is_err() {
            return Err(GpuError::NotPresent(
                "libcuda could not be bound (missing entry points)".into(),
            ));
        }
        // CUDA maps streams onto CUDA_DEVICE_MAX_CONNECTIONS hardware queues
        // (8 by default), and work behind a stream parked in
        // cuStreamWaitValue32 on a shared queue waits with it. Stream I/O
        // does not depend on this for progress (a parked stream is released
        // by host stores alone; see streamops), but every stage of a stream
        // op parks its stream until its bytes are read, so with few queues
        // concurrent stream ops and the workers' copies would wait behind
        // each other's stages. 32 (the maximum) gives the 16 worker streams
        // and up to 16 user streams queues of their own. It only takes effect
        // if no context exists yet; an explicit setting wins.
        if std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_none() {
            std::env::set_var("CUDA_DEVICE_MAX_CONNECTIONS", "32");
        }
        // SAFETY: the library is loaded; cuInit takes flags only (must be 0).
        let r = unsafe { sys::cuInit(0) };
        if r == sys::CUresult::CUDA_ERROR_NO_DEVICE {
            return Err(GpuError::NotPresent("cuInit: no CUDA device".into()));
        }
        check("cuInit", r)?;
        let mut count: c_int = 0;
        // SAFETY: out-pointer to a live local.
        check("cuDeviceGetCount", unsafe {
            sys::cuDeviceGetCount(&mut count)
        })?;
        if count <= 0 {
            return Err(GpuError::NotPresent("no CUDA device".into()));
        }
        let mut devices = Vec::with_capacity(count as usize);
        for ordinal in 0..count {
            let mut dev: sys::CUdevice = 0;
            // SAFETY: out-pointer to a live local; `ordinal < count`.
            check("cuDeviceGet", unsafe {
                sys::cuDeviceGet(&mut dev, ordinal)
            })?;
            devices.push(dev);
        }
        Ok(CudaGpu {
            id: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            ctxs: (0..count).map(|_| AtomicUsize::new(0)).collect(),
            devices,
            retain_lock: Mutex::new(()),
            streams: RwLock::new(HashMap::new()),
            batch_copies: AtomicBool::new(true),
            kernels: Mutex::new(HashMap::new()),
        })
    }

    fn index(&self, device: i32) -> GpuResult<usize> {
        usize::try_from(device)
            .ok()
            .filter(|&i| i < self.devices.len())
            .ok_or(GpuError::InvalidValue("device ordinal out of range"))
    }

    /// The primary context of `device`, retained on first use.
    fn ctx(&self, device: i32) -> GpuResult<usize> {
        let i = self.index(device)?;
        let c = self.ctxs[i].load(Ordering::Acquire);
        if c != 0 {
            return Ok(c);
        }
        let _g = self.retain_lock.lock().unwrap_or_else(|e| e.into_inner());
        let c = self.ctxs[i].load(Ordering::Acquire);
        if c != 0 {
            return Ok(c);
        }
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local; `devices[i]` came from cuDeviceGet.
        let r = unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, self.devices[i]) };
        check("cuDevicePrimaryCtxRetain", r)?;
        if ctx.is_null() {
            return Err(GpuError::Driver {
                call: "cuDevicePrimaryCtxRetain",
                code: sys::CUresult::CUDA_ERROR_INVALID_CONTEXT as i32,
            });
        }
        self.ctxs[i].store(ctx as usize, Ordering::Release);
        Ok(ctx as usize)
    }

    /// The context current on this thread (0 when none).
    fn current_ctx(&self) -> GpuResult<usize> {
        let (id, ctx, _) = BOUND.with(|b| b.get());
        if id == self.id && ctx != 0 {
            return Ok(ctx);
        }
        let mut cur: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local.
        check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut cur) })?;
        Ok(cur as usize)
    }

    /// Run `f` with `ctx` current, restoring the thread's context afterwards
    /// unless the thread is bound to `ctx` already.
    fn in_ctx<R>(&self, ctx: usize, f: impl FnOnce() -> GpuResult<R>) -> GpuResult<R> {
        let cur = self.current_ctx()?;
        if cur == ctx {
            return f();
        }
        // SAFETY: `ctx` is a context this runtime retained or the driver
        // returned for a live stream; setting it current has no other effect.
        check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(ctx as sys::CUcontext)
        })?;
        let r = f();
        // SAFETY: `cur` was current on this thread a moment ago (or is NULL,
        // which unbinds), so it is still a valid argument.
        let restored = check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(cur as sys::CUcontext)
        });
        let r = r?;
        restored?;
        Ok(r)
    }

    /// Run `f` with some context current: the thread's own, else one this
    /// runtime already retained, else device 0's primary context.
    fn in_any_ctx<R>(&self, f: impl FnOnce() -> GpuResult<R>) -> GpuResult<R> {
        if self.current_ctx()? != 0 {
            return f();
        }
        let retained = self
            .ctxs
            .iter()
            .map(|c| c.load(Ordering::Acquire))
            .find(|&c| c != 0);
        let ctx = match retained {
            Some(c) => c,
            None => self.ctx(0)?,
        };
        self.in_ctx(ctx, f)
    }

    /// The context of `stream`: None for the context-relative handles.
    fn stream_ctx(&self, stream: Stream) -> GpuResult<Option<StreamInfoOrCtx>> {
        if is_context_relative(stream) {
            return Ok(None);
        }
        if let Some(info) = self
            .streams
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&stream.0)
        {
            return Ok(Some(StreamInfoOrCtx::Ours(*info)));
        }
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        self.in_any_ctx(|| {
            // SAFETY: `stream` is a live stream handle of the caller (the
            // trait's contract for user streams); out-pointer to a live local.
            check("cuStreamGetCtx", unsafe {
                sys::cuStreamGetCtx(stream.0 as sys::CUstream, &mut ctx)
            })
        })?;
        Ok(Some(StreamInfoOrCtx::User(ctx as usize)))
    }

    /// Run `f` with the context of `stream` current.
    fn in_stream_ctx<R>(&self, stream: Stream, f: impl FnOnce() -> GpuResult<R>) -> GpuResult<R> {
        match self.stream_ctx(stream)? {
            None => self.in_any_ctx(f),
            Some(StreamInfoOrCtx::Ours(info)) => self.in_ctx(info.ctx, f),
            Some(StreamInfoOrCtx::User(ctx)) => self.in_ctx(ctx, f),
        }
    }

    /// The context `stream` runs in (the calling thread's for the
    /// context-relative handles).
    fn ctx_of(&self, stream: Stream) -> GpuResult<usize> {
        match self.stream_ctx(stream)? {
            Some(StreamInfoOrCtx::Ours(info)) => Ok(info.ctx),
            Some(StreamInfoOrCtx::User(ctx)) => Ok(ctx),
            None => self.in_any_ctx(|| self.current_ctx()),
        }
    }

    /// Enqueue a cuStreamWaitValue32 on the word at `host_addr` with `flags`.
    ///
    /// # Safety
    /// As for [`Gpu::stream_wait_value32`].
    unsafe fn wait_value(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
        flags: sys::CUstreamWaitValue_flags,
    ) -> GpuResult<()> {
        self.in_stream_ctx(stream, || {
            // SAFETY: the caller promised `host_addr` is registered host
            // memory that outlives the wait.
            let d = unsafe { mapped(host_addr as *const c_void) }?;
            // SAFETY: `d` is the device address of that word in the stream's context.
            check("cuStreamWaitValue32_v2", unsafe {
                sys::cuStreamWaitValue32_v2(stream.0 as sys::CUstream, d, value, flags as c_uint)
            })
        })
    }

    /// Load the place kernel into `ctx` (a primary context), once.
    fn load_place_kernel(&self, ctx: usize) -> GpuResult<PlaceKernel> {
        let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = kernels.get(&ctx) {
            return Ok(*k);
        }
        let device = self.ctx_device(ctx)?;
        let k = self.in_ctx(ctx, || {
            let mut module: sys::CUmodule = std::ptr::null_mut();
            // SAFETY: PLACE_PTX is NUL-terminated PTX text; out-pointer to a live local.
            check("cuModuleLoadData", unsafe {
                sys::cuModuleLoadData(&mut module, PLACE_PTX.as_ptr() as *const c_void)
            })?;
            let mut func: sys::CUfunction = std::ptr::null_mut();
            // SAFETY: `module` was just loaded; the name is NUL-terminated.
            let found = check("cuModuleGetFunction", unsafe {
                sys::cuModuleGetFunction(&mut func, module, PLACE_ENTRY.as_ptr())
            });
            let mut sms: c_int = 0;
            let counted = found.and_then(|()| {
                // SAFETY: out-pointer to a live local; `devices[device]` came from cuDeviceGet.
                check("cuDeviceGetAttribute", unsafe {
                    sys::cuDeviceGetAttribute(
                        &mut sms,
                        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                        self.devices[device as usize],
                    )
                })
            });
            if let Err(e) = counted {
                // SAFETY: loaded above and not used by anything.
                unsafe { sys::cuModuleUnload(module) };
                return Err(e);
            }
            Ok(PlaceKernel {
                module: module as usize,
                func: func as usize,
                grid: (sms.max(1) * PLACE_BLOCKS_PER_SM) as c_uint,
            })
        })?;
        kernels.insert(ctx, k);
        Ok(k)
    }

    /// The device ordinal of a context.
    fn ctx_device(&self, ctx: usize) -> GpuResult<i32> {
        if let Some(i) = self
            .ctxs
            .iter()
            .position(|c| c.load(Ordering::Acquire) == ctx)
        {
            return Ok(i as i32);
        }
        self.in_ctx(ctx, || {
            let mut dev: sys::CUdevice = 0;
            // SAFETY: out-pointer to a live local; a context is current.
            check("cuCtxGetDevice", unsafe { sys::cuCtxGetDevice(&mut dev) })?;
            Ok(dev)
        })
    }

    fn query_pointer(&self, ptr: u64) -> GpuResult<Option<RawAttrs>> {
        use sys::CUpointer_attribute::*;
        let mut a = RawAttrs::default();
        let mut kinds = [
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            CU_POINTER_ATTRIBUTE_RANGE_SIZE,
            CU_POINTER_ATTRIBUTE_IS_MANAGED,
        ];
        let mut data: [*mut c_void; 5] = [
            &mut a.mem_type as *mut u32 as *mut c_void,
            &mut a.ordinal as *mut i32 as *mut c_void,
            &mut a.range_start as *mut u64 as *mut c_void,
            &mut a.range_bytes as *mut usize as *mut c_void,
            &mut a.managed as *mut u64 as *mut c_void,
        ];
        // SAFETY: `kinds` and `data` have 5 entries each; every data pointer
        // refers to a live field of `a` at least as large as the attribute
        // (memory type: 4 bytes, ordinal: int, start: CUdeviceptr, size:
        // size_t, managed: a boolean written into 8 zeroed bytes).
        let r = unsafe {
            sys::cuPointerGetAttributes(
                kinds.len() as c_uint,
                kinds.as_mut_ptr(),
                data.as_mut_ptr(),
                ptr,
            )
        };
        if r == sys::CUresult::CUDA_ERROR_INVALID_VALUE {
            return Ok(None); // not a CUDA pointer (older drivers say so this way)
        }
        check("cuPointerGetAttributes", r)?;
        Ok(Some(a))
    }
}

enum StreamInfoOrCtx {
    Ours(StreamInfo),
    User(usize),
}

/// Range of an allocation when the driver reported one containing `ptr`.
fn known_range(a: &RawAttrs, ptr: u64) -> Option<(u64, u64)> {
    let start = a.range_start;
    let bytes = a.range_bytes as u64;
    let end = start.checked_add(bytes)?;
    (start != 0 && bytes != 0 && start <= ptr && ptr < end).then_some((start, bytes))
}

impl Drop for CudaGpu {
    fn drop(&mut self) {
        let kernels: Vec<(usize, PlaceKernel)> = self
            .kernels
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        for (ctx, k) in kernels {
            let _ = self.in_ctx(ctx, || {
                // SAFETY: loaded once by `load_place_kernel`, unloaded once here.
                check("cuModuleUnload", unsafe {
                    sys::cuModuleUnload(k.module as sys::CUmodule)
                })
            });
        }
        let streams: Vec<(usize, StreamInfo)> = self
            .streams
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        for (s, info) in streams {
            let _ = self.in_ctx(info.ctx, || {
                // SAFETY: the stream was created by this runtime and is destroyed once.
                check("cuStreamDestroy_v2", unsafe {
                    sys::cuStreamDestroy_v2(s as sys::CUstream)
                })
            });
        }
        if BOUND.with(|b| b.get().0) == self.id {
            BOUND.with(|b| b.set((0, 0, 0)));
        }
        for (i, c) in self.ctxs.iter().enumerate() {
            if c.load(Ordering::Acquire) != 0 {
                // SAFETY: this runtime retained exactly one reference on the
                // primary context of `devices[i]`; release it once.
                let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.devices[i]) };
            }
        }
    }
}

impl Gpu for CudaGpu {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device_count(&self) -> i32 {
        self.devices.len() as i32
    }

    fn pointer_info(&self, ptr: u64) -> GpuResult<PtrInfo> {
        // Try without touching contexts first: with unified addressing the
        // driver answers on any thread, and a user's thread stays as it was.
        let attrs = match self.query_pointer(ptr) {
            Err(e) if is_code(&e, sys::CUresult::CUDA_ERROR_INVALID_CONTEXT) => {
                self.in_any_ctx(|| self.query_pointer(ptr))?
            }
            other => other?,
        };
        let unknown = PtrInfo {
            kind: MemKind::PageableHost,
            alloc_base: ptr,
            alloc_bytes: u64::MAX - ptr,
        };
        let Some(a) = attrs else {
            return Ok(unknown);
        };
        let with_range = |kind: MemKind| {
            let (alloc_base, alloc_bytes) = known_range(&a, ptr).unwrap_or((ptr, u64::MAX - ptr));
            PtrInfo {
                kind,
                alloc_base,
                alloc_bytes,
            }
        };
        use sys::CUmemorytype::*;
        if a.managed != 0 || a.mem_type == CU_MEMORYTYPE_UNIFIED as u32 {
            return Ok(with_range(MemKind::Managed {
                device: a.ordinal.max(0),
            }));
        }
        match a.mem_type {
            0 => Ok(unknown),
            t if t == CU_MEMORYTYPE_DEVICE as u32 => match known_range(&a, ptr) {
                Some((alloc_base, alloc_bytes)) => Ok(PtrInfo {
                    kind: MemKind::Device { device: a.ordinal },
                    alloc_base,
                    alloc_bytes,
                }),
                None => Err(GpuError::InvalidValue(
                    "device pointer without an allocation range",
                )),
            },
            t if t == CU_MEMORYTYPE_HOST as u32 => Ok(with_range(MemKind::PinnedHost)),
            t if t == CU_MEMORYTYPE_ARRAY as u32 => {
                Err(GpuError::InvalidValue("pointer is a CUDA array"))
            }
            _ => Err(GpuError::InvalidValue("unknown CUDA memory type")),
        }
    }

    fn current_device(&self) -> GpuResult<i32> {
        let (id, ctx, dev) = BOUND.with(|b| b.get());
        if id == self.id && ctx != 0 {
            return Ok(dev);
        }
        let mut dev: sys::CUdevice = 0;
        // SAFETY: out-pointer to a live local.
        let r = unsafe { sys::cuCtxGetDevice(&mut dev) };
        if r == sys::CUresult::CUDA_ERROR_INVALID_CONTEXT {
            return Ok(0); // no current context: the runtime's default device
        }
        check("cuCtxGetDevice", r)?;
        Ok(dev)
    }

    fn bind_thread(&self, device: i32) -> GpuResult<()> {
        let ctx = self.ctx(device)?;
        // SAFETY: `ctx` is a primary context this runtime retained.
        check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(ctx as sys::CUcontext)
        })?;
        BOUND.with(|b| b.set((self.id, ctx, device)));
        Ok(())
    }

    unsafe fn host_register(&self, ptr: *mut u8, len: usize) -> GpuResult<()> {
        if ptr.is_null() || len == 0 {
            return Err(GpuError::InvalidValue("null or empty host range"));
        }
        // PORTABLE: every context may use it; DEVICEMAP: it has a device
        // address (needed by the stream wait/write value operations).
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        self.in_any_ctx(|| {
            // SAFETY: the caller promised `ptr..ptr+len` is a live mapping
            // that outlives the registration.
            check("cuMemHostRegister_v2", unsafe {
                sys::cuMemHostRegister_v2(ptr as *mut c_void, len, flags)
            })
        })
    }

    unsafe fn host_unregister(&self, ptr: *mut u8) -> GpuResult<()> {
        self.in_any_ctx(|| {
            // SAFETY: the caller promised `ptr` is registered and unused by copies.
            check("cuMemHostUnregister", unsafe {
                sys::cuMemHostUnregister(ptr as *mut c_void)
            })
        })
    }

    fn stream_create(&self, device: i32) -> GpuResult<Stream> {
        let ctx = self.ctx(device)?;
        let mut s: sys::CUstream = std::ptr::null_mut();
        self.in_ctx(ctx, || {
            let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint;
            // SAFETY: out-pointer to a live local; `ctx` is current.
            check("cuStreamCreate", unsafe {
                sys::cuStreamCreate(&mut s, flags)
            })
        })?;
        self.streams
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(s as usize, StreamInfo { device, ctx });
        Ok(Stream(s as usize))
    }

    fn stream_destroy(&self, stream: Stream) {
        // Only streams this runtime created; a user's stream is the user's.
        let info = self
            .streams
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&stream.0);
        if let Some(info) = info {
            let _ = self.in_ctx(info.ctx, || {
                // SAFETY: created by `stream_create`, removed from the table
                // above, so destroyed exactly once.
                check("cuStreamDestroy_v2", unsafe {
                    sys::cuStreamDestroy_v2(stream.0 as sys::CUstream)
                })
            });
        }
    }

    fn stream_device(&self, stream: Stream) -> GpuResult<i32> {
        match self.stream_ctx(stream)? {
            None => self.current_device(),
            Some(StreamInfoOrCtx::Ours(info)) => Ok(info.device),
            Some(StreamInfoOrCtx::User(ctx)) => self.ctx_device(ctx),
        }
    }

    fn stream_synchronize(&self, stream: Stream) -> GpuResult<()> {
        self.in_stream_ctx(stream, || {
            // SAFETY: a live stream handle (trait contract); its context is current.
            check("cuStreamSynchronize", unsafe {
                sys::cuStreamSynchronize(stream.0 as sys::CUstream)
            })
        })
    }

    unsafe fn copy_htod_async(
        &self,
        dst: DevPtr,
        src: *const u8,
        len: usize,
        stream: Stream,
    ) -> GpuResult<()> {
        if len == 0 {
            return Ok(());
        }
        self.in_stream_ctx(stream, || {
            // SAFETY: the caller promised `src..src+len` stays valid until the
            // copy finished and that `dst..dst+len` is device memory.
            check("cuMemcpyHtoDAsync_v2", unsafe {
                sys::cuMemcpyHtoDAsync_v2(dst, src as *const c_void, len, stream.0 as sys::CUstream)
            })
        })
    }

    unsafe fn copy_htod_batch_async(&self, copies: &[HtodCopy], stream: Stream) -> GpuResult<()> {
        let one_by_one = |copies: &[HtodCopy]| {
            // SAFETY: the caller's promise is passed on.
            unsafe { super::copy_htod_each(self, copies, stream) }
        };
        // The NULL and per-thread streams are refused by the batch call.
        if copies.len() < 2
            || copies.iter().any(|c| c.len == 0)
            || is_context_relative(stream)
            || !self.batch_copies.load(Ordering::Relaxed)
        {
            return one_by_one(copies);
        }
        let mut dsts: Vec<sys::CUdeviceptr> = copies.iter().map(|c| c.dst).collect();
        let mut srcs: Vec<sys::CUdeviceptr> = copies.iter().map(|c| c.src as u64).collect();
        let mut sizes: Vec<usize> = copies.iter().map(|c| c.len).collect();
        let mut attr = htod_batch_attributes();
        let mut attr_index = 0usize;
        let mut fail_index = usize::MAX;
        let r = self.in_stream_ctx(stream, || {
            // SAFETY: the arrays hold `copies.len()` entries and one attribute
            // that applies from index 0; the caller promised every source and
            // destination range stays valid until the copies have finished.
            check("cuMemcpyBatchAsync", unsafe {
                sys::cuMemcpyBatchAsync(
                    dsts.as_mut_ptr(),
                    srcs.as_mut_ptr(),
                    sizes.as_mut_ptr(),
                    copies.len(),
                    &mut attr,
                    &mut attr_index,
                    1,
                    &mut fail_index,
                    stream.0 as sys::CUstream,
                )
            })
        });
        match r {
            Err(e) if is_code(&e, sys::CUresult::CUDA_ERROR_NOT_SUPPORTED) => {
                crate::log_info!("cuMemcpyBatchAsync is not supported here; copies go one by one");
                self.batch_copies.store(false, Ordering::Relaxed);
                one_by_one(copies)
            }
            r => r,
        }
    }

    unsafe fn copy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DevPtr,
        len: usize,
        stream: Stream,
    ) -> GpuResult<()> {
        if len == 0 {
            return Ok(());
        }
        self.in_stream_ctx(stream, || {
            // SAFETY: the caller promised `dst..dst+len` stays valid and
            // untouched until the copy finished.
            check("cuMemcpyDtoHAsync_v2", unsafe {
                sys::cuMemcpyDtoHAsync_v2(dst as *mut c_void, src, len, stream.0 as sys::CUstream)
            })
        })
    }

    fn device_alloc(&self, device: i32, len: usize) -> GpuResult<DevPtr> {
        if len == 0 {
            return Err(GpuError::InvalidValue("zero-byte device allocation"));
        }
        let ctx = self.ctx(device)?;
        let mut p: sys::CUdeviceptr = 0;
        self.in_ctx(ctx, || {
            // SAFETY: out-pointer to a live local; the device's context is current.
            check("cuMemAlloc_v2", unsafe { sys::cuMemAlloc_v2(&mut p, len) })
        })?;
        Ok(p)
    }

    unsafe fn device_free(&self, ptr: DevPtr) -> GpuResult<()> {
        let device = match self.pointer_info(ptr)?.kind {
            MemKind::Device { device } => device,
            _ => return Err(GpuError::InvalidValue("not device memory")),
        };
        let ctx = self.ctx(device)?;
        self.in_ctx(ctx, || {
            // SAFETY: the caller promised `ptr` came from `device_alloc` and
            // is unused; its device's context is current.
            check("cuMemFree_v2", unsafe { sys::cuMemFree_v2(ptr) })
        })
    }

    fn event_create(&self) -> GpuResult<Event> {
        let mut e: sys::CUevent = std::ptr::null_mut();
        self.in_any_ctx(|| {
            // BLOCKING_SYNC: a worker waiting for its copy sleeps instead of
            // spinning, leaving the cores to the page-cache copies (measured on
            // the H200: spinning workers used ~9 cores of user time).
            let flags = (sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint)
                | (sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as c_uint);
            // SAFETY: out-pointer to a live local; a context is current.
            check("cuEventCreate", unsafe {
                sys::cuEventCreate(&mut e, flags)
            })
        })?;
        Ok(Event(e as usize))
    }

    fn event_destroy(&self, event: Event) {
        if event.0 == 0 {
            return;
        }
        let _ = self.in_any_ctx(|| {
            // SAFETY: the engine destroys each event it created once.
            check("cuEventDestroy_v2", unsafe {
                sys::cuEventDestroy_v2(event.0 as sys::CUevent)
            })
        });
    }

    fn event_record(&self, event: Event, stream: Stream) -> GpuResult<()> {
        self.in_stream_ctx(stream, || {
            // SAFETY: live event and stream handles (trait contract).
            check("cuEventRecord", unsafe {
                sys::cuEventRecord(event.0 as sys::CUevent, stream.0 as sys::CUstream)
            })
        })
    }

    fn event_query(&self, event: Event) -> GpuResult<bool> {
        self.in_any_ctx(|| {
            // SAFETY: a live event handle (trait contract).
            let r = unsafe { sys::cuEventQuery(event.0 as sys::CUevent) };
            match r {
                sys::CUresult::CUDA_SUCCESS => Ok(true),
                sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
                other => check("cuEventQuery", other).map(|()| false),
            }
        })
    }

    fn event_synchronize(&self, event: Event) -> GpuResult<()> {
        self.in_any_ctx(|| {
            // SAFETY: a live event handle (trait contract).
            check("cuEventSynchronize", unsafe {
                sys::cuEventSynchronize(event.0 as sys::CUevent)
            })
        })
    }

    unsafe fn stream_wait_value32(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
    ) -> GpuResult<()> {
        let geq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ;
        // SAFETY: the caller's promise is passed on.
        unsafe { self.wait_value(stream, host_addr, value, geq) }
    }

    unsafe fn stream_write_value32(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
    ) -> GpuResult<()> {
        self.in_stream_ctx(stream, || {
            // SAFETY: as for `stream_wait_value32`.
            let d = unsafe { mapped(host_addr as *const c_void) }?;
            // SAFETY: `d` is the device address of that word in the stream's context.
            check("cuStreamWriteValue32_v2", unsafe {
                sys::cuStreamWriteValue32_v2(stream.0 as sys::CUstream, d, value, 0)
            })
        })
    }

    unsafe fn stream_wait_value32_eq(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
    ) -> GpuResult<()> {
        let eq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ;
        // SAFETY: the caller's promise is passed on.
        unsafe { self.wait_value(stream, host_addr, value, eq) }
    }

    fn stream_id(&self, stream: Stream) -> GpuResult<u64> {
        let mut id: std::ffi::c_ulonglong = 0;
        self.in_stream_ctx(stream, || {
            // SAFETY: a live stream handle (trait contract) or a
            // context-relative one, whose context is current; out-pointer to a live local.
            check("cuStreamGetId", unsafe {
                sys::cuStreamGetId(stream.0 as sys::CUstream, &mut id)
            })
        })?;
        Ok(id)
    }

    fn described_copies(&self) -> bool {
        true
    }

    fn prepare_described_copies(&self, stream: Stream) -> GpuResult<()> {
        let ctx = self.ctx_of(stream)?;
        // The staging memory of stream I/O comes from the device's primary
        // context (the runtime API's); a kernel in another context of the
        // same device could not address it.
        let device = self.ctx_device(ctx)?;
        if self.ctx(device)? != ctx {
            return Err(GpuError::InvalidValue(
                "stream I/O needs a stream of the device's primary context",
            ));
        }
        self.load_place_kernel(ctx).map(|_| ())
    }

    fn preload_described_copies(&self) -> GpuResult<()> {
        for device in 0..self.device_count() {
            let ctx = self.ctx(device)?;
            let k = self.load_place_kernel(ctx)?;
            // With lazy module loading (CUDA_MODULE_LOADING=LAZY, the default
            // since CUDA 12.2) a function's code reaches the device at its
            // first launch, which may wait for the context to go idle: launch
            // it once now, with a zero-length descriptor, on a stream of our
            // own, so that no later launch (behind a parked stream) loads code.
            self.in_ctx(ctx, || {
                let mut d: sys::CUdeviceptr = 0;
                let desc = CopyDesc::default();
                // SAFETY: out-pointer to a live local.
                check("cuMemAlloc_v2", unsafe {
                    sys::cuMemAlloc_v2(&mut d, std::mem::size_of::<CopyDesc>())
                })?;
                let mut st: sys::CUstream = std::ptr::null_mut();
                // SAFETY: out-pointer to a live local; the context is current.
                let r = check("cuStreamCreate", unsafe {
                    sys::cuStreamCreate(
                        &mut st,
                        sys::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint,
                    )
                })
                .and_then(|()| {
                    // SAFETY: `d` holds 32 bytes; `desc` is a live local; the
                    // copy is synchronous.
                    check("cuMemcpyHtoD_v2", unsafe {
                        sys::cuMemcpyHtoD_v2(
                            d,
                            &desc as *const CopyDesc as *const c_void,
                            std::mem::size_of::<CopyDesc>(),
                        )
                    })
                })
                .and_then(|()| {
                    let mut param = d;
                    let mut params = [&mut param as *mut sys::CUdeviceptr as *mut c_void];
                    // SAFETY: the place kernel of this context with its one
                    // u64 parameter; a zero-length descriptor moves nothing.
                    check("cuLaunchKernel", unsafe {
                        sys::cuLaunchKernel(
                            k.func as sys::CUfunction,
                            1,
                            1,
                            1,
                            PLACE_BLOCK,
                            1,
                            1,
                            0,
                            st,
                            params.as_mut_ptr(),
                            std::ptr::null_mut(),
                        )
                    })
                })
                .and_then(|()| {
                    // SAFETY: `st` was created above.
                    check("cuStreamSynchronize", unsafe {
                        sys::cuStreamSynchronize(st)
                    })
                });
                if !st.is_null() {
                    // SAFETY: created above, no work left on it.
                    unsafe { sys::cuStreamDestroy_v2(st) };
                }
                // SAFETY: allocated above; the stream that used it is synchronised.
                unsafe { sys::cuMemFree_v2(d) };
                r
            })?;
        }
        Ok(())
    }

    unsafe fn copy_described_async(
        &self,
        desc: *const CopyDesc,
        dev_desc: DevPtr,
        stream: Stream,
    ) -> GpuResult<()> {
        let ctx = self.ctx_of(stream)?;
        let k = self
            .kernels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&ctx)
            .copied()
            .ok_or(GpuError::InvalidValue(
                "described copies were not prepared for this stream's context",
            ))?;
        self.in_ctx(ctx, || {
            // The descriptor goes to device memory by DMA when the stream gets
            // here (a pinned source is read at execution time), so that the
            // kernel's blocks read it from device memory, not across the link.
            // SAFETY: the caller promised `desc` is registered host memory that
            // outlives the copy and `dev_desc` 32 bytes of device memory.
            check("cuMemcpyHtoDAsync_v2", unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    dev_desc,
                    desc as *const c_void,
                    std::mem::size_of::<CopyDesc>(),
                    stream.0 as sys::CUstream,
                )
            })?;
            let mut d = dev_desc;
            let mut params = [&mut d as *mut sys::CUdeviceptr as *mut c_void];
            // SAFETY: `k.func` is the place kernel of this context, whose one
            // parameter is a u64 (the descriptor's device address), passed by
            // pointer as cuLaunchKernel requires; its shared memory is static.
            check("cuLaunchKernel", unsafe {
                sys::cuLaunchKernel(
                    k.func as sys::CUfunction,
                    k.grid,
                    1,
                    1,
                    PLACE_BLOCK,
                    1,
                    1,
                    0,
                    stream.0 as sys::CUstream,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_never_panics() {
        match CudaGpu::load() {
            Ok(g) => assert!(g.device_count() > 0),
            Err(e) => {
                eprintln!("CUDA not loaded (expected without a GPU): {e}");
                assert!(matches!(
                    e,
                    GpuError::NotPresent(_) | GpuError::Driver { .. }
                ));
            }
        }
    }

    /// The byte offsets the place kernel (place.ptx) copies, computed as its
    /// PTX does: vector body [vstart, vend) when dst and src are congruent
    /// modulo 16, bytes for the rest, every index strided over `threads`.
    fn place_offsets(dst: u64, src: u64, len: u64, threads: u64) -> Vec<u64> {
        let congruent = (dst ^ src) & 15 == 0;
        let head = (dst & 15).wrapping_neg() & 15;
        let (vstart, nvec) = if congruent {
            let v = head.min(len);
            (v, (len - v) >> 4)
        } else {
            (0, 0)
        };
        let vend = vstart + 16 * nvec;
        let outside = len - vend + vstart;
        let mut out = Vec::new();
        for t in 0..threads {
            let mut j = t;
            while j < nvec {
                let off = vstart + 16 * j;
                assert_eq!((dst + off) % 16, 0, "a vector store is not 16-byte aligned");
                out.extend(off..off + 16);
                j += threads;
            }
            let mut j = t;
            while j < outside {
                out.push(if j < vstart { j } else { vend + (j - vstart) });
                j += threads;
            }
        }
        out
    }

    #[test]
    fn the_place_kernels_index_math_copies_every_byte_once() {
        for len in (0..100).chain([4095, 4096, 4097, 65536 + 3]) {
            for d in 0..16u64 {
                for s in [0u64, 1, 3, 8, 15] {
                    for threads in [1u64, 7, 64] {
                        let (dst, src) = (0x1000 + d, 0x9000 + (d + s) % 16);
                        let mut offs = place_offsets(dst, src, len, threads);
                        offs.sort_unstable();
                        assert!(
                            offs.iter().copied().eq(0..len),
                            "dst {dst:#x} src {src:#x} len {len} threads {threads}"
                        );
                    }
                }
            }
        }
    }

    /// The place kernel on a real device: the descriptor, written after the
    /// launch was enqueued behind a wait, decides what is copied; aligned
    /// and unaligned ranges. Ignored without a GPU.
    #[test]
    #[ignore = "needs a CUDA device (scripts/gpu-run.sh runs it with --include-ignored)"]
    fn the_place_kernel_copies_what_the_descriptor_says_when_it_runs() {
        use std::sync::atomic::AtomicU32;
        let gpu = CudaGpu::load().unwrap_or_else(|e| panic!("no usable CUDA device: {e}"));
        let n = (4 << 20) + 4096;
        let a = gpu.device_alloc(0, n).unwrap();
        let b = gpu.device_alloc(0, n).unwrap();
        let dd = gpu.device_alloc(0, 64).unwrap();
        let s = gpu.stream_create(0).unwrap();
        gpu.preload_described_copies().unwrap();
        gpu.prepare_described_copies(s).unwrap();
        // Pinned: the source pattern, the read-back, a zero page, the gate
        // word and the descriptor.
        let mut host = vec![0u8; 3 * n + 4096];
        let base = host.as_mut_ptr();
        // SAFETY: `host` outlives the registration (unregistered below).
        unsafe { gpu.host_register(base, host.len()) }.unwrap();
        for (i, x) in host[..n].iter_mut().enumerate() {
            *x = (i * 131 + i / 7) as u8;
        }
        // 64-byte aligned within the last 4 KiB of the buffer.
        let tail = (base as usize + 3 * n).next_multiple_of(64);
        let gate = tail as *mut AtomicU32;
        let desc = (tail + 64) as *mut CopyDesc;
        // SAFETY: inside the registered buffer; the stream is synchronised
        // before the CPU reads or rewrites anything it uses.
        unsafe {
            gpu.copy_htod_async(a, base, n, s).unwrap();
            gpu.stream_synchronize(s).unwrap();
        }
        let cases = [
            (0, 0, 4 << 20),
            (3, 3, (1 << 20) + 5),
            (1, 2, 100_000),
            (16, 0, 17),
            (5, 5, 0),
            (0, 0, 15),
            (7, 7, 40),
            (4095, 1, 4096),
        ];
        for (round, &(doff, soff, len)) in cases.iter().enumerate() {
            let v = round as u32 + 1;
            // SAFETY: as above; the zero page is host[2n..3n].
            unsafe {
                gpu.copy_htod_async(b, base.add(2 * n), n, s).unwrap();
                gpu.stream_wait_value32_eq(s, (*gate).as_ptr(), v).unwrap();
                gpu.copy_described_async(desc, dd, s).unwrap();
                gpu.copy_dtoh_async(base.add(n), b, n, s).unwrap();
                desc.write_volatile(CopyDesc {
                    dst: b + doff,
                    src: a + soff,
                    len,
                    reserved: 0,
                });
                (*gate).store(v, Ordering::Release);
            }
            gpu.stream_synchronize(s).unwrap();
            let (doff, soff, len) = (doff as usize, soff as usize, len as usize);
            let got = &host[n..2 * n];
            assert!(got[..doff].iter().all(|&x| x == 0), "case {round}: before");
            assert!(
                got[doff..doff + len] == host[soff..soff + len],
                "case {round}: copied bytes"
            );
            assert!(
                got[doff + len..].iter().all(|&x| x == 0),
                "case {round}: after"
            );
        }
        gpu.stream_destroy(s);
        // SAFETY: registered above; no copy uses it any more.
        unsafe { gpu.host_unregister(base) }.unwrap();
        // SAFETY: allocated above; nothing uses them any more.
        unsafe {
            gpu.device_free(a).unwrap();
            gpu.device_free(b).unwrap();
            gpu.device_free(dd).unwrap();
        }
    }

    /// cuMemcpyBatchAsync: every piece where it belongs. Ignored without a
    /// GPU, as the test below.
    #[test]
    #[ignore = "needs a CUDA device (run with --include-ignored on the GPU machine)"]
    fn batched_copies_land_in_order_on_a_real_device() {
        let gpu = CudaGpu::load().unwrap_or_else(|e| panic!("no usable CUDA device: {e}"));
        // Eight 256 KiB pieces of one pinned buffer, placed in reverse order
        // with gaps on the device, as one batch; then read back.
        let (piece, n) = (256 << 10, 8usize);
        let mut host: Vec<u8> = (0..2 * n * piece)
            .map(|i| (i * 7 + i / 4099) as u8)
            .collect();
        let base = host.as_mut_ptr();
        // SAFETY: `host` outlives the registration (unregistered below).
        unsafe { gpu.host_register(base, host.len()) }.unwrap();
        let dev = gpu.device_alloc(0, 2 * n * piece).unwrap();
        let s = gpu.stream_create(0).unwrap();
        let at = |i: usize| dev + (2 * (n - 1 - i) * piece) as u64;
        let copies: Vec<HtodCopy> = (0..n)
            .map(|i| HtodCopy {
                dst: at(i),
                // SAFETY: inside `host`.
                src: unsafe { base.add(i * piece) },
                len: piece,
            })
            .collect();
        // SAFETY: sources stay untouched and registered until the stream is
        // synchronised; destinations are inside `dev`.
        unsafe { gpu.copy_htod_batch_async(&copies, s) }.unwrap();
        gpu.stream_synchronize(s).unwrap();
        assert!(
            gpu.batch_copies.load(Ordering::Relaxed),
            "cuMemcpyBatchAsync was refused: the copies went one by one"
        );
        let back = host[n * piece..].as_mut_ptr();
        for i in 0..n {
            // SAFETY: the second half of `host` is registered and untouched
            // by the CPU until the synchronisation below.
            unsafe { gpu.copy_dtoh_async(back.add(i * piece), at(i), piece, s) }.unwrap();
        }
        gpu.stream_synchronize(s).unwrap();
        assert!(
            host[..n * piece] == host[n * piece..],
            "a piece landed in the wrong place"
        );
        gpu.stream_destroy(s);
        // SAFETY: registered above; no copy uses it any more.
        unsafe { gpu.host_unregister(base) }.unwrap();
        // SAFETY: allocated above; nothing uses it any more.
        unsafe { gpu.device_free(dev) }.unwrap();
    }

    /// Needs a CUDA device, so it is ignored by default (CI reports it as
    /// ignored, not passed); scripts/gpu-run.sh runs it with
    /// `--include-ignored` on the GPU machine, where a missing device fails it.
    #[test]
    #[ignore = "needs a CUDA device (scripts/gpu-run.sh runs it with --include-ignored)"]
    fn round_trip_on_a_real_device() {
        use std::sync::atomic::AtomicU32;
        let gpu = CudaGpu::load().unwrap_or_else(|e| panic!("no usable CUDA device: {e}"));
        let len = 1 << 20;
        let dev = gpu.device_alloc(0, len).unwrap();
        let info = gpu.pointer_info(dev + 100).unwrap();
        assert_eq!(info.kind, MemKind::Device { device: 0 });
        assert_eq!(info.alloc_base, dev);
        assert!(info.alloc_bytes >= len as u64);

        // One registered buffer: source, destination, then two u32 words.
        // Everything the parked stream touches is pinned: a copy from
        // pageable memory would make the host wait for the parked stream.
        let mut words: Vec<AtomicU32> = (0..(2 * len + 8) / 4).map(|_| AtomicU32::new(0)).collect();
        let base = words.as_mut_ptr() as *mut u8;
        let bytes = words.len() * 4;
        let pageable = [0u8; 64];
        assert_eq!(
            gpu.pointer_info(pageable.as_ptr() as u64).unwrap().kind,
            MemKind::PageableHost
        );
        // SAFETY: `words` outlives the registration (unregistered below).
        unsafe { gpu.host_register(base, bytes) }.unwrap();
        assert_eq!(
            gpu.pointer_info(base as u64).unwrap().kind,
            MemKind::PinnedHost
        );
        for (i, w) in words[..len / 4].iter().enumerate() {
            w.store(i as u32 * 2_654_435_761, Ordering::Relaxed);
        }
        let (gate, done) = (&words[2 * len / 4], &words[2 * len / 4 + 1]);

        let s = gpu.stream_create(0).unwrap();
        assert_eq!(gpu.stream_device(s).unwrap(), 0);
        let ev = gpu.event_create().unwrap();
        // SAFETY: every range is inside the registered `words`, which lives
        // until after the event has completed; the CPU does not touch the
        // destination until then.
        unsafe {
            gpu.stream_wait_value32(s, gate.as_ptr(), 1).unwrap();
            gpu.copy_htod_async(dev, base, len, s).unwrap();
            gpu.copy_dtoh_async(base.add(len), dev, len, s).unwrap();
            gpu.stream_write_value32(s, done.as_ptr(), 7).unwrap();
        }
        gpu.event_record(ev, s).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!gpu.event_query(ev).unwrap(), "wait_value32 did not park");
        assert_eq!(done.load(Ordering::Acquire), 0);
        gate.store(1, Ordering::Release);
        gpu.event_synchronize(ev).unwrap();
        assert!(gpu.event_query(ev).unwrap());
        assert_eq!(done.load(Ordering::Acquire), 7);
        for i in 0..len / 4 {
            let (a, b) = (&words[i], &words[len / 4 + i]);
            assert_eq!(
                a.load(Ordering::Relaxed),
                b.load(Ordering::Relaxed),
                "word {i}"
            );
        }

        gpu.event_destroy(ev);
        gpu.stream_destroy(s);
        // SAFETY: registered above; no copy uses it any more.
        unsafe { gpu.host_unregister(base) }.unwrap();
        // SAFETY: allocated above; nothing uses it any more.
        unsafe { gpu.device_free(dev) }.unwrap();
    }
}
