//! Storage I/O: the read and write ops a chunk submits to the worker's ring,
//! and what their completions mean.

use super::{Active, Phase, Worker};
use crate::config::ReadMode;
use crate::errno::{libc_result, verdict, Verdict, Way, MAX_RETRIES};
use crate::error::{Error, OpError, Result};
use crate::request::{Direction, Memory};
use crate::ring::{Cqe, Op};
use crate::stats::{Stage, Stats};
use crate::{log::Level, log_once};

/// Copy `len` bytes from a bounce slot into the caller's host buffer at `dst`.
///
/// The caller's pointer is not something the library can vouch for (an
/// unregistered host pointer has no known extent), and a bad one must give
/// EFAULT, as a read straight into it would, not crash a worker thread. So
/// the kernel does the copy (process_vm_writev on our own process checks the
/// destination); where that call is refused (seccomp), a plain copy is used.
fn copy_to_caller(src: *const u8, dst: usize, len: usize) -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    static REFUSED: AtomicBool = AtomicBool::new(false);
    if !REFUSED.load(Ordering::Relaxed) {
        let mut done = 0usize;
        let mut retries = 0u32;
        while done < len {
            let local = libc::iovec {
                // SAFETY: done < len, inside the slot.
                iov_base: unsafe { src.add(done) } as *mut libc::c_void,
                iov_len: len - done,
            };
            let remote = libc::iovec {
                iov_base: (dst + done) as *mut libc::c_void,
                iov_len: len - done,
            };
            // SAFETY: `local` names slot memory we own; the kernel validates `remote`.
            let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
            let res = libc_result(n);
            match verdict(Way::CheckedCopy, res, len - done) {
                Verdict::Complete(n) | Verdict::Short(n) => done += n,
                Verdict::Retry(errno) => {
                    if retries >= MAX_RETRIES {
                        return Err(Error::Os(errno));
                    }
                    retries += 1;
                }
                Verdict::FallBack if done == 0 => {
                    REFUSED.store(true, Ordering::Relaxed);
                    break;
                }
                // Refused part-way: the system did not refuse the call itself.
                Verdict::FallBack => return Err(Error::Os(-res as i32)),
                Verdict::Fail(errno) => return Err(Error::Os(errno)),
                Verdict::Eof | Verdict::Miss => {
                    crate::log_error!("internal error: a read verdict for a host copy");
                    return Err(OpError::InternalError.into());
                }
            }
        }
        if done == len {
            return Ok(());
        }
    }
    // SAFETY: the slot holds `len` valid bytes at `src`; the caller promised a
    // buffer covering the request (the C contract) — the checked path above is
    // unavailable on this system.
    unsafe { std::ptr::copy_nonoverlapping(src, dst as *mut u8, len) };
    Ok(())
}

/// File offset rounded down to the 4 KiB unit that slot layouts start at.
pub(super) fn slot_base(off: u64) -> u64 {
    off & !(crate::file::MAX_DIO_ALIGN as u64 - 1)
}

pub(super) fn align_down(x: u64, a: u64) -> u64 {
    x & !(a - 1)
}

pub(super) fn align_up(x: u64, a: u64) -> u64 {
    (x + a - 1) & !(a - 1)
}
impl Worker {
    pub(super) fn direct_for(&self, a: &Active) -> Option<(i32, u64)> {
        if a.buffered_only
            || self.cfg.read_mode == ReadMode::Buffered && a.chunk.dir == Direction::Read
        {
            return None;
        }
        a.chunk.file.direct()
    }

    pub(super) fn next_read(&mut self, id: usize) {
        let (op, phase, io_start) = {
            let a = self.table[id].as_ref().expect("active entry");
            let cur = a.chunk.file_offset + a.done as u64;
            let end = a.chunk.file_offset + a.chunk.len as u64;
            let direct = self.direct_for(a);
            // A descriptor opened with O_DIRECT says "bypass the page cache": no probe.
            let mut probe_cache = direct.is_some()
                && self.cfg.read_mode == ReadMode::Auto
                && !a.chunk.file.client_direct
                && !a.want_direct;
            if probe_cache {
                // Ask the page cache first when the kernel can say (no I/O).
                match crate::file::fully_cached(a.chunk.file.buffered_fd, cur, end - cur) {
                    Some(true) | None => {}
                    Some(false) => {
                        probe_cache = false;
                        Stats::add(&self.stats.cache_misses, 1);
                    }
                }
            }
            match direct {
                Some((dfd, align)) if !probe_cache => {
                    let start = align_down(cur, align);
                    let stop = align_up(end, align);
                    let host_aligned = match a.chunk.mem {
                        Memory::Host(p) => {
                            start == cur
                                && stop == end
                                && (p + a.done) as u64 % a.chunk.file.dio_mem_align.max(1) as u64
                                    == 0
                        }
                        Memory::Device { .. } => false,
                    };
                    // An aligned host range of 4 KiB pages that the block
                    // layer would split (more pages than the disk takes
                    // segments) reads faster through a huge-page slot: one
                    // request, which its neighbours can merge with (1 MiB
                    // cold reads on the 2-core VM: bench/RESULTS.md).
                    let split = host_aligned
                        && self.slab.huge()
                        && a.chunk.file.splits_on_small_pages((stop - start) as usize);
                    if a.slot.is_none() && (!host_aligned || split) {
                        // Unaligned (or splitting) host range: read through a bounce slot.
                        self.enter(id, Stage::Slot);
                        self.act(id).phase = Phase::NeedSlot;
                        self.need_slot.push_back(id);
                        self.grant_slots();
                        return;
                    }
                    let buf = if a.slot.is_some() {
                        let delta = (cur - start) as usize;
                        // SAFETY: start >= slot_base(file_offset) since both are aligned
                        // down and start >= file_offset rounded down; stays in the slot.
                        unsafe { self.buf_at(a, a.done).sub(delta) }
                    } else {
                        self.buf_at(a, a.done)
                    };
                    let op = Op::Read {
                        fd: dfd,
                        buf,
                        len: (stop - start) as u32,
                        offset: start,
                        fixed: self.fixed_index(a),
                        nowait: false,
                    };
                    (op, Phase::DirectRead, start)
                }
                _ => {
                    let op = Op::Read {
                        fd: a.chunk.file.buffered_fd,
                        buf: self.buf_at(a, a.done),
                        len: (end - cur) as u32,
                        offset: cur,
                        fixed: self.fixed_index(a),
                        nowait: probe_cache,
                    };
                    let phase = if probe_cache {
                        Phase::NowaitRead
                    } else {
                        Phase::BufferedRead
                    };
                    (op, phase, cur)
                }
            }
        };
        let a = self.act(id);
        a.phase = phase;
        a.io_start = io_start;
        self.push(id, op);
    }

    pub(super) fn next_write(&mut self, id: usize) {
        let op = {
            let a = self.table[id].as_ref().expect("active entry");
            let cur = a.chunk.file_offset + a.done as u64;
            let rem = (a.chunk.len - a.done) as u64;
            let src = self.buf_at(a, a.done);
            let fd = match self.direct_for(a) {
                Some((dfd, align))
                    if (a.chunk.file.client_direct || a.chunk.durable)
                        && cur % align == 0
                        && rem % align == 0
                        && src as u64 % a.chunk.file.dio_mem_align.max(1) as u64 == 0 =>
                {
                    dfd
                }
                _ => a.chunk.file.buffered_fd,
            };
            let op = Op::Write {
                fd,
                buf: src,
                len: rem as u32,
                offset: cur,
                fixed: self.fixed_index(a),
            };
            (op, fd != a.chunk.file.buffered_fd)
        };
        let (op, direct) = op;
        let a = self.act(id);
        a.phase = Phase::Write;
        a.write_direct = direct;
        self.push(id, op);
    }

    pub(super) fn push(&mut self, id: usize, op: Op) {
        // SAFETY: the op's memory is a bounce slot this chunk owns until its CQE
        // (slots are freed only in `finish`), or the caller's buffer, which the
        // request keeps alive until it completes (the C contract for sync, async
        // and batch I/O alike).
        if let Err(e) = unsafe { self.ring.push(op, id as u64) } {
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            self.finish(id, Err(Error::Os(errno)));
        }
    }

    pub(super) fn retry_or_fail(&mut self, id: usize, errno: i32) {
        Stats::add(&self.stats.retries, 1);
        let a = self.act(id);
        a.retries += 1;
        if a.retries > MAX_RETRIES {
            self.finish(id, Err(Error::Os(errno)));
        } else {
            self.resubmit(id);
        }
    }

    /// Issue the same kind of operation again for what remains.
    pub(super) fn resubmit(&mut self, id: usize) {
        match self.act(id).phase {
            Phase::NowaitRead | Phase::BufferedRead | Phase::DirectRead => self.next_read(id),
            Phase::Write => self.next_write(id),
            Phase::NeedSlot | Phase::ToDevice | Phase::FromDevice => {
                self.internal_error(id, "a retry for a chunk with nothing in the ring")
            }
        }
    }

    pub(super) fn on_cqe(&mut self, c: Cqe) {
        let id = c.user_data as usize;
        let Some(a) = self.table.get(id).and_then(|a| a.as_ref()) else {
            return;
        };
        let res = c.result;
        match a.phase {
            Phase::NowaitRead | Phase::BufferedRead => self.on_buffered_read(id, res),
            Phase::DirectRead => self.on_direct_read(id, res),
            Phase::Write => self.on_write(id, res),
            Phase::NeedSlot | Phase::ToDevice | Phase::FromDevice => {
                self.internal_error(id, "a ring completion for a chunk with nothing in the ring")
            }
        }
    }

    pub(super) fn on_buffered_read(&mut self, id: usize, res: i32) {
        let a = self.act(id);
        let nowait = a.phase == Phase::NowaitRead;
        let way = if nowait {
            Way::CacheProbe
        } else {
            Way::BufferedRead
        };
        match verdict(way, res as isize, a.chunk.len - a.done) {
            Verdict::Miss => {
                // Not (all) in the page cache: what is missing comes by O_DIRECT.
                Stats::add(&self.stats.cache_misses, 1);
                let a = self.act(id);
                a.want_direct = true;
                a.retries = 0;
                self.next_read(id);
            }
            Verdict::FallBack => {
                // The filesystem cannot do RWF_NOWAIT (tmpfs, some FUSE): plain reads.
                log_once!(
                    Level::Info,
                    "RWF_NOWAIT refused ({}); reading through the page cache",
                    -res
                );
                let a = self.act(id);
                a.buffered_only = true;
                self.next_read(id);
            }
            Verdict::Retry(errno) => self.retry_or_fail(id, errno),
            Verdict::Fail(errno) => self.finish(id, Err(Error::Os(errno))),
            Verdict::Eof => self.read_complete(id),
            Verdict::Complete(n) | Verdict::Short(n) => {
                let counter = if nowait {
                    &self.stats.cache_hit_bytes
                } else {
                    &self.stats.buffered_read_bytes
                };
                Stats::add(counter, n as u64);
                let a = self.act(id);
                a.done += n;
                a.retries = 0;
                if a.done >= a.chunk.len {
                    self.read_complete(id);
                } else {
                    // Short: partly cached (probe again from where the cache stopped),
                    // or EOF, which the next read reports as 0.
                    self.next_read(id);
                }
            }
        }
    }

    pub(super) fn on_direct_read(&mut self, id: usize, res: i32) {
        let a = self.act(id);
        let Some((_, align)) = a.chunk.file.direct() else {
            self.finish(id, Err(OpError::InternalError.into()));
            return;
        };
        let start = a.chunk.file_offset;
        let end = start + a.chunk.len as u64;
        let asked = (align_up(end, align) - a.io_start) as usize;
        match verdict(Way::DirectRead, res as isize, asked) {
            Verdict::Retry(errno) => self.retry_or_fail(id, errno),
            Verdict::FallBack => {
                log_once!(
                    Level::Warn,
                    "an O_DIRECT read was refused with EINVAL although it met the announced \
                     alignment; falling back to the page cache for such reads"
                );
                let a = self.act(id);
                a.buffered_only = true;
                self.next_read(id);
            }
            Verdict::Fail(errno) => self.finish(id, Err(Error::Os(errno))),
            Verdict::Miss => self.internal_error(id, "a page-cache miss on an O_DIRECT read"),
            Verdict::Eof => self.read_complete(id),
            Verdict::Complete(n) | Verdict::Short(n) => {
                Stats::add(&self.stats.direct_read_bytes, n as u64);
                let a = self.act(id);
                let valid_end = a.io_start + n as u64;
                let cur = start + a.done as u64;
                if valid_end > cur {
                    a.done = (valid_end.min(end) - start) as usize;
                }
                if a.done >= a.chunk.len || n as u64 % align != 0 {
                    // Complete, or EOF inside the last block.
                    self.read_complete(id);
                } else {
                    a.retries += 1;
                    if a.retries > MAX_RETRIES {
                        self.finish(id, Err(Error::Os(libc::EIO)));
                    } else {
                        self.next_read(id);
                    }
                }
            }
        }
    }

    /// All bytes of a read chunk (or all there are, at EOF) are in place.
    pub(super) fn read_complete(&mut self, id: usize) {
        let a = self.table[id].as_ref().expect("active entry");
        let done = a.done;
        match (a.slot, a.chunk.mem) {
            (Some(_), Memory::Device { ptr, .. }) if done > 0 => {
                let src = self.buf_at(a, 0) as *const u8;
                self.copy_to_device(id, ptr, src, done);
            }
            (Some(_), Memory::Host(p)) if done > a.slot_from => {
                let from = a.slot_from;
                let src = self.buf_at(a, from) as *const u8;
                let r = copy_to_caller(src, p + from, done - from).map(|()| done);
                self.finish(id, r);
            }
            _ => self.finish(id, Ok(done)),
        }
    }

    pub(super) fn on_write(&mut self, id: usize, res: i32) {
        let a = self.act(id);
        let way = if a.write_direct {
            Way::DirectWrite
        } else {
            Way::BufferedWrite
        };
        match verdict(way, res as isize, a.chunk.len - a.done) {
            Verdict::Retry(errno) => self.retry_or_fail(id, errno),
            Verdict::FallBack => {
                log_once!(
                    Level::Warn,
                    "an O_DIRECT write was refused with EINVAL; using the page cache for such writes"
                );
                self.act(id).buffered_only = true;
                self.next_write(id);
            }
            Verdict::Fail(errno) => self.finish(id, Err(Error::Os(errno))),
            Verdict::Eof | Verdict::Miss => self.internal_error(id, "a read verdict for a write"),
            Verdict::Complete(n) | Verdict::Short(n) => {
                let counter = if way == Way::DirectWrite {
                    &self.stats.direct_write_bytes
                } else {
                    &self.stats.buffered_write_bytes
                };
                Stats::add(counter, n as u64);
                let a = self.act(id);
                a.done += n;
                if a.done >= a.chunk.len {
                    let done = a.chunk.len;
                    self.finish(id, Ok(done));
                } else {
                    a.retries = 0;
                    self.next_write(id);
                }
            }
        }
    }

    /// A chunk met a state its code cannot be in: log it and fail the chunk
    /// (never drop it, which would leave its request waiting forever).
    pub(super) fn internal_error(&mut self, id: usize, what: &str) {
        crate::log_error!("hipfile-io-{}: internal error: {what}", self.id);
        self.finish(id, Err(OpError::InternalError.into()));
    }
}
