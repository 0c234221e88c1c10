//! `copy`: the link limit. Pinned host memory (mmap + host_register) to device
//! memory with async copies of `bs`, `iodepth` in flight on one stream per job;
//! `--rw=write` copies device to host. No file I/O at all.

use super::{Dir, Done, Engine, EventFifo, Op};
use crate::mem::HostBuf;
use hipfile_engine::gpu::{Gpu, Stream};
use std::sync::Arc;

pub struct CopyEngine {
    gpu: Arc<dyn Gpu>,
    host: HostBuf,
    dev_base: u64,
    slot_bytes: usize,
    stream: Stream,
    fifo: Option<EventFifo>,
    lens: Vec<usize>,
}

impl CopyEngine {
    pub fn new(
        gpu: &Arc<dyn Gpu>,
        device: i32,
        dev_base: u64,
        slot_bytes: usize,
        slots: usize,
    ) -> Result<CopyEngine, String> {
        let host = HostBuf::pinned(slots * slot_bytes, gpu)?;
        let stream = gpu
            .stream_create(device)
            .map_err(|e| format!("stream_create on GPU {device}: {e}"))?;
        let fifo = match EventFifo::new(gpu, slots) {
            Ok(f) => f,
            Err(e) => {
                gpu.stream_destroy(stream);
                return Err(e);
            }
        };
        Ok(CopyEngine {
            gpu: gpu.clone(),
            host,
            dev_base,
            slot_bytes,
            stream,
            fifo: Some(fifo),
            lens: vec![0; slots],
        })
    }
}

impl Engine for CopyEngine {
    fn submit(&mut self, slot: usize, op: Op) -> Result<(), String> {
        let off = slot * self.slot_bytes;
        let dev = self.dev_base + off as u64;
        // SAFETY: slot < slots, so host+off..+len is inside the pinned buffer, which
        // lives until drop (after a synchronize); the device range is the job's allocation.
        let host = unsafe { self.host.ptr().add(off) };
        // SAFETY: as above; the slot is not touched until its event completes.
        let r = unsafe {
            match op.dir {
                Dir::Read => self.gpu.copy_htod_async(dev, host, op.len, self.stream),
                Dir::Write => self.gpu.copy_dtoh_async(host, dev, op.len, self.stream),
            }
        };
        r.map_err(|e| format!("async copy: {e}"))?;
        self.lens[slot] = op.len;
        match &mut self.fifo {
            Some(f) => f.record(slot, self.stream),
            None => Err("copy engine already finished".into()),
        }
    }

    fn reap(&mut self, min: usize, out: &mut Vec<Done>) -> Result<(), String> {
        let lens = &self.lens;
        match &mut self.fifo {
            Some(f) => f.reap(min, out, |slot| Ok(lens[slot])),
            None => Ok(()),
        }
    }

    fn finish(&mut self) -> Result<(), String> {
        self.gpu
            .stream_synchronize(self.stream)
            .map_err(|e| format!("stream_synchronize: {e}"))
    }
}

impl Drop for CopyEngine {
    fn drop(&mut self) {
        let _ = self.gpu.stream_synchronize(self.stream);
        self.fifo = None;
        self.gpu.stream_destroy(self.stream);
    }
}
