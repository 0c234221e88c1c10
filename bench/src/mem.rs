//! Buffers: page-aligned host memory (optionally pinned with the GPU runtime)
//! and device memory from the engine's GPU runtime, plus the per-job buffer
//! that the engines read into and write from.

use hipfile_engine::bounce::Slab;
use hipfile_engine::gpu::{DevPtr, Gpu, NoGpu, Stream};
use std::sync::Arc;

/// How a host buffer gets its pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostPages {
    /// An anonymous mapping faulted in at allocation (`MAP_POPULATE`), so
    /// that page faults never land in a timed region.
    Populated,
    /// The same on transparent huge pages (`--iomem=mmaphuge`).
    Huge,
    /// glibc's allocator, aligned to a page inside the allocation and left
    /// untouched, as fio's `iomem=malloc` (its default) does: the first I/O
    /// faults the pages in, and their physical layout is the kernel's of
    /// the moment. A 4 MiB O_DIRECT read carries one segment per physically
    /// contiguous run of the buffer, so comparing a run against fio's needs
    /// the same kind of buffer.
    Malloc,
}

/// Page-aligned host memory (so O_DIRECT accepts it): one slot of the
/// engine's bounce slab (`hipfile_engine::bounce::Slab`), which also does
/// the huge-page variant, or a `malloc` allocation.
pub struct HostBuf {
    /// Owns the mapping (unmapped when it drops, after `Drop::drop` below).
    _slab: Option<Slab>,
    /// A `calloc` allocation that holds `ptr..ptr + len`, freed on drop.
    malloced: *mut libc::c_void,
    ptr: *mut u8,
    len: usize,
    /// Set when the GPU runtime pinned it (host_register); undone on drop.
    pinned_by: Option<Arc<dyn Gpu>>,
}

// SAFETY: the memory is owned by this value; sharing it across threads is as
// safe as sharing a Vec<u8> (users take care not to race on the bytes).
unsafe impl Send for HostBuf {}

impl HostBuf {
    pub fn new(len: usize) -> Result<HostBuf, String> {
        HostBuf::with_pages(len, HostPages::Populated)
    }

    /// As [`HostBuf::new`] with the pages `pages` says. `Huge`: a 2 MiB-aligned
    /// region, rounded up to whole 2 MiB, advised MADV_HUGEPAGE before it is
    /// touched, so the kernel backs it with transparent huge pages where it
    /// can (fio's mmaphuge maps a hugetlbfs file instead; this needs no mount).
    pub fn with_pages(len: usize, pages: HostPages) -> Result<HostBuf, String> {
        let huge = pages == HostPages::Huge;
        let len = if huge {
            len.max(1).next_multiple_of(2 << 20)
        } else {
            len.max(1).next_multiple_of(4096)
        };
        if pages == HostPages::Malloc {
            // fio allocates the buffer plus a page and aligns inside it.
            // calloc, so that the bytes are defined before the first read:
            // glibc serves an allocation this large from a fresh mapping,
            // which it knows to be zero and does not touch, as with malloc.
            // SAFETY: a plain allocation, freed on drop.
            let p = unsafe { libc::calloc(1, len + 4095) };
            if p.is_null() {
                return Err(format!("malloc of {} bytes failed", len + 4095));
            }
            return Ok(HostBuf {
                _slab: None,
                malloced: p,
                ptr: (p as usize).next_multiple_of(4096) as *mut u8,
                len,
                pinned_by: None,
            });
        }
        let none: Arc<dyn Gpu> = Arc::new(NoGpu {
            why: "bench host buffer".into(),
        });
        let slab = Slab::with_pages(&[(1, len)], &none, false, huge)
            .map_err(|e| format!("mmap of {len} bytes failed: {e}"))?;
        if huge && !slab.huge() {
            eprintln!("note: --iomem=mmaphuge: no transparent huge pages here; 4 KiB pages");
        }
        Ok(HostBuf {
            ptr: slab.slot(0),
            _slab: Some(slab),
            malloced: std::ptr::null_mut(),
            len,
            pinned_by: None,
        })
    }

    /// Page-locked host memory registered with `gpu` (for async copies).
    pub fn pinned(len: usize, gpu: &Arc<dyn Gpu>) -> Result<HostBuf, String> {
        let mut b = HostBuf::new(len)?;
        // SAFETY: the mapping lives until drop, which unregisters it first.
        unsafe { gpu.host_register(b.ptr, b.len) }
            .map_err(|e| format!("host_register of {} bytes: {e}", b.len))?;
        b.pinned_by = Some(gpu.clone());
        Ok(b)
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is the slab's one slot, initialised by it, or
        // inside the calloc allocation (zeroed).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        if let Some(g) = self.pinned_by.take() {
            // SAFETY: registered in `pinned`; every copy using it has been synchronised.
            let _ = unsafe { g.host_unregister(self.ptr) };
        }
        if !self.malloced.is_null() {
            // SAFETY: from malloc in `with_pages`, freed once.
            unsafe { libc::free(self.malloced) };
        }
    }
}

/// Device memory from `Gpu::device_alloc`, freed on drop.
pub struct DeviceBuf {
    pub ptr: DevPtr,
    gpu: Arc<dyn Gpu>,
}

impl DeviceBuf {
    pub fn new(gpu: &Arc<dyn Gpu>, device: i32, len: usize) -> Result<DeviceBuf, String> {
        let ptr = gpu
            .device_alloc(device, len)
            .map_err(|e| format!("device_alloc of {len} bytes on GPU {device}: {e}"))?;
        Ok(DeviceBuf {
            ptr,
            gpu: gpu.clone(),
        })
    }
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by device_alloc; the job has synchronised its streams.
        let _ = unsafe { self.gpu.device_free(self.ptr) };
    }
}

enum Backing {
    Host(HostBuf),
    Device {
        buf: DeviceBuf,
        /// A stream of its own for verify/fill copies, so they never queue
        /// behind (or in front of) the I/O being measured.
        aux: Stream,
        /// Host staging for those copies (pinned when the runtime allows it).
        staging: HostBuf,
    },
}

/// One job's I/O buffer: `slots` regions of `slot_bytes`, one per I/O in flight.
pub struct JobMem {
    backing: Backing,
    pub slot_bytes: usize,
    pub slots: usize,
    gpu: Arc<dyn Gpu>,
}

impl JobMem {
    pub fn host(
        slots: usize,
        slot_bytes: usize,
        gpu: &Arc<dyn Gpu>,
        pages: HostPages,
    ) -> Result<JobMem, String> {
        Ok(JobMem {
            backing: Backing::Host(HostBuf::with_pages(slots * slot_bytes, pages)?),
            slot_bytes,
            slots,
            gpu: gpu.clone(),
        })
    }

    pub fn device(
        slots: usize,
        slot_bytes: usize,
        gpu: &Arc<dyn Gpu>,
        device: i32,
    ) -> Result<JobMem, String> {
        let buf = DeviceBuf::new(gpu, device, slots * slot_bytes)?;
        let aux = gpu
            .stream_create(device)
            .map_err(|e| format!("stream_create on GPU {device}: {e}"))?;
        let staging = HostBuf::pinned(slot_bytes, gpu).or_else(|_| HostBuf::new(slot_bytes))?;
        Ok(JobMem {
            backing: Backing::Device { buf, aux, staging },
            slot_bytes,
            slots,
            gpu: gpu.clone(),
        })
    }

    pub fn is_device(&self) -> bool {
        matches!(self.backing, Backing::Device { .. })
    }

    /// The buffer's base: a host pointer or a device address.
    pub fn base(&self) -> u64 {
        match &self.backing {
            Backing::Host(h) => h.ptr() as u64,
            Backing::Device { buf, .. } => buf.ptr,
        }
    }

    pub fn len(&self) -> usize {
        self.slots * self.slot_bytes
    }

    /// The first `len` bytes of `slot` as host memory (a device-to-host copy
    /// on the aux stream for device memory). The slot's I/O must have completed.
    pub fn fetch(&mut self, slot: usize, len: usize) -> Result<&[u8], String> {
        let off = slot * self.slot_bytes;
        match &mut self.backing {
            Backing::Host(h) => Ok(&h.as_slice()[off..off + len]),
            Backing::Device { buf, aux, staging } => {
                // SAFETY: staging holds slot_bytes >= len; the source lies in our allocation.
                unsafe {
                    self.gpu
                        .copy_dtoh_async(staging.ptr(), buf.ptr + off as u64, len, *aux)
                }
                .and_then(|_| self.gpu.stream_synchronize(*aux))
                .map_err(|e| format!("device-to-host copy for verify: {e}"))?;
                Ok(&staging.as_slice()[..len])
            }
        }
    }

    /// Write the first `len` bytes of `slot` with `f` (through host staging and
    /// a host-to-device copy for device memory). No I/O may use the slot.
    pub fn store(
        &mut self,
        slot: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<(), String> {
        let off = slot * self.slot_bytes;
        match &mut self.backing {
            Backing::Host(h) => {
                f(&mut h.as_mut_slice()[off..off + len]);
                Ok(())
            }
            Backing::Device { buf, aux, staging } => {
                f(&mut staging.as_mut_slice()[..len]);
                // SAFETY: staging stays untouched until the synchronize below.
                unsafe {
                    self.gpu
                        .copy_htod_async(buf.ptr + off as u64, staging.ptr(), len, *aux)
                }
                .and_then(|_| self.gpu.stream_synchronize(*aux))
                .map_err(|e| format!("host-to-device copy of write data: {e}"))
            }
        }
    }
}

impl Drop for JobMem {
    fn drop(&mut self) {
        if let Backing::Device { aux, .. } = &self.backing {
            let _ = self.gpu.stream_synchronize(*aux);
            self.gpu.stream_destroy(*aux);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_buffers_are_aligned_writable_and_whole() {
        for pages in [HostPages::Populated, HostPages::Huge, HostPages::Malloc] {
            let huge = pages == HostPages::Huge;
            let mut b = HostBuf::with_pages(3 << 20, pages).unwrap();
            let align = if huge { 2 << 20 } else { 4096 };
            assert_eq!(b.ptr() as usize % align, 0, "{pages:?}");
            assert_eq!(b.as_slice().len(), if huge { 4 << 20 } else { 3 << 20 });
            let n = b.as_slice().len();
            b.as_mut_slice()[n - 1] = 7;
            assert!(b.as_slice()[..n - 1].iter().all(|&x| x == 0));
            assert_eq!(b.as_slice()[n - 1], 7);
        }
    }
}
