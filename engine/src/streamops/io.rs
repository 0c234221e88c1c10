//! File I/O of the stream service: positional reads and writes between a
//! file and host memory (a pinned stage slot or the caller's host buffer),
//! with the engine's read-mode rules, retries, and a fault hook for tests.
//! Nothing here touches a GPU.

use crate::config::ReadMode;
use crate::error::{Error, Result};
use crate::file::File;
use crate::log::Level;
use crate::log_once;
use crate::ring::Op;
#[cfg(feature = "testing")]
use crate::ring::{Cqe, FaultPlan};
use crate::worker::Faults;

/// Retries of EINTR / EAGAIN before the error is reported.
const MAX_RETRIES: u32 = 64;

/// Per-thread I/O context: with the `testing` feature, a fault plan that
/// rewrites each call's result as it would a ring completion.
#[derive(Default)]
pub(crate) struct IoCtx {
    #[cfg(feature = "testing")]
    pub faults: Option<Box<dyn FaultPlan>>,
}

impl IoCtx {
    /// The context of I/O thread `n`: the fault plan `faults` makes for it,
    /// if tests gave a factory.
    #[cfg_attr(not(feature = "testing"), allow(unused_variables))]
    pub(crate) fn new(faults: &Faults, n: usize) -> IoCtx {
        match faults {
            None => IoCtx::default(),
            #[cfg(feature = "testing")]
            Some(f) => IoCtx { faults: f(n) },
            #[cfg(not(feature = "testing"))]
            Some(never) => match *never {},
        }
    }

    /// The result of one call after the fault plan (bytes or −errno).
    #[cfg(not(feature = "testing"))]
    fn filter(&mut self, _op: Op, r: i64) -> i64 {
        r
    }

    /// The result of one call after the fault plan (bytes or −errno).
    #[cfg(feature = "testing")]
    fn filter(&mut self, op: Op, r: i64) -> i64 {
        let Some(plan) = self.faults.as_mut() else {
            return r;
        };
        let mut out = Vec::with_capacity(1);
        plan.on_complete(
            &op,
            Cqe {
                user_data: 0,
                result: r as i32,
            },
            &mut out,
        );
        // The call is synchronous: a completion the plan holds back comes out now.
        plan.flush(&mut out);
        out.first().map_or(r, |c| c.result as i64)
    }
}

/// Should a read of `len` bytes at `off` go around the page cache? Only
/// where O_DIRECT can serve it (offset aligned), and then: always for
/// `HIPFILE_READ_MODE=direct` or a descriptor the caller opened with
/// O_DIRECT, and in auto mode when `cachestat` says part of it is not cached.
pub(crate) fn wants_direct(file: &File, off: u64, len: usize, mode: ReadMode) -> bool {
    let Some((_, align)) = file.direct() else {
        return false;
    };
    if off % align != 0 {
        return false;
    }
    match mode {
        ReadMode::Buffered => false,
        ReadMode::Direct => true,
        ReadMode::Auto => {
            file.client_direct
                || crate::file::fully_cached(file.buffered_fd, off, len as u64) == Some(false)
        }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Read up to `len` bytes at `off` into `dst`. `room` (≥ `len`) bytes at
/// `dst` may be written: an O_DIRECT read rounds its length up to the
/// alignment. Returns the bytes read (short only at EOF) and whether the
/// reads went around the page cache.
///
/// # Safety
/// `dst..dst+room` must be writable memory that nothing else uses meanwhile.
pub(crate) unsafe fn read_into(
    ctx: &mut IoCtx,
    file: &File,
    dst: *mut u8,
    len: usize,
    room: usize,
    off: u64,
    direct: bool,
) -> Result<(usize, bool)> {
    let mut direct = direct;
    let mut done = 0usize;
    let mut retries = 0u32;
    while done < len {
        let pos = off + done as u64;
        // SAFETY: done < len <= room.
        let p = unsafe { dst.add(done) };
        let (fd, want) = match file.direct() {
            Some((dfd, a)) if direct => {
                let want = (len - done).next_multiple_of(a as usize);
                let mem_ok = p as u64 % file.dio_mem_align.max(1) as u64 == 0;
                if pos % a != 0 || !mem_ok || want > room - done {
                    direct = false;
                    continue;
                }
                (dfd, want)
            }
            _ => (file.buffered_fd, len - done),
        };
        // SAFETY: `p..p+want` lies within `dst..dst+room` (checked above for
        // O_DIRECT; want = len - done otherwise), which the caller lent us.
        let r = unsafe { libc::pread(fd, p.cast(), want, pos as i64) };
        let r = if r < 0 { -(errno() as i64) } else { r as i64 };
        let op = Op::Read {
            fd,
            buf: p,
            len: want as u32,
            offset: pos,
            fixed: None,
            nowait: false,
        };
        let r = ctx.filter(op, r);
        if r < 0 {
            let e = (-r) as i32;
            if direct && e == libc::EINVAL {
                log_once!(
                    Level::Warn,
                    "an O_DIRECT read was refused with EINVAL; stream reads of such \
                     ranges use the page cache"
                );
                direct = false;
                continue;
            }
            if (e == libc::EINTR || e == libc::EAGAIN) && retries < MAX_RETRIES {
                retries += 1;
                continue;
            }
            return Err(Error::Os(e));
        }
        if r == 0 {
            break; // EOF
        }
        done += (r as usize).min(len - done);
    }
    Ok((done, direct))
}

/// Write `len` bytes from `src` at `off`, looping over short writes.
/// Returns the bytes written and whether they went around the page cache.
///
/// # Safety
/// `src..src+len` must be readable and unchanged until the call returns.
pub(crate) unsafe fn write_from(
    ctx: &mut IoCtx,
    file: &File,
    src: *const u8,
    len: usize,
    off: u64,
) -> Result<(usize, bool)> {
    // Writes go around the page cache only where the caller asked for that
    // by opening the file with O_DIRECT (as the sync path).
    let fd = match file.direct() {
        Some((dfd, a))
            if file.client_direct
                && off % a == 0
                && len as u64 % a == 0
                && src as u64 % file.dio_mem_align.max(1) as u64 == 0 =>
        {
            dfd
        }
        _ => file.buffered_fd,
    };
    let mut done = 0usize;
    let mut retries = 0u32;
    while done < len {
        let pos = off + done as u64;
        // SAFETY: done < len.
        let p = unsafe { src.add(done) };
        // SAFETY: `p..p+len-done` lies within the caller's range.
        let r = unsafe { libc::pwrite(fd, p.cast(), len - done, pos as i64) };
        let r = if r < 0 { -(errno() as i64) } else { r as i64 };
        let op = Op::Write {
            fd,
            buf: p,
            len: (len - done) as u32,
            offset: pos,
            fixed: None,
        };
        let r = ctx.filter(op, r);
        if r < 0 {
            let e = (-r) as i32;
            if (e == libc::EINTR || e == libc::EAGAIN) && retries < MAX_RETRIES {
                retries += 1;
                continue;
            }
            return Err(Error::Os(e));
        }
        if r == 0 {
            return Err(Error::Os(libc::EIO));
        }
        done += (r as usize).min(len - done);
    }
    Ok((done, fd != file.buffered_fd))
}
