//! Small page-cache reads into host memory, answered from what the calling
//! thread remembers instead of the registry.
//!
//! A 4 KiB `pread` of a page-cache-hot file costs about 1 µs, most of it in
//! the kernel. The full path of `hipFileRead` adds a registry lookup under
//! its lock (a locked read-modify-write of the lock word to take it and
//! another to release it, a hash, and three reference counts), the
//! argument checks, the buffer's classification (a GPU runtime call where one
//! is loaded), the engine's choice of path and the file's in-flight count:
//! 20–30 % of the call in all. A data loader reads the same file into the
//! same buffer over and over, so each thread remembers the last
//! (handle, buffer) pair whose read the full path served on the caller's
//! thread from the page cache, and the next read of that pair is one `pread`
//! on the caller's descriptor and the statistics.
//!
//! What the thread remembers is only valid while nothing in the driver has
//! changed: every change to the registry counts ([`registry::mutations`]),
//! and the count the thread read before its lookup must still be the count
//! now, as must the fork generation (a child after `fork()` has a fresh
//! driver). The thread keeps no reference to the file or the engine, so a
//! deregistered file or a closed driver is not kept alive by an idle
//! thread: only the caller's descriptor number, which the caller keeps open
//! while the handle is registered, and the engine's per-thread byte counter
//! (memory only).
//!
//! A registered host buffer is remembered with its length, and a read
//! outside it goes the full way (which refuses it). Anything else that is
//! not the plain case goes the full way too: device memory, an O_DIRECT
//! handle, a file whose page-cache probes do not all hit, a read due its
//! periodic probe ([`crate::file::REPROBE_EVERY`]), a read larger than the
//! engine serves inline without asking the page cache, and any read that
//! does not come back whole (an error, end of file, a signal): the full path
//! then reads it again and answers as it always does. A read of what is
//! remembered skips the file's and the buffer's in-flight counts, so a
//! deregistration that races it is not refused as one racing a full-path
//! read is; the caller's descriptor is read as the caller's own `pread`
//! would read it.

use crate::file::File;
use crate::pipeline::Engine;
use crate::stats::PerThread;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// What a thread read before its lookup: the registry's change count and
/// the fork generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    mutations: u64,
    fork: u64,
}

/// Read before a lookup whose answer may be remembered.
#[inline]
pub fn stamp() -> Stamp {
    Stamp {
        mutations: crate::registry::mutations(),
        fork: crate::fork::generation(),
    }
}

struct Remembered {
    stamp: Stamp,
    handle: usize,
    base: u64,
    /// Bytes of the buffer from `base`: a registration's length, or no
    /// bound for unregistered host memory (the caller vouches for it).
    len: u64,
    fd: i32,
    /// Largest read served this way.
    max: usize,
    /// The file has no O_DIRECT way: every read is a page-cache read, and
    /// there is no probe to make.
    page_cache_only: bool,
    /// The file's O_DIRECT alignment of offsets and lengths, and of memory
    /// ([`File::dio_fits`]), less one: a read that misses either is a
    /// page-cache read without a probe on the full path too. Alignments are
    /// powers of two (block sizes), so a mask tests them: a division by a
    /// value the compiler cannot see costs some 15–40 cycles, and three of
    /// them were 2–4 % of a 4 KiB read.
    dio_mask: u64,
    mem_mask: u64,
    /// The file's recent page-cache probes all hit ([`File::trusts_page_cache`])
    /// when the full path last read it here.
    trusted: bool,
    inline_bytes: Arc<PerThread>,
    /// This thread's statistics shard ([`crate::stats::record::thread_shard`]),
    /// held for the thread's life: asked once here, not per read.
    shard: (usize, bool),
    /// Reads of a trusted file left before one must probe the page cache
    /// on the full path ([`crate::file::REPROBE_EVERY`]).
    turns: Cell<u32>,
    /// Reads served from this memory (tests ask, [`served`]).
    served: Cell<u64>,
}

/// Reads of a trusted file between two probes, as on the full path.
const TURNS: u32 = crate::file::REPROBE_EVERY - 1;

thread_local! {
    static LAST: RefCell<Option<Remembered>> = const { RefCell::new(None) };
}

/// After the full path served a read of `handle` into the host buffer at
/// `base` (`len` bytes from there: a registration's length, or `u64::MAX -
/// base` for unregistered memory): remember it for this thread's next
/// reads, where such a read can skip the full path (module notes). `stamp`
/// was read before the lookup that found `file` and `engine`.
pub fn remember(stamp: Stamp, handle: usize, base: u64, len: u64, engine: &Engine, file: &File) {
    let cfg = engine.config();
    let max = cfg
        .inline_max_bytes
        .min(crate::config::INLINE_OTHER_MAX_BYTES);
    let page_cache_only = file.page_cache_only();
    let trusted = file.trusts_page_cache();
    let (dio_align, mem_align) = file.dio_alignment();
    let plain = cfg.read_mode == crate::config::ReadMode::Auto
        && dio_align.is_power_of_two()
        && mem_align.is_power_of_two()
        && max > 0
        && file.readable
        && !file.client_direct;
    let _ = LAST.try_with(|last| {
        let Ok(mut last) = last.try_borrow_mut() else {
            return;
        };
        if !plain {
            *last = None;
            return;
        }
        if let Some(r) = last.as_mut().filter(|r| {
            r.stamp == stamp
                && r.handle == handle
                && r.base == base
                && r.len == len
                && Arc::ptr_eq(&r.inline_bytes, engine.inline_bytes())
        }) {
            r.trusted = trusted;
            r.page_cache_only = page_cache_only;
            r.turns.set(TURNS);
        } else {
            *last = Some(Remembered {
                stamp,
                handle,
                base,
                len,
                fd: file.buffered_fd,
                max,
                page_cache_only,
                dio_mask: dio_align - 1,
                mem_mask: mem_align - 1,
                trusted,
                inline_bytes: engine.inline_bytes().clone(),
                shard: crate::stats::record::thread_shard(),
                turns: Cell::new(TURNS),
                served: Cell::new(0),
            });
        }
    });
}

/// Forget what this thread remembers (its read went the full path and was
/// not the plain case).
pub fn forget() {
    let _ = LAST.try_with(|last| {
        if let Ok(mut last) = last.try_borrow_mut() {
            *last = None;
        }
    });
}

/// Reads this thread served from what it remembers now (0 when it
/// remembers nothing): for tests, which must see that the path they test ran.
pub fn served() -> u64 {
    LAST.try_with(|last| {
        last.try_borrow()
            .ok()
            .and_then(|l| l.as_ref().map(|r| r.served.get()))
            .unwrap_or(0)
    })
    .unwrap_or(0)
}

/// Read `size` bytes at `file_offset` of `handle` into `base +
/// buffer_offset`, if this thread remembers `(handle, base)` and nothing has
/// changed since: the byte count, or None for the full path (which then
/// does the whole read, and answers errors as it always does).
#[inline]
pub fn try_read(
    handle: usize,
    base: u64,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
) -> Option<usize> {
    if size == 0 || file_offset < 0 || buffer_offset < 0 {
        return None;
    }
    let boff = buffer_offset as u64;
    let dst = base.checked_add(boff)?;
    (file_offset as u64).checked_add(size as u64)?;
    LAST.try_with(|last| {
        let last = last.try_borrow().ok()?;
        let r = last.as_ref()?;
        if r.handle != handle
            || r.base != base
            || size > r.max
            || boff >= r.len
            || size as u64 > r.len - boff
            || stamp() != r.stamp
        {
            return None;
        }
        // Where the full path would read through the page cache without
        // asking it first: no O_DIRECT way, or a read O_DIRECT cannot take;
        // or a trusted file whose periodic probe is not due.
        let unaligned =
            (file_offset as u64 | size as u64) & r.dio_mask != 0 || dst & r.mem_mask != 0;
        if !(r.page_cache_only || unaligned) {
            if !r.trusted {
                return None;
            }
            let t = r.turns.get();
            if t == 0 {
                // This read goes the full way, and probes.
                crate::inline::probe_next();
                return None;
            }
            r.turns.set(t - 1);
        }
        let call = crate::stats::Call::remembered_host_read(size);
        // SAFETY: the caller's buffer covers [dst, dst + size) (the C
        // contract, as for the full path's pread into it).
        let n = unsafe { libc::pread(r.fd, dst as *mut libc::c_void, size, file_offset) };
        if n != size as isize {
            return None;
        }
        let (shard, alone) = r.shard;
        r.inline_bytes.add_at(shard, alone, size as u64);
        r.served.set(r.served.get() + 1);
        if let Some(c) = call {
            c.finish_in(&Ok(size), Some(r.shard));
        }
        Some(size)
    })
    .ok()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_to_the_registry_makes_the_stamp_stale() {
        let a = stamp();
        assert_eq!(a, stamp());
        drop(crate::registry::driver().write());
        assert_ne!(a, stamp());
    }
}
