//! Bounce slabs: page-aligned host memory, split into equal slots, page-locked
//! with the GPU runtime (so async copies run at link speed) and registered
//! with the worker's io_uring (so reads and writes use READ_FIXED/WRITE_FIXED).
//!
//! Both pinning and registration count against RLIMIT_MEMLOCK for non-root
//! users (8 MiB by default on many systems). When either fails the slab still
//! works: registration falls back to plain READ/WRITE, pinning to pageable
//! copies; each is logged once with the way to raise the limit.

use crate::gpu::Gpu;
use crate::{log::Level, log_once};
use std::sync::Arc;

pub struct Slab {
    base: *mut u8,
    bytes: usize,
    slot_bytes: usize,
    slots: usize,
    small_bytes: usize,
    small: usize,
    /// The GPU runtime that pinned the slab, to unpin it on drop.
    pinned_by: Option<Arc<dyn Gpu>>,
}

// SAFETY: the slab is plain memory; the worker that owns it hands slots to the
// kernel and GPU under its in-flight rules; moving the owner between threads is fine.
unsafe impl Send for Slab {}

impl Slab {
    /// Map `slots` slots of `slot_bytes` and `small` slots of `small_bytes` (each
    /// rounded up to 4 KiB), and pin them with `gpu` when it has devices and `pin` is set.
    /// Slot indices: 0..slots are the large ones, slots..slots+small the small ones.
    pub fn new(
        slots: usize,
        slot_bytes: usize,
        small: usize,
        small_bytes: usize,
        gpu: &Arc<dyn Gpu>,
        pin: bool,
    ) -> std::io::Result<Slab> {
        let slot_bytes = slot_bytes.div_ceil(4096) * 4096;
        let small_bytes = small_bytes.div_ceil(4096) * 4096;
        let bytes = slots * slot_bytes + small * small_bytes;
        // SAFETY: an anonymous private mapping with no address hint has no preconditions.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = p.cast::<u8>();
        let mut slab = Slab {
            base,
            bytes,
            slot_bytes,
            slots,
            small_bytes,
            small,
            pinned_by: None,
        };
        if pin && gpu.has_devices() {
            // SAFETY: the mapping lives until `drop`, which unregisters it first.
            match unsafe { gpu.host_register(base, bytes) } {
                Ok(()) => slab.pinned_by = Some(gpu.clone()),
                Err(e) => log_once!(
                    Level::Warn,
                    "could not page-lock {} MiB of bounce memory with {} ({e}); GPU copies \
                     will use pageable memory and run slower. Raise the memory-lock limit \
                     (ulimit -l, or LimitMEMLOCK= for a service) or lower HIPFILE_IO_THREADS / \
                     HIPFILE_QUEUE_DEPTH / HIPFILE_CHUNK_KB",
                    bytes >> 20,
                    gpu.name()
                ),
            }
        }
        Ok(slab)
    }

    /// Large slots (indices 0..slots()).
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Small slots (indices slots()..slots()+small_slots()).
    pub fn small_slots(&self) -> usize {
        self.small
    }

    /// Bytes of slot `i`.
    pub fn slot_len(&self, i: usize) -> usize {
        if i < self.slots {
            self.slot_bytes
        } else {
            self.small_bytes
        }
    }

    pub fn is_pinned(&self) -> bool {
        self.pinned_by.is_some()
    }

    /// Start of slot `i` (4 KiB aligned).
    pub fn slot(&self, i: usize) -> *mut u8 {
        assert!(i < self.slots + self.small);
        let off = if i < self.slots {
            i * self.slot_bytes
        } else {
            self.slots * self.slot_bytes + (i - self.slots) * self.small_bytes
        };
        // SAFETY: i is a valid slot index, so the offset stays inside the mapping.
        unsafe { self.base.add(off) }
    }

    /// One iovec per slot, for `Ring::register_buffers` (buffer index = slot index).
    pub fn iovecs(&self) -> Vec<libc::iovec> {
        (0..self.slots + self.small)
            .map(|i| libc::iovec {
                iov_base: self.slot(i).cast(),
                iov_len: self.slot_len(i),
            })
            .collect()
    }
}

impl Drop for Slab {
    fn drop(&mut self) {
        if let Some(gpu) = self.pinned_by.take() {
            // SAFETY: we registered `base` in `new`; the owner drops the slab only after
            // every copy that used it has completed.
            let _ = unsafe { gpu.host_unregister(self.base) };
        }
        // SAFETY: `base..base+bytes` is the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.bytes) };
    }
}

/// Log (once per process) that io_uring buffer registration failed.
pub fn log_registration_failure(bytes: usize, err: &std::io::Error) {
    log_once!(
        Level::Warn,
        "io_uring could not register {} MiB of bounce buffers ({err}); using unregistered \
         reads and writes, which cost a little more CPU per I/O. Raise the memory-lock limit \
         (ulimit -l unlimited, or LimitMEMLOCK=infinity for a service) to enable it",
        bytes >> 20
    );
}
