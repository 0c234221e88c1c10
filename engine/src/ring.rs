//! The only module that touches io_uring submission and completion queues.
//!
//! A buffer handed to [`Ring::push`] belongs to the kernel until its completion
//! has been returned by [`Ring::reap`]; callers track that in their in-flight
//! tables. A [`FaultPlan`] can sit between the kernel and the caller to rewrite
//! completions (tests only): short transfers, EINTR, EAGAIN, EIO, ENOSPC,
//! ECANCELED, and reordering.

use io_uring::{opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// One operation for the ring.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    Read {
        fd: RawFd,
        buf: *mut u8,
        len: u32,
        offset: u64,
        /// Index of a registered buffer that contains `buf..buf+len` (READ_FIXED).
        fixed: Option<u16>,
        /// RWF_NOWAIT: fail with EAGAIN instead of blocking (page-cache probe).
        nowait: bool,
    },
    Write {
        fd: RawFd,
        buf: *const u8,
        len: u32,
        offset: u64,
        fixed: Option<u16>,
    },
    Fsync {
        fd: RawFd,
        datasync: bool,
    },
}

impl Op {
    pub fn len(&self) -> u32 {
        match *self {
            Op::Read { len, .. } | Op::Write { len, .. } => len,
            Op::Fsync { .. } => 0,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A completion: the caller's tag and the kernel's result (bytes or −errno).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe {
    pub user_data: u64,
    pub result: i32,
}

/// Rewrites completions between the kernel and the engine (fault injection).
/// `op` is the operation that produced `cqe`. Returned completions are handed
/// to the engine; a plan may hold some back (reordering) and must release them
/// from `flush` when asked.
pub trait FaultPlan: Send {
    fn on_complete(&mut self, op: &Op, cqe: Cqe, out: &mut Vec<Cqe>);
    /// Release held completions (called once nothing else is in the kernel).
    fn flush(&mut self, out: &mut Vec<Cqe>);
    /// How many completions the plan holds back right now.
    fn holding(&self) -> usize;
}

pub struct Ring {
    uring: IoUring,
    /// Ops in flight by user_data, so a fault plan can see what it rewrites.
    ops: std::collections::HashMap<u64, Op>,
    faults: Option<Box<dyn FaultPlan>>,
    unsubmitted: usize,
    /// The kernel refused a timed wait (EXT_ARG, Linux < 5.11): waits block.
    no_timed_wait: bool,
}

impl Ring {
    pub fn new(entries: u32) -> io::Result<Ring> {
        let uring = IoUring::builder()
            .setup_single_issuer()
            .build(entries)
            .or_else(|_| {
                // Older kernels (< 6.0) refuse SINGLE_ISSUER; it is only a hint.
                IoUring::new(entries)
            })?;
        Ok(Ring {
            uring,
            ops: std::collections::HashMap::new(),
            faults: None,
            unsubmitted: 0,
            no_timed_wait: false,
        })
    }

    pub fn set_fault_plan(&mut self, plan: Option<Box<dyn FaultPlan>>) {
        self.faults = plan;
    }

    /// Register buffers for READ_FIXED/WRITE_FIXED. Fails (ENOMEM, EPERM) when
    /// RLIMIT_MEMLOCK is too small; the caller then uses plain reads.
    ///
    /// # Safety
    /// Every iovec must describe memory that stays mapped until the ring is dropped.
    pub unsafe fn register_buffers(&mut self, iovecs: &[libc::iovec]) -> io::Result<()> {
        // SAFETY: guaranteed by the caller (see above).
        unsafe { self.uring.submitter().register_buffers(iovecs) }
    }

    /// Ops pushed whose completion the caller has not seen yet.
    pub fn in_flight(&self) -> usize {
        self.ops.len() + self.faults.as_ref().map_or(0, |p| p.holding())
    }

    /// Queue `op`, tagged `user_data` (unique among in-flight ops).
    ///
    /// # Safety
    /// The memory `op` names must stay valid and unaliased until its completion
    /// is returned by `reap`.
    pub unsafe fn push(&mut self, op: Op, user_data: u64) -> io::Result<()> {
        let entry = build_sqe(&op).user_data(user_data);
        loop {
            // SAFETY: the entry's buffers are valid until completion (caller's contract).
            let pushed = unsafe { self.uring.submission().push(&entry) };
            if pushed.is_ok() {
                break;
            }
            // Submission queue full: hand what is queued to the kernel and retry.
            self.submit()?;
        }
        self.unsubmitted += 1;
        self.ops.insert(user_data, op);
        Ok(())
    }

    /// Submit queued entries without waiting.
    pub fn submit(&mut self) -> io::Result<()> {
        self.submit_and_wait(0)
    }

    /// Submit queued entries and wait until at least `want` completions are
    /// ready (or held by a fault plan).
    pub fn submit_and_wait(&mut self, want: usize) -> io::Result<()> {
        self.enter(want, None)
    }

    /// As [`Ring::submit_and_wait`], but return after `timeout` even when
    /// nothing completed (a worker then looks at its GPU copies and the work
    /// queue). Blocks without a limit on kernels that cannot time the wait.
    pub fn submit_and_wait_for(&mut self, want: usize, timeout: Duration) -> io::Result<()> {
        let timeout = (!self.no_timed_wait).then_some(timeout);
        self.enter(want, timeout)
    }

    fn enter(&mut self, want: usize, timeout: Option<Duration>) -> io::Result<()> {
        let want = want.min(self.ops.len());
        // Nothing to wait for: a timeout would only add a syscall argument.
        let ts = timeout.filter(|_| want > 0).map(types::Timespec::from);
        loop {
            let r = match &ts {
                Some(ts) => {
                    let args = types::SubmitArgs::new().timespec(ts);
                    self.uring.submitter().submit_with_args(want, &args)
                }
                None => self.uring.submit_and_wait(want),
            };
            let Err(e) = r else {
                self.unsubmitted = 0;
                return Ok(());
            };
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // Timed out: the entries were submitted all the same.
                Some(libc::ETIME) if ts.is_some() => {
                    self.unsubmitted = 0;
                    return Ok(());
                }
                // CQ overflow backlog: the caller must reap first; report success so it does.
                Some(libc::EBUSY) => return Ok(()),
                // No EXT_ARG (Linux < 5.11): wait without a limit from now on.
                Some(libc::EINVAL) if ts.is_some() => {
                    self.no_timed_wait = true;
                    return self.enter(want, None);
                }
                _ => return Err(e),
            }
        }
    }

    /// Move ready completions into `out` (after the fault plan, if any).
    pub fn reap(&mut self, out: &mut Vec<Cqe>) {
        let mut raw = Vec::new();
        for cqe in self.uring.completion() {
            raw.push(Cqe {
                user_data: cqe.user_data(),
                result: cqe.result(),
            });
        }
        for cqe in raw {
            let Some(op) = self.ops.remove(&cqe.user_data) else {
                continue;
            };
            match self.faults.as_mut() {
                Some(plan) => plan.on_complete(&op, cqe, out),
                None => out.push(cqe),
            }
        }
        if self.ops.is_empty() {
            if let Some(plan) = self.faults.as_mut() {
                plan.flush(out);
            }
        }
    }
}

fn build_sqe(op: &Op) -> squeue::Entry {
    match *op {
        Op::Read {
            fd,
            buf,
            len,
            offset,
            fixed,
            nowait,
        } => {
            let flags = if nowait { libc::RWF_NOWAIT } else { 0 };
            match fixed {
                Some(idx) => opcode::ReadFixed::new(types::Fd(fd), buf, len, idx)
                    .offset(offset)
                    .rw_flags(flags)
                    .build(),
                None => opcode::Read::new(types::Fd(fd), buf, len)
                    .offset(offset)
                    .rw_flags(flags)
                    .build(),
            }
        }
        Op::Write {
            fd,
            buf,
            len,
            offset,
            fixed,
        } => {
            // Positional even if the descriptor has gained O_APPEND since its
            // registration (see crate::file::noappend_flag).
            let flags = crate::file::noappend_flag();
            match fixed {
                Some(idx) => opcode::WriteFixed::new(types::Fd(fd), buf, len, idx)
                    .offset(offset)
                    .rw_flags(flags)
                    .build(),
                None => opcode::Write::new(types::Fd(fd), buf, len)
                    .offset(offset)
                    .rw_flags(flags)
                    .build(),
            }
        }
        Op::Fsync { fd, datasync } => {
            let f = if datasync {
                types::FsyncFlags::DATASYNC
            } else {
                types::FsyncFlags::empty()
            };
            opcode::Fsync::new(types::Fd(fd)).flags(f).build()
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Never free memory the kernel may still write: wait for every op.
        let mut sink = Vec::new();
        let mut rounds = 0u32;
        while !self.ops.is_empty() && rounds < 100_000 {
            if self.submit_and_wait(1).is_err() {
                break;
            }
            self.reap(&mut sink);
            sink.clear();
            rounds += 1;
        }
    }
}

/// A reproducible fault plan for tests: rewrites completions by a seeded
/// generator. Short transfers stay 4 KiB multiples (what the kernel does
/// mid-file, also for O_DIRECT); hard errors are counted so a test can tell an
/// injected failure from a real one.
pub struct SeededFaults {
    state: u64,
    /// Per mille of completions to rewrite.
    pub rate: u32,
    /// Which rewrites are allowed.
    pub hard_errors: bool,
    held: Vec<Cqe>,
    pub injected_hard: std::sync::Arc<std::sync::atomic::AtomicU64>,
    pub injected_soft: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl SeededFaults {
    pub fn new(seed: u64, rate: u32, hard_errors: bool) -> SeededFaults {
        SeededFaults {
            state: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            rate,
            hard_errors,
            held: Vec::new(),
            injected_hard: Default::default(),
            injected_soft: Default::default(),
        }
    }

    fn next(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

impl FaultPlan for SeededFaults {
    fn on_complete(&mut self, op: &Op, cqe: Cqe, out: &mut Vec<Cqe>) {
        use std::sync::atomic::Ordering::Relaxed;
        let roll = (self.next() % 1000) as u32;
        if roll >= self.rate || matches!(op, Op::Fsync { .. }) {
            out.push(cqe);
            return;
        }
        let kind = self.next() % if self.hard_errors { 7 } else { 4 };
        let rewritten = match kind {
            // A short transfer: the engine must resubmit the rest.
            // (Never 0: that means EOF, which a kernel does not report mid-file.)
            0 if cqe.result >= 8192 => Some((cqe.result / 2) & !4095),
            1 => Some(-libc::EINTR),
            2 => Some(-libc::EAGAIN),
            3 => {
                // Hold it back: completions arrive out of order.
                self.held.push(cqe);
                self.injected_soft.fetch_add(1, Relaxed);
                return;
            }
            4 => Some(-libc::EIO),
            5 => Some(-libc::ENOSPC),
            6 => Some(-libc::ECANCELED),
            _ => None,
        };
        match rewritten {
            Some(r) => {
                if kind >= 4 {
                    self.injected_hard.fetch_add(1, Relaxed);
                } else {
                    self.injected_soft.fetch_add(1, Relaxed);
                }
                out.push(Cqe {
                    user_data: cqe.user_data,
                    result: r,
                });
            }
            None => out.push(cqe),
        }
    }

    fn flush(&mut self, out: &mut Vec<Cqe>) {
        // Release in reverse order of arrival.
        while let Some(c) = self.held.pop() {
            out.push(c);
        }
    }

    fn holding(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_timed_wait_returns_without_a_completion_and_still_submits() {
        let mut fds = [0; 2];
        // SAFETY: pipe fills two descriptors, closed below.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let mut ring = Ring::new(8).unwrap();
        let mut buf = [0u8; 8];
        // SAFETY: `buf` outlives the op: it is reaped before the end of the test.
        unsafe {
            ring.push(
                Op::Read {
                    fd: fds[0],
                    buf: buf.as_mut_ptr(),
                    len: 8,
                    offset: u64::MAX, // -1: the pipe's current position
                    fixed: None,
                    nowait: false,
                },
                3,
            )
            .unwrap();
        }
        // Nothing to read yet: the wait ends at its timeout, with the read submitted.
        ring.submit_and_wait_for(1, Duration::from_millis(20))
            .unwrap();
        let mut out = Vec::new();
        ring.reap(&mut out);
        assert!(out.is_empty());
        assert_eq!(ring.in_flight(), 1);
        // SAFETY: writes 3 bytes from a live array to our pipe.
        assert_eq!(unsafe { libc::write(fds[1], b"abc".as_ptr().cast(), 3) }, 3);
        while out.is_empty() {
            ring.submit_and_wait_for(1, Duration::from_secs(10))
                .unwrap();
            ring.reap(&mut out);
        }
        assert_eq!(
            out,
            vec![Cqe {
                user_data: 3,
                result: 3
            }]
        );
        assert_eq!(&buf[..3], b"abc");
        // SAFETY: our descriptors, no longer used.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }

    #[test]
    fn read_write_fsync_round_trip() {
        let path = std::env::temp_dir().join(format!("hipfile-ring-{}", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        f.write_all(b"hello ring").unwrap();
        let mut ring = Ring::new(8).unwrap();
        let mut buf = [0u8; 16];
        // SAFETY: `buf` outlives the op: we reap before it goes out of scope.
        unsafe {
            ring.push(
                Op::Read {
                    fd: f.as_raw_fd(),
                    buf: buf.as_mut_ptr(),
                    len: 16,
                    offset: 6,
                    fixed: None,
                    nowait: false,
                },
                7,
            )
            .unwrap();
        }
        ring.submit_and_wait(1).unwrap();
        let mut out = Vec::new();
        ring.reap(&mut out);
        assert_eq!(
            out,
            vec![Cqe {
                user_data: 7,
                result: 4
            }]
        );
        assert_eq!(&buf[..4], b"ring");
        // SAFETY: fsync names no memory.
        unsafe {
            ring.push(
                Op::Fsync {
                    fd: f.as_raw_fd(),
                    datasync: true,
                },
                8,
            )
            .unwrap();
        }
        ring.submit_and_wait(1).unwrap();
        out.clear();
        ring.reap(&mut out);
        assert_eq!(
            out,
            vec![Cqe {
                user_data: 8,
                result: 0
            }]
        );
        std::fs::remove_file(&path).unwrap();
    }
}
