//! Lanes and submission: the application's side of stream I/O. Every GPU
//! call of a stream op is made here, on the caller's thread, while it
//! submits; lanes are created, registered and freed here too, only on
//! application threads (submit, `hipFileStreamDeregister`, driver close).
//!
//! A lane belongs to one stream (keyed by device and the runtime's stream
//! id) while it has ops; an idle lane may be handed to another stream once
//! [`SOFT_LANES`] lanes exist, so memory grows with the streams that are busy
//! at once, not with every stream ever used. A lane is freed only when the
//! service has let go of it and the stream has passed its last op (`passed`),
//! so no GPU operation can still touch its memory; lanes not idle when their
//! stream is deregistered or the engine closes wait in a process-wide list
//! and are freed by a later deregistration or close.

use super::service::{
    LaneMem, Op, Service, Staging, DEV_DESC_BYTES, PAGE_BYTES, SKEW_ROOM, SLOT_PAD,
};
use super::{Binding, StreamRequest, MAX_STAGE_BYTES, MIN_STAGE_BYTES};
use crate::bounce::Slab;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::gpu::{DevPtr, Gpu, GpuError, Stream};
use crate::pipeline::{Direction, Memory};
use crate::stats::Stats;
use crate::worker::Faults;
use crate::{log_debug, log_info, log_warn};
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Lanes kept before an idle one is handed to a new stream instead of
/// allocating another.
pub const SOFT_LANES: usize = 16;
/// Lanes at most (every one of them busy): beyond, a submission fails with
/// hipErrorOutOfMemory, as a failed per-op allocation does upstream.
pub const MAX_LANES: usize = 1024;
/// `hipErrorOutOfMemory` / `CUDA_ERROR_OUT_OF_MEMORY`.
const OUT_OF_MEMORY: i32 = 2;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// (device, stream id): what a lane belongs to.
type Key = (i32, u64);

/// Submission state of a lane, held across the GPU calls of one submission
/// so that stage sequence numbers follow stream order.
struct Submit {
    key: Key,
    next_seq: u64,
    last_gen: u32,
}

/// The memory a lane owns, freed only by [`Lane::release`].
struct Res {
    page: ManuallyDrop<Slab>,
    staging: Option<(ManuallyDrop<Slab>, DevPtr)>,
}

pub(crate) struct Lane {
    id: u64,
    device: i32,
    /// The stream handle it serves, as the application passed it (lets
    /// deregistration find it without asking the runtime about a stream
    /// that may be gone).
    handle: AtomicUsize,
    mem: Arc<LaneMem>,
    submit: Mutex<Submit>,
    res: Mutex<Option<Res>>,
    /// A GPU call failed midway through a submission: its flags may never
    /// be written again, so it takes no more ops and is never freed.
    broken: AtomicBool,
}

impl Lane {
    /// The flag page, zeroed and registered.
    fn new(
        gpu: &Arc<dyn Gpu>,
        id: u64,
        key: Key,
        handle: Stream,
        first: (u64, u32),
    ) -> Result<Lane> {
        let page = Slab::new(&[(1, PAGE_BYTES)], gpu, false)
            .map_err(|e| Error::Os(e.raw_os_error().unwrap_or(libc::ENOMEM)))?;
        // SAFETY: the slab lives until `release`, which unregisters it first.
        unsafe { gpu.host_register(page.slot(0), PAGE_BYTES) }.map_err(|e| {
            log_warn!(
                "stream I/O: cannot register a page of flags with {}: {e}",
                gpu.name()
            );
            Error::Gpu(e)
        })?;
        // SAFETY: a fresh zeroed page that lives as long as the lane's memory.
        let mem = Arc::new(unsafe { LaneMem::new(page.slot(0)) });
        Ok(Lane {
            id,
            device: key.0,
            handle: AtomicUsize::new(handle.0),
            mem,
            submit: Mutex::new(Submit {
                key,
                next_seq: first.0,
                last_gen: first.1,
            }),
            res: Mutex::new(Some(Res {
                page: ManuallyDrop::new(page),
                staging: None,
            })),
            broken: AtomicBool::new(false),
        })
    }

    /// Give the lane its staging (first device op): `stages` pinned host
    /// slots and one device buffer, with fewer stages where pinning that
    /// much fails (a low memory-lock limit), down to two.
    fn add_staging(
        &self,
        gpu: &Arc<dyn Gpu>,
        stages: usize,
        stage_bytes: usize,
        huge: bool,
    ) -> Result<()> {
        if self.mem.staging.get().is_some() {
            return Ok(());
        }
        let stride = stage_bytes + SLOT_PAD;
        // One staging buffer, then a descriptor per possible stage.
        let dev_bytes = stride + stages * DEV_DESC_BYTES;
        let dev = gpu.device_alloc(self.device, dev_bytes).map_err(|e| {
            log_warn!(
                "stream I/O: cannot allocate {} KiB of staging on device {}: {e}",
                stride >> 10,
                self.device
            );
            Error::Gpu(GpuError::Driver {
                call: "stream staging allocation",
                code: OUT_OF_MEMORY,
            })
        })?;
        let mut n = stages;
        let mut last_err = None;
        while n >= 2 {
            let slab = Slab::with_pages(&[(n, stride)], gpu, false, huge)
                .map_err(|e| Error::Os(e.raw_os_error().unwrap_or(libc::ENOMEM)))?;
            // SAFETY: the slab lives until `release`, which unregisters it first.
            match unsafe { gpu.host_register(slab.slot(0), n * stride) } {
                Ok(()) => {
                    if n < stages {
                        log_warn!(
                            "stream I/O: pinned {n} stages of {} KiB per stream instead of \
                             {stages} (raise the memory-lock limit, ulimit -l)",
                            stage_bytes >> 10
                        );
                    }
                    let staging = Staging {
                        host: slab.slot(0),
                        dev,
                        stages: n,
                        stage_bytes,
                    };
                    let _ = self.mem.staging.set(staging);
                    if let Some(res) = lock(&self.res).as_mut() {
                        res.staging = Some((ManuallyDrop::new(slab), dev));
                    }
                    return Ok(());
                }
                Err(e) => last_err = Some(e),
            }
            n /= 2;
        }
        // SAFETY: allocated above, never used.
        let _ = unsafe { gpu.device_free(dev) };
        let e = last_err.unwrap_or(GpuError::InvalidValue("no stages"));
        log_warn!(
            "stream I/O: cannot pin staging memory with {} ({e}); raise the memory-lock \
             limit (ulimit -l, or LimitMEMLOCK= for a service)",
            gpu.name()
        );
        Err(Error::Gpu(GpuError::Driver {
            call: "stream staging registration",
            code: OUT_OF_MEMORY,
        }))
    }

    /// Idle: the service has nothing of it and the stream passed its last op.
    /// Needs the submit lock (not held by a submission in progress).
    fn idle(&self, service: &Service, sub: &Submit) -> bool {
        !self.broken.load(Ordering::Acquire)
            && self.mem.passed() == sub.last_gen
            && service.lane_idle(self.id)
    }

    /// Free the lane's memory if nothing can use it any more; false (and
    /// nothing freed) otherwise.
    fn release(&self, gpu: &Arc<dyn Gpu>, service: &Service) -> bool {
        let Ok(sub) = self.submit.try_lock() else {
            return false;
        };
        if !self.idle(service, &sub) || !service.forget_lane(self.id) {
            return false;
        }
        let Some(mut res) = lock(&self.res).take() else {
            return true;
        };
        if let Some((mut slab, dev)) = res.staging.take() {
            // SAFETY: registered in `add_staging`; no stream or service uses
            // the slots (idle), and nothing will (the lane is gone).
            let _ = unsafe { gpu.host_unregister(slab.slot(0)) };
            // SAFETY: as above; dropped once, here.
            unsafe { ManuallyDrop::drop(&mut slab) };
            // SAFETY: allocated in `add_staging`; no copy uses it any more.
            let _ = unsafe { gpu.device_free(dev) };
        }
        // SAFETY: as above, for the flag page registered in `new`.
        let _ = unsafe { gpu.host_unregister(res.page.slot(0)) };
        // SAFETY: dropped once, here.
        unsafe { ManuallyDrop::drop(&mut res.page) };
        log_debug!("stream I/O: lane {} freed", self.id);
        true
    }
}

/// Lanes whose stream was deregistered, or whose engine closed, while they
/// were busy: freed by a later deregistration or close once idle.
struct Grave {
    gpu: Arc<dyn Gpu>,
    service: Arc<Service>,
    lane: Arc<Lane>,
}

static GRAVES: Mutex<Vec<Grave>> = Mutex::new(Vec::new());

fn bury(gpu: &Arc<dyn Gpu>, service: &Arc<Service>, lane: Arc<Lane>) {
    if lane.broken.load(Ordering::Acquire) {
        return; // never freed (see `Lane::broken`)
    }
    lock(&GRAVES).push(Grave {
        gpu: gpu.clone(),
        service: service.clone(),
        lane,
    });
}

/// Free every buried lane that has become idle.
fn sweep_graves() {
    let graves = std::mem::take(&mut *lock(&GRAVES));
    let mut left = Vec::new();
    for g in graves {
        if !g.lane.release(&g.gpu, &g.service) {
            left.push(g);
        }
    }
    lock(&GRAVES).extend(left);
}

/// The stream I/O of one engine: its lanes and its service.
pub struct StreamOps {
    gpu: Arc<dyn Gpu>,
    stage_bytes: usize,
    stages: usize,
    huge: bool,
    lanes: Mutex<HashMap<Key, Arc<Lane>>>,
    /// Serialises lane creation (GPU allocations) without blocking lookups.
    creating: Mutex<()>,
    next_lane: AtomicU64,
    /// Where new lanes start their stage sequence and generation (tests
    /// start them near the u32 wrap).
    first: Mutex<(u64, u32)>,
    service: Arc<Service>,
}

impl StreamOps {
    pub(crate) fn new(
        cfg: &Config,
        gpu: Arc<dyn Gpu>,
        faults: Faults,
        stats: Arc<Stats>,
    ) -> StreamOps {
        let stage_bytes = cfg
            .chunk_bytes
            .clamp(MIN_STAGE_BYTES, MAX_STAGE_BYTES)
            .next_multiple_of(4096);
        let stages = cfg.stream_stages;
        log_info!(
            "stream I/O: {stages} stages of {} KiB per stream, up to {} I/O threads",
            stage_bytes >> 10,
            cfg.io_threads
        );
        StreamOps {
            gpu,
            stage_bytes,
            stages,
            huge: cfg.huge_pages,
            lanes: Mutex::new(HashMap::new()),
            creating: Mutex::new(()),
            next_lane: AtomicU64::new(1),
            first: Mutex::new((0, 0)),
            service: Service::new(cfg.io_threads, cfg.read_mode, faults, cfg.io_threads, stats),
        }
    }

    /// Tests: lanes created from now on start at stage sequence `seq` and
    /// generation `gen` (the words of a lane start at 0, so start at least
    /// [`crate::streamops::MAX_STAGES`] sequences before a wrap of u32).
    #[doc(hidden)]
    pub fn start_sequences_at(&self, seq: u64, gen: u32) {
        *lock(&self.first) = (seq, gen);
    }

    /// Bytes per stage.
    pub fn stage_bytes(&self) -> usize {
        self.stage_bytes
    }

    /// Lanes in use or cached.
    pub fn lanes(&self) -> usize {
        lock(&self.lanes).len()
    }

    fn key(&self, stream: Stream, device: i32) -> Result<Key> {
        Ok((device, self.gpu.stream_id(stream)?))
    }

    /// Enqueue `req` on its stream (module docs of `streamops`).
    pub(crate) fn submit(&self, req: StreamRequest) -> Result<()> {
        let device = match req.buf {
            Memory::Device { device, .. } => device,
            Memory::Host(_) => self.gpu.stream_device(req.stream)?,
        };
        let key = self.key(req.stream, device)?;
        loop {
            let lane = self.lane_for(key, req.stream)?;
            let mut sub = lock(&lane.submit);
            if sub.key != key || lane.broken.load(Ordering::Acquire) {
                continue; // handed to another stream, or retired, meanwhile
            }
            if req.buf.is_device() {
                lane.add_staging(&self.gpu, self.stages, self.stage_bytes, self.huge)?;
            }
            return self.enqueue(&lane, &mut sub, req);
        }
    }

    /// The lane of `key`: the stream's own, an idle one handed over, or a new one.
    fn lane_for(&self, key: Key, stream: Stream) -> Result<Arc<Lane>> {
        if let Some(l) = lock(&self.lanes).get(&key) {
            return Ok(l.clone());
        }
        let _creating = lock(&self.creating);
        if let Some(l) = lock(&self.lanes).get(&key) {
            return Ok(l.clone());
        }
        // Before this stream is parked on anything of ours: load the kernel
        // into its context (and refuse streams we cannot serve).
        self.gpu.prepare_described_copies(stream)?;
        if let Some(l) = self.hand_over(key, stream) {
            return Ok(l);
        }
        if lock(&self.lanes).len() >= MAX_LANES {
            log_warn!(
                "stream I/O: {MAX_LANES} streams have stream ops in flight; refusing another"
            );
            return Err(Error::Gpu(GpuError::Driver {
                call: "stream lane",
                code: OUT_OF_MEMORY,
            }));
        }
        let id = self.next_lane.fetch_add(1, Ordering::Relaxed);
        let first = *lock(&self.first);
        let lane = Arc::new(Lane::new(&self.gpu, id, key, stream, first)?);
        lock(&self.lanes).insert(key, lane.clone());
        log_debug!(
            "stream I/O: lane {id} for stream id {} on device {}",
            key.1,
            key.0
        );
        Ok(lane)
    }

    /// Once [`SOFT_LANES`] exist: take an idle lane of the device from the
    /// stream that has it and give it to `key`.
    fn hand_over(&self, key: Key, stream: Stream) -> Option<Arc<Lane>> {
        let mut lanes = lock(&self.lanes);
        if lanes.len() < SOFT_LANES {
            return None;
        }
        let (old, lane) = lanes.iter().find_map(|(k, l)| {
            if l.device != key.0 {
                return None;
            }
            let mut sub = l.submit.try_lock().ok()?;
            if !l.idle(&self.service, &sub) {
                return None;
            }
            sub.key = key;
            l.handle.store(stream.0, Ordering::Release);
            Some((*k, l.clone()))
        })?;
        lanes.remove(&old);
        lanes.insert(key, lane.clone());
        log_debug!("stream I/O: lane {} handed to stream id {}", lane.id, key.1);
        Some(lane)
    }

    /// Put the whole op on the stream. Every GPU call's effect is published
    /// to the op right after the call returns (streamops docs, invariant).
    fn enqueue(&self, lane: &Arc<Lane>, sub: &mut Submit, req: StreamRequest) -> Result<()> {
        let gpu = &self.gpu;
        let s = req.stream;
        let mem = &lane.mem;
        let staging = if req.buf.is_device() {
            mem.staging.get().copied()
        } else {
            None
        };
        let stages = staging.map_or(0, |st| req.size.div_ceil(st.stage_bytes));
        let gen = match sub.last_gen.wrapping_add(1) {
            0 => 1, // the words start at 0
            g => g,
        };
        let first_seq = sub.next_seq;
        let op = Arc::new(Op::new(
            lane.id,
            gen,
            req.dir,
            staging.is_some(),
            first_seq,
            stages,
            Binding::of(&req),
            req.file.clone(),
            req.hold,
        ));
        self.service.push(mem, op.clone())?;
        // SAFETY: every word and descriptor is in the lane's registered flag
        // page and every slot in its registered staging, which live until
        // the lane is released, which waits until the stream passed the op.
        unsafe {
            if let Err(e) = gpu.stream_write_value32(s, mem.started_ptr(), gen) {
                op.withdraw();
                return Err(Error::Gpu(e));
            }
            // `started` is on the stream: the op is committed from here on.
            sub.last_gen = gen;
            sub.next_seq += stages as u64;
            let mut failed = None;
            if let Some(st) = staging {
                for k in 0..stages {
                    let q = first_seq + k as u64;
                    let slot = (q % st.stages as u64) as usize;
                    let v = (q + 1) as u32;
                    let copy_len = (req.size - k * st.stage_bytes).min(st.stage_bytes) + SKEW_ROOM;
                    let host = st.slot(slot);
                    if let Err(e) = gpu.stream_wait_value32_eq(s, mem.ready_ptr(slot), v) {
                        failed = Some(e);
                        break;
                    }
                    op.publish_stage(k);
                    let r = match req.dir {
                        Direction::Read => {
                            gpu.copy_htod_async(st.dev, host, copy_len, s)
                                .and_then(|()| {
                                    gpu.copy_described_async(mem.desc(slot), st.dev_desc(slot), s)
                                })
                        }
                        Direction::Write => gpu
                            .copy_described_async(mem.desc(slot), st.dev_desc(slot), s)
                            .and_then(|()| gpu.copy_dtoh_async(host, st.dev, copy_len, s)),
                    }
                    .and_then(|()| gpu.stream_write_value32(s, mem.back_ptr(slot), v));
                    if let Err(e) = r {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if let Some(e) = failed {
                op.fail(Error::Gpu(e.clone()));
                self.retire(lane, &e);
            }
            match gpu.stream_wait_value32_eq(s, mem.done_ptr(), gen) {
                Ok(()) => op.finish_submit(),
                Err(e) => {
                    op.fail(Error::Gpu(e.clone()));
                    op.finish_submit();
                    self.retire(lane, &e);
                    return Ok(());
                }
            }
            if let Err(e) = gpu.stream_write_value32(s, mem.passed_ptr(), gen) {
                self.retire(lane, &e);
            }
        }
        Ok(())
    }

    /// A GPU call failed midway through a submission: the lane's flags may
    /// never be written again, so it takes no more ops and is never freed.
    fn retire(&self, lane: &Arc<Lane>, e: &GpuError) {
        if lane.broken.swap(true, Ordering::AcqRel) {
            return;
        }
        log_warn!(
            "stream I/O: a GPU call failed while an op was being enqueued ({e}); the op \
             reports it through *bytes_p, and the stream's staging ({} KiB) is retired \
             and never freed",
            (self.stages * (self.stage_bytes + SLOT_PAD) + PAGE_BYTES) >> 10
        );
        lock(&self.lanes).retain(|_, l| !Arc::ptr_eq(l, lane));
    }

    /// `hipFileStreamDeregister`: free the stream's lane once idle. Lanes
    /// are found by the handle (the application may have destroyed the
    /// stream already, and the runtime must not be asked about it); for the
    /// NULL and per-thread handles that is every thread's lane of them.
    pub(crate) fn forget(&self, stream: Stream) {
        let gone: Vec<Arc<Lane>> = {
            let mut lanes = lock(&self.lanes);
            let keys: Vec<Key> = lanes
                .iter()
                .filter(|(_, l)| l.handle.load(Ordering::Acquire) == stream.0)
                .map(|(k, _)| *k)
                .collect();
            keys.iter().filter_map(|k| lanes.remove(k)).collect()
        };
        for lane in gone {
            if !lane.release(&self.gpu, &self.service) {
                bury(&self.gpu, &self.service, lane);
            }
        }
        sweep_graves();
    }
}

impl Drop for StreamOps {
    fn drop(&mut self) {
        let lanes: Vec<Arc<Lane>> = lock(&self.lanes).drain().map(|(_, l)| l).collect();
        for lane in lanes {
            if !lane.release(&self.gpu, &self.service) {
                bury(&self.gpu, &self.service, lane);
            }
        }
        self.service.close();
        sweep_graves();
    }
}
