//! `TestGpu`: a TEST DOUBLE of a GPU runtime, for engine tests on machines
//! without a GPU. It is never the answer to a GPU test: it only lets the
//! engine's logic (ordering, events, stream-ordered waits, error paths) run
//! where no device exists.
//!
//! What it models, and why each choice makes bugs visible:
//!
//! - `n` devices whose "device memory" is host memory the engine cannot reach:
//!   `device_alloc` hands out addresses in a private window starting at
//!   `0x0000_DE00_0000_0000` (above the 47-bit user address space of x86-64,
//!   so the CPU faults and the kernel answers `EFAULT` if anything dereferences
//!   one). Addresses are never reused, and allocations are separated by a
//!   guard gap, so stale or overrunning pointers do not land in another
//!   allocation. Fresh allocations are filled with [`FRESH_DEVICE_BYTE`] so
//!   that data which was never copied shows.
//! - Every stream (including the NULL stream `Stream(0)`, created lazily) has
//!   its own executor thread with a FIFO queue. Copies, event records and
//!   wait/write-value operations run there, in order, after the enqueueing
//!   call has returned; [`TestGpu::set_copy_delay`] slows copies down so that
//!   a missing wait shows up as wrong data rather than as luck.
//! - Events complete only when their stream's thread reaches the record.
//! - `stream_wait_value32` parks the stream until the 32-bit host word is
//!   `>= value` (plain unsigned comparison, as the trait documents; CUDA's
//!   `GEQ` is a cyclic comparison, which only differs across a wrap of 2^31);
//!   `stream_wait_value32_eq` until it is `== value`.
//! - Described copies ([`Gpu::copy_described_async`]) read their descriptor
//!   on the stream thread when the stream reaches them, as the CUDA kernel
//!   does; a descriptor that names anything but device memory of the double
//!   is counted ([`TestGpu::described_copy_faults`]) and copies nothing, where
//!   a real device would fault.
//! - Fault injection: [`TestGpu::fail_next_copies`] makes the next copies
//!   (described ones included) fail at enqueue time with
//!   `GpuError::Driver { call: "test-copy", code: 999 }`;
//!   [`TestGpu::fail_copies_after`] lets some succeed first;
//!   [`TestGpu::fail_value_ops_after`] does the same for wait/write-value
//!   calls; [`TestGpu::set_pin_limit`] makes large registrations fail.
//! - The driver lock ([`TestGpu::set_driver_lock_model`]): in CUDA, calls such
//!   as `cudaFree`, `cudaHostAlloc` or a pageable `cudaMemcpyAsync` hold a
//!   driver lock while they wait for streams to drain, and most other calls on
//!   other threads then block on that lock. The model makes every call that a
//!   library thread (named `hipfile-*`) makes while any stream is parked in a
//!   wait-value operation block until no stream is parked: a parked stream
//!   whose release needs such a call never drains.
//!
//! Stricter than a real runtime where that catches engine bugs: wait/write
//! value words must lie in memory registered with `host_register`, and the
//! host side of a copy must not be a (fake) device address.
//!
//! Executor threads stop when the `TestGpu` is dropped (queued work that has
//! not run by then is discarded).

use super::{
    CopyDesc, DevPtr, Event, Gpu, GpuError, GpuResult, HtodCopy, MemKind, PtrInfo, Stream,
};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Start of the fake device address space (device `d` owns the window
/// `DEVICE_WINDOW_BASE + d * DEVICE_WINDOW_BYTES ..`).
const DEVICE_WINDOW_BASE: u64 = 0x0000_DE00_0000_0000;
/// 64 GiB of never-reused addresses per device.
const DEVICE_WINDOW_BYTES: u64 = 1 << 36;
/// At most this many devices: 256 windows of 64 GiB end at 0x0000_EE00_0000_0000.
const MAX_DEVICES: i32 = 256;
/// `cudaMalloc` aligns to 256 bytes; so does the double.
const ALLOC_ALIGN_BYTES: u64 = 256;
/// Gap left between allocations, so an overrun does not reach the next one.
const GUARD_BYTES: u64 = 64 * 1024;
/// Byte that fills fresh device allocations.
pub const FRESH_DEVICE_BYTE: u8 = 0xA5;
/// Code of the injected copy failure.
pub const INJECTED_COPY_ERROR: i32 = 999;
/// First stream and event handles: distinct ranges, so swapping them fails.
const STREAM_HANDLE_BASE: usize = 0x5_0000;
const EVENT_HANDLE_BASE: usize = 0xE_0000;

static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// (instance, device) made current on this thread by `bind_thread`.
    static CURRENT: Cell<(u64, i32)> = const { Cell::new((0, 0)) };
}

/// Lock a mutex, ignoring poisoning: the double's state stays consistent
/// because no code path panics while holding a lock.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(g).unwrap_or_else(|e| e.into_inner())
}

/// One fake device allocation.
struct Storage {
    device: i32,
    len: usize,
    bytes: Mutex<Box<[u8]>>,
}

/// Completion state of one event: records are numbered; the event is
/// complete when the latest record has been processed.
#[derive(Default)]
struct EventState {
    gens: Mutex<EventGens>,
    cv: Condvar,
}

#[derive(Default)]
struct EventGens {
    recorded: u64,
    done: u64,
}

/// A host pointer moved to an executor thread.
struct HostPtr(*mut u8);
// SAFETY: the pointer is only dereferenced by the executor thread, within the
// lifetime the caller of the unsafe copy method promised.
unsafe impl Send for HostPtr {}

/// A registered 32-bit host word moved to an executor thread.
struct WordPtr(*const AtomicU32);
// SAFETY: as for `HostPtr`; all accesses are atomic.
unsafe impl Send for WordPtr {}

/// A registered copy descriptor moved to an executor thread.
struct DescPtr(*const CopyDesc);
// SAFETY: as for `HostPtr`; the descriptor is read with volatile loads.
unsafe impl Send for DescPtr {}

enum Op {
    HtoD {
        src: HostPtr,
        dst: Arc<Storage>,
        offset: usize,
        len: usize,
    },
    DtoH {
        dst: HostPtr,
        src: Arc<Storage>,
        offset: usize,
        len: usize,
    },
    Record {
        event: Arc<EventState>,
        gen: u64,
    },
    WaitValue {
        word: WordPtr,
        value: u32,
        /// Equality instead of `>=`.
        eq: bool,
    },
    Described {
        desc: DescPtr,
        device: i32,
    },
    WriteValue {
        word: WordPtr,
        value: u32,
    },
}

#[derive(Default)]
struct Queue {
    ops: VecDeque<Op>,
    enqueued: u64,
    completed: u64,
    /// Set by `stream_destroy`: drain, then exit.
    closing: bool,
}

/// One stream: its queue, drained in order by its own thread.
struct StreamExec {
    device: i32,
    queue: Mutex<Queue>,
    /// Wakes the executor (new work, shutdown) and synchronizers (progress).
    cv: Condvar,
}

/// State shared with executor threads.
struct Shared {
    shutdown: AtomicBool,
    copy_delay_ns: AtomicU64,
    /// Streams waiting in a `stream_wait_value32` that is not yet satisfied.
    parked: AtomicUsize,
    /// Device allocations by base address (executors resolve described copies).
    allocs: Mutex<BTreeMap<u64, Arc<Storage>>>,
    /// Described copies whose descriptor named no valid device memory.
    described_faults: AtomicU64,
    /// The driver-lock model is on.
    lock_model: AtomicBool,
    /// Library calls blocked by the model right now, and in all.
    lock_blocked: AtomicUsize,
    lock_blocked_total: AtomicU64,
    /// Notified whenever a stream stops being parked (and when the model changes).
    unparked: Condvar,
    unparked_lock: Mutex<()>,
}

/// The test double; see the module documentation.
pub struct TestGpu {
    id: u64,
    n_devices: i32,
    shared: Arc<Shared>,
    /// Next free offset in each device's window.
    next_offset: Mutex<Vec<u64>>,
    host_regs: Mutex<BTreeMap<u64, usize>>,
    streams: Mutex<HashMap<usize, Arc<StreamExec>>>,
    events: Mutex<HashMap<usize, Arc<EventState>>>,
    next_handle: AtomicUsize,
    copies_issued: AtomicU64,
    /// Calls of `event_synchronize` (a thread that slept on an event).
    event_sleeps: AtomicU64,
    /// Calls of `copy_htod_batch_async` with two copies or more.
    copy_batches: AtomicU64,
    fail_copies: AtomicU32,
    /// Copies that still succeed before the armed failures start.
    fail_copies_skip: AtomicU32,
    /// The same for wait-value and write-value calls.
    fail_values: AtomicU32,
    fail_values_skip: AtomicU32,
    /// `host_register` of a larger range fails (a memory-lock limit).
    pin_limit: AtomicUsize,
    /// Devices on which described copies were prepared.
    described_ready: Mutex<Vec<i32>>,
    /// Described copies are switched off (the runtime then behaves as one without them).
    described_off: AtomicBool,
    threads: Mutex<Vec<(Arc<StreamExec>, JoinHandle<()>)>>,
    /// Names of the threads that created a stream while some stream was parked.
    created_while_parked: Mutex<Vec<String>>,
}

impl TestGpu {
    /// A test double with `n_devices` devices (clamped to `0..=256`).
    pub fn new(n_devices: i32) -> TestGpu {
        let n = n_devices.clamp(0, MAX_DEVICES);
        TestGpu {
            id: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            n_devices: n,
            shared: Arc::new(Shared {
                shutdown: AtomicBool::new(false),
                copy_delay_ns: AtomicU64::new(0),
                parked: AtomicUsize::new(0),
                allocs: Mutex::new(BTreeMap::new()),
                described_faults: AtomicU64::new(0),
                lock_model: AtomicBool::new(false),
                lock_blocked: AtomicUsize::new(0),
                lock_blocked_total: AtomicU64::new(0),
                unparked: Condvar::new(),
                unparked_lock: Mutex::new(()),
            }),
            next_offset: Mutex::new(vec![0; n as usize]),
            host_regs: Mutex::new(BTreeMap::new()),
            streams: Mutex::new(HashMap::new()),
            events: Mutex::new(HashMap::new()),
            next_handle: AtomicUsize::new(0),
            copies_issued: AtomicU64::new(0),
            event_sleeps: AtomicU64::new(0),
            copy_batches: AtomicU64::new(0),
            fail_copies: AtomicU32::new(0),
            fail_copies_skip: AtomicU32::new(0),
            fail_values: AtomicU32::new(0),
            fail_values_skip: AtomicU32::new(0),
            pin_limit: AtomicUsize::new(usize::MAX),
            described_ready: Mutex::new(Vec::new()),
            described_off: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            created_while_parked: Mutex::new(Vec::new()),
        }
    }

    /// Test helper: write `data` into device memory at `ptr`, synchronously
    /// (it does not wait for queued copies; synchronize first if it matters).
    ///
    /// # Panics
    /// When `ptr..ptr+data.len()` is not inside one live allocation.
    pub fn write_device(&self, ptr: u64, data: &[u8]) {
        let (st, off) = match self.device_range(ptr, data.len()) {
            Ok(r) => r,
            Err(e) => panic!("TestGpu::write_device({ptr:#x}, {} bytes): {e}", data.len()),
        };
        lock(&st.bytes)[off..off + data.len()].copy_from_slice(data);
    }

    /// Test helper: read `len` bytes of device memory at `ptr`, synchronously.
    ///
    /// # Panics
    /// When `ptr..ptr+len` is not inside one live allocation.
    pub fn read_device(&self, ptr: u64, len: usize) -> Vec<u8> {
        let (st, off) = match self.device_range(ptr, len) {
            Ok(r) => r,
            Err(e) => panic!("TestGpu::read_device({ptr:#x}, {len} bytes): {e}"),
        };
        let bytes = lock(&st.bytes);
        bytes[off..off + len].to_vec()
    }

    /// The threads (by name) that created a stream while another stream was
    /// parked in a wait-value operation. On the H200, `cuStreamCreate` there
    /// spun forever once the context held many streams, so the library must
    /// never do it: its threads are named `hipfile-*`.
    pub fn streams_created_while_parked(&self) -> Vec<String> {
        lock(&self.created_while_parked).clone()
    }

    /// Calls of `event_synchronize` so far.
    pub fn event_sleeps(&self) -> u64 {
        self.event_sleeps.load(Ordering::Relaxed)
    }

    /// Copies accepted so far (both directions; failed and empty ones excluded).
    pub fn copies_issued(&self) -> u64 {
        self.copies_issued.load(Ordering::Relaxed)
    }

    /// Batches of two or more host-to-device copies submitted in one call.
    pub fn copy_batches(&self) -> u64 {
        self.copy_batches.load(Ordering::Relaxed)
    }

    /// Fault hook: the next `n` copy calls fail with
    /// `GpuError::Driver { call: "test-copy", code: 999 }` and enqueue nothing.
    pub fn fail_next_copies(&self, n: u32) {
        self.fail_copies.store(n, Ordering::Relaxed);
    }

    /// Fault hook: after `skip` more successful copy calls, the next `n` fail
    /// as with [`TestGpu::fail_next_copies`].
    pub fn fail_copies_after(&self, skip: u32, n: u32) {
        self.fail_copies_skip.store(skip, Ordering::Relaxed);
        self.fail_copies.store(n, Ordering::Relaxed);
    }

    /// Fault hook: after `skip` more successful wait-value / write-value
    /// calls, the next `n` fail with the injected error and enqueue nothing.
    pub fn fail_value_ops_after(&self, skip: u32, n: u32) {
        self.fail_values_skip.store(skip, Ordering::Relaxed);
        self.fail_values.store(n, Ordering::Relaxed);
    }

    /// `host_register` of more than `bytes` at once fails with
    /// CUDA_ERROR_OUT_OF_MEMORY, as pinning does past a memory-lock limit
    /// (`usize::MAX`: no limit).
    pub fn set_pin_limit(&self, bytes: usize) {
        self.pin_limit.store(bytes, Ordering::Relaxed);
    }

    /// Described copies whose descriptor, when the stream reached it, named
    /// no device memory of the double (a real device would have faulted).
    pub fn described_copy_faults(&self) -> u64 {
        self.shared.described_faults.load(Ordering::Relaxed)
    }

    /// Behave as a runtime without described copies (HIP): stream I/O then
    /// takes the worker-driven path.
    pub fn disable_described_copies(&self, off: bool) {
        self.described_off.store(off, Ordering::Relaxed);
    }

    /// Switch the driver-lock model on or off (module documentation).
    /// Switching it off releases every blocked call.
    pub fn set_driver_lock_model(&self, on: bool) {
        self.shared.lock_model.store(on, Ordering::Release);
        let _g = lock(&self.shared.unparked_lock);
        self.shared.unparked.notify_all();
    }

    /// Library calls the driver-lock model holds right now.
    pub fn calls_blocked_by_lock_model(&self) -> usize {
        self.shared.lock_blocked.load(Ordering::Acquire)
    }

    /// Library calls the driver-lock model has held so far.
    pub fn calls_ever_blocked_by_lock_model(&self) -> u64 {
        self.shared.lock_blocked_total.load(Ordering::Acquire)
    }

    /// Streams parked in a wait-value operation right now.
    pub fn parked_streams(&self) -> usize {
        self.shared.parked.load(Ordering::Acquire)
    }

    /// The driver lock: a call from a library thread waits while any stream
    /// is parked (and the model is on).
    fn driver_lock(&self) {
        let sh = &self.shared;
        if !sh.lock_model.load(Ordering::Acquire) {
            return;
        }
        let library = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("hipfile-"));
        if !library {
            return;
        }
        let held = || {
            sh.lock_model.load(Ordering::Acquire)
                && sh.parked.load(Ordering::Acquire) > 0
                && !sh.shutdown.load(Ordering::Acquire)
        };
        let mut g = lock(&sh.unparked_lock);
        if !held() {
            return;
        }
        sh.lock_blocked.fetch_add(1, Ordering::AcqRel);
        sh.lock_blocked_total.fetch_add(1, Ordering::AcqRel);
        while held() {
            g = sh
                .unparked
                .wait_timeout(g, Duration::from_millis(10))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        sh.lock_blocked.fetch_sub(1, Ordering::AcqRel);
    }

    /// Each copy sleeps `d` on its stream thread before it moves data.
    pub fn set_copy_delay(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.shared.copy_delay_ns.store(ns, Ordering::Relaxed);
    }

    fn check_device(&self, device: i32) -> GpuResult<()> {
        if (0..self.n_devices).contains(&device) {
            Ok(())
        } else {
            Err(GpuError::InvalidValue("device ordinal out of range"))
        }
    }

    /// True when `addr` lies in the fake device address space (allocated or not).
    fn in_device_window(addr: u64) -> bool {
        let end = DEVICE_WINDOW_BASE + MAX_DEVICES as u64 * DEVICE_WINDOW_BYTES;
        (DEVICE_WINDOW_BASE..end).contains(&addr)
    }

    /// The allocation holding `ptr..ptr+len`, and the offset of `ptr` in it.
    fn device_range(&self, ptr: u64, len: usize) -> GpuResult<(Arc<Storage>, usize)> {
        device_range_in(&self.shared.allocs, ptr, len)
    }

    /// The registration holding `addr..addr+len`, if any.
    fn registered(&self, addr: u64, len: u64) -> Option<(u64, usize)> {
        let regs = lock(&self.host_regs);
        let (&base, &rlen) = regs.range(..=addr).next_back()?;
        let end = base.checked_add(rlen as u64)?;
        let want_end = addr.checked_add(len)?;
        (want_end <= end).then_some((base, rlen))
    }

    fn check_host_side(ptr: *const u8, len: usize) -> GpuResult<()> {
        if ptr.is_null() {
            return Err(GpuError::InvalidValue("null host pointer"));
        }
        if Self::in_device_window(ptr as u64) {
            return Err(GpuError::InvalidValue(
                "host side of a copy is a (fake) device address",
            ));
        }
        if (ptr as u64).checked_add(len as u64).is_none() {
            return Err(GpuError::InvalidValue("host range wraps"));
        }
        Ok(())
    }

    fn check_word(&self, addr: *mut u32) -> GpuResult<()> {
        if addr.is_null() || (addr as usize) % std::mem::align_of::<u32>() != 0 {
            return Err(GpuError::InvalidValue("host word is null or misaligned"));
        }
        if self.registered(addr as u64, 4).is_none() {
            return Err(GpuError::InvalidValue(
                "host word is not in registered host memory (host_register it first)",
            ));
        }
        Ok(())
    }

    /// Enqueue a copy and count it, unless an armed copy failure takes it
    /// (then nothing is enqueued and the injected error is returned).
    fn enqueue_copy(&self, exec: &StreamExec, op: Op) -> GpuResult<()> {
        if take_failure(&self.fail_copies, &self.fail_copies_skip) {
            return Err(GpuError::Driver {
                call: "test-copy",
                code: INJECTED_COPY_ERROR,
            });
        }
        Self::enqueue(exec, op)?;
        self.copies_issued.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The injected error, when a value operation is armed to fail.
    fn value_failure(&self) -> GpuResult<()> {
        if take_failure(&self.fail_values, &self.fail_values_skip) {
            return Err(GpuError::Driver {
                call: "test-value-op",
                code: INJECTED_COPY_ERROR,
            });
        }
        Ok(())
    }

    fn spawn_exec(&self, device: i32, handle: usize) -> GpuResult<Arc<StreamExec>> {
        let exec = Arc::new(StreamExec {
            device,
            queue: Mutex::new(Queue::default()),
            cv: Condvar::new(),
        });
        let (e, s) = (exec.clone(), self.shared.clone());
        let join = std::thread::Builder::new()
            .name(format!("testgpu-stream-{handle:#x}"))
            .spawn(move || run_stream(&e, &s))
            .map_err(|e| GpuError::Driver {
                call: "test-stream-create",
                code: e.raw_os_error().unwrap_or(-1),
            })?;
        let mut threads = lock(&self.threads);
        // Forget threads of destroyed streams that have finished draining.
        threads.retain(|(_, j)| !j.is_finished());
        threads.push((exec.clone(), join));
        Ok(exec)
    }

    fn exec(&self, stream: Stream) -> GpuResult<Arc<StreamExec>> {
        let mut streams = lock(&self.streams);
        if let Some(e) = streams.get(&stream.0) {
            return Ok(e.clone());
        }
        if stream.0 == 0 {
            // The NULL stream: one executor, created on first use (device 0's).
            let e = self.spawn_exec(0, 0)?;
            streams.insert(0, e.clone());
            return Ok(e);
        }
        Err(GpuError::InvalidValue("unknown stream"))
    }

    fn event(&self, event: Event) -> GpuResult<Arc<EventState>> {
        lock(&self.events)
            .get(&event.0)
            .cloned()
            .ok_or(GpuError::InvalidValue("unknown event"))
    }

    /// Queue a wait on a registered word: `>= value`, or `== value` when `eq`.
    fn wait_value(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
        eq: bool,
    ) -> GpuResult<()> {
        self.enqueue_value_op(stream, host_addr, |word| Op::WaitValue { word, value, eq })
    }

    /// Queue the value op `op` makes of the registered word at `host_addr`.
    fn enqueue_value_op(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        op: impl FnOnce(WordPtr) -> Op,
    ) -> GpuResult<()> {
        self.driver_lock();
        let exec = self.exec(stream)?;
        self.check_word(host_addr)?;
        self.value_failure()?;
        Self::enqueue(&exec, op(WordPtr(host_addr as *const AtomicU32)))
    }

    /// Queue the copy `op` makes of the device range `dev..dev + len`
    /// (storage and offset) after checking the host side `host..host + len`;
    /// a zero-length copy queues nothing.
    fn enqueue_host_copy(
        &self,
        stream: Stream,
        host: *const u8,
        dev: DevPtr,
        len: usize,
        op: impl FnOnce(Arc<Storage>, usize) -> Op,
    ) -> GpuResult<()> {
        self.driver_lock();
        let exec = self.exec(stream)?;
        if len == 0 {
            return Ok(());
        }
        Self::check_host_side(host, len)?;
        let (storage, offset) = self.device_range(dev, len)?;
        self.enqueue_copy(&exec, op(storage, offset))
    }

    fn enqueue(exec: &StreamExec, op: Op) -> GpuResult<()> {
        let mut q = lock(&exec.queue);
        if q.closing {
            return Err(GpuError::InvalidValue("stream was destroyed"));
        }
        q.ops.push_back(op);
        q.enqueued += 1;
        exec.cv.notify_all();
        Ok(())
    }
}

/// Consume one armed failure: none while `fail` is 0; the first `skip` calls
/// pass.
fn take_failure(fail: &AtomicU32, skip: &AtomicU32) -> bool {
    let dec = |c: &AtomicU32| {
        c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    };
    fail.load(Ordering::Relaxed) > 0 && !dec(skip) && dec(fail)
}

/// The allocation of `allocs` holding `ptr..ptr+len`, and the offset of `ptr` in it.
fn device_range_in(
    allocs: &Mutex<BTreeMap<u64, Arc<Storage>>>,
    ptr: u64,
    len: usize,
) -> GpuResult<(Arc<Storage>, usize)> {
    let allocs = lock(allocs);
    let (base, st) = allocs
        .range(..=ptr)
        .next_back()
        .ok_or(GpuError::InvalidValue(
            "not device memory of the test double",
        ))?;
    let off = ptr - base;
    if off >= st.len as u64 {
        return Err(GpuError::InvalidValue(
            "not device memory of the test double",
        ));
    }
    let off = off as usize;
    if len > st.len - off {
        return Err(GpuError::InvalidValue(
            "copy runs past the end of the device allocation",
        ));
    }
    Ok((st.clone(), off))
}

/// Body of a stream's executor thread.
fn run_stream(exec: &StreamExec, shared: &Shared) {
    loop {
        let op = {
            let mut q = lock(&exec.queue);
            loop {
                if shared.shutdown.load(Ordering::Acquire) {
                    return;
                }
                if let Some(op) = q.ops.pop_front() {
                    break op;
                }
                if q.closing {
                    return;
                }
                q = wait(&exec.cv, q);
            }
        };
        if !execute(op, shared) {
            return;
        }
        let mut q = lock(&exec.queue);
        q.completed += 1;
        exec.cv.notify_all();
    }
}

/// Run one operation; false when shutdown interrupted it.
fn execute(op: Op, shared: &Shared) -> bool {
    let copy_delay = || {
        let ns = shared.copy_delay_ns.load(Ordering::Relaxed);
        if ns > 0 {
            std::thread::sleep(Duration::from_nanos(ns));
        }
    };
    match op {
        Op::HtoD {
            src,
            dst,
            offset,
            len,
        } => {
            copy_delay();
            let mut bytes = lock(&dst.bytes);
            // SAFETY: `offset + len <= dst.len` was checked at enqueue and the
            // storage never changes size; the caller of `copy_htod_async`
            // promised `src..src+len` stays valid until the copy has finished,
            // and device storage is private to the double, so they cannot overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(src.0, bytes.as_mut_ptr().add(offset), len);
            }
        }
        Op::DtoH {
            dst,
            src,
            offset,
            len,
        } => {
            copy_delay();
            let bytes = lock(&src.bytes);
            // SAFETY: bounds checked at enqueue as above; the caller of
            // `copy_dtoh_async` promised `dst..dst+len` stays valid and
            // untouched until the copy has finished.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr().add(offset), dst.0, len);
            }
        }
        Op::Record { event, gen } => {
            let mut g = lock(&event.gens);
            g.done = g.done.max(gen);
            event.cv.notify_all();
        }
        Op::WaitValue { word, value, eq } => {
            // SAFETY: the word was checked to be aligned and registered, and
            // the caller promised it outlives the wait; every access is atomic.
            let w = unsafe { &*word.0 };
            let met = || {
                let v = w.load(Ordering::Acquire);
                if eq {
                    v == value
                } else {
                    v >= value
                }
            };
            let mut spins = 0u32;
            if met() {
                return true;
            }
            shared.parked.fetch_add(1, Ordering::AcqRel);
            let unpark = || {
                shared.parked.fetch_sub(1, Ordering::AcqRel);
                let _g = lock(&shared.unparked_lock);
                shared.unparked.notify_all();
            };
            while !met() {
                if shared.shutdown.load(Ordering::Acquire) {
                    unpark();
                    return false;
                }
                if spins < 64 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            unpark();
        }
        Op::Described { desc, device } => {
            // SAFETY: the descriptor lies in registered host memory that the
            // caller promised outlives the copy; it is read now, when the
            // stream gets here, with volatile loads (the host wrote it
            // before releasing the wait this copy followed).
            let d = unsafe { desc.0.read_volatile() };
            if d.len > 0 {
                copy_delay();
                if let Err(why) = described_copy(&shared.allocs, device, &d) {
                    shared.described_faults.fetch_add(1, Ordering::Relaxed);
                    crate::log_warn!("test double: described copy {d:?} faulted: {why}");
                }
            }
        }
        Op::WriteValue { word, value } => {
            // SAFETY: as for `WaitValue`.
            let w = unsafe { &*word.0 };
            w.store(value, Ordering::Release);
        }
    }
    true
}

/// Copy `d.len` bytes between two device allocations of `device`.
fn described_copy(
    allocs: &Mutex<BTreeMap<u64, Arc<Storage>>>,
    device: i32,
    d: &CopyDesc,
) -> Result<(), String> {
    let len = usize::try_from(d.len).map_err(|_| "length overflows".to_string())?;
    let (src, soff) = device_range_in(allocs, d.src, len).map_err(|e| format!("source: {e}"))?;
    let (dst, doff) =
        device_range_in(allocs, d.dst, len).map_err(|e| format!("destination: {e}"))?;
    if src.device != device || dst.device != device {
        return Err(format!(
            "memory of devices {} -> {} on a stream of device {device}",
            src.device, dst.device
        ));
    }
    if Arc::ptr_eq(&src, &dst) {
        lock(&dst.bytes).copy_within(soff..soff + len, doff);
    } else {
        let from = lock(&src.bytes)[soff..soff + len].to_vec();
        lock(&dst.bytes)[doff..doff + len].copy_from_slice(&from);
    }
    Ok(())
}

impl Drop for TestGpu {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _g = lock(&self.shared.unparked_lock);
            self.shared.unparked.notify_all();
        }
        let threads = std::mem::take(&mut *lock(&self.threads));
        for (exec, _) in &threads {
            // Take the lock so that an executor between its check and its wait
            // does not miss the wake-up.
            let _q = lock(&exec.queue);
            exec.cv.notify_all();
        }
        for (_, join) in threads {
            let _ = join.join();
        }
    }
}

impl Gpu for TestGpu {
    fn name(&self) -> &'static str {
        "test-double"
    }

    fn device_count(&self) -> i32 {
        self.n_devices
    }

    fn pointer_info(&self, ptr: u64) -> GpuResult<PtrInfo> {
        self.driver_lock();
        {
            let allocs = lock(&self.shared.allocs);
            if let Some((&base, st)) = allocs.range(..=ptr).next_back() {
                if ptr - base < st.len as u64 {
                    return Ok(PtrInfo {
                        kind: MemKind::Device { device: st.device },
                        alloc_base: base,
                        alloc_bytes: st.len as u64,
                    });
                }
            }
        }
        if let Some((base, len)) = self.registered(ptr, 1) {
            return Ok(PtrInfo {
                kind: MemKind::PinnedHost,
                alloc_base: base,
                alloc_bytes: len as u64,
            });
        }
        Ok(PtrInfo {
            kind: MemKind::PageableHost,
            alloc_base: ptr,
            alloc_bytes: u64::MAX - ptr,
        })
    }

    fn current_device(&self) -> GpuResult<i32> {
        self.driver_lock();
        let (id, dev) = CURRENT.with(|c| c.get());
        Ok(if id == self.id { dev } else { 0 })
    }

    fn bind_thread(&self, device: i32) -> GpuResult<()> {
        self.driver_lock();
        self.check_device(device)?;
        CURRENT.with(|c| c.set((self.id, device)));
        Ok(())
    }

    unsafe fn host_register(&self, ptr: *mut u8, len: usize) -> GpuResult<()> {
        self.driver_lock();
        if ptr.is_null() || len == 0 {
            return Err(GpuError::InvalidValue("null or empty host range"));
        }
        if Self::in_device_window(ptr as u64) {
            return Err(GpuError::InvalidValue("host_register of a device address"));
        }
        if len > self.pin_limit.load(Ordering::Relaxed) {
            return Err(GpuError::Driver {
                call: "test-host-register",
                code: 2, // CUDA_ERROR_OUT_OF_MEMORY
            });
        }
        let start = ptr as u64;
        let end = start
            .checked_add(len as u64)
            .ok_or(GpuError::InvalidValue("host range wraps"))?;
        let mut regs = lock(&self.host_regs);
        let overlaps_before = regs
            .range(..=start)
            .next_back()
            .is_some_and(|(&b, &l)| b + l as u64 > start);
        let overlaps_after = regs.range(start..end).next().is_some();
        if overlaps_before || overlaps_after {
            // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
            return Err(GpuError::Driver {
                call: "test-host-register",
                code: 712,
            });
        }
        regs.insert(start, len);
        Ok(())
    }

    unsafe fn host_unregister(&self, ptr: *mut u8) -> GpuResult<()> {
        self.driver_lock();
        match lock(&self.host_regs).remove(&(ptr as u64)) {
            Some(_) => Ok(()),
            // CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
            None => Err(GpuError::Driver {
                call: "test-host-unregister",
                code: 713,
            }),
        }
    }

    fn stream_create(&self, device: i32) -> GpuResult<Stream> {
        self.driver_lock();
        self.check_device(device)?;
        if self.shared.parked.load(Ordering::Acquire) > 0 {
            // A real driver can stall here (see `streams_created_while_parked`).
            let t = std::thread::current();
            lock(&self.created_while_parked).push(t.name().unwrap_or("unnamed").to_string());
        }
        let handle = STREAM_HANDLE_BASE + self.next_handle.fetch_add(1, Ordering::Relaxed);
        let exec = self.spawn_exec(device, handle)?;
        lock(&self.streams).insert(handle, exec);
        Ok(Stream(handle))
    }

    fn stream_destroy(&self, stream: Stream) {
        self.driver_lock();
        if stream.0 == 0 {
            return; // the NULL stream lives as long as the runtime
        }
        if let Some(exec) = lock(&self.streams).remove(&stream.0) {
            // Like cuStreamDestroy: queued work still runs, then the thread exits.
            let mut q = lock(&exec.queue);
            q.closing = true;
            exec.cv.notify_all();
        }
    }

    fn stream_device(&self, stream: Stream) -> GpuResult<i32> {
        self.driver_lock();
        if stream.0 == 0 {
            return self.current_device();
        }
        Ok(self.exec(stream)?.device)
    }

    fn stream_synchronize(&self, stream: Stream) -> GpuResult<()> {
        self.driver_lock();
        let exec = self.exec(stream)?;
        let mut q = lock(&exec.queue);
        let target = q.enqueued;
        while q.completed < target && !self.shared.shutdown.load(Ordering::Acquire) {
            q = wait(&exec.cv, q);
        }
        Ok(())
    }

    unsafe fn copy_htod_async(
        &self,
        dst: DevPtr,
        src: *const u8,
        len: usize,
        stream: Stream,
    ) -> GpuResult<()> {
        self.enqueue_host_copy(stream, src, dst, len, |dst, offset| Op::HtoD {
            src: HostPtr(src as *mut u8),
            dst,
            offset,
            len,
        })
    }

    unsafe fn copy_htod_batch_async(&self, copies: &[HtodCopy], stream: Stream) -> GpuResult<()> {
        self.driver_lock();
        if copies.len() >= 2 {
            self.copy_batches.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's promise is passed on.
        unsafe { super::copy_htod_each(self, copies, stream) }
    }
    unsafe fn copy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DevPtr,
        len: usize,
        stream: Stream,
    ) -> GpuResult<()> {
        self.enqueue_host_copy(stream, dst, src, len, |src, offset| Op::DtoH {
            dst: HostPtr(dst),
            src,
            offset,
            len,
        })
    }

    fn device_alloc(&self, device: i32, len: usize) -> GpuResult<DevPtr> {
        self.driver_lock();
        self.check_device(device)?;
        if len == 0 {
            return Err(GpuError::InvalidValue("zero-byte device allocation"));
        }
        let out_of_memory = GpuError::Driver {
            call: "test-alloc",
            code: 2, // CUDA_ERROR_OUT_OF_MEMORY
        };
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(len)
            .map_err(|_| out_of_memory.clone())?;
        bytes.resize(len, FRESH_DEVICE_BYTE);
        let rounded = (len as u64).div_ceil(ALLOC_ALIGN_BYTES) * ALLOC_ALIGN_BYTES;
        let base = {
            let mut next = lock(&self.next_offset);
            let off = next[device as usize];
            let new_next = off + rounded + GUARD_BYTES;
            if new_next > DEVICE_WINDOW_BYTES {
                return Err(out_of_memory);
            }
            next[device as usize] = new_next;
            DEVICE_WINDOW_BASE + device as u64 * DEVICE_WINDOW_BYTES + off
        };
        let storage = Arc::new(Storage {
            device,
            len,
            bytes: Mutex::new(bytes.into_boxed_slice()),
        });
        lock(&self.shared.allocs).insert(base, storage);
        Ok(base)
    }

    unsafe fn device_free(&self, ptr: DevPtr) -> GpuResult<()> {
        self.driver_lock();
        // Queued copies hold their own reference to the storage, so freeing
        // early is a logic error of the caller but never a use-after-free here.
        match lock(&self.shared.allocs).remove(&ptr) {
            Some(_) => Ok(()),
            None => Err(GpuError::InvalidValue(
                "not the base of a device allocation",
            )),
        }
    }

    fn event_create(&self) -> GpuResult<Event> {
        self.driver_lock();
        let handle = EVENT_HANDLE_BASE + self.next_handle.fetch_add(1, Ordering::Relaxed);
        lock(&self.events).insert(handle, Arc::new(EventState::default()));
        Ok(Event(handle))
    }

    fn event_destroy(&self, event: Event) {
        self.driver_lock();
        // A record still queued keeps its own reference; it completes harmlessly.
        lock(&self.events).remove(&event.0);
    }

    fn event_record(&self, event: Event, stream: Stream) -> GpuResult<()> {
        self.driver_lock();
        let ev = self.event(event)?;
        let exec = self.exec(stream)?;
        let gen = {
            let mut g = lock(&ev.gens);
            g.recorded += 1;
            g.recorded
        };
        Self::enqueue(&exec, Op::Record { event: ev, gen })
    }

    fn event_query(&self, event: Event) -> GpuResult<bool> {
        self.driver_lock();
        let ev = self.event(event)?;
        let g = lock(&ev.gens);
        Ok(g.done >= g.recorded)
    }

    fn event_synchronize(&self, event: Event) -> GpuResult<()> {
        self.event_sleeps.fetch_add(1, Ordering::Relaxed);
        self.driver_lock();
        let ev = self.event(event)?;
        let mut g = lock(&ev.gens);
        let target = g.recorded;
        while g.done < target {
            g = wait(&ev.cv, g);
        }
        Ok(())
    }

    unsafe fn stream_wait_value32(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
    ) -> GpuResult<()> {
        self.wait_value(stream, host_addr, value, false)
    }

    unsafe fn stream_write_value32(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
    ) -> GpuResult<()> {
        self.enqueue_value_op(stream, host_addr, |word| Op::WriteValue { word, value })
    }

    unsafe fn stream_wait_value32_eq(
        &self,
        stream: Stream,
        host_addr: *mut u32,
        value: u32,
    ) -> GpuResult<()> {
        self.wait_value(stream, host_addr, value, true)
    }

    fn stream_id(&self, stream: Stream) -> GpuResult<u64> {
        self.driver_lock();
        self.exec(stream)?;
        Ok(stream.0 as u64)
    }

    fn described_copies(&self) -> bool {
        !self.described_off.load(Ordering::Relaxed)
    }

    fn prepare_described_copies(&self, stream: Stream) -> GpuResult<()> {
        self.driver_lock();
        if !self.described_copies() {
            return Err(GpuError::NotPresent(
                "test double: described copies are switched off".into(),
            ));
        }
        let device = self.exec(stream)?.device;
        let mut ready = lock(&self.described_ready);
        if !ready.contains(&device) {
            ready.push(device);
        }
        Ok(())
    }

    unsafe fn copy_described_async(
        &self,
        desc: *const CopyDesc,
        _dev_desc: DevPtr,
        stream: Stream,
    ) -> GpuResult<()> {
        self.driver_lock();
        let exec = self.exec(stream)?;
        if !lock(&self.described_ready).contains(&exec.device) {
            return Err(GpuError::InvalidValue(
                "described copies were not prepared for this stream's device",
            ));
        }
        if desc.is_null()
            || (desc as usize) % std::mem::align_of::<CopyDesc>() != 0
            || self
                .registered(desc as u64, std::mem::size_of::<CopyDesc>() as u64)
                .is_none()
        {
            return Err(GpuError::InvalidValue(
                "copy descriptor is not aligned registered host memory",
            ));
        }
        let op = Op::Described {
            desc: DescPtr(desc),
            device: exec.device,
        };
        self.enqueue_copy(&exec, op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A registered, heap-pinned host word (the double only checks registration).
    struct Word {
        cell: Box<AtomicU32>,
    }

    impl Word {
        fn new(gpu: &TestGpu) -> Word {
            let cell = Box::new(AtomicU32::new(0));
            let w = Word { cell };
            // SAFETY: the box lives until the word is dropped, after the tests
            // synchronize every stream that uses it.
            unsafe { gpu.host_register(w.ptr() as *mut u8, 4) }.unwrap();
            w
        }
        fn ptr(&self) -> *mut u32 {
            self.cell.as_ptr()
        }
        fn get(&self) -> u32 {
            self.cell.load(Ordering::Acquire)
        }
        fn set(&self, v: u32) {
            self.cell.store(v, Ordering::Release);
        }
    }

    #[test]
    fn device_addresses_are_not_host_addresses() {
        let gpu = TestGpu::new(2);
        let a = gpu.device_alloc(0, 4096).unwrap();
        let b = gpu.device_alloc(1, 10).unwrap();
        // Above the 47-bit user address space: dereferencing faults.
        assert!(a >= 1 << 47 && b >= 1 << 47);
        assert_eq!(a % ALLOC_ALIGN_BYTES, 0);
        assert_ne!(a, b);
        assert_eq!(gpu.read_device(a, 4096), vec![FRESH_DEVICE_BYTE; 4096]);

        let info = gpu.pointer_info(b + 3).unwrap();
        assert_eq!(info.kind, MemKind::Device { device: 1 });
        assert_eq!((info.alloc_base, info.alloc_bytes), (b, 10));
        // One past the end is not device memory.
        assert_eq!(
            gpu.pointer_info(b + 10).unwrap().kind,
            MemKind::PageableHost
        );

        let mut host = vec![0u8; 64];
        let hp = host.as_mut_ptr();
        assert_eq!(
            gpu.pointer_info(hp as u64).unwrap().kind,
            MemKind::PageableHost
        );
        // SAFETY: `host` outlives the registration.
        unsafe { gpu.host_register(hp, 64) }.unwrap();
        let info = gpu.pointer_info(hp as u64 + 63).unwrap();
        assert_eq!(info.kind, MemKind::PinnedHost);
        assert_eq!((info.alloc_base, info.alloc_bytes), (hp as u64, 64));
        // SAFETY: registered just above and unused by any copy.
        assert!(unsafe { gpu.host_register(hp.wrapping_add(8), 8) }.is_err());
        // SAFETY: as above.
        unsafe { gpu.host_unregister(hp) }.unwrap();
        assert_eq!(
            gpu.pointer_info(hp as u64).unwrap().kind,
            MemKind::PageableHost
        );

        // SAFETY: nothing uses `a` any more.
        unsafe { gpu.device_free(a) }.unwrap();
        assert_eq!(gpu.pointer_info(a).unwrap().kind, MemKind::PageableHost);
        // Addresses are never reused.
        assert!(gpu.device_alloc(0, 4096).unwrap() > a);
    }

    #[test]
    fn copies_are_asynchronous_and_ordered() {
        let gpu = TestGpu::new(1);
        let s = gpu.stream_create(0).unwrap();
        let dev = gpu.device_alloc(0, 1024).unwrap();
        let delay = Duration::from_millis(20);
        gpu.set_copy_delay(delay);
        // Park the stream first, so that "nothing ran yet" is certain rather
        // than a bet on scheduling.
        let gate = Word::new(&gpu);

        let first = vec![1u8; 1024];
        let second = vec![2u8; 1024];
        let mut back = vec![0u8; 1024];
        // SAFETY: the word and buffers live until the stream is synchronized below.
        unsafe {
            gpu.stream_wait_value32(s, gate.ptr(), 1).unwrap();
            gpu.copy_htod_async(dev, first.as_ptr(), 1024, s).unwrap();
            gpu.copy_htod_async(dev, second.as_ptr(), 1024, s).unwrap();
            gpu.copy_dtoh_async(back.as_mut_ptr(), dev, 1024, s)
                .unwrap();
        }
        // The calls returned; no copy has run.
        assert_eq!(gpu.copies_issued(), 3);
        assert_eq!(gpu.read_device(dev, 1024), vec![FRESH_DEVICE_BYTE; 1024]);

        let released = Instant::now();
        gate.set(1);
        gpu.stream_synchronize(s).unwrap();
        // All three ran on the stream thread, one after the other.
        assert!(released.elapsed() >= delay * 3);
        // In order: the second write wins, and the read saw it.
        assert_eq!(gpu.read_device(dev, 1024), second);
        assert_eq!(back, second);
        gpu.stream_destroy(s);
    }

    #[test]
    fn copy_delay_shows_a_missing_wait() {
        let gpu = TestGpu::new(1);
        let dev = gpu.device_alloc(0, 64).unwrap();
        gpu.set_copy_delay(Duration::from_millis(100));
        let src = [6u8; 64];
        let t0 = Instant::now();
        // SAFETY: `src` outlives the synchronize below.
        unsafe { gpu.copy_htod_async(dev, src.as_ptr(), 64, Stream(0)) }.unwrap();
        let enqueue = t0.elapsed();
        gpu.stream_synchronize(Stream(0)).unwrap();
        // The enqueue did not wait for the (slow) copy; the synchronize did.
        assert!(t0.elapsed() >= Duration::from_millis(100));
        assert!(
            enqueue < Duration::from_millis(100),
            "enqueue took {enqueue:?}"
        );
        assert_eq!(gpu.read_device(dev, 64), src);
    }

    #[test]
    fn events_track_completion() {
        let gpu = TestGpu::new(1);
        let s = gpu.stream_create(0).unwrap();
        let ev = gpu.event_create().unwrap();
        // Never recorded: complete, as in CUDA.
        assert!(gpu.event_query(ev).unwrap());

        let gate = Word::new(&gpu);
        let dev = gpu.device_alloc(0, 8).unwrap();
        let src = [7u8; 8];
        gpu.set_copy_delay(Duration::from_millis(10));
        // SAFETY: the word and `src` live until the event has completed.
        unsafe {
            gpu.stream_wait_value32(s, gate.ptr(), 1).unwrap();
            gpu.copy_htod_async(dev, src.as_ptr(), 8, s).unwrap();
        }
        gpu.event_record(ev, s).unwrap();
        assert!(!gpu.event_query(ev).unwrap());
        gate.set(1);
        gpu.event_synchronize(ev).unwrap();
        assert!(gpu.event_query(ev).unwrap());
        // Complete means the work before the record is done.
        assert_eq!(gpu.read_device(dev, 8), src);

        // Re-recording makes it pending again until the stream gets there.
        gate.set(0);
        // SAFETY: as above.
        unsafe { gpu.stream_wait_value32(s, gate.ptr(), 2) }.unwrap();
        gpu.event_record(ev, s).unwrap();
        assert!(!gpu.event_query(ev).unwrap());
        gate.set(2);
        gpu.event_synchronize(ev).unwrap();
        assert!(gpu.event_query(ev).unwrap());

        // Unknown handles are errors, and stream/event handles do not mix.
        assert!(gpu.event_query(Event(s.0)).is_err());
        assert!(gpu.stream_synchronize(Stream(ev.0)).is_err());
        gpu.event_destroy(ev);
        assert!(gpu.event_query(ev).is_err());
    }

    #[test]
    fn wait_value_parks_the_stream_until_the_host_releases_it() {
        let gpu = TestGpu::new(1);
        let s = gpu.stream_create(0).unwrap();
        let gate = Word::new(&gpu);
        let done = Word::new(&gpu);
        let ev = gpu.event_create().unwrap();
        let dev = gpu.device_alloc(0, 16).unwrap();
        let src = [9u8; 16];
        // SAFETY: the words and `src` outlive the synchronize at the end.
        unsafe {
            gpu.stream_wait_value32(s, gate.ptr(), 2).unwrap();
            gpu.copy_htod_async(dev, src.as_ptr(), 16, s).unwrap();
            gpu.stream_write_value32(s, done.ptr(), 5).unwrap();
        }
        gpu.event_record(ev, s).unwrap();

        std::thread::sleep(Duration::from_millis(50));
        assert!(!gpu.event_query(ev).unwrap());
        assert_eq!(done.get(), 0);
        assert_eq!(gpu.read_device(dev, 16), vec![FRESH_DEVICE_BYTE; 16]);

        gate.set(1); // not yet >= 2
        std::thread::sleep(Duration::from_millis(20));
        assert!(!gpu.event_query(ev).unwrap());

        gate.set(2);
        gpu.event_synchronize(ev).unwrap();
        assert_eq!(done.get(), 5);
        assert_eq!(gpu.read_device(dev, 16), src);

        // Unregistered words are refused.
        let mut loose = 0u32;
        // SAFETY: refused before anything is queued.
        let r = unsafe { gpu.stream_wait_value32(s, &mut loose, 1) };
        assert!(matches!(r, Err(GpuError::InvalidValue(_))));
    }

    #[test]
    fn a_parked_stream_does_not_block_others() {
        let gpu = TestGpu::new(2);
        let parked = gpu.stream_create(0).unwrap();
        let free = gpu.stream_create(1).unwrap();
        assert_eq!(gpu.stream_device(parked).unwrap(), 0);
        assert_eq!(gpu.stream_device(free).unwrap(), 1);
        let gate = Word::new(&gpu);
        let flag = Word::new(&gpu);
        // SAFETY: the words outlive both streams' work (the gpu is dropped
        // first, which stops the parked stream).
        unsafe {
            gpu.stream_wait_value32(parked, gate.ptr(), 1).unwrap();
            gpu.stream_write_value32(free, flag.ptr(), 1).unwrap();
        }
        gpu.stream_synchronize(free).unwrap();
        assert_eq!(flag.get(), 1);
        drop(gpu); // must not hang on the parked stream
    }

    #[test]
    fn fault_injection_fails_the_next_copies() {
        let gpu = TestGpu::new(1);
        let dev = gpu.device_alloc(0, 4).unwrap();
        let src = [3u8; 4];
        gpu.fail_next_copies(2);
        let injected = Err(GpuError::Driver {
            call: "test-copy",
            code: 999,
        });
        // SAFETY: `src` outlives the synchronize below.
        unsafe {
            assert_eq!(
                gpu.copy_htod_async(dev, src.as_ptr(), 4, Stream(0)),
                injected
            );
            assert_eq!(
                gpu.copy_htod_async(dev, src.as_ptr(), 4, Stream(0)),
                injected
            );
            assert_eq!(gpu.copy_htod_async(dev, src.as_ptr(), 4, Stream(0)), Ok(()));
        }
        gpu.stream_synchronize(Stream(0)).unwrap();
        assert_eq!(gpu.read_device(dev, 4), src);
        assert_eq!(gpu.copies_issued(), 1);
    }

    #[test]
    fn copies_are_bounds_checked() {
        let gpu = TestGpu::new(1);
        let dev = gpu.device_alloc(0, 100).unwrap();
        let buf = [0u8; 200];
        // SAFETY: every call below is refused before anything is queued.
        unsafe {
            assert!(gpu
                .copy_htod_async(dev + 50, buf.as_ptr(), 51, Stream(0))
                .is_err());
            assert!(gpu
                .copy_htod_async(dev + 100, buf.as_ptr(), 1, Stream(0))
                .is_err());
            // Host side given a device address: an engine bug, refused.
            let other = gpu.device_alloc(0, 100).unwrap();
            assert!(gpu
                .copy_htod_async(dev, other as *const u8, 1, Stream(0))
                .is_err());
            assert!(gpu
                .copy_htod_async(dev, buf.as_ptr(), 1, Stream(12345))
                .is_err());
        }
        assert_eq!(gpu.copies_issued(), 0);
    }

    #[test]
    fn destroy_drains_queued_work() {
        let gpu = TestGpu::new(1);
        let s = gpu.stream_create(0).unwrap();
        let dev = gpu.device_alloc(0, 8).unwrap();
        let src = [4u8; 8];
        gpu.set_copy_delay(Duration::from_millis(20));
        // SAFETY: `src` outlives the gpu, whose drop joins the executor.
        unsafe { gpu.copy_htod_async(dev, src.as_ptr(), 8, s) }.unwrap();
        gpu.stream_destroy(s);
        assert!(gpu.stream_synchronize(s).is_err());
        let t0 = Instant::now();
        while gpu.read_device(dev, 8) != src {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "queued copy never ran"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn current_device_is_per_thread_and_per_instance() {
        let gpu = Arc::new(TestGpu::new(3));
        assert_eq!(gpu.current_device().unwrap(), 0);
        gpu.bind_thread(2).unwrap();
        assert_eq!(gpu.current_device().unwrap(), 2);
        assert_eq!(gpu.stream_device(Stream(0)).unwrap(), 2);
        assert!(gpu.bind_thread(3).is_err());
        let g = gpu.clone();
        let other = std::thread::spawn(move || g.current_device().unwrap())
            .join()
            .unwrap();
        assert_eq!(other, 0);
        let second = TestGpu::new(3);
        assert_eq!(second.current_device().unwrap(), 0);
    }

    /// A registered, aligned copy descriptor.
    struct Desc {
        cell: Box<CopyDesc>,
    }

    impl Desc {
        fn new(gpu: &TestGpu) -> Desc {
            let d = Desc {
                cell: Box::new(CopyDesc::default()),
            };
            // SAFETY: the box lives until the descriptor is dropped, after the
            // tests synchronize every stream that uses it.
            unsafe { gpu.host_register(d.ptr() as *mut u8, 32) }.unwrap();
            d
        }
        fn ptr(&self) -> *mut CopyDesc {
            &*self.cell as *const CopyDesc as *mut CopyDesc
        }
        fn set(&self, d: CopyDesc) {
            // SAFETY: the stream reading it is parked until the test releases it.
            unsafe { self.ptr().write_volatile(d) };
        }
    }

    #[test]
    fn a_described_copy_reads_its_descriptor_when_the_stream_reaches_it() {
        let gpu = TestGpu::new(1);
        let s = gpu.stream_create(0).unwrap();
        let a = gpu.device_alloc(0, 64).unwrap();
        let b = gpu.device_alloc(0, 64).unwrap();
        gpu.write_device(a, &[7u8; 64]);
        let gate = Word::new(&gpu);
        let desc = Desc::new(&gpu);
        // SAFETY: the descriptor and word outlive the synchronize below.
        unsafe {
            assert!(
                gpu.copy_described_async(desc.ptr(), 0, s).is_err(),
                "not prepared"
            );
            gpu.prepare_described_copies(s).unwrap();
            gpu.stream_wait_value32_eq(s, gate.ptr(), 3).unwrap();
            gpu.copy_described_async(desc.ptr(), 0, s).unwrap();
        }
        // Written after the copy was enqueued, before the stream gets there.
        desc.set(CopyDesc {
            dst: b + 10,
            src: a,
            len: 20,
            reserved: 0,
        });
        gate.set(3);
        gpu.stream_synchronize(s).unwrap();
        let got = gpu.read_device(b, 64);
        assert_eq!(got[..10], [FRESH_DEVICE_BYTE; 10]);
        assert_eq!(got[10..30], [7u8; 20]);
        assert_eq!(got[30..], [FRESH_DEVICE_BYTE; 34]);
        assert_eq!(gpu.described_copy_faults(), 0);
        // A descriptor naming host memory is a fault, and copies nothing.
        desc.set(CopyDesc {
            dst: desc.ptr() as u64,
            src: a,
            len: 8,
            reserved: 0,
        });
        // SAFETY: as above.
        unsafe { gpu.copy_described_async(desc.ptr(), 0, s) }.unwrap();
        gpu.stream_synchronize(s).unwrap();
        assert_eq!(gpu.described_copy_faults(), 1);
    }

    #[test]
    fn an_equality_wait_holds_on_larger_values_too() {
        let gpu = TestGpu::new(1);
        let s = gpu.stream_create(0).unwrap();
        let (gate, done) = (Word::new(&gpu), Word::new(&gpu));
        // SAFETY: the words outlive the synchronize below.
        unsafe {
            gpu.stream_wait_value32_eq(s, gate.ptr(), 5).unwrap();
            gpu.stream_write_value32(s, done.ptr(), 1).unwrap();
        }
        gate.set(6);
        wait_for(|| gpu.parked_streams() == 1);
        assert_eq!(done.get(), 0, "6 satisfied a wait for == 5");
        gate.set(5);
        gpu.stream_synchronize(s).unwrap();
        assert_eq!(done.get(), 1);
    }

    /// Wait until `cond` holds (with a bound that only a bug reaches).
    fn wait_for(cond: impl Fn() -> bool) {
        let t0 = Instant::now();
        while !cond() {
            assert!(t0.elapsed() < Duration::from_secs(60), "never happened");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn the_lock_model_holds_library_calls_while_a_stream_is_parked() {
        let gpu = Arc::new(TestGpu::new(1));
        let s = gpu.stream_create(0).unwrap();
        let gate = Word::new(&gpu);
        gpu.set_driver_lock_model(true);
        // SAFETY: the word outlives the synchronize below.
        unsafe { gpu.stream_wait_value32(s, gate.ptr(), 1) }.unwrap();
        wait_for(|| gpu.parked_streams() == 1);
        // An application thread is not held.
        gpu.event_create().unwrap();
        assert_eq!(gpu.calls_ever_blocked_by_lock_model(), 0);
        let g = gpu.clone();
        let library = std::thread::Builder::new()
            .name("hipfile-test".into())
            .spawn(move || g.event_create().map(|_| ()))
            .unwrap();
        wait_for(|| gpu.calls_blocked_by_lock_model() == 1);
        gate.set(1);
        library.join().unwrap().unwrap();
        gpu.stream_synchronize(s).unwrap();
        assert_eq!(gpu.calls_ever_blocked_by_lock_model(), 1);
        assert_eq!(gpu.calls_blocked_by_lock_model(), 0);
    }

    #[test]
    fn copy_failures_can_start_after_some_successes() {
        let gpu = TestGpu::new(1);
        let dev = gpu.device_alloc(0, 4).unwrap();
        let src = [1u8; 4];
        gpu.fail_copies_after(2, 1);
        // SAFETY: `src` outlives the synchronize below.
        let r: Vec<bool> = (0..4)
            .map(|_| unsafe { gpu.copy_htod_async(dev, src.as_ptr(), 4, Stream(0)) }.is_ok())
            .collect();
        gpu.stream_synchronize(Stream(0)).unwrap();
        assert_eq!(r, [true, true, false, true]);
    }

    #[test]
    fn many_threads_many_streams() {
        let gpu = Arc::new(TestGpu::new(2));
        let workers: Vec<_> = (0..4)
            .map(|i| {
                let gpu = gpu.clone();
                std::thread::spawn(move || {
                    let dev_id = i % 2;
                    gpu.bind_thread(dev_id).unwrap();
                    let s = gpu.stream_create(dev_id).unwrap();
                    let ev = gpu.event_create().unwrap();
                    let dev = gpu.device_alloc(dev_id, 4096).unwrap();
                    for round in 0..50u8 {
                        let src = vec![round ^ i as u8; 4096];
                        let mut back = vec![0u8; 4096];
                        // SAFETY: both buffers outlive the event wait below.
                        unsafe {
                            gpu.copy_htod_async(dev, src.as_ptr(), 4096, s).unwrap();
                            gpu.copy_dtoh_async(back.as_mut_ptr(), dev, 4096, s)
                                .unwrap();
                        }
                        gpu.event_record(ev, s).unwrap();
                        gpu.event_synchronize(ev).unwrap();
                        assert_eq!(back, src);
                    }
                    gpu.event_destroy(ev);
                    gpu.stream_destroy(s);
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(gpu.copies_issued(), 4 * 50 * 2);
    }
}
