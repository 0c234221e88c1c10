//! The GPU runtime seen by the engine: one small trait, three implementations
//! (CUDA through `cudarc`, HIP through hand-declared entry points, and a test
//! double), plus "none" when no runtime is present.
//!
//! Every runtime is loaded at run time, so the same `libhipfile.so` loads on a
//! machine without any GPU software. Handles (streams, events) are plain
//! integers owned by the runtime that created them.

pub mod cuda;
#[cfg(feature = "testing")]
pub mod flaky;
pub mod hip;
#[cfg(feature = "testing")]
pub mod testgpu;

use std::fmt;
use std::sync::Arc;

/// A device address as the GPU runtime sees it (CUDA `CUdeviceptr`, HIP `void*`).
pub type DevPtr = u64;

/// An opaque stream handle of one runtime (a `CUstream`/`hipStream_t` value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stream(pub usize);

/// An opaque event handle of one runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Event(pub usize);

/// One host-to-device copy of a batch ([`Gpu::copy_htod_batch_async`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HtodCopy {
    pub dst: DevPtr,
    pub src: *const u8,
    pub len: usize,
}

/// The descriptor of a described copy ([`Gpu::copy_described_async`]): the
/// copy reads it from registered host memory when the stream reaches it, so
/// the host may fill it in after the copy was enqueued. 32 bytes, so that one
/// descriptor never straddles two 64-byte cache lines.
#[repr(C, align(32))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyDesc {
    /// Device address the bytes go to.
    pub dst: u64,
    /// Device address the bytes come from.
    pub src: u64,
    /// Bytes to copy; 0 makes the copy a no-op.
    pub len: u64,
    /// Unused; keeps the size at 32 bytes.
    pub reserved: u64,
}

/// What kind of memory a pointer refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemKind {
    /// Device memory of the given device ordinal: only reachable through copies.
    Device { device: i32 },
    /// Host memory the runtime knows (pinned / registered); CPU-addressable.
    PinnedHost,
    /// Managed (unified) memory: CPU-addressable, migrates on touch.
    Managed { device: i32 },
    /// Memory the runtime does not know: ordinary pageable host memory.
    PageableHost,
}

impl MemKind {
    /// True when the CPU (and so the kernel, through io_uring) may address the memory.
    pub fn is_host_addressable(self) -> bool {
        !matches!(self, MemKind::Device { .. })
    }
}

/// Attributes of a pointer: its kind, and for device memory the allocation it lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtrInfo {
    pub kind: MemKind,
    /// Start of the allocation that holds the pointer (device memory), else the pointer.
    pub alloc_base: u64,
    /// Size of that allocation in bytes (device memory), else `u64::MAX - ptr` (unknown).
    pub alloc_bytes: u64,
}

/// An error reported by a GPU runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuError {
    /// No runtime is loaded (no driver, no library): device memory is unusable.
    NotPresent(String),
    /// The runtime rejected an argument (maps to `hipFileInvalidValue`).
    InvalidValue(&'static str),
    /// The runtime returned an error code from a named call.
    Driver { call: &'static str, code: i32 },
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::NotPresent(why) => write!(f, "no GPU runtime: {why}"),
            GpuError::InvalidValue(what) => write!(f, "invalid value: {what}"),
            GpuError::Driver { call, code } => write!(f, "{call} failed with code {code}"),
        }
    }
}

impl std::error::Error for GpuError {}

pub type GpuResult<T> = Result<T, GpuError>;

/// The operations the engine needs from a GPU runtime.
///
/// Threading rule: every method may be called from any thread; implementations
/// make the right context current themselves (`bind_thread` is an optimisation
/// that workers call once per device).
pub trait Gpu: Send + Sync {
    /// Short name for logs: "cuda", "hip", "test-double", "none".
    fn name(&self) -> &'static str;
    /// True for a real or simulated device runtime; false for "none".
    fn has_devices(&self) -> bool {
        self.device_count() > 0
    }
    fn device_count(&self) -> i32;
    /// Classify a pointer. Unknown memory is `PageableHost`, never an error.
    fn pointer_info(&self, ptr: u64) -> GpuResult<PtrInfo>;
    /// The device the calling thread currently uses (for stats and defaults).
    fn current_device(&self) -> GpuResult<i32>;
    /// Make `device` current on the calling thread (workers call it once).
    fn bind_thread(&self, device: i32) -> GpuResult<()>;
    /// Page-lock host memory so that every device can DMA from and to it.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be a live mapping that outlives the registration.
    unsafe fn host_register(&self, ptr: *mut u8, len: usize) -> GpuResult<()>;
    /// Undo `host_register`.
    ///
    /// # Safety
    /// `ptr` must have been registered and no copy may still use it.
    unsafe fn host_unregister(&self, ptr: *mut u8) -> GpuResult<()>;
    /// A non-blocking stream on `device`.
    fn stream_create(&self, device: i32) -> GpuResult<Stream>;
    fn stream_destroy(&self, stream: Stream);
    /// The device a (user's) stream belongs to; the NULL stream means the current device.
    fn stream_device(&self, stream: Stream) -> GpuResult<i32>;
    fn stream_synchronize(&self, stream: Stream) -> GpuResult<()>;
    /// Enqueue a host-to-device copy.
    ///
    /// # Safety
    /// `src..src+len` must stay valid and unchanged until the copy has finished
    /// (an event recorded after it completes); `dst..dst+len` must be device memory.
    unsafe fn copy_htod_async(
        &self,
        dst: DevPtr,
        src: *const u8,
        len: usize,
        stream: Stream,
    ) -> GpuResult<()>;
    /// Enqueue several host-to-device copies on one stream, in order, as one
    /// submission where the runtime has one. CUDA's `cuMemcpyBatchAsync`
    /// carries small copies at the link's rate for large ones: on the H200,
    /// four 1 MiB copies as one batch 52.4 GB/s against 47.4–47.7 queued one
    /// by one, sixteen 256 KiB ones 52.4 against 34.8–35.1
    /// (`engine/examples/copy_shape.rs`). The default queues them one by one. On an error some copies may
    /// have been queued: the caller must synchronise the stream before it
    /// reuses any source.
    ///
    /// # Safety
    /// As for [`Gpu::copy_htod_async`], for every copy.
    unsafe fn copy_htod_batch_async(&self, copies: &[HtodCopy], stream: Stream) -> GpuResult<()> {
        // SAFETY: the caller's promise is passed on.
        unsafe { copy_htod_each(self, copies, stream) }
    }
    /// Enqueue a device-to-host copy.
    ///
    /// # Safety
    /// `dst..dst+len` must stay valid and untouched by the CPU until the copy has finished.
    unsafe fn copy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DevPtr,
        len: usize,
        stream: Stream,
    ) -> GpuResult<()>;
    /// Allocate device memory (stream staging, benchmarks and tests).
    fn device_alloc(&self, device: i32, len: usize) -> GpuResult<DevPtr>;
    /// Free memory from `device_alloc`.
    ///
    /// # Safety
    /// `ptr` came from `device_alloc` and nothing uses it any more.
    unsafe fn device_free(&self, ptr: DevPtr) -> GpuResult<()>;
    fn event_create(&self) -> GpuResult<Event>;
    fn event_destroy(&self, event: Event);
    fn event_record(&self, event: Event, stream: Stream) -> GpuResult<()>;
    /// Ok(true) once every operation before the record has finished.
    fn event_query(&self, event: Event) -> GpuResult<bool>;
    fn event_synchronize(&self, event: Event) -> GpuResult<()>;
    /// Make `stream` wait until the 32-bit word at `host_addr` (pinned host
    /// memory, see `host_register`) is `>= value`. Used to park a user's stream
    /// while a worker performs a stream-ordered transfer.
    ///
    /// # Safety
    /// `host_addr` must be registered host memory that outlives the wait.
    unsafe fn stream_wait_value32(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
    ) -> GpuResult<()>;
    /// Make `stream` write `value` into the 32-bit word at `host_addr` once it gets there.
    ///
    /// # Safety
    /// As for `stream_wait_value32`.
    unsafe fn stream_write_value32(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
    ) -> GpuResult<()>;
    /// Make `stream` wait until the 32-bit word at `host_addr` equals
    /// `value` (an equality test stays right when counters wrap).
    ///
    /// # Safety
    /// As for `stream_wait_value32`.
    unsafe fn stream_wait_value32_eq(
        &self,
        _stream: Stream,
        _host_addr: *mut u32,
        _value: u32,
    ) -> GpuResult<()> {
        Err(GpuError::NotPresent(format!(
            "{}: equality stream waits are not implemented",
            self.name()
        )))
    }
    /// An identity of the stream that `stream` names on the calling thread,
    /// distinct from every other live stream of the process (CUDA:
    /// `cuStreamGetId`; the per-thread default stream has one per thread).
    /// The default is the handle itself.
    fn stream_id(&self, stream: Stream) -> GpuResult<u64> {
        Ok(stream.0 as u64)
    }
    /// True when [`Gpu::copy_described_async`] is implemented: stream-ordered
    /// I/O then needs no GPU call off the caller's thread (streamops).
    fn described_copies(&self) -> bool {
        false
    }
    /// Get ready to enqueue described copies on `stream` (CUDA: load the copy
    /// kernel into the stream's context, once per context). Call it on the
    /// application's thread before parking `stream` on anything.
    fn prepare_described_copies(&self, _stream: Stream) -> GpuResult<()> {
        Err(GpuError::NotPresent(format!(
            "{}: described copies are not implemented",
            self.name()
        )))
    }
    /// Load what described copies need on every device now (CUDA: the copy
    /// kernel, and the kernel's code on the device). Loading a module can
    /// wait for the whole context to go idle, so the engine does it when it
    /// starts, before any stream of the application can be parked by a
    /// stream op; [`Gpu::prepare_described_copies`] is then a lookup.
    fn preload_described_copies(&self) -> GpuResult<()> {
        Ok(())
    }
    /// Enqueue a device-to-device copy whose destination, source and length
    /// are read from `*desc` when `stream` reaches it (not now); a length of
    /// 0 copies nothing. `dev_desc` is 32 bytes of device memory the copy may
    /// use to carry the descriptor onto the device: the stream first copies
    /// `*desc` there, so the copy reads its descriptor from device memory
    /// (one small DMA) instead of every thread block reading host memory
    /// across the link (hundreds of round trips of a microsecond or more
    /// each, which made a 4 MiB placement take milliseconds on the H200).
    ///
    /// # Safety
    /// `desc` must lie in registered host memory that outlives the copy;
    /// `dev_desc` must be device memory of the stream's device that nothing
    /// else uses until the copy has run; when the stream reaches the copy,
    /// `*desc` must describe device memory of the stream's device (or have
    /// length 0).
    unsafe fn copy_described_async(
        &self,
        _desc: *const CopyDesc,
        _dev_desc: DevPtr,
        _stream: Stream,
    ) -> GpuResult<()> {
        Err(GpuError::NotPresent(format!(
            "{}: described copies are not implemented",
            self.name()
        )))
    }
}

/// Queue `copies` on `stream` one by one (what a runtime without batch
/// submission does, and CUDA's where the driver refuses a batch).
///
/// # Safety
/// As for [`Gpu::copy_htod_async`], for every copy.
pub unsafe fn copy_htod_each<G: Gpu + ?Sized>(
    gpu: &G,
    copies: &[HtodCopy],
    stream: Stream,
) -> GpuResult<()> {
    for c in copies {
        // SAFETY: the caller's promise covers every copy.
        unsafe { gpu.copy_htod_async(c.dst, c.src, c.len, stream)? };
    }
    Ok(())
}

/// The runtime used when nothing is loaded: host memory works, device memory does not.
pub struct NoGpu {
    pub why: String,
}

impl NoGpu {
    fn absent<T>(&self) -> GpuResult<T> {
        Err(GpuError::NotPresent(self.why.clone()))
    }
}

impl Gpu for NoGpu {
    fn name(&self) -> &'static str {
        "none"
    }
    fn device_count(&self) -> i32 {
        0
    }
    fn pointer_info(&self, ptr: u64) -> GpuResult<PtrInfo> {
        Ok(PtrInfo {
            kind: MemKind::PageableHost,
            alloc_base: ptr,
            alloc_bytes: u64::MAX - ptr,
        })
    }
    fn current_device(&self) -> GpuResult<i32> {
        Ok(0)
    }
    fn bind_thread(&self, _device: i32) -> GpuResult<()> {
        self.absent()
    }
    unsafe fn host_register(&self, _ptr: *mut u8, _len: usize) -> GpuResult<()> {
        self.absent()
    }
    unsafe fn host_unregister(&self, _ptr: *mut u8) -> GpuResult<()> {
        self.absent()
    }
    fn stream_create(&self, _device: i32) -> GpuResult<Stream> {
        self.absent()
    }
    fn stream_destroy(&self, _stream: Stream) {}
    fn stream_device(&self, _stream: Stream) -> GpuResult<i32> {
        self.absent()
    }
    fn stream_synchronize(&self, _stream: Stream) -> GpuResult<()> {
        self.absent()
    }
    unsafe fn copy_htod_async(
        &self,
        _: DevPtr,
        _: *const u8,
        _: usize,
        _: Stream,
    ) -> GpuResult<()> {
        self.absent()
    }
    unsafe fn copy_dtoh_async(&self, _: *mut u8, _: DevPtr, _: usize, _: Stream) -> GpuResult<()> {
        self.absent()
    }
    fn device_alloc(&self, _device: i32, _len: usize) -> GpuResult<DevPtr> {
        self.absent()
    }
    unsafe fn device_free(&self, _ptr: DevPtr) -> GpuResult<()> {
        self.absent()
    }
    fn event_create(&self) -> GpuResult<Event> {
        self.absent()
    }
    fn event_destroy(&self, _event: Event) {}
    fn event_record(&self, _event: Event, _stream: Stream) -> GpuResult<()> {
        self.absent()
    }
    fn event_query(&self, _event: Event) -> GpuResult<bool> {
        self.absent()
    }
    fn event_synchronize(&self, _event: Event) -> GpuResult<()> {
        self.absent()
    }
    unsafe fn stream_wait_value32(&self, _: Stream, _: *mut u32, _: u32) -> GpuResult<()> {
        self.absent()
    }
    unsafe fn stream_write_value32(&self, _: Stream, _: *mut u32, _: u32) -> GpuResult<()> {
        self.absent()
    }
}

/// Which runtime to load (`HIPFILE_GPU_RUNTIME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeChoice {
    /// CUDA if its driver loads and has a device, else HIP, else none.
    Auto,
    Cuda,
    Hip,
    None,
}

/// Load the runtime chosen by `choice`. Never panics: a missing or broken
/// runtime yields `NoGpu` with the reason, which is logged once by the caller.
pub fn load(choice: RuntimeChoice) -> Arc<dyn Gpu> {
    let mut reasons = Vec::new();
    if matches!(choice, RuntimeChoice::Auto | RuntimeChoice::Cuda) {
        match cuda::CudaGpu::load() {
            Ok(g) => return Arc::new(g),
            Err(e) => reasons.push(format!("CUDA: {e}")),
        }
    }
    if matches!(choice, RuntimeChoice::Auto | RuntimeChoice::Hip) {
        match hip::HipGpu::load() {
            Ok(g) => return Arc::new(g),
            Err(e) => reasons.push(format!("HIP: {e}")),
        }
    }
    if choice == RuntimeChoice::None {
        reasons.push("HIPFILE_GPU_RUNTIME=none".to_string());
    }
    Arc::new(NoGpu {
        why: reasons.join("; "),
    })
}
