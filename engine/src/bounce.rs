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
    /// The whole mapping (larger than `bytes` when aligned for huge pages).
    map: *mut u8,
    map_bytes: usize,
    /// (first slot index, count, bytes per slot) for each size class.
    classes: Vec<(usize, usize, usize)>,
    /// The GPU runtime that pinned the slab, to unpin it on drop.
    pinned_by: Option<Arc<dyn Gpu>>,
    /// Huge pages were asked for and the kernel may give them (THP not off).
    huge: bool,
}

// SAFETY: the slab is plain memory; the worker that owns it hands slots to the
// kernel and GPU under its in-flight rules; moving the owner between threads is fine.
unsafe impl Send for Slab {}

impl Slab {
    /// Map one region holding, for each `(count, bytes)` class, `count` slots of
    /// `bytes` (rounded up to 4 KiB), and pin it with `gpu` when it has devices
    /// and `pin` is set. Slot indices run through the classes in order.
    pub fn new(classes: &[(usize, usize)], gpu: &Arc<dyn Gpu>, pin: bool) -> std::io::Result<Slab> {
        Slab::with_pages(classes, gpu, pin, false)
    }

    /// As [`Slab::new`]; `huge`: ask for transparent huge pages (the region
    /// starts on a 2 MiB boundary and is advised MADV_HUGEPAGE before it is
    /// touched). Physically contiguous slots reach a block device as fewer
    /// segments: a 1 MiB O_DIRECT read from 4 KiB pages has 256, above a
    /// virtio disk's 254, so it is split, and neighbouring reads cannot merge.
    /// Where the kernel gives no huge pages the slab is plain memory.
    pub fn with_pages(
        classes: &[(usize, usize)],
        gpu: &Arc<dyn Gpu>,
        pin: bool,
        huge: bool,
    ) -> std::io::Result<Slab> {
        let mut table = Vec::with_capacity(classes.len());
        let mut first = 0;
        let mut bytes = 0;
        for &(count, b) in classes {
            let b = b.div_ceil(4096) * 4096;
            table.push((first, count, b));
            first += count;
            bytes += count * b;
        }
        let bytes = bytes.max(4096);
        const HUGE: usize = 2 << 20;
        // A huge page backs only a whole, aligned 2 MiB of an madvised range:
        // advise (and touch) whole huge pages, or a slab's tail, and all of a
        // slab under 2 MiB, would stay on 4 KiB pages.
        let advised = bytes.next_multiple_of(HUGE);
        let map_bytes = if huge { advised + HUGE } else { bytes };
        let populate = if huge { 0 } else { libc::MAP_POPULATE };
        // SAFETY: an anonymous private mapping with no address hint has no preconditions.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | populate,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let map = p.cast::<u8>();
        let mut got_huge = false;
        let base = if huge {
            let base = (map as usize).next_multiple_of(HUGE) as *mut u8;
            // SAFETY: advice and first touch on our own fresh mapping; `base +
            // advised` stays inside it (HUGE bytes of slack were mapped).
            unsafe {
                if libc::madvise(base.cast(), advised, libc::MADV_HUGEPAGE) != 0 {
                    log_once!(
                        Level::Info,
                        "MADV_HUGEPAGE refused ({}); bounce slabs use 4 KiB pages",
                        std::io::Error::last_os_error()
                    );
                } else {
                    got_huge = thp_allowed();
                }
                std::ptr::write_bytes(base, 0, advised);
            }
            base
        } else {
            map
        };
        let mut slab = Slab {
            base,
            map,
            map_bytes,
            classes: table,
            pinned_by: None,
            huge: got_huge,
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

    /// The slab asked for transparent huge pages and the kernel has them on
    /// (`madvise` or `always`): its slots are then (very likely) physically
    /// contiguous, one block segment per 2 MiB.
    pub fn huge(&self) -> bool {
        self.huge
    }

    /// Bytes of all slots.
    pub fn bytes(&self) -> usize {
        self.classes.iter().map(|&(_, c, b)| c * b).sum()
    }

    /// The GPU runtime page-locked the slab.
    pub fn pinned(&self) -> bool {
        self.pinned_by.is_some()
    }

    /// All slots.
    pub fn len(&self) -> usize {
        self.classes.last().map_or(0, |&(f, c, _)| f + c)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slot indices of class `k`.
    pub fn class_range(&self, k: usize) -> std::ops::Range<usize> {
        let (f, c, _) = self.classes[k];
        f..f + c
    }

    /// Bytes per slot of class `k`.
    pub fn class_bytes(&self, k: usize) -> usize {
        self.classes[k].2
    }

    pub fn classes(&self) -> usize {
        self.classes.len()
    }

    /// The class slot `i` belongs to.
    pub fn class_of(&self, i: usize) -> usize {
        self.classes
            .iter()
            .position(|&(f, c, _)| i >= f && i < f + c)
            .expect("slot index in range")
    }

    /// Bytes of slot `i`.
    pub fn slot_len(&self, i: usize) -> usize {
        self.classes[self.class_of(i)].2
    }

    /// Start of slot `i` (4 KiB aligned).
    pub fn slot(&self, i: usize) -> *mut u8 {
        let mut off = 0;
        for &(f, c, b) in &self.classes {
            if i < f + c {
                off += (i - f) * b;
                // SAFETY: i is a valid slot index, so the offset stays inside the mapping.
                return unsafe { self.base.add(off) };
            }
            off += c * b;
        }
        panic!("slot index {i} out of range");
    }

    /// One iovec per slot, for `Ring::register_buffers` (buffer index = slot index).
    pub fn iovecs(&self) -> Vec<libc::iovec> {
        (0..self.len())
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
        // SAFETY: `map..map+map_bytes` is the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.map.cast(), self.map_bytes) };
    }
}

/// Whether transparent huge pages can back an madvised region: the sysfs
/// switch is not `[never]` (a kernel without THP has no switch: false).
pub fn thp_allowed() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|t| !t.contains("[never]"))
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

/// Tests: the value of `field` (e.g. `THPeligible`) in the /proc/self/smaps
/// entry of the mapping that holds `addr`, trimmed; None where there is no
/// such mapping or the kernel does not report the field.
#[cfg(test)]
pub(crate) fn smaps_field(addr: usize, field: &str) -> Option<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = range.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                inside = a <= addr && addr < b;
                continue;
            }
        }
        if inside {
            if let Some(v) = line.strip_prefix(field).and_then(|v| v.strip_prefix(':')) {
                return Some(v.trim().to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::Slab;
    use crate::gpu::{Gpu, NoGpu};
    use std::sync::Arc;

    #[test]
    fn slots_hold_their_bytes_with_and_without_huge_pages() {
        let gpu: Arc<dyn Gpu> = Arc::new(NoGpu { why: "test".into() });
        let classes = [(3, 64 << 10), (2, (1 << 20) + 8192), (2, (4 << 20) + 8192)];
        for huge in [false, true] {
            let slab = Slab::with_pages(&classes, &gpu, false, huge).unwrap();
            assert_eq!(slab.len(), 7);
            assert_eq!(slab.huge(), huge && super::thp_allowed());
            if huge {
                assert_eq!(
                    slab.slot(0) as usize % (2 << 20),
                    0,
                    "not on a 2 MiB boundary"
                );
            }
            // Every slot is writable over its whole length, and slots do not overlap.
            for i in 0..slab.len() {
                // SAFETY: slot i spans slot_len(i) bytes of the slab.
                unsafe { std::ptr::write_bytes(slab.slot(i), i as u8 + 1, slab.slot_len(i)) };
            }
            for i in 0..slab.len() {
                // SAFETY: as above, read back.
                let s = unsafe { std::slice::from_raw_parts(slab.slot(i), slab.slot_len(i)) };
                assert!(
                    s.iter().all(|&b| b == i as u8 + 1),
                    "slot {i} (huge {huge})"
                );
            }
            let iov = slab.iovecs();
            assert_eq!(iov.len(), 7);
            assert_eq!(iov[6].iov_len, (4 << 20) + 8192);
        }
    }

    /// The `THPeligible` flag of the mapping of /proc/self/smaps that holds
    /// `addr` (None where the kernel does not report it).
    fn thp_eligible(addr: usize) -> Option<bool> {
        super::smaps_field(addr, "THPeligible").map(|v| v == "1")
    }

    #[test]
    fn every_slot_of_a_huge_slab_may_get_huge_pages() {
        // A huge page can back only a whole aligned 2 MiB of an madvised
        // range: a slab advised over its own size only would leave its tail
        // (and all of a slab under 2 MiB) on 4 KiB pages.
        if !super::thp_allowed() {
            eprintln!("THP is off here: the slab is plain memory (Slab::huge() = false)");
            let gpu: Arc<dyn Gpu> = Arc::new(NoGpu { why: "test".into() });
            assert!(!Slab::with_pages(&[(1, 1 << 20)], &gpu, false, true)
                .unwrap()
                .huge());
            return;
        }
        let gpu: Arc<dyn Gpu> = Arc::new(NoGpu { why: "test".into() });
        for classes in [
            vec![(1, 1 << 20)],
            vec![(3, (1 << 20) + 8192), (1, 64 << 10)],
        ] {
            let slab = Slab::with_pages(&classes, &gpu, false, true).unwrap();
            for i in 0..slab.len() {
                let last = slab.slot(i) as usize + slab.slot_len(i) - 1;
                for at in [slab.slot(i) as usize, last] {
                    match thp_eligible(at) {
                        Some(e) => assert!(e, "slot {i} of {classes:?}: {at:#x} not THP-eligible"),
                        None => eprintln!("no THPeligible in smaps: not checked"),
                    }
                }
            }
        }
    }
}
