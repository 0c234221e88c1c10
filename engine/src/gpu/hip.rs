//! The HIP runtime: hand-declared entry points of `libamdhip64`, loaded at run
//! time with `libloading` (`libamdhip64.so`, then `.so.7`, `.so.6`, `.so.5`).
//! `hip-sys` is not used because it links `-lamdhip64` at build time, which
//! would make the library fail to load where ROCm is absent.
//!
//! **Status: not yet run on AMD hardware.** This file has only been compiled.
//! The prototypes, enum values and the `hipPointerAttribute_t` layout below
//! were checked against HIP's public headers (`hip_runtime_api.h`,
//! ROCm >= 6), not against a running ROCm.
//!
//! A missing library or entry point is `Err(NotPresent(..))` naming it, never
//! a panic. Device selection mirrors the CUDA backend: a thread that called
//! `bind_thread(d)` stays on `d` (a thread-local remembers it, so calls on `d`
//! cost no `hipSetDevice`); any other thread gets the needed device for the
//! duration of a call and its own device restored afterwards.
//!
//! Handles: `Stream(s)` is the `hipStream_t` value (0 is the NULL stream of
//! the current device, 2 is `hipStreamPerThread`); `Event(e)` is the
//! `hipEvent_t` value, created on the calling thread's current device.

use super::{DevPtr, Event, Gpu, GpuError, GpuResult, MemKind, PtrInfo, Stream};
use libloading::Library;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

/// Library names tried in order.
const LIB_NAMES: [&str; 4] = [
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];

/// `hipError_t` (a C enum: `int`).
type HipError = c_int;
type HipStream = *mut c_void;
type HipEvent = *mut c_void;

const HIP_SUCCESS: HipError = 0;
const HIP_ERROR_INVALID_VALUE: HipError = 1;
const HIP_ERROR_INSUFFICIENT_DRIVER: HipError = 35;
const HIP_ERROR_NO_DEVICE: HipError = 100;
const HIP_ERROR_NOT_READY: HipError = 600;

/// `hipMemoryType` since ROCm 6 (aligned with CUDA's `cudaMemoryType`).
mod mem_type_v6 {
    pub const UNREGISTERED: i32 = 0;
    pub const HOST: i32 = 1;
    pub const DEVICE: i32 = 2;
    pub const MANAGED: i32 = 3;
    pub const ARRAY: i32 = 10;
    pub const UNIFIED: i32 = 11;
}

/// `hipMemoryType` before ROCm 6 (the field was then called `memoryType`,
/// same place in the struct; unregistered memory was an error instead).
mod mem_type_v5 {
    pub const HOST: i32 = 0;
    pub const DEVICE: i32 = 1;
    pub const ARRAY: i32 = 2;
    pub const UNIFIED: i32 = 3;
}

/// `hipRuntimeGetVersion` of HIP 6.0 (major * 10_000_000 + minor * 100_000 + patch).
const HIP_6_VERSION: c_int = 60_000_000;

const HIP_HOST_REGISTER_PORTABLE: c_uint = 1;
const HIP_HOST_REGISTER_MAPPED: c_uint = 2;
const HIP_STREAM_NON_BLOCKING: c_uint = 1;
const HIP_EVENT_DISABLE_TIMING: c_uint = 2;
const HIP_MEMCPY_HOST_TO_DEVICE: c_int = 1;
const HIP_MEMCPY_DEVICE_TO_HOST: c_int = 2;
const HIP_STREAM_WAIT_VALUE_GTE: c_uint = 0;
/// `hipStreamPerThread`.
const HIP_STREAM_PER_THREAD: usize = 2;

/// `hipPointerAttribute_t`, ROCm >= 6 layout:
/// `{ hipMemoryType type; int device; void* devicePointer; void* hostPointer;
///    int isManaged; unsigned allocationFlags; }`.
#[repr(C)]
struct HipPointerAttribute {
    mem_type: c_int,
    device: c_int,
    device_pointer: *mut c_void,
    host_pointer: *mut c_void,
    is_managed: c_int,
    allocation_flags: c_uint,
}

/// The attribute struct plus spare room, so that a future runtime with a
/// longer struct writes into our memory rather than past it.
#[repr(C)]
struct HipPointerAttributeBuf {
    attr: HipPointerAttribute,
    _spare: [u64; 8],
}

macro_rules! hip_api {
    ($($name:ident: fn($($arg:ty),*);)*) => {
        /// The entry points used, resolved once at load.
        #[allow(non_snake_case)]
        struct Api {
            $($name: unsafe extern "C" fn($($arg),*) -> HipError,)*
        }

        impl Api {
            fn load(lib: &Library, lib_name: &str) -> GpuResult<Api> {
                Ok(Api {
                    $($name: {
                        let symbol = concat!(stringify!($name), "\0").as_bytes();
                        // SAFETY: the declared type is the C prototype of this
                        // entry point in hip_runtime_api.h (listed below); the
                        // function pointer is only used while `lib` is loaded
                        // (both live in `HipGpu`).
                        let f = unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) -> HipError>(symbol)
                        };
                        match f {
                            Ok(f) => *f,
                            Err(e) => {
                                return Err(GpuError::NotPresent(format!(
                                    "{lib_name} lacks {}: {e}",
                                    stringify!($name)
                                )))
                            }
                        }
                    },)*
                })
            }
        }
    };
}

hip_api! {
    hipInit: fn(c_uint);
    hipRuntimeGetVersion: fn(*mut c_int);
    hipGetDeviceCount: fn(*mut c_int);
    hipGetDevice: fn(*mut c_int);
    hipSetDevice: fn(c_int);
    hipPointerGetAttributes: fn(*mut HipPointerAttribute, *const c_void);
    hipMemGetAddressRange: fn(*mut *mut c_void, *mut usize, *mut c_void);
    hipHostRegister: fn(*mut c_void, usize, c_uint);
    hipHostUnregister: fn(*mut c_void);
    hipStreamCreateWithFlags: fn(*mut HipStream, c_uint);
    hipStreamDestroy: fn(HipStream);
    hipStreamGetDevice: fn(HipStream, *mut c_int);
    hipStreamSynchronize: fn(HipStream);
    hipMemcpyAsync: fn(*mut c_void, *const c_void, usize, c_int, HipStream);
    hipEventCreateWithFlags: fn(*mut HipEvent, c_uint);
    hipEventRecord: fn(HipEvent, HipStream);
    hipEventQuery: fn(HipEvent);
    hipEventSynchronize: fn(HipEvent);
    hipEventDestroy: fn(HipEvent);
    hipStreamWaitValue32: fn(HipStream, *mut c_void, u32, c_uint, u32);
    hipStreamWriteValue32: fn(HipStream, *mut c_void, u32, c_uint);
    hipHostGetDevicePointer: fn(*mut *mut c_void, *mut c_void, c_uint);
    hipMalloc: fn(*mut *mut c_void, usize);
    hipFree: fn(*mut c_void);
}

static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// (instance, device) that `bind_thread` made current on this thread.
    static BOUND: Cell<(u64, i32)> = const { Cell::new((0, 0)) };
}

fn check(call: &'static str, r: HipError) -> GpuResult<()> {
    if r == HIP_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::Driver { call, code: r })
    }
}

/// The HIP runtime.
pub struct HipGpu {
    id: u64,
    api: Api,
    n_devices: i32,
    /// ROCm >= 6 `hipMemoryType` values.
    v6_mem_types: bool,
    /// Streams created by `stream_create`, with their device.
    streams: RwLock<HashMap<usize, i32>>,
    /// Keeps the entry points in `api` mapped; dropped last.
    _lib: Library,
}

fn open_library() -> GpuResult<(Library, &'static str)> {
    let mut why = Vec::new();
    for name in LIB_NAMES {
        // SAFETY: loading libamdhip64 runs only the runtime's own initialisers.
        match unsafe { Library::new(name) } {
            Ok(lib) => return Ok((lib, name)),
            Err(e) => why.push(format!("{name}: {e}")),
        }
    }
    Err(GpuError::NotPresent(format!(
        "libamdhip64 not found ({})",
        why.join("; ")
    )))
}

impl HipGpu {
    /// Load `libamdhip64`, initialise HIP and count devices. Never panics.
    pub fn load() -> Result<HipGpu, GpuError> {
        let (lib, lib_name) = open_library()?;
        let api = Api::load(&lib, lib_name)?;
        // SAFETY: a resolved entry point; flags must be 0.
        let r = unsafe { (api.hipInit)(0) };
        if r == HIP_ERROR_NO_DEVICE || r == HIP_ERROR_INSUFFICIENT_DRIVER {
            return Err(GpuError::NotPresent(format!(
                "hipInit: no usable AMD GPU (error {r})"
            )));
        }
        check("hipInit", r)?;
        let mut version: c_int = 0;
        // SAFETY: out-pointer to a live local.
        check("hipRuntimeGetVersion", unsafe {
            (api.hipRuntimeGetVersion)(&mut version)
        })?;
        let mut count: c_int = 0;
        // SAFETY: out-pointer to a live local.
        let r = unsafe { (api.hipGetDeviceCount)(&mut count) };
        if r == HIP_ERROR_NO_DEVICE || (r == HIP_SUCCESS && count <= 0) {
            return Err(GpuError::NotPresent("no HIP device".into()));
        }
        check("hipGetDeviceCount", r)?;
        Ok(HipGpu {
            id: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            api,
            n_devices: count,
            v6_mem_types: version >= HIP_6_VERSION,
            streams: RwLock::new(HashMap::new()),
            _lib: lib,
        })
    }

    fn check_device(&self, device: i32) -> GpuResult<()> {
        if (0..self.n_devices).contains(&device) {
            Ok(())
        } else {
            Err(GpuError::InvalidValue("device ordinal out of range"))
        }
    }

    /// The calling thread's device.
    fn device_now(&self) -> GpuResult<i32> {
        let (id, dev) = BOUND.with(|b| b.get());
        if id == self.id {
            return Ok(dev);
        }
        let mut dev: c_int = 0;
        // SAFETY: out-pointer to a live local.
        check("hipGetDevice", unsafe { (self.api.hipGetDevice)(&mut dev) })?;
        Ok(dev)
    }

    /// Run `f` with `device` current, restoring the thread's device afterwards.
    fn on_device<R>(&self, device: i32, f: impl FnOnce() -> GpuResult<R>) -> GpuResult<R> {
        self.check_device(device)?;
        let cur = self.device_now()?;
        if cur == device {
            return f();
        }
        // SAFETY: `device` is in range.
        check("hipSetDevice", unsafe { (self.api.hipSetDevice)(device) })?;
        let r = f();
        // SAFETY: `cur` was this thread's device a moment ago.
        let restored = check("hipSetDevice", unsafe { (self.api.hipSetDevice)(cur) });
        let r = r?;
        restored?;
        Ok(r)
    }

    /// The device of `stream`; None for the current-device handles.
    fn stream_dev(&self, stream: Stream) -> GpuResult<Option<i32>> {
        if stream.0 == 0 || stream.0 == HIP_STREAM_PER_THREAD {
            return Ok(None);
        }
        if let Some(&d) = self
            .streams
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&stream.0)
        {
            return Ok(Some(d));
        }
        let mut d: c_int = 0;
        // SAFETY: a live stream handle of the caller (trait contract);
        // out-pointer to a live local.
        check("hipStreamGetDevice", unsafe {
            (self.api.hipStreamGetDevice)(stream.0 as HipStream, &mut d)
        })?;
        Ok(Some(d))
    }

    fn on_stream<R>(&self, stream: Stream, f: impl FnOnce() -> GpuResult<R>) -> GpuResult<R> {
        match self.stream_dev(stream)? {
            None => f(),
            Some(d) => self.on_device(d, f),
        }
    }

    /// `hipMemGetAddressRange`, when it knows `ptr`.
    fn address_range(&self, ptr: u64) -> Option<(u64, u64)> {
        let mut base: *mut c_void = std::ptr::null_mut();
        let mut size: usize = 0;
        // SAFETY: out-pointers to live locals; the runtime only looks `ptr` up.
        let r =
            unsafe { (self.api.hipMemGetAddressRange)(&mut base, &mut size, ptr as *mut c_void) };
        let (base, size) = (base as u64, size as u64);
        let end = base.checked_add(size)?;
        (r == HIP_SUCCESS && size != 0 && base <= ptr && ptr < end).then_some((base, size))
    }

    /// The device address of a registered host word.
    fn device_word(&self, host_addr: *mut u32) -> GpuResult<*mut c_void> {
        let mut d: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local; the caller promised the word
        // is registered host memory.
        check("hipHostGetDevicePointer", unsafe {
            (self.api.hipHostGetDevicePointer)(&mut d, host_addr as *mut c_void, 0)
        })?;
        Ok(d)
    }
}

impl Drop for HipGpu {
    fn drop(&mut self) {
        let streams: Vec<(usize, i32)> = self
            .streams
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        for (s, d) in streams {
            let _ = self.on_device(d, || {
                // SAFETY: created by `stream_create` and destroyed once.
                check("hipStreamDestroy", unsafe {
                    (self.api.hipStreamDestroy)(s as HipStream)
                })
            });
        }
        if BOUND.with(|b| b.get().0) == self.id {
            BOUND.with(|b| b.set((0, 0)));
        }
    }
}

impl Gpu for HipGpu {
    fn name(&self) -> &'static str {
        "hip"
    }

    fn device_count(&self) -> i32 {
        self.n_devices
    }

    fn pointer_info(&self, ptr: u64) -> GpuResult<PtrInfo> {
        let unknown = PtrInfo {
            kind: MemKind::PageableHost,
            alloc_base: ptr,
            alloc_bytes: u64::MAX - ptr,
        };
        let mut buf = HipPointerAttributeBuf {
            attr: HipPointerAttribute {
                mem_type: 0,
                device: 0,
                device_pointer: std::ptr::null_mut(),
                host_pointer: std::ptr::null_mut(),
                is_managed: 0,
                allocation_flags: 0,
            },
            _spare: [0; 8],
        };
        // SAFETY: `buf` starts with a `hipPointerAttribute_t` and has spare
        // room after it; the runtime only looks `ptr` up.
        let r = unsafe { (self.api.hipPointerGetAttributes)(&mut buf.attr, ptr as *const c_void) };
        if r == HIP_ERROR_INVALID_VALUE {
            return Ok(unknown); // ROCm < 6 answers unknown memory this way
        }
        check("hipPointerGetAttributes", r)?;
        let a = &buf.attr;
        let with_range = |kind: MemKind| {
            let (alloc_base, alloc_bytes) =
                self.address_range(ptr).unwrap_or((ptr, u64::MAX - ptr));
            PtrInfo {
                kind,
                alloc_base,
                alloc_bytes,
            }
        };
        let device = a.device;
        if a.is_managed != 0 {
            return Ok(with_range(MemKind::Managed {
                device: device.max(0),
            }));
        }
        enum K {
            Unknown,
            Host,
            Device,
            Managed,
            Array,
            Other,
        }
        let k = if self.v6_mem_types {
            match a.mem_type {
                mem_type_v6::UNREGISTERED => K::Unknown,
                mem_type_v6::HOST => K::Host,
                mem_type_v6::DEVICE => K::Device,
                mem_type_v6::MANAGED | mem_type_v6::UNIFIED => K::Managed,
                mem_type_v6::ARRAY => K::Array,
                _ => K::Other,
            }
        } else {
            match a.mem_type {
                mem_type_v5::HOST => K::Host,
                mem_type_v5::DEVICE => K::Device,
                mem_type_v5::UNIFIED => K::Managed,
                mem_type_v5::ARRAY => K::Array,
                _ => K::Other,
            }
        };
        match k {
            K::Unknown => Ok(unknown),
            K::Host => Ok(with_range(MemKind::PinnedHost)),
            K::Managed => Ok(with_range(MemKind::Managed {
                device: device.max(0),
            })),
            K::Device => match self.address_range(ptr) {
                Some((alloc_base, alloc_bytes)) => Ok(PtrInfo {
                    kind: MemKind::Device { device },
                    alloc_base,
                    alloc_bytes,
                }),
                None => Err(GpuError::InvalidValue(
                    "device pointer without an allocation range",
                )),
            },
            K::Array => Err(GpuError::InvalidValue("pointer is a HIP array")),
            K::Other => Err(GpuError::InvalidValue("unknown HIP memory type")),
        }
    }

    fn current_device(&self) -> GpuResult<i32> {
        self.device_now()
    }

    fn bind_thread(&self, device: i32) -> GpuResult<()> {
        self.check_device(device)?;
        // SAFETY: `device` is in range.
        check("hipSetDevice", unsafe { (self.api.hipSetDevice)(device) })?;
        BOUND.with(|b| b.set((self.id, device)));
        Ok(())
    }

    unsafe fn host_register(&self, ptr: *mut u8, len: usize) -> GpuResult<()> {
        if ptr.is_null() || len == 0 {
            return Err(GpuError::InvalidValue("null or empty host range"));
        }
        // PORTABLE: every device may use it; MAPPED: it has a device address
        // (needed by the stream wait/write value operations).
        let flags = HIP_HOST_REGISTER_PORTABLE | HIP_HOST_REGISTER_MAPPED;
        // SAFETY: the caller promised `ptr..ptr+len` is a live mapping that
        // outlives the registration.
        check("hipHostRegister", unsafe {
            (self.api.hipHostRegister)(ptr as *mut c_void, len, flags)
        })
    }

    unsafe fn host_unregister(&self, ptr: *mut u8) -> GpuResult<()> {
        // SAFETY: the caller promised `ptr` is registered and unused by copies.
        check("hipHostUnregister", unsafe {
            (self.api.hipHostUnregister)(ptr as *mut c_void)
        })
    }

    fn stream_create(&self, device: i32) -> GpuResult<Stream> {
        let mut s: HipStream = std::ptr::null_mut();
        self.on_device(device, || {
            // SAFETY: out-pointer to a live local; `device` is current.
            check("hipStreamCreateWithFlags", unsafe {
                (self.api.hipStreamCreateWithFlags)(&mut s, HIP_STREAM_NON_BLOCKING)
            })
        })?;
        self.streams
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(s as usize, device);
        Ok(Stream(s as usize))
    }

    fn stream_destroy(&self, stream: Stream) {
        // Only streams this runtime created; a user's stream is the user's.
        let dev = self
            .streams
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&stream.0);
        if let Some(d) = dev {
            let _ = self.on_device(d, || {
                // SAFETY: created by `stream_create`, removed from the table
                // above, so destroyed exactly once.
                check("hipStreamDestroy", unsafe {
                    (self.api.hipStreamDestroy)(stream.0 as HipStream)
                })
            });
        }
    }

    fn stream_device(&self, stream: Stream) -> GpuResult<i32> {
        match self.stream_dev(stream)? {
            Some(d) => Ok(d),
            None => self.device_now(),
        }
    }

    fn stream_synchronize(&self, stream: Stream) -> GpuResult<()> {
        self.on_stream(stream, || {
            // SAFETY: a live stream handle (trait contract).
            check("hipStreamSynchronize", unsafe {
                (self.api.hipStreamSynchronize)(stream.0 as HipStream)
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
        self.on_stream(stream, || {
            // SAFETY: the caller promised `src..src+len` stays valid until the
            // copy finished and that `dst..dst+len` is device memory.
            check("hipMemcpyAsync", unsafe {
                (self.api.hipMemcpyAsync)(
                    dst as *mut c_void,
                    src as *const c_void,
                    len,
                    HIP_MEMCPY_HOST_TO_DEVICE,
                    stream.0 as HipStream,
                )
            })
        })
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
        self.on_stream(stream, || {
            // SAFETY: the caller promised `dst..dst+len` stays valid and
            // untouched until the copy finished.
            check("hipMemcpyAsync", unsafe {
                (self.api.hipMemcpyAsync)(
                    dst as *mut c_void,
                    src as *const c_void,
                    len,
                    HIP_MEMCPY_DEVICE_TO_HOST,
                    stream.0 as HipStream,
                )
            })
        })
    }

    fn device_alloc(&self, device: i32, len: usize) -> GpuResult<DevPtr> {
        if len == 0 {
            return Err(GpuError::InvalidValue("zero-byte device allocation"));
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        self.on_device(device, || {
            // SAFETY: out-pointer to a live local; `device` is current.
            check("hipMalloc", unsafe { (self.api.hipMalloc)(&mut p, len) })
        })?;
        Ok(p as u64)
    }

    unsafe fn device_free(&self, ptr: DevPtr) -> GpuResult<()> {
        let device = match self.pointer_info(ptr)?.kind {
            MemKind::Device { device } => device,
            _ => return Err(GpuError::InvalidValue("not device memory")),
        };
        self.on_device(device, || {
            // SAFETY: the caller promised `ptr` came from `device_alloc` and is unused.
            check("hipFree", unsafe { (self.api.hipFree)(ptr as *mut c_void) })
        })
    }

    fn event_create(&self) -> GpuResult<Event> {
        let mut e: HipEvent = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local.
        check("hipEventCreateWithFlags", unsafe {
            (self.api.hipEventCreateWithFlags)(&mut e, HIP_EVENT_DISABLE_TIMING)
        })?;
        Ok(Event(e as usize))
    }

    fn event_destroy(&self, event: Event) {
        if event.0 != 0 {
            // SAFETY: the engine destroys each event it created once.
            let _ = unsafe { (self.api.hipEventDestroy)(event.0 as HipEvent) };
        }
    }

    fn event_record(&self, event: Event, stream: Stream) -> GpuResult<()> {
        self.on_stream(stream, || {
            // SAFETY: live event and stream handles (trait contract).
            check("hipEventRecord", unsafe {
                (self.api.hipEventRecord)(event.0 as HipEvent, stream.0 as HipStream)
            })
        })
    }

    fn event_query(&self, event: Event) -> GpuResult<bool> {
        // SAFETY: a live event handle (trait contract).
        let r = unsafe { (self.api.hipEventQuery)(event.0 as HipEvent) };
        match r {
            HIP_SUCCESS => Ok(true),
            HIP_ERROR_NOT_READY => Ok(false),
            other => Err(GpuError::Driver {
                call: "hipEventQuery",
                code: other,
            }),
        }
    }

    fn event_synchronize(&self, event: Event) -> GpuResult<()> {
        // SAFETY: a live event handle (trait contract).
        check("hipEventSynchronize", unsafe {
            (self.api.hipEventSynchronize)(event.0 as HipEvent)
        })
    }

    unsafe fn stream_wait_value32(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
    ) -> GpuResult<()> {
        self.on_stream(stream, || {
            let d = self.device_word(host_addr)?;
            // SAFETY: `d` is the device address of a registered word that the
            // caller promised outlives the wait; mask: all bits compared.
            check("hipStreamWaitValue32", unsafe {
                (self.api.hipStreamWaitValue32)(
                    stream.0 as HipStream,
                    d,
                    value,
                    HIP_STREAM_WAIT_VALUE_GTE,
                    u32::MAX,
                )
            })
        })
    }

    unsafe fn stream_write_value32(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
    ) -> GpuResult<()> {
        self.on_stream(stream, || {
            let d = self.device_word(host_addr)?;
            // SAFETY: as for `stream_wait_value32`.
            check("hipStreamWriteValue32", unsafe {
                (self.api.hipStreamWriteValue32)(stream.0 as HipStream, d, value, 0)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_attribute_layout_matches_rocm6() {
        // 4 + 4 + 8 + 8 + 4 + 4 on 64-bit Linux.
        assert_eq!(std::mem::size_of::<HipPointerAttribute>(), 32);
        assert_eq!(std::mem::offset_of!(HipPointerAttribute, device_pointer), 8);
        assert_eq!(std::mem::offset_of!(HipPointerAttribute, is_managed), 24);
    }

    #[test]
    fn load_never_panics() {
        match HipGpu::load() {
            Ok(g) => assert!(g.device_count() > 0),
            Err(e) => {
                eprintln!("HIP not loaded (expected without an AMD GPU): {e}");
                assert!(matches!(
                    e,
                    GpuError::NotPresent(_) | GpuError::Driver { .. }
                ));
            }
        }
    }
}
