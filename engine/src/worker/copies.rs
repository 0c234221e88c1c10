//! GPU copies and their events: where a chunk waits for its copy.

use super::{Phase, Worker};
use crate::error::{Error, OpError, Result};
use crate::gpu::{Event, Gpu, GpuError, HtodCopy, Stream};
use crate::request::Memory;
use crate::stats::{Stage, Stats};
use std::collections::HashMap;
use std::sync::Mutex;

/// Worker streams made ahead of time, one per worker and device.
///
/// Creating a stream while a user's stream is parked by a stream op can stall
/// inside the driver: on the H200 `cuStreamCreate` spun forever once the
/// context held many streams (two leaked per seed by the stream fault test),
/// and the op it was meant to serve never finished. So the stream path calls
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

impl Worker {
    pub(super) fn stream_for(&mut self, device: i32) -> std::result::Result<Stream, GpuError> {
        if let Some(s) = self.streams.get(&device) {
            return Ok(*s);
        }
        let s = match self.pool.take(device, self.id) {
            Some(s) => s,
            None => {
                // No stream op has used this device yet: no stream can be parked on it.
                self.gpu.bind_thread(device)?;
                crate::log_debug!("hipfile-io-{}: new stream on device {device}", self.id);
                self.gpu.stream_create(device)?
            }
        };
        self.streams.insert(device, s);
        Ok(s)
    }

    pub(super) fn event_for(
        &mut self,
        slot: usize,
        device: i32,
    ) -> std::result::Result<Event, GpuError> {
        if let Some(e) = self.events.get(&(slot, device)) {
            return Ok(*e);
        }
        self.gpu.bind_thread(device)?;
        let e = self.gpu.event_create()?;
        self.events.insert((slot, device), e);
        Ok(e)
    }

    /// The event recorded after chunk `id`'s copy, if one was.
    pub(super) fn event_of(&self, id: usize) -> Option<Event> {
        let a = self.table[id].as_ref()?;
        if !a.has_event {
            return None;
        }
        self.events.get(&(a.slot?, self.device_of(id)?)).copied()
    }

    pub(super) fn device_of(&self, id: usize) -> Option<i32> {
        match self.table[id].as_ref()?.chunk.mem {
            Memory::Device { device, .. } => Some(device),
            Memory::Host(_) => None,
        }
    }

    /// Queue chunk `id`'s copy on the worker's stream for `device`. Its
    /// completion event is recorded by the next [`Worker::flush_copies`].
    pub(super) fn enqueue_copy(
        &mut self,
        id: usize,
        device: i32,
        copy: impl FnOnce(&dyn Gpu, Stream) -> std::result::Result<(), GpuError>,
    ) -> std::result::Result<(), GpuError> {
        if self.table[id].as_ref().and_then(|a| a.slot).is_none() {
            return Err(GpuError::InvalidValue("no slot"));
        }
        let stream = self.stream_for(device)?;
        self.gpu.bind_thread(device)?;
        copy(self.gpu.as_ref(), stream)?;
        Stats::add(&self.stats.gpu_copies, 1);
        self.act(id).has_event = false;
        self.copying.push_back(id);
        self.unflushed.push(id);
        Ok(())
    }

    /// Record one completion event per device after the copies queued since
    /// the last call. A stream runs its copies in order, so that event ends
    /// them all: a worker that queued several copies in one pass (the reads
    /// of a batch that completed together) records, polls and waits on one
    /// event, not one per copy. On the H200, an event after every 1 MiB copy
    /// carried 44–45 GB/s; one after every four, 47–48 (copy_shape, run 13).
    pub(super) fn flush_copies(&mut self) {
        if self.unflushed.is_empty() {
            return;
        }
        let ids = std::mem::take(&mut self.unflushed);
        let pending = std::mem::take(&mut self.pending_htod);
        let mut devices: Vec<i32> = ids.iter().filter_map(|&id| self.device_of(id)).collect();
        devices.sort_unstable();
        devices.dedup();
        for device in devices {
            let (ids_here, batch): (Vec<usize>, Vec<HtodCopy>) = pending
                .iter()
                .filter(|(id, _)| self.device_of(*id) == Some(device))
                .copied()
                .unzip();
            if let Err(e) = self.submit_htod(device, &batch) {
                // The stream is synchronised before any of these slots is reused.
                for id in ids_here {
                    self.finish_after_gpu_error(id, e.clone());
                }
            }
            let Some(&last) = ids
                .iter()
                .rev()
                .find(|&&id| self.device_of(id) == Some(device) && self.copying.contains(&id))
            else {
                continue;
            };
            if let Err(e) = self.record_event(last, device) {
                let on_device: Vec<usize> = ids
                    .iter()
                    .copied()
                    .filter(|&id| self.device_of(id) == Some(device))
                    .collect();
                for id in on_device {
                    self.finish_after_gpu_error(id, e.clone());
                }
            } else {
                self.act(last).has_event = true;
            }
        }
    }

    /// Give this pass's host-to-device copies to `device` to the runtime,
    /// as one batch on the worker's stream there.
    pub(super) fn submit_htod(
        &mut self,
        device: i32,
        batch: &[HtodCopy],
    ) -> std::result::Result<(), GpuError> {
        if batch.is_empty() {
            return Ok(());
        }
        let stream = self.stream_for(device)?;
        self.gpu.bind_thread(device)?;
        // SAFETY: each source lies in its chunk's slot, which stays untouched
        // until the copy's event completes (the slot is freed in `finish`
        // only); each destination is the chunk's device range.
        unsafe { self.gpu.copy_htod_batch_async(batch, stream)? };
        Stats::add(&self.stats.gpu_copies, batch.len() as u64);
        if batch.len() > 1 {
            Stats::add(&self.stats.gpu_copy_batches, 1);
        }
        Ok(())
    }

    /// Record chunk `id`'s slot event on the worker's stream for `device`.
    pub(super) fn record_event(
        &mut self,
        id: usize,
        device: i32,
    ) -> std::result::Result<(), GpuError> {
        let slot = self.table[id]
            .as_ref()
            .and_then(|a| a.slot)
            .ok_or(GpuError::InvalidValue("no slot"))?;
        let stream = self.stream_for(device)?;
        let ev = self.event_for(slot, device)?;
        self.gpu.bind_thread(device)?;
        self.gpu.event_record(ev, stream)?;
        Stats::add(&self.stats.gpu_events, 1);
        Ok(())
    }

    /// Queue chunk `id`'s host-to-device copy for this pass's batch: it is
    /// given to the runtime, with the pass's other copies to the chunk's
    /// device, by the next [`Worker::flush_copies`] (later in the same pass).
    pub(super) fn copy_to_device(&mut self, id: usize, dst: u64, src: *const u8, len: usize) {
        self.enter(id, Stage::Gpu);
        self.act(id).phase = Phase::ToDevice;
        if self.table[id].as_ref().and_then(|a| a.slot).is_none() {
            self.finish_after_gpu_error(id, GpuError::InvalidValue("no slot"));
            return;
        }
        self.act(id).has_event = false;
        self.pending_htod.push((id, HtodCopy { dst, src, len }));
        self.copying.push_back(id);
        self.unflushed.push(id);
    }

    pub(super) fn copy_from_device(&mut self, id: usize) {
        let a = self.table[id].as_ref().expect("active entry");
        let Memory::Device { ptr, device } = a.chunk.mem else {
            self.next_write(id);
            return;
        };
        let dst = self.buf_at(a, 0);
        let len = a.chunk.len;
        self.enter(id, Stage::Gpu);
        self.act(id).phase = Phase::FromDevice;
        // SAFETY: `dst..dst+len` is this chunk's slot, untouched until the event completes.
        let r = self.enqueue_copy(id, device, |g, s| unsafe {
            g.copy_dtoh_async(dst, ptr, len, s)
        });
        if let Err(e) = r {
            self.finish_after_gpu_error(id, e);
        }
    }

    pub(super) fn finish_after_gpu_error(&mut self, id: usize, e: GpuError) {
        // The copy may have been queued before the failure: make sure the GPU is
        // done with the slot before it is reused.
        if let Some(Memory::Device { device, .. }) = self.table[id].as_ref().map(|a| a.chunk.mem) {
            if let Some(s) = self.streams.get(&device) {
                let _ = self.gpu.stream_synchronize(*s);
            }
        }
        self.copying.retain(|&c| c != id);
        self.finish(id, Err(Error::Gpu(e)));
    }

    /// Finish the chunks whose copies have completed: an event that has
    /// completed ends its own chunk's copy and every earlier one on its device.
    pub(super) fn poll_copies(&mut self) {
        let mut i = 0;
        while i < self.copying.len() {
            let id = self.copying[i];
            let Some(device) = self.device_of(id) else {
                self.copying.remove(i);
                self.finish(id, Err(OpError::InternalError.into()));
                continue;
            };
            let Some(ev) = self.event_of(id) else {
                // Covered by the next event on its stream.
                i += 1;
                continue;
            };
            let r = self.gpu.event_query(ev);
            if matches!(r, Ok(false)) {
                i += 1;
                continue;
            }
            let ended: Vec<usize> = self
                .copying
                .iter()
                .take(i + 1)
                .copied()
                .filter(|&c| self.device_of(c) == Some(device))
                .collect();
            self.copying.retain(|c| !ended.contains(c));
            // Every removed chunk stood at or before position i.
            i = i + 1 - ended.len();
            for c in ended {
                match &r {
                    Ok(_) => self.copy_done(c),
                    Err(e) => self.finish_after_gpu_error(c, e.clone()),
                }
            }
        }
    }

    pub(super) fn copy_done(&mut self, id: usize) {
        let a = self.act(id);
        match a.phase {
            Phase::ToDevice => {
                let done = a.done;
                self.finish(id, Ok(done));
            }
            Phase::FromDevice => {
                self.enter(id, Stage::Storage);
                self.next_write(id)
            }
            _ => self.finish(id, Err(OpError::InternalError.into())),
        }
    }
}
