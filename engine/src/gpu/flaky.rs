//! Fault injection over any runtime: `FlakyGpu` wraps a real or simulated
//! runtime and makes the next N asynchronous copies fail, so the engine's
//! GPU-error paths can be exercised on a real device too (the test double has
//! the same knob built in). Plus helpers that fill and read device memory
//! through any runtime, and the choice of runtime for tests
//! (`HIPFILE_TEST_GPU=cuda|hip` selects a real one; unset means the double).

use super::testgpu::TestGpu;
use super::*;
use std::sync::atomic::{AtomicU32, Ordering};

/// A runtime whose next `fail_next_copies(n)` copy calls (a batch counts as
/// one) report a driver error without being enqueued; everything else is
/// passed through.
pub struct FlakyGpu {
    inner: Arc<dyn Gpu>,
    fail: AtomicU32,
}

impl FlakyGpu {
    pub fn new(inner: Arc<dyn Gpu>) -> FlakyGpu {
        FlakyGpu {
            inner,
            fail: AtomicU32::new(0),
        }
    }

    /// The wrapped runtime (helpers use it so their copies never fail).
    pub fn inner(&self) -> &Arc<dyn Gpu> {
        &self.inner
    }

    /// Make the next `n` copies fail (0 stops failing).
    pub fn fail_next_copies(&self, n: u32) {
        self.fail.store(n, Ordering::SeqCst);
    }

    fn take_failure(&self) -> bool {
        self.fail
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

impl Gpu for FlakyGpu {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn device_count(&self) -> i32 {
        self.inner.device_count()
    }
    fn pointer_info(&self, ptr: u64) -> GpuResult<PtrInfo> {
        self.inner.pointer_info(ptr)
    }
    fn current_device(&self) -> GpuResult<i32> {
        self.inner.current_device()
    }
    fn bind_thread(&self, device: i32) -> GpuResult<()> {
        self.inner.bind_thread(device)
    }
    unsafe fn host_register(&self, ptr: *mut u8, len: usize) -> GpuResult<()> {
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { self.inner.host_register(ptr, len) }
    }
    unsafe fn host_unregister(&self, ptr: *mut u8) -> GpuResult<()> {
        // SAFETY: as above.
        unsafe { self.inner.host_unregister(ptr) }
    }
    fn stream_create(&self, device: i32) -> GpuResult<Stream> {
        self.inner.stream_create(device)
    }
    fn stream_destroy(&self, stream: Stream) {
        self.inner.stream_destroy(stream)
    }
    fn stream_device(&self, stream: Stream) -> GpuResult<i32> {
        self.inner.stream_device(stream)
    }
    fn stream_synchronize(&self, stream: Stream) -> GpuResult<()> {
        self.inner.stream_synchronize(stream)
    }
    unsafe fn copy_htod_async(
        &self,
        dst: DevPtr,
        src: *const u8,
        len: usize,
        stream: Stream,
    ) -> GpuResult<()> {
        if self.take_failure() {
            return Err(GpuError::Driver {
                call: "copy_htod_async (injected)",
                code: 999,
            });
        }
        // SAFETY: as above.
        unsafe { self.inner.copy_htod_async(dst, src, len, stream) }
    }
    unsafe fn copy_htod_batch_async(&self, copies: &[HtodCopy], stream: Stream) -> GpuResult<()> {
        if self.take_failure() {
            return Err(GpuError::Driver {
                call: "copy_htod_batch_async (injected)",
                code: 999,
            });
        }
        // SAFETY: as above.
        unsafe { self.inner.copy_htod_batch_async(copies, stream) }
    }
    unsafe fn copy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DevPtr,
        len: usize,
        stream: Stream,
    ) -> GpuResult<()> {
        if self.take_failure() {
            return Err(GpuError::Driver {
                call: "copy_dtoh_async (injected)",
                code: 999,
            });
        }
        // SAFETY: as above.
        unsafe { self.inner.copy_dtoh_async(dst, src, len, stream) }
    }
    fn device_alloc(&self, device: i32, len: usize) -> GpuResult<DevPtr> {
        self.inner.device_alloc(device, len)
    }
    unsafe fn device_free(&self, ptr: DevPtr) -> GpuResult<()> {
        // SAFETY: as above.
        unsafe { self.inner.device_free(ptr) }
    }
    fn event_create(&self) -> GpuResult<Event> {
        self.inner.event_create()
    }
    fn event_destroy(&self, event: Event) {
        self.inner.event_destroy(event)
    }
    fn event_record(&self, event: Event, stream: Stream) -> GpuResult<()> {
        self.inner.event_record(event, stream)
    }
    fn event_query(&self, event: Event) -> GpuResult<bool> {
        self.inner.event_query(event)
    }
    fn event_synchronize(&self, event: Event) -> GpuResult<()> {
        self.inner.event_synchronize(event)
    }
    unsafe fn stream_wait_value32(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
    ) -> GpuResult<()> {
        // SAFETY: as above.
        unsafe { self.inner.stream_wait_value32(stream, host_addr, value) }
    }
    unsafe fn stream_write_value32(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
    ) -> GpuResult<()> {
        // SAFETY: as above.
        unsafe { self.inner.stream_write_value32(stream, host_addr, value) }
    }
    unsafe fn stream_wait_value32_eq(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
    ) -> GpuResult<()> {
        // SAFETY: as above.
        unsafe { self.inner.stream_wait_value32_eq(stream, host_addr, value) }
    }
    fn stream_id(&self, stream: Stream) -> GpuResult<u64> {
        self.inner.stream_id(stream)
    }
    fn described_copies(&self) -> bool {
        self.inner.described_copies()
    }
    fn preload_described_copies(&self) -> GpuResult<()> {
        self.inner.preload_described_copies()
    }
    fn prepare_described_copies(&self, stream: Stream) -> GpuResult<()> {
        self.inner.prepare_described_copies(stream)
    }
    unsafe fn copy_described_async(
        &self,
        desc: *const CopyDesc,
        dev_desc: DevPtr,
        stream: Stream,
    ) -> GpuResult<()> {
        if self.take_failure() {
            return Err(GpuError::Driver {
                call: "copy_described_async (injected)",
                code: 999,
            });
        }
        // SAFETY: as above.
        unsafe { self.inner.copy_described_async(desc, dev_desc, stream) }
    }
}

/// Copy `data` to device memory at `dst` through any runtime and wait for it.
pub fn write_device(gpu: &dyn Gpu, device: i32, dst: DevPtr, data: &[u8]) -> GpuResult<()> {
    gpu.bind_thread(device)?;
    let s = gpu.stream_create(device)?;
    // SAFETY: `data` outlives the copy (synchronised below); `dst` is the caller's device memory.
    let r = unsafe { gpu.copy_htod_async(dst, data.as_ptr(), data.len(), s) }
        .and_then(|()| gpu.stream_synchronize(s));
    gpu.stream_destroy(s);
    r
}

/// Read `len` bytes of device memory at `src` through any runtime.
pub fn read_device(gpu: &dyn Gpu, device: i32, src: DevPtr, len: usize) -> GpuResult<Vec<u8>> {
    let mut out = vec![0u8; len];
    gpu.bind_thread(device)?;
    let s = gpu.stream_create(device)?;
    // SAFETY: `out` outlives the copy (synchronised below).
    let r = unsafe { gpu.copy_dtoh_async(out.as_mut_ptr(), src, len, s) }
        .and_then(|()| gpu.stream_synchronize(s));
    gpu.stream_destroy(s);
    r.map(|()| out)
}

/// The runtime a test runs against: a real one when `HIPFILE_TEST_GPU` names
/// it (`cuda` or `hip`; the test must then fail, not skip, when it cannot be
/// loaded), else the test double with `devices` devices. The double is also
/// returned on its own so tests can use its extra knobs (copy delays).
pub fn runtime_under_test(devices: i32) -> (Arc<FlakyGpu>, Option<Arc<TestGpu>>) {
    match std::env::var("HIPFILE_TEST_GPU").as_deref() {
        Ok("cuda") => {
            let g = cuda::CudaGpu::load()
                .unwrap_or_else(|e| panic!("HIPFILE_TEST_GPU=cuda but CUDA does not load: {e}"));
            (Arc::new(FlakyGpu::new(Arc::new(g))), None)
        }
        Ok("hip") => {
            let g = hip::HipGpu::load()
                .unwrap_or_else(|e| panic!("HIPFILE_TEST_GPU=hip but HIP does not load: {e}"));
            (Arc::new(FlakyGpu::new(Arc::new(g))), None)
        }
        Ok(other) if !other.is_empty() => {
            panic!(
                "HIPFILE_TEST_GPU={other:?}: expected cuda or hip (or unset for the test double)"
            )
        }
        _ => {
            let t = Arc::new(TestGpu::new(devices));
            (Arc::new(FlakyGpu::new(t.clone())), Some(t))
        }
    }
}
