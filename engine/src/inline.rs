//! Small transfers on the caller's thread: host memory with pread/pwrite
//! ([`host_io`]), device memory through a per-thread bounce buffer
//! ([`device_io`]).
//!
//! Handing a 4 KiB read to a worker (channel, ring, slot, copy on the worker's
//! stream, event) cost 52.6 µs p50 on the H200 host against 9.7 µs for pread
//! plus a synchronous copy. Requests up to `inline_max_bytes` instead use a
//! per-thread pinned bounce buffer and a per-thread, per-device stream: the
//! storage step is the host inline path (page cache or O_DIRECT), the copy is
//! an async copy followed by a stream synchronisation on the caller's thread.

use crate::bounce::Slab;
use crate::errno::{libc_result, take_retry, verdict, Verdict, Way};
use crate::error::{Error, OpError, Result};
use crate::gpu::{Gpu, Stream};
use crate::request::{Direction, IoRequest, Memory};
use crate::stats::Stats;
use crate::MAX_RW_COUNT;
use crate::{log::Level, log_once};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

struct Ctx {
    gpu: Arc<dyn Gpu>,
    slab: Slab,
    streams: HashMap<i32, Stream>,
}

impl Drop for Ctx {
    fn drop(&mut self) {
        for (_, s) in self.streams.drain() {
            let _ = self.gpu.stream_synchronize(s);
            self.gpu.stream_destroy(s);
        }
    }
}

thread_local! {
    static CTX: RefCell<Option<Ctx>> = const { RefCell::new(None) };
}

/// Bounce bytes per thread: the largest inline request plus DIO widening room.
const BOUNCE_BYTES: usize = (1 << 20) + 2 * crate::file::MAX_DIO_ALIGN;

/// Whether this thread already has its bounce buffer and a stream for the
/// device of `mem` (then [`device_io`] creates nothing).
pub(crate) fn ready_for(gpu: &Arc<dyn Gpu>, mem: &Memory) -> bool {
    let Memory::Device { device, .. } = *mem else {
        return false;
    };
    CTX.with(|cell| {
        cell.borrow()
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(&c.gpu, gpu) && c.streams.contains_key(&device))
    })
}

/// `cached`: the caller has just found the whole range in the page cache
/// (passed on to [`host_io`]).
pub(crate) fn device_io(
    gpu: &Arc<dyn Gpu>,
    req: &IoRequest,
    stats: &Stats,
    cached: bool,
) -> Result<usize> {
    let Memory::Device { ptr, device } = req.mem else {
        return Err(OpError::InternalError.into());
    };
    if req.size > BOUNCE_BYTES - 2 * crate::file::MAX_DIO_ALIGN {
        return Err(OpError::InternalError.into());
    }
    CTX.with(|cell| {
        let mut cell = cell.borrow_mut();
        let stale = cell.as_ref().is_some_and(|c| !Arc::ptr_eq(&c.gpu, gpu));
        if stale || cell.is_none() {
            let slab = Slab::new(&[(1, BOUNCE_BYTES)], gpu, true)
                .map_err(|e| Error::Os(e.raw_os_error().unwrap_or(libc::ENOMEM)))?;
            *cell = Some(Ctx {
                gpu: gpu.clone(),
                slab,
                streams: HashMap::new(),
            });
        }
        let ctx = cell.as_mut().expect("context just made");
        let stream = match ctx.streams.get(&device) {
            Some(s) => *s,
            None => {
                let s = gpu.stream_create(device)?;
                ctx.streams.insert(device, s);
                s
            }
        };
        // Keep the bounce start congruent with the file offset modulo 4 KiB so an
        // aligned request can still go O_DIRECT.
        let skew = (req.file_offset % 4096) as usize;
        // SAFETY: skew < 4096 and skew + size <= BOUNCE_BYTES by the check above.
        let bounce = unsafe { ctx.slab.slot(0).add(skew) };
        let host = IoRequest {
            mem: Memory::Host(bounce as usize),
            ..req.clone()
        };
        match req.dir {
            Direction::Read => {
                let n = host_io(&host, stats, false, cached)?;
                if n > 0 {
                    // SAFETY: the bounce holds n valid bytes and stays untouched until
                    // the stream synchronisation below returns.
                    unsafe { gpu.copy_htod_async(ptr, bounce, n, stream)? };
                    gpu.stream_synchronize(stream)?;
                }
                Ok(n)
            }
            Direction::Write => {
                // SAFETY: the bounce has room for size bytes; nothing else uses it until
                // the synchronisation returns.
                unsafe { gpu.copy_dtoh_async(bounce, ptr, req.size, stream)? };
                gpu.stream_synchronize(stream)?;
                host_io(&host, stats, false, false)
            }
        }
    })
}

/// A small host-memory transfer on the caller's thread: what pread/pwrite
/// would cost, without a hand-off. Reads use the page cache when the range is
/// resident (RWF_NOWAIT) and O_DIRECT when it is not and the request is
/// aligned; writes go to the descriptor kind the caller opened, positional
/// whatever the descriptor's flags are now ([`crate::file::noappend_flag`]).
/// A write that fails after part of it was written reports that part, as
/// pwrite does (this loop writes in order, so nothing lies past it). Each
/// result means what [`crate::errno`] says it means. `via_huge_page`: an
/// O_DIRECT read may go through a huge page ([`crate::host_bounce`]), as it
/// should into a caller's memory of small pages (false for our own bounce,
/// or with huge pages turned off). `cached`: the caller has just found the
/// whole range in the page cache, so a large read skips asking again.
pub(crate) fn host_io(
    req: &IoRequest,
    stats: &Stats,
    via_huge_page: bool,
    cached: bool,
) -> Result<usize> {
    let Memory::Host(p) = req.mem else {
        return Err(OpError::InternalError.into());
    };
    let f = &req.file;
    let size = req.size.min(MAX_RW_COUNT);
    // O_DIRECT was refused with EINVAL: the page cache from then on.
    let mut no_direct = false;
    let aligned = |off: u64, ptr: usize, len: usize| {
        f.direct()
            .is_some_and(|(_, a)| f.dio_fits(a, off, len as u64, Some(ptr as u64)))
    };
    let mut done = 0usize;
    let mut retries = 0u32;
    while done < size {
        let off = req.file_offset + done as u64;
        let ptr = p + done;
        let len = size - done;
        let v = match req.dir {
            Direction::Read => {
                let direct_fd = match f.direct() {
                    Some((dfd, _)) if !no_direct && aligned(off, ptr, len) => Some(dfd),
                    _ => None,
                };
                let iov = libc::iovec {
                    iov_base: ptr as *mut libc::c_void,
                    iov_len: len,
                };
                // Large and not all in the page cache: straight to O_DIRECT.
                // A RWF_NOWAIT read that misses still starts readahead, which
                // would read the range a second time. (A small read skips the
                // question: it would cost more than the read.)
                let want_direct = direct_fd.is_some()
                    && (f.client_direct
                        || len > crate::config::INLINE_OTHER_MAX_BYTES
                            && !cached
                            && crate::file::fully_cached(f.buffered_fd, off, len as u64)
                                == Some(false));
                // Without an O_DIRECT way a miss is read through the page
                // cache anyway: plain pread, which skips the iovec import
                // preadv2 costs, and a miss's second syscall.
                let probe = if want_direct || direct_fd.is_none() {
                    Verdict::Miss
                } else if f.trusts_page_cache() && !reprobe_due() {
                    // The file's recent probes all hit: plain pread, without
                    // the probe's extra cost (`crate::file::CACHE_TRUST`).
                    pread(f.buffered_fd, Way::BufferedRead, ptr, len, off)
                } else {
                    // SAFETY: the caller's buffer covers [ptr, ptr + len) (the C contract).
                    let r = unsafe {
                        libc::preadv2(f.buffered_fd, &iov, 1, off as i64, libc::RWF_NOWAIT)
                    };
                    let v = verdict(Way::CacheProbe, libc_result(r), len);
                    match v {
                        Verdict::Complete(_) => f.record_probe(true),
                        Verdict::Short(_) | Verdict::Miss => f.record_probe(false),
                        _ => {}
                    }
                    v
                };
                match probe {
                    Verdict::Miss | Verdict::FallBack => match direct_fd {
                        // Storage into the caller's small pages: through a
                        // huge page, where this thread has one.
                        Some(dfd) if via_huge_page && crate::host_bounce::scattered(ptr, len) => {
                            let asked = len.min(crate::host_bounce::PAGE_BYTES);
                            match crate::host_bounce::pread(dfd, ptr, asked, off) {
                                Some(r) => {
                                    if r > 0 {
                                        Stats::add(&stats.host_bounce_bytes, r as u64);
                                    }
                                    verdict(Way::DirectRead, r, asked)
                                }
                                None => pread(dfd, Way::DirectRead, ptr, len, off),
                            }
                        }
                        Some(dfd) => pread(dfd, Way::DirectRead, ptr, len, off),
                        None => pread(f.buffered_fd, Way::BufferedRead, ptr, len, off),
                    },
                    v => v,
                }
            }
            Direction::Write => {
                // O_DIRECT only on a descriptor the caller opened so: a
                // direct write beside page-cache pages of the same range
                // makes the kernel record EIO for every later fsync. (Not
                // asking `direct()` otherwise: it would open a descriptor.)
                let direct_fd = (f.client_direct && !no_direct && aligned(off, ptr, len))
                    .then(|| f.direct())
                    .flatten();
                let (fd, way) = match direct_fd {
                    Some((dfd, _)) => (dfd, Way::DirectWrite),
                    None => (f.buffered_fd, Way::BufferedWrite),
                };
                let iov = libc::iovec {
                    iov_base: ptr as *mut libc::c_void,
                    iov_len: len,
                };
                let flags = crate::file::noappend_flag();
                // SAFETY: the caller's buffer covers [ptr, ptr + len).
                let r = unsafe { libc::pwritev2(fd, &iov, 1, off as i64, flags) };
                verdict(way, libc_result(r), len)
            }
        };
        match v {
            Verdict::Complete(n) | Verdict::Short(n) => done += n,
            Verdict::Eof => break,
            Verdict::Retry(errno) => {
                if let Err(errno) = take_retry(&mut retries, errno) {
                    return failed(req.dir, done, errno);
                }
            }
            Verdict::FallBack => {
                log_once!(
                    Level::Warn,
                    "an O_DIRECT transfer was refused with EINVAL although it met the \
                     announced alignment; using the page cache for it"
                );
                no_direct = true;
            }
            Verdict::Fail(errno) => return failed(req.dir, done, errno),
            Verdict::Miss => {
                // Only a page-cache probe misses, and its miss was handled above.
                crate::log_error!("internal error: a page-cache miss reached the inline loop");
                return Err(OpError::InternalError.into());
            }
        }
    }
    Ok(done)
}

thread_local! {
    /// This thread's reads of trusted files since its last probe of one.
    static SINCE_PROBE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether this read of a trusted file should probe anyway: one in
/// [`crate::file::REPROBE_EVERY`] of the thread's reads does, so a file that
/// left the page cache loses its trust. Counted per thread: a per-file
/// counter would be one more word every calling thread writes.
fn reprobe_due() -> bool {
    SINCE_PROBE.with(|n| {
        let k = n.get() + 1;
        let due = k >= crate::file::REPROBE_EVERY;
        n.set(if due { 0 } else { k });
        due
    })
}

/// Make this thread's next read of a trusted file probe the page cache
/// ([`reprobe_due`]): for a thread whose reads went without the full path
/// ([`crate::fast`]) for [`crate::file::REPROBE_EVERY`] reads.
pub(crate) fn probe_next() {
    SINCE_PROBE.with(|n| n.set(crate::file::REPROBE_EVERY - 1));
}

/// One `pread` of `len` bytes at `off` into `ptr`, and what it means.
fn pread(fd: i32, way: Way, ptr: usize, len: usize, off: u64) -> Verdict {
    // SAFETY: the caller's buffer covers [ptr, ptr + len) (the C contract).
    let r = unsafe { libc::pread(fd, ptr as *mut libc::c_void, len, off as i64) };
    verdict(way, libc_result(r), len)
}

/// What a transfer that failed with `errno` after `done` bytes reports: a
/// write the bytes it wrote (from its start), as pwrite does; a read, or a
/// write that wrote nothing, the error.
fn failed(dir: Direction, done: usize, errno: i32) -> Result<usize> {
    if dir == Direction::Write && done > 0 {
        Ok(done)
    } else {
        Err(Error::Os(errno))
    }
}
