//! `posix`: the naive baseline an application writes without a GPU-direct
//! library: `pread` into pageable host memory, then (device memory) one
//! synchronous host-to-device copy; writes copy device-to-host, then `pwrite`.

use super::{pread_full, pwrite_full, Dir, Done, Engine, Op};
use crate::mem::HostBuf;
use hipfile_engine::gpu::{Gpu, Stream};
use std::sync::Arc;

enum Target {
    /// Host memory: the I/O goes straight into the job's buffer.
    Host { base: *mut u8 },
    /// Device memory: through a pageable bounce buffer and a stream.
    Device {
        base: u64,
        bounce: HostBuf,
        stream: Stream,
        gpu: Arc<dyn Gpu>,
    },
}

pub struct PosixEngine {
    slot_bytes: usize,
    target: Target,
    pending: Option<(usize, Op)>,
}

// SAFETY: the raw pointer names the job's buffer, used by this job's thread only.
unsafe impl Send for PosixEngine {}

impl PosixEngine {
    pub fn host(base: u64, slot_bytes: usize) -> PosixEngine {
        PosixEngine {
            slot_bytes,
            target: Target::Host {
                base: base as *mut u8,
            },
            pending: None,
        }
    }

    pub fn device(
        base: u64,
        slot_bytes: usize,
        gpu: &Arc<dyn Gpu>,
        device: i32,
    ) -> Result<PosixEngine, String> {
        let stream = gpu
            .stream_create(device)
            .map_err(|e| format!("stream_create on GPU {device}: {e}"))?;
        Ok(PosixEngine {
            slot_bytes,
            target: Target::Device {
                base,
                // Pageable on purpose (page-aligned only so that --direct=1 works).
                bounce: HostBuf::new(slot_bytes)?,
                stream,
                gpu: gpu.clone(),
            },
            pending: None,
        })
    }

    fn run(&mut self, slot: usize, op: Op) -> Result<usize, String> {
        let off = slot * self.slot_bytes;
        match &mut self.target {
            Target::Host { base } => {
                // SAFETY: slot < slots, so base+off..+len lies in the job's buffer.
                let p = unsafe { base.add(off) };
                match op.dir {
                    Dir::Read => pread_full(op.fd, p, op.len, op.offset),
                    Dir::Write => pwrite_full(op.fd, p, op.len, op.offset),
                }
            }
            Target::Device {
                base,
                bounce,
                stream,
                gpu,
            } => {
                let dev = *base + off as u64;
                match op.dir {
                    Dir::Read => {
                        let n = pread_full(op.fd, bounce.ptr(), op.len, op.offset)?;
                        // SAFETY: bounce holds n bytes and is untouched until the sync.
                        unsafe { gpu.copy_htod_async(dev, bounce.ptr(), n, *stream) }
                            .and_then(|_| gpu.stream_synchronize(*stream))
                            .map_err(|e| format!("host-to-device copy: {e}"))?;
                        Ok(n)
                    }
                    Dir::Write => {
                        // SAFETY: bounce has room for len bytes; nothing reads it before the sync.
                        unsafe { gpu.copy_dtoh_async(bounce.ptr(), dev, op.len, *stream) }
                            .and_then(|_| gpu.stream_synchronize(*stream))
                            .map_err(|e| format!("device-to-host copy: {e}"))?;
                        pwrite_full(op.fd, bounce.ptr(), op.len, op.offset)
                    }
                }
            }
        }
    }
}

impl Engine for PosixEngine {
    fn submit(&mut self, slot: usize, op: Op) -> Result<(), String> {
        if self.pending.is_some() {
            return Err("posix: a second I/O submitted before the first was reaped".into());
        }
        self.pending = Some((slot, op));
        Ok(())
    }

    fn reap(&mut self, _min: usize, out: &mut Vec<Done>) -> Result<(), String> {
        if let Some((slot, op)) = self.pending.take() {
            let result = self.run(slot, op);
            out.push(Done { slot, result });
        }
        Ok(())
    }
}

impl Drop for PosixEngine {
    fn drop(&mut self) {
        if let Target::Device { stream, gpu, .. } = &self.target {
            let _ = gpu.stream_synchronize(*stream);
            gpu.stream_destroy(*stream);
        }
    }
}
