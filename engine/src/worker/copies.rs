//! GPU copies and their events: where a chunk waits for its copy.
//!
//! A chunk whose copy is queued is an [`OnGpu`] in [`Copies`], in the order
//! the copies were queued, until an event recorded after its copy has
//! completed. One event per device and pass covers every copy the worker
//! queued on that device's stream in the pass (a stream runs its copies in
//! order): a worker that queued several copies together (the reads of a
//! batch that completed together) records, polls and waits on one event,
//! not one per copy. On the H200, an event after every 1 MiB copy carried
//! 44–45 GB/s; one after every four, 47–48.

use super::chunk::{GpuCopy, OnGpu};
use crate::error::{Error, Result};
use crate::gpu::{Event, Gpu, GpuError, GpuResult, HtodCopy, Stream};
use crate::stats::Stats;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Worker streams made ahead of time, one per worker and device.
///
/// Creating a stream while a user's stream is parked by a stream op can stall
/// inside the driver: on the H200 `cuStreamCreate` spun forever once the
/// context held many streams, and the op it was meant to serve never finished. So the stream path calls
/// [`StreamPool::prepare`] for a device before it parks the first stream on it,
/// and a worker takes its prepared stream instead of creating one then.
#[derive(Default)]
pub(crate) struct StreamPool {
    /// device -> the stream of each worker, until the worker takes it.
    ready: Mutex<HashMap<i32, Vec<Option<Stream>>>>,
}

impl StreamPool {
    /// Make one stream per worker on `device`, unless that was done already.
    pub(crate) fn prepare(&self, gpu: &dyn Gpu, device: i32, workers: usize) -> Result<()> {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        if ready.contains_key(&device) {
            return Ok(());
        }
        let mut made = Vec::with_capacity(workers);
        for _ in 0..workers {
            match gpu.stream_create(device) {
                Ok(s) => made.push(Some(s)),
                Err(e) => {
                    for s in made.into_iter().flatten() {
                        gpu.stream_destroy(s);
                    }
                    crate::log_error!("cannot create worker streams on device {device}: {e}");
                    return Err(Error::Gpu(e));
                }
            }
        }
        ready.insert(device, made);
        Ok(())
    }

    pub(super) fn take(&self, device: i32, worker: usize) -> Option<Stream> {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        ready.get_mut(&device)?.get_mut(worker)?.take()
    }

    /// Destroy the streams no worker took (after the workers have exited).
    pub(crate) fn release(&self, gpu: &dyn Gpu) {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        for (_, v) in ready.drain() {
            for s in v.into_iter().flatten() {
                gpu.stream_destroy(s);
            }
        }
    }
}

/// A chunk on the GPU and what is known of its copy.
struct Copying {
    chunk: OnGpu,
    /// A host-to-device copy not yet given to the runtime (the pass's batch).
    htod: Option<HtodCopy>,
    /// The event recorded after this chunk's copy, if one was; a copy
    /// without one completes with the next event on its stream.
    event: Option<Event>,
    /// Queued since the last [`Copies::flush`].
    unflushed: bool,
    /// The runtime refused the copy or its event (the chunk fails).
    failed: Option<GpuError>,
}

/// The worker's streams and events, and its chunks on the GPU.
pub(super) struct Copies {
    worker: usize,
    gpu: Arc<dyn Gpu>,
    stats: Arc<Stats>,
    /// Streams prepared for this engine's workers (see [`StreamPool`]).
    pool: Arc<StreamPool>,
    streams: HashMap<i32, Stream>,
    /// Events by (slot, device): a slot's event is recorded again only
    /// after the chunk that held the slot has seen it complete.
    events: HashMap<(usize, i32), Event>,
    /// Chunks with a copy in flight, in the order the copies were queued.
    copying: VecDeque<Copying>,
    /// Entries of `copying` queued since the last flush.
    unflushed: usize,
    /// Reused by every flush: no allocation per pass.
    batch: Vec<HtodCopy>,
    devices: Vec<i32>,
}

impl Copies {
    /// Room for `cap` chunks on the GPU (the most a worker holds).
    pub(super) fn new(
        worker: usize,
        gpu: Arc<dyn Gpu>,
        stats: Arc<Stats>,
        pool: Arc<StreamPool>,
        cap: usize,
    ) -> Copies {
        Copies {
            worker,
            gpu,
            stats,
            pool,
            streams: HashMap::new(),
            events: HashMap::new(),
            copying: VecDeque::with_capacity(cap),
            unflushed: 0,
            batch: Vec::with_capacity(cap),
            devices: Vec::new(),
        }
    }

    /// No chunk is on the GPU.
    pub(super) fn is_empty(&self) -> bool {
        self.copying.is_empty()
    }

    /// Copies were queued since the last [`Copies::flush`].
    pub(super) fn has_unflushed(&self) -> bool {
        self.unflushed > 0
    }

    /// Queue `chunk`'s copy: a device-to-host copy at once, a host-to-device
    /// copy with the pass's batch at the next [`Copies::flush`]. A chunk whose
    /// copy the runtime refused goes to `failed`, its slot safe to reuse.
    pub(super) fn queue(
        &mut self,
        chunk: OnGpu,
        copy: GpuCopy,
        failed: &mut Vec<(OnGpu, GpuError)>,
    ) {
        let htod = match copy {
            GpuCopy::Htod(c) => Some(c),
            GpuCopy::Dtoh { dst, src, len } => {
                let device = chunk.device;
                let queued = self.stream_for(device).and_then(|stream| {
                    self.gpu.bind_thread(device)?;
                    // SAFETY: `dst..dst+len` is this chunk's slot, which the
                    // copy owns until its event completes.
                    unsafe { self.gpu.copy_dtoh_async(dst, src, len, stream) }
                });
                if let Err(e) = queued {
                    // The copy may have been queued before the failure.
                    self.synchronize(device);
                    failed.push((chunk, e));
                    return;
                }
                Stats::add(&self.stats.gpu_copies, 1);
                None
            }
        };
        self.copying.push_back(Copying {
            chunk,
            htod,
            event: None,
            unflushed: true,
            failed: None,
        });
        self.unflushed += 1;
    }

    /// Give this pass's host-to-device copies to the runtime, one batch per
    /// device, and record one event per device after the pass's copies.
    /// Chunks whose copy or event the runtime refused go to `failed`, after
    /// their stream has been synchronised (their slots are then safe).
    pub(super) fn flush(&mut self, failed: &mut Vec<(OnGpu, GpuError)>) {
        if self.unflushed == 0 {
            return;
        }
        self.devices.clear();
        for c in self.copying.iter().filter(|c| c.unflushed) {
            if !self.devices.contains(&c.chunk.device) {
                self.devices.push(c.chunk.device);
            }
        }
        self.devices.sort_unstable();
        for k in 0..self.devices.len() {
            let device = self.devices[k];
            self.batch.clear();
            self.batch.extend(
                self.copying
                    .iter()
                    .filter(|c| c.unflushed && c.chunk.device == device)
                    .filter_map(|c| c.htod),
            );
            if let Err(e) = self.submit_htod(device) {
                for c in self.copying.iter_mut() {
                    if c.unflushed && c.chunk.device == device && c.htod.is_some() {
                        c.failed = Some(e.clone());
                    }
                }
            }
            let last = self
                .copying
                .iter()
                .rposition(|c| c.unflushed && c.chunk.device == device && c.failed.is_none());
            let Some(last) = last else {
                continue;
            };
            let slot = self.copying[last].chunk.slot_index();
            match self.record_event(slot, device) {
                Ok(ev) => self.copying[last].event = Some(ev),
                Err(e) => {
                    for c in self.copying.iter_mut() {
                        if c.unflushed && c.chunk.device == device {
                            c.failed = Some(e.clone());
                        }
                    }
                }
            }
        }
        for c in self.copying.iter_mut().filter(|c| c.unflushed) {
            c.unflushed = false;
            c.htod = None;
        }
        self.unflushed = 0;
        let mut i = 0;
        while i < self.copying.len() {
            if self.copying[i].failed.is_none() {
                i += 1;
                continue;
            }
            if let Some(c) = self.copying.remove(i) {
                // The copy may have been queued before the failure: the GPU
                // must be done with the slot before it is reused.
                self.synchronize(c.chunk.device);
                if let Some(e) = c.failed {
                    failed.push((c.chunk, e));
                }
            }
        }
    }

    /// Give the batch of host-to-device copies to `device`'s stream.
    fn submit_htod(&mut self, device: i32) -> GpuResult<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let stream = self.stream_for(device)?;
        self.gpu.bind_thread(device)?;
        // SAFETY: each source lies in its chunk's slot, which the copy owns
        // until its event completes; each destination is the chunk's device range.
        unsafe { self.gpu.copy_htod_batch_async(&self.batch, stream)? };
        Stats::add(&self.stats.gpu_copies, self.batch.len() as u64);
        if self.batch.len() > 1 {
            Stats::add(&self.stats.gpu_copy_batches, 1);
        }
        Ok(())
    }

    /// Record the event of `slot` on the worker's stream for `device`.
    fn record_event(&mut self, slot: usize, device: i32) -> GpuResult<Event> {
        let stream = self.stream_for(device)?;
        let ev = match self.events.get(&(slot, device)) {
            Some(e) => *e,
            None => {
                self.gpu.bind_thread(device)?;
                let e = self.gpu.event_create()?;
                self.events.insert((slot, device), e);
                e
            }
        };
        self.gpu.bind_thread(device)?;
        self.gpu.event_record(ev, stream)?;
        Stats::add(&self.stats.gpu_events, 1);
        Ok(ev)
    }

    /// Move the chunks whose copies have ended into `ended`, with the
    /// outcome: an event that has completed ends its own chunk's copy and
    /// every earlier one on its device.
    pub(super) fn poll(&mut self, ended: &mut Vec<(OnGpu, GpuResult<()>)>) {
        let mut i = 0;
        while i < self.copying.len() {
            let Some(ev) = self.copying[i].event else {
                // Covered by the next event on its stream.
                i += 1;
                continue;
            };
            let r = self.gpu.event_query(ev);
            if matches!(r, Ok(false)) {
                i += 1;
                continue;
            }
            let device = self.copying[i].chunk.device;
            let r = r.map(|_| ());
            if r.is_err() {
                // The GPU must be done with the slots before they are reused.
                self.synchronize(device);
            }
            // Every entry at or before i on this device has ended.
            let (mut j, mut end) = (0, i + 1);
            while j < end {
                if self.copying[j].chunk.device != device {
                    j += 1;
                    continue;
                }
                if let Some(c) = self.copying.remove(j) {
                    ended.push((c.chunk, r.clone()));
                }
                end -= 1;
            }
            i = j;
        }
    }

    /// Wait until the oldest copy that has an event recorded after it ends
    /// (when nothing else can happen first: nothing is in the kernel): ask
    /// the event for up to `spin`, yielding the core between asks, then
    /// sleep on it.
    ///
    /// The sleep is the runtime's blocking-sync wait, which wakes on the
    /// GPU's interrupt. Under Firecracker that wake-up came late enough to
    /// cost most of a mid-size request: eight threads each reading 2 MiB
    /// into one pinned buffer and copying it to the GPU
    /// (`engine/examples/hot_probe.rs`, `bufs=1`) moved 9.4–9.9 GB/s
    /// sleeping on the event and 35 GB/s asking it in a loop, and 16 MiB
    /// requests read 8.6–8.9 GB/s with the sleep against 22.7–22.8 with a
    /// 3 ms spin first (H100, 105 MiB-L3 host). Yielding between asks
    /// leaves the core to a worker whose page-cache copy is runnable.
    pub(super) fn wait_oldest(&self, spin: std::time::Duration) {
        let Some(ev) = self.copying.iter().find_map(|c| c.event) else {
            return;
        };
        if !spin.is_zero() {
            let until = std::time::Instant::now() + spin;
            loop {
                if !matches!(self.gpu.event_query(ev), Ok(false)) {
                    // Ended, or failed (poll() reports it).
                    return;
                }
                if std::time::Instant::now() >= until {
                    break;
                }
                std::thread::yield_now();
            }
        }
        crate::log_debug!("hipfile-io-{}: waiting for a GPU copy", self.worker);
        // A copy still running after the spin (a long queue on the link):
        // sleep rather than hold the core any longer.
        let _ = self.gpu.event_synchronize(ev);
    }

    fn stream_for(&mut self, device: i32) -> GpuResult<Stream> {
        if let Some(s) = self.streams.get(&device) {
            return Ok(*s);
        }
        let s = match self.pool.take(device, self.worker) {
            Some(s) => s,
            None => {
                // No stream op has used this device yet: no stream can be parked on it.
                self.gpu.bind_thread(device)?;
                crate::log_debug!("hipfile-io-{}: new stream on device {device}", self.worker);
                self.gpu.stream_create(device)?
            }
        };
        self.streams.insert(device, s);
        Ok(s)
    }

    /// Wait until the worker's stream on `device` has run everything queued.
    fn synchronize(&self, device: i32) {
        if let Some(s) = self.streams.get(&device) {
            let _ = self.gpu.stream_synchronize(*s);
        }
    }

    /// Destroy the streams and events (the worker is exiting, nothing in flight).
    pub(super) fn teardown(&mut self) {
        for (_, s) in self.streams.drain() {
            let _ = self.gpu.stream_synchronize(s);
            self.gpu.stream_destroy(s);
        }
        for (_, e) in self.events.drain() {
            self.gpu.event_destroy(e);
        }
    }
}
