//! Storage I/O: the read and write ops a chunk submits to the worker's ring,
//! and what their completions mean.

use super::{Active, Phase, Worker, MAX_RETRIES};
use crate::config::ReadMode;
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
            if n > 0 {
                done += n as usize;
                continue;
            }
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            match e {
                libc::EFAULT => return Err(Error::Os(libc::EFAULT)),
                libc::EINTR => continue,
                _ if done == 0 => {
                    REFUSED.store(true, Ordering::Relaxed);
                    break;
                }
                _ => return Err(Error::Os(e)),
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
            _ => self.finish(id, Err(OpError::InternalError.into())),
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
            _ => {}
        }
    }

    pub(super) fn on_buffered_read(&mut self, id: usize, res: i32) {
        let a = self.act(id);
        let nowait = a.phase == Phase::NowaitRead;
        if res == -libc::EAGAIN && nowait {
            // Not (all) in the page cache: what is missing comes by O_DIRECT.
            Stats::add(&self.stats.cache_misses, 1);
            let a = self.act(id);
            a.want_direct = true;
            a.retries = 0;
            self.next_read(id);
        } else if nowait && (res == -libc::EOPNOTSUPP || res == -libc::EINVAL) {
            // The filesystem cannot do RWF_NOWAIT (tmpfs, some FUSE): plain reads.
            log_once!(
                Level::Info,
                "RWF_NOWAIT refused ({}); reading through the page cache",
                -res
            );
            let a = self.act(id);
            a.buffered_only = true;
            self.next_read(id);
        } else if res == -libc::EINTR || res == -libc::EAGAIN {
            self.retry_or_fail(id, -res);
        } else if res < 0 {
            self.finish(id, Err(Error::Os(-res)));
        } else if res == 0 {
            self.read_complete(id);
        } else {
            let counter = if nowait {
                &self.stats.cache_hit_bytes
            } else {
                &self.stats.buffered_read_bytes
            };
            Stats::add(counter, res as u64);
            let a = self.act(id);
            a.done += res as usize;
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

    pub(super) fn on_direct_read(&mut self, id: usize, res: i32) {
        if res == -libc::EINTR || res == -libc::EAGAIN {
            self.retry_or_fail(id, -res);
            return;
        }
        if res == -libc::EINVAL {
            log_once!(
                Level::Warn,
                "an O_DIRECT read was refused with EINVAL although it met the announced \
                 alignment; falling back to the page cache for such reads"
            );
            let a = self.act(id);
            a.buffered_only = true;
            self.next_read(id);
            return;
        }
        if res < 0 {
            self.finish(id, Err(Error::Os(-res)));
            return;
        }
        Stats::add(&self.stats.direct_read_bytes, res as u64);
        let a = self.act(id);
        let Some((_, align)) = a.chunk.file.direct() else {
            self.finish(id, Err(OpError::InternalError.into()));
            return;
        };
        let start = a.chunk.file_offset;
        let end = start + a.chunk.len as u64;
        let valid_end = a.io_start + res as u64;
        let cur = start + a.done as u64;
        if valid_end > cur {
            a.done = (valid_end.min(end) - start) as usize;
        }
        if res == 0 || a.done >= a.chunk.len || res as u64 % align != 0 {
            // Complete, or EOF (nothing more, or a partial last block).
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
        if res == -libc::EINTR || res == -libc::EAGAIN {
            self.retry_or_fail(id, -res);
            return;
        }
        if res == -libc::EINVAL {
            let a = self.act(id);
            if !a.buffered_only && a.chunk.file.client_direct {
                log_once!(Level::Warn, "an O_DIRECT write was refused with EINVAL; using the page cache for such writes");
                a.buffered_only = true;
                self.next_write(id);
                return;
            }
        }
        if res < 0 {
            self.finish(id, Err(Error::Os(-res)));
            return;
        }
        if res == 0 {
            self.retry_or_fail(id, libc::EIO);
            return;
        }
        let a = self.act(id);
        let counter = if a.write_direct {
            &self.stats.direct_write_bytes
        } else {
            &self.stats.buffered_write_bytes
        };
        Stats::add(counter, res as u64);
        let a = self.act(id);
        a.done += res as usize;
        if a.done >= a.chunk.len {
            let done = a.chunk.len;
            self.finish(id, Ok(done));
        } else {
            a.retries = 0;
            self.next_write(id);
        }
    }
}
