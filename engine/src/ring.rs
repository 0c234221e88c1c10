//! The only module that touches io_uring submission and completion queues.
//!
//! A buffer handed to [`Ring::push`] belongs to the kernel until its completion
//! has been returned by [`Ring::reap`]; callers track that in their in-flight
//! tables. With the `testing` feature a `FaultPlan` can sit between the
//! kernel and the caller to rewrite completions: short transfers, EINTR,
//! EAGAIN, EIO, ENOSPC, ECANCELED, and reordering.
//!
//! Neither queue of the ring can stall the caller:
//! - a full submission queue parks the op in a bounded FIFO of the ring's own
//!   (as many ops as the queue holds), which feeds the queue, in order, as the
//!   kernel consumes it; past that bound `push` fails instead of blocking;
//! - an overflowed completion queue (`io_uring_enter` fails with EBUSY while
//!   the kernel holds completions it could not post) is emptied into a
//!   backlog that [`Ring::reap`] hands out first, and the call is repeated.
//!   The worker keeps fewer ops in flight than the completion queue holds
//!   (twice the submission queue), so this is a safeguard, not a path.

#[cfg(feature = "testing")]
mod faults;

#[cfg(feature = "testing")]
pub use faults::{FaultPlan, SeededFaults};

use crate::{log::Level, log_once};
use io_uring::{opcode, squeue, types, IoUring};
use std::collections::VecDeque;
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

pub struct Ring {
    uring: IoUring,
    /// Ops pushed and not reaped, by user_data (parked ones too), so a fault
    /// plan can see what it rewrites.
    ops: std::collections::HashMap<u64, Op>,
    #[cfg(feature = "testing")]
    faults: Option<Box<dyn FaultPlan>>,
    /// Ops that found the submission queue full, oldest first.
    parked: VecDeque<squeue::Entry>,
    /// At most this many ops wait in `parked`.
    parked_max: usize,
    /// Completions taken off an overflowed completion queue, not yet reaped.
    backlog: Vec<Cqe>,
    /// The kernel refused a timed wait (EXT_ARG, Linux < 5.11): waits block.
    no_timed_wait: bool,
    /// Tests: the next `io_uring_enter` calls fail with these errnos, unissued.
    #[cfg(test)]
    fail_next_enter: VecDeque<i32>,
}

/// Consecutive EBUSY answers, each after the completion queue was emptied,
/// before `io_uring_enter` gives the error to the caller.
const MAX_BUSY: u32 = 3;

impl Ring {
    pub fn new(entries: u32) -> io::Result<Ring> {
        let uring = IoUring::builder()
            .setup_single_issuer()
            .build(entries)
            .or_else(|_| {
                // Older kernels (< 6.0) refuse SINGLE_ISSUER; it is only a hint.
                IoUring::new(entries)
            })?;
        let parked_max = uring.params().sq_entries() as usize;
        Ok(Ring {
            uring,
            ops: std::collections::HashMap::with_capacity(2 * parked_max),
            #[cfg(feature = "testing")]
            faults: None,
            parked: VecDeque::with_capacity(parked_max),
            parked_max,
            backlog: Vec::new(),
            no_timed_wait: false,
            #[cfg(test)]
            fail_next_enter: VecDeque::new(),
        })
    }

    #[cfg(feature = "testing")]
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
        #[cfg(feature = "testing")]
        let held = self.faults.as_ref().map_or(0, |p| p.holding());
        #[cfg(not(feature = "testing"))]
        let held = 0;
        self.ops.len() + held
    }

    /// Queue `op`, tagged `user_data` (unique among in-flight ops). When the
    /// submission queue is full the op is parked and enters it, in order, at
    /// a later submit; EAGAIN when the parking space is full too.
    ///
    /// # Safety
    /// The memory `op` names must stay valid and unaliased until its completion
    /// is returned by `reap`.
    pub unsafe fn push(&mut self, op: Op, user_data: u64) -> io::Result<()> {
        let entry = build_sqe(&op).user_data(user_data);
        // Behind parked ops, an op waits its turn: ops enter the kernel in push order.
        // SAFETY: the entry's buffers are valid until completion (caller's contract).
        if !self.parked.is_empty() || unsafe { self.uring.submission().push(&entry) }.is_err() {
            if self.parked.len() >= self.parked_max {
                return Err(io::Error::from_raw_os_error(libc::EAGAIN));
            }
            self.parked.push_back(entry);
        }
        self.ops.insert(user_data, op);
        Ok(())
    }

    /// Move parked ops into the submission queue while it has room.
    fn unpark(&mut self) {
        if self.parked.is_empty() {
            return;
        }
        let mut sq = self.uring.submission();
        while let Some(entry) = self.parked.front() {
            // SAFETY: pushed by `push`, whose caller keeps the buffers valid
            // until the op's completion.
            if unsafe { sq.push(entry) }.is_err() {
                break;
            }
            self.parked.pop_front();
        }
    }

    /// Move the posted completions into the backlog; how many there were.
    fn drain_completions(&mut self) -> usize {
        let before = self.backlog.len();
        self.backlog.extend(self.uring.completion().map(|c| Cqe {
            user_data: c.user_data(),
            result: c.result(),
        }));
        self.backlog.len() - before
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
        self.enter(want, Some(timeout))
    }

    fn enter(&mut self, want: usize, timeout: Option<Duration>) -> io::Result<()> {
        self.unpark();
        // Parked ops are not in the kernel: no completion of theirs can come.
        let mut want = want.min(self.ops.len() - self.parked.len());
        let mut busy = 0;
        loop {
            // Completions already taken off the queue count towards the wait.
            want = want.saturating_sub(self.backlog.len());
            // Nothing to wait for: a timeout would only add a syscall argument.
            let ts = timeout
                .filter(|_| want > 0 && !self.no_timed_wait)
                .map(types::Timespec::from);
            let r = match self.take_injected_failure() {
                Some(e) => Err(e),
                None => match &ts {
                    Some(ts) => {
                        let args = types::SubmitArgs::new().timespec(ts);
                        self.uring.submitter().submit_with_args(want, &args)
                    }
                    None => self.uring.submit_and_wait(want),
                },
            };
            let Err(e) = r else {
                break;
            };
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // Timed out: the entries were submitted all the same.
                Some(libc::ETIME) if ts.is_some() => break,
                // The completion queue overflowed and the kernel holds
                // completions it could not post; it takes no submissions until
                // they fit. Empty the queue into the backlog and enter again.
                Some(libc::EBUSY) => {
                    if self.drain_completions() == 0 {
                        busy += 1;
                        if busy >= MAX_BUSY {
                            return Err(e);
                        }
                    }
                }
                // No EXT_ARG (Linux < 5.11): wait without a limit from now on.
                Some(libc::EINVAL) if ts.is_some() => self.no_timed_wait = true,
                _ => return Err(e),
            }
        }
        self.unpark();
        Ok(())
    }

    #[cfg(test)]
    fn take_injected_failure(&mut self) -> Option<io::Error> {
        self.fail_next_enter
            .pop_front()
            .map(io::Error::from_raw_os_error)
    }

    #[cfg(not(test))]
    fn take_injected_failure(&mut self) -> Option<io::Error> {
        None
    }

    /// Move ready completions into `out` (after the fault plan, if any):
    /// first those an overflow put in the backlog, then the posted ones.
    pub fn reap(&mut self, out: &mut Vec<Cqe>) {
        let Ring {
            uring,
            ops,
            #[cfg(feature = "testing")]
            faults,
            backlog,
            ..
        } = self;
        let posted = uring.completion().map(|c| Cqe {
            user_data: c.user_data(),
            result: c.result(),
        });
        for cqe in backlog.drain(..).chain(posted) {
            let Some(op) = ops.remove(&cqe.user_data) else {
                log_once!(
                    Level::Error,
                    "io_uring completion for no pushed op (user_data {}); ignored",
                    cqe.user_data
                );
                continue;
            };
            #[cfg(feature = "testing")]
            if let Some(plan) = faults.as_mut() {
                plan.on_complete(&op, cqe, out);
                continue;
            }
            let _ = op;
            out.push(cqe);
        }
        #[cfg(feature = "testing")]
        if ops.is_empty() {
            if let Some(plan) = faults.as_mut() {
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

/// Why io_uring cannot serve the workers in this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unusable {
    /// A system call failed: which one, and its errno.
    Refused { call: &'static str, errno: i32 },
    /// The kernel's io_uring lacks operations the workers submit.
    MissingOps(Vec<&'static str>),
}

/// Whether io_uring can serve the workers: a ring can be set up, the kernel
/// runs every opcode the workers submit, and a submission completes (a
/// sandbox may allow `io_uring_setup` but refuse `io_uring_enter`, or
/// emulate io_uring with a few opcodes only, as gVisor does where its
/// io_uring is enabled at all). Called once per process by [`crate::storage`].
pub fn probe() -> Result<(), Unusable> {
    let refused = |call: &'static str, e: io::Error| Unusable::Refused {
        call,
        errno: e.raw_os_error().unwrap_or(libc::EIO),
    };
    let mut uring = IoUring::new(8).map_err(|e| refused("io_uring_setup", e))?;
    let mut ops = io_uring::Probe::new();
    uring
        .submitter()
        .register_probe(&mut ops)
        .map_err(|e| refused("io_uring_register", e))?;
    // In the order of `storage::NEEDED_OPS`, which names them.
    let missing: Vec<&'static str> = [
        opcode::Read::CODE,
        opcode::Write::CODE,
        opcode::ReadFixed::CODE,
        opcode::WriteFixed::CODE,
        opcode::Fsync::CODE,
    ]
    .into_iter()
    .zip(crate::storage::NEEDED_OPS)
    .filter(|&(code, _)| !ops.is_supported(code))
    .map(|(_, name)| name)
    .collect();
    if !missing.is_empty() {
        return Err(Unusable::MissingOps(missing));
    }
    let nop = opcode::Nop::new().build().user_data(1);
    // SAFETY: a NOP names no memory.
    if unsafe { uring.submission().push(&nop) }.is_err() {
        return Err(Unusable::Refused {
            call: "io_uring_enter",
            errno: libc::EBUSY,
        });
    }
    loop {
        match uring.submit_and_wait(1) {
            Ok(_) => break,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(refused("io_uring_enter", e)),
        }
    }
    let result = uring.completion().next().map(|c| c.result());
    match result {
        Some(0) => Ok(()),
        Some(r) => Err(Unusable::Refused {
            call: "io_uring_enter",
            errno: -r,
        }),
        None => Err(Unusable::Refused {
            call: "io_uring_enter",
            errno: libc::EIO,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchFile;
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

    /// A file of 64 bytes `0, 1, 2, ...`, removed when dropped.
    struct Bytes64(ScratchFile);

    impl Bytes64 {
        fn new(name: &str) -> Bytes64 {
            let bytes: Vec<u8> = (0..64).collect();
            Bytes64(ScratchFile::new(&format!("ring-{name}"), &bytes))
        }

        /// A read of the 4 bytes at `4 * i` into `buf`.
        fn read4(&self, i: usize, buf: &mut [u8; 4]) -> Op {
            Op::Read {
                fd: self.0.file.as_raw_fd(),
                buf: buf.as_mut_ptr(),
                len: 4,
                offset: 4 * i as u64,
                fixed: None,
                nowait: false,
            }
        }
    }

    /// Submit and reap until `n` completions came (at most 1000 rounds).
    fn reap_n(ring: &mut Ring, n: usize) -> Vec<Cqe> {
        let mut out = Vec::new();
        for _ in 0..1000 {
            if out.len() >= n {
                break;
            }
            ring.submit_and_wait(1).unwrap();
            ring.reap(&mut out);
        }
        out
    }

    #[test]
    fn a_full_submission_queue_parks_ops_in_push_order() {
        let file = Bytes64::new("park");
        let mut ring = Ring::new(2).unwrap();
        assert_eq!(ring.parked_max, 2);
        let mut bufs = [[0u8; 4]; 4];
        for (i, b) in bufs.iter_mut().enumerate() {
            // SAFETY: `bufs` outlives the ops: all are reaped below.
            unsafe { ring.push(file.read4(i, b), i as u64).unwrap() };
        }
        // Two fit the queue; the other two wait, oldest first, without a submit.
        let parked: Vec<u64> = ring.parked.iter().map(|e| e.get_user_data()).collect();
        assert_eq!(parked, [2, 3]);
        assert_eq!(ring.in_flight(), 4);
        let mut done = reap_n(&mut ring, 4);
        done.sort_by_key(|c| c.user_data);
        let want: Vec<Cqe> = (0..4)
            .map(|i| Cqe {
                user_data: i,
                result: 4,
            })
            .collect();
        assert_eq!(done, want);
        for (i, b) in bufs.iter().enumerate() {
            let i = 4 * i as u8;
            assert_eq!(*b, [i, i + 1, i + 2, i + 3]);
        }
        assert_eq!(ring.in_flight(), 0);
    }

    #[test]
    fn a_push_past_the_parking_space_is_refused() {
        let file = Bytes64::new("refuse");
        let mut ring = Ring::new(2).unwrap();
        let mut bufs = [[0u8; 4]; 5];
        for (i, b) in bufs.iter_mut().enumerate() {
            // SAFETY: `bufs` outlives the ops: all pushed ones are reaped below.
            let r = unsafe { ring.push(file.read4(i, b), i as u64) };
            if i < 4 {
                r.unwrap();
            } else {
                assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EAGAIN));
            }
        }
        assert_eq!(ring.in_flight(), 4, "the refused op is not in flight");
        assert_eq!(reap_n(&mut ring, 4).len(), 4);
    }

    #[test]
    fn an_overflowed_completion_queue_is_emptied_and_the_submission_repeated() {
        let file = Bytes64::new("busy");
        let mut ring = Ring::new(2).unwrap();
        let (mut a, mut b) = ([0u8; 4], [0u8; 4]);
        // SAFETY: `a` and `b` outlive the ops: both are reaped below.
        unsafe { ring.push(file.read4(1, &mut a), 1).unwrap() };
        ring.submit_and_wait(1).unwrap();
        // A's completion is posted; B waits in the submission queue when the
        // kernel answers EBUSY (the overflow the ring cannot make here).
        // SAFETY: as above.
        unsafe { ring.push(file.read4(2, &mut b), 2).unwrap() };
        ring.fail_next_enter.push_back(libc::EBUSY);
        ring.submit_and_wait(1).unwrap();
        assert_eq!(
            ring.uring.submission().len(),
            0,
            "B was left in the submission queue"
        );
        assert_eq!(ring.backlog.len(), 1, "A's completion was not set aside");
        let done = reap_n(&mut ring, 2);
        assert_eq!(
            done[0],
            Cqe {
                user_data: 1,
                result: 4
            },
            "the set-aside completion comes first"
        );
        assert_eq!(
            done[1..],
            [Cqe {
                user_data: 2,
                result: 4
            }]
        );
        assert_eq!((a, b), ([4, 5, 6, 7], [8, 9, 10, 11]));
    }

    #[test]
    fn ebusy_that_emptying_the_completion_queue_does_not_end_is_an_error() {
        let file = Bytes64::new("stuck");
        let mut ring = Ring::new(2).unwrap();
        let mut a = [0u8; 4];
        // SAFETY: `a` outlives the op: it is reaped below.
        unsafe { ring.push(file.read4(0, &mut a), 0).unwrap() };
        ring.fail_next_enter
            .extend([libc::EBUSY; MAX_BUSY as usize]);
        let e = ring.submit_and_wait(1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBUSY));
        // The op is still queued and completes at the next entry.
        assert_eq!(reap_n(&mut ring, 1).len(), 1);
        assert_eq!(a, [0, 1, 2, 3]);
    }

    #[test]
    fn read_write_fsync_round_trip() {
        let scratch = ScratchFile::new("ring", b"hello ring");
        let f = &scratch.file;
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
    }
}
