//! The POSIX storage backend: where io_uring is refused (see [`super`]), a
//! worker's operations run as plain system calls — `pread`/`pwrite`,
//! `preadv2` with `RWF_NOWAIT` for the page-cache probe, `fdatasync`/`fsync`.
//!
//! A completion carries what io_uring reports for the same operation, since
//! the kernel runs the same file operation underneath: the bytes moved (short
//! at EOF, or where a `RWF_NOWAIT` read reaches the first page the cache
//! lacks), 0 at EOF, −EAGAIN for a `RWF_NOWAIT` read that would block,
//! −EOPNOTSUPP where the filesystem cannot do `RWF_NOWAIT`, −EINVAL for an
//! O_DIRECT transfer the device cannot take at that alignment, −EBADF for a
//! bad descriptor. So the worker's errno handling serves both backends
//! unchanged. Registered buffers mean nothing here: READ_FIXED and
//! WRITE_FIXED become plain reads and writes of the same memory.
//!
//! Operations run synchronously, on the worker's thread, when the worker
//! submits them: their completions are ready when `submit` returns. A helper
//! thread per worker would not make the worker faster:
//! - A page-cache read is a memory copy by the CPU that issues it. io_uring
//!   makes that copy inline in `io_uring_enter`, on the worker's thread as
//!   well (which is why the worker bounds the page-cache reads of one pass),
//!   so hot reads cost the same on both backends; a helper would add a
//!   wake-up per operation and a third runnable thread per worker.
//! - A worker's GPU copies run asynchronously on its stream: while it reads
//!   the next chunk, the copy of the one before moves over PCIe, so storage
//!   and the link overlap within each worker and across workers.
//! - What a worker cannot overlap is its own O_DIRECT reads: they reach the
//!   disk one at a time per worker, so the disk sees as many reads at once as
//!   there are workers taking storage-bound chunks (`cold_io_threads`), not
//!   the ring's depth. A reader thread per worker would let a worker copy
//!   one read out of its huge-page slot while its next read is at the disk,
//!   but each read then costs two wake-ups more: on the 2-core VM, cold
//!   1 MiB batches at depth 16 and cold 4 MiB sync reads ran 0.88 × and
//!   0.86 × as fast that way (5 interleaved rounds each).
//!
//! Measured on the 2-core VM with `scripts/bench-posix-vs-fio.sh` (host
//! memory, one 1 GiB file; `bench/RESULTS.md`, "The 2-core VM"): cold
//! 1 MiB sync reads at 0.85–1.08 × fio `psync`, cold 4 MiB sync reads and
//! 1 MiB batches at depth 16 at 0.65–0.90 ×, and 1.0–1.45 × the io_uring
//! backend on the same paths; hot reads at 2.2–7.9 × fio. What the cold
//! rows lose is the copy out of the huge page, which fio does not make: a
//! 4 MiB O_DIRECT read into two huge pages runs at 4.1 GB/s there, and
//! with the copy into a buffer of 4 KiB pages at 2.1–2.7, where fio reads
//! straight into its own buffer at 3.0–3.3 when the kernel happened to
//! give that buffer physically contiguous pages (and at 0.6–0.8 when not).

#[cfg(feature = "testing")]
use crate::ring::FaultPlan;
use crate::ring::{Cqe, Op};
use std::io;

/// The POSIX counterpart of [`crate::ring::Ring`]: the same push, submit,
/// wait and reap, with the same completions and fault plans.
#[derive(Default)]
pub struct PosixRing {
    /// Pushed, not yet submitted: (user data, op).
    queued: Vec<(u64, Op)>,
    /// Executed; the completion is not yet reaped.
    done: Vec<(Op, Cqe)>,
    #[cfg(feature = "testing")]
    faults: Option<Box<dyn FaultPlan>>,
}

impl PosixRing {
    pub fn new() -> PosixRing {
        PosixRing::default()
    }

    #[cfg(feature = "testing")]
    pub fn set_fault_plan(&mut self, plan: Option<Box<dyn FaultPlan>>) {
        self.faults = plan;
    }

    /// Ops pushed whose completion the caller has not seen yet.
    pub fn in_flight(&self) -> usize {
        #[cfg(feature = "testing")]
        let held = self.faults.as_ref().map_or(0, |p| p.holding());
        #[cfg(not(feature = "testing"))]
        let held = 0;
        self.queued.len() + self.done.len() + held
    }

    /// Queue `op`, tagged `user_data`; it runs at the next submit.
    ///
    /// # Safety
    /// The memory `op` names must stay valid and unaliased until its
    /// completion is returned by `reap` (the contract of [`crate::ring::Ring::push`]).
    pub unsafe fn push(&mut self, op: Op, user_data: u64) -> io::Result<()> {
        self.queued.push((user_data, op));
        Ok(())
    }

    /// Run every queued op, in the order pushed. Their completions are then
    /// ready, so a wait for any number of them never blocks.
    pub fn submit(&mut self) -> io::Result<()> {
        for (user_data, op) in self.queued.drain(..) {
            // SAFETY: `push`'s contract keeps the op's memory valid until its
            // completion is reaped, which is after this call.
            let result = unsafe { execute(&op) };
            self.done.push((op, Cqe { user_data, result }));
        }
        Ok(())
    }

    /// Move ready completions into `out` (after the fault plan, if any).
    pub fn reap(&mut self, out: &mut Vec<Cqe>) {
        #[cfg(feature = "testing")]
        if let Some(plan) = self.faults.as_mut() {
            for (op, cqe) in self.done.drain(..) {
                plan.on_complete(&op, cqe, out);
            }
            if self.queued.is_empty() {
                plan.flush(out);
            }
            return;
        }
        out.extend(self.done.drain(..).map(|(_, cqe)| cqe));
    }
}

/// Run one op with plain system calls; the result as io_uring reports it
/// (bytes, or −errno).
///
/// # Safety
/// The memory `op` names must be valid for the transfer it describes.
pub unsafe fn execute(op: &Op) -> i32 {
    let r: isize = match *op {
        Op::Read {
            fd,
            buf,
            len,
            offset,
            nowait,
            ..
        } => {
            let len = len as usize;
            if nowait {
                let iov = libc::iovec {
                    iov_base: buf.cast(),
                    iov_len: len,
                };
                // SAFETY: the caller vouches for buf..buf+len; an offset of -1
                // reads at the file position, as io_uring's READ does.
                let r = unsafe { libc::preadv2(fd, &iov, 1, offset as i64, libc::RWF_NOWAIT) };
                if r < 0 && errno() == libc::ENOSYS {
                    // No preadv2 (a sandbox that lacks it): this kernel
                    // interface cannot probe the page cache.
                    return -libc::EOPNOTSUPP;
                }
                r
            } else if offset == u64::MAX {
                // SAFETY: as above; io_uring reads at the file position for -1.
                unsafe { libc::read(fd, buf.cast(), len) }
            } else {
                // SAFETY: as above.
                unsafe { libc::pread(fd, buf.cast(), len, offset as i64) }
            }
        }
        Op::Write {
            fd,
            buf,
            len,
            offset,
            ..
        } => {
            let len = len as usize;
            if offset == u64::MAX {
                // SAFETY: the caller vouches for buf..buf+len.
                unsafe { libc::write(fd, buf.cast(), len) }
            } else {
                // The same RWF_NOAPPEND the io_uring write carries: the write
                // lands at its offset even if the application set O_APPEND
                // on the descriptor after registration.
                let iov = libc::iovec {
                    iov_base: buf.cast_mut().cast(),
                    iov_len: len,
                };
                // SAFETY: as above.
                unsafe { libc::pwritev2(fd, &iov, 1, offset as i64, crate::file::noappend_flag()) }
            }
        }
        Op::Fsync { fd, datasync } => {
            // SAFETY: names no memory.
            (unsafe {
                if datasync {
                    libc::fdatasync(fd)
                } else {
                    libc::fsync(fd)
                }
            }) as isize
        }
    };
    if r < 0 {
        -errno()
    } else {
        // A transfer is at most MAX_RW_COUNT bytes, which fits.
        r as i32
    }
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::SeededFaults;
    use crate::scratch::ScratchFile;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};

    /// A file in `HIPFILE_TEST_DIR` (disk-backed: O_DIRECT and page-cache
    /// eviction need a real filesystem) holding `bytes`, removed on drop.
    fn scratch(name: &str, bytes: &[u8]) -> ScratchFile {
        ScratchFile::new(&format!("posix-{name}"), bytes)
    }

    /// 64 KiB aligned for O_DIRECT, freed on drop.
    struct Aligned(*mut u8);

    const ALIGNED: std::alloc::Layout = match std::alloc::Layout::from_size_align(64 << 10, 4096) {
        Ok(l) => l,
        Err(_) => panic!("a valid layout"),
    };

    impl Drop for Aligned {
        fn drop(&mut self) {
            // SAFETY: allocated with this layout by `direct_and_aligned`.
            unsafe { std::alloc::dealloc(self.0, ALIGNED) };
        }
    }

    /// `p` opened O_DIRECT for reading, and a buffer it can read into.
    fn direct_and_aligned(p: &std::path::Path) -> (std::fs::File, Aligned) {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(p)
            .expect("O_DIRECT open (set HIPFILE_TEST_DIR to a disk-backed directory)");
        // SAFETY: a non-zero size.
        let base = unsafe { std::alloc::alloc(ALIGNED) };
        assert!(!base.is_null());
        (f, Aligned(base))
    }

    fn read(fd: i32, buf: &mut [u8], offset: u64, nowait: bool) -> Op {
        Op::Read {
            fd,
            buf: buf.as_mut_ptr(),
            len: buf.len() as u32,
            offset,
            fixed: None,
            nowait,
        }
    }

    fn run(op: Op) -> i32 {
        // SAFETY: every op in these tests names a live local buffer.
        unsafe { execute(&op) }
    }

    #[test]
    fn a_read_past_the_end_is_short_and_then_zero() {
        let tmp = scratch("short", b"0123456789");
        let f = &tmp.file;
        let mut buf = [0u8; 8];
        assert_eq!(run(read(f.as_raw_fd(), &mut buf, 6, false)), 4);
        assert_eq!(&buf[..4], b"6789");
        assert_eq!(run(read(f.as_raw_fd(), &mut buf, 10, false)), 0);
        assert_eq!(run(read(f.as_raw_fd(), &mut buf, 1 << 20, false)), 0);
    }

    #[test]
    fn a_nowait_read_of_an_uncached_range_is_eagain_and_of_a_cached_one_succeeds() {
        let data = vec![7u8; 64 << 10];
        let tmp = scratch("nowait", &data);
        let f = &tmp.file;
        let fd = f.as_raw_fd();
        let mut buf = vec![0u8; 64 << 10];
        assert_eq!(run(read(fd, &mut buf, 0, true)), 64 << 10);
        // Clean pages are dropped by DONTNEED once written back; a page another
        // process (or writeback still in flight) holds may stay, so ask until
        // the range is out of the page cache.
        // The pages can also come back between the check and the read (the
        // kernel's readahead, or reclaim racing the advice), so a probe that
        // still finds them is asked again after another eviction; what it
        // may never give is anything but EAGAIN or a count.
        let mut evicted = false;
        let mut saw_eagain = false;
        for _ in 0..50 {
            f.sync_data().unwrap();
            // SAFETY: our descriptor; advice names no memory.
            let r = unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
            assert_eq!(r, 0);
            if crate::file::fully_cached(fd, 0, 64 << 10) != Some(true) {
                evicted = true;
                let got = run(read(fd, &mut buf, 0, true));
                assert!(
                    got == -libc::EAGAIN || (0..=64 << 10).contains(&got),
                    "a RWF_NOWAIT read of an evicted range gave {got}"
                );
                if got == -libc::EAGAIN {
                    saw_eagain = true;
                    break;
                }
            }
            std::thread::yield_now();
        }
        if evicted {
            assert!(
                saw_eagain,
                "no RWF_NOWAIT read of the evicted range gave EAGAIN"
            );
        } else {
            eprintln!("note: the kernel kept the range cached; the EAGAIN case was not reached");
        }
        // A blocking read brings the range back; then the probe hits.
        assert_eq!(run(read(fd, &mut buf, 0, false)), 64 << 10);
        assert_eq!(run(read(fd, &mut buf, 0, true)), 64 << 10);
    }

    #[test]
    fn an_o_direct_read_into_an_unaligned_buffer_is_einval() {
        let data = vec![1u8; 16 << 10];
        let tmp = scratch("dio", &data);
        let p = &tmp.path;
        let (f, mem) = direct_and_aligned(p);
        let base = mem.0;
        let at = |off: usize, len: usize| Op::Read {
            fd: f.as_raw_fd(),
            // SAFETY: off + len stays inside the 64 KiB allocation.
            buf: unsafe { base.add(off) },
            len: len as u32,
            offset: 0,
            fixed: Some(0),
            nowait: false,
        };
        assert_eq!(run(at(0, 8192)), 8192);
        assert_eq!(run(at(1, 8192)), -libc::EINVAL);
        assert_eq!(run(at(0, 100)), -libc::EINVAL);
    }

    #[test]
    fn writes_and_syncs_report_bytes_and_zero() {
        let tmp = scratch("write", b"");
        let f = &tmp.file;
        let fd = f.as_raw_fd();
        let data = *b"posix backend";
        let op = Op::Write {
            fd,
            buf: data.as_ptr(),
            len: data.len() as u32,
            offset: 3,
            fixed: Some(2),
        };
        assert_eq!(run(op), data.len() as i32);
        assert_eq!(run(Op::Fsync { fd, datasync: true }), 0);
        assert_eq!(
            run(Op::Fsync {
                fd,
                datasync: false
            }),
            0
        );
        let mut back = [0u8; 16];
        assert_eq!(f.read_at(&mut back, 0).unwrap(), 16);
        assert_eq!(&back[3..], b"posix backend");
    }

    #[test]
    fn a_bad_descriptor_is_ebadf() {
        let mut buf = [0u8; 4];
        assert_eq!(run(read(-1, &mut buf, 0, false)), -libc::EBADF);
        assert_eq!(run(read(-1, &mut buf, 0, true)), -libc::EBADF);
        assert_eq!(
            run(Op::Fsync {
                fd: -1,
                datasync: true
            }),
            -libc::EBADF
        );
    }

    #[test]
    fn completions_come_after_submit_tagged_and_in_order() {
        let tmp = scratch("ring", b"abcdefgh");
        let f = &tmp.file;
        let mut ring = PosixRing::new();
        let mut a = [0u8; 4];
        let mut b = [0u8; 4];
        // SAFETY: both buffers outlive the ops: reaped below.
        unsafe {
            ring.push(read(f.as_raw_fd(), &mut a, 0, false), 10)
                .unwrap();
            ring.push(read(f.as_raw_fd(), &mut b, 4, true), 11).unwrap();
        }
        assert_eq!(ring.in_flight(), 2);
        let mut out = Vec::new();
        ring.reap(&mut out);
        assert!(out.is_empty(), "nothing runs before submit");
        ring.submit().unwrap();
        ring.reap(&mut out);
        assert_eq!(
            out,
            vec![
                Cqe {
                    user_data: 10,
                    result: 4
                },
                Cqe {
                    user_data: 11,
                    result: 4
                }
            ]
        );
        assert_eq!((&a, &b), (b"abcd", b"efgh"));
        assert_eq!(ring.in_flight(), 0);
    }

    #[test]
    fn a_fault_plan_rewrites_and_holds_back_completions() {
        let tmp = scratch("faults", &vec![5u8; 1 << 20]);
        let f = &tmp.file;
        let mut ring = PosixRing::new();
        let plan = SeededFaults::new(3, 1000, true);
        let (hard, soft) = (plan.injected_hard.clone(), plan.injected_soft.clone());
        ring.set_fault_plan(Some(Box::new(plan)));
        let mut bufs = vec![[0u8; 16 << 10]; 64];
        for (i, b) in bufs.iter_mut().enumerate() {
            // SAFETY: the buffers outlive the ops: all are reaped below.
            unsafe {
                ring.push(read(f.as_raw_fd(), b, (i as u64) << 14, false), i as u64)
                    .unwrap()
            };
        }
        ring.submit().unwrap();
        let mut out = Vec::new();
        ring.reap(&mut out);
        // Every op completes exactly once, held-back ones last.
        let mut tags: Vec<u64> = out.iter().map(|c| c.user_data).collect();
        tags.sort_unstable();
        assert_eq!(tags, (0..64).collect::<Vec<u64>>());
        assert_eq!(ring.in_flight(), 0);
        let rewritten = out.iter().filter(|c| c.result != 16 << 10).count() as u64;
        let injected = hard.load(std::sync::atomic::Ordering::Relaxed)
            + soft.load(std::sync::atomic::Ordering::Relaxed);
        assert!(injected > 0 && rewritten > 0 && rewritten <= injected);
    }

    /// Every case above, run by io_uring and by this backend, completes the
    /// same. About io_uring itself: scripts/test.sh skips it where io_uring
    /// is refused.
    #[test]
    fn same_results_as_io_uring() {
        let data = vec![9u8; 64 << 10];
        let tmp = scratch("same", &data);
        let (p, f) = (&tmp.path, &tmp.file);
        let fd = f.as_raw_fd();
        let (dio, mem) = direct_and_aligned(p);
        let base = mem.0;
        // Read the whole file (so no readahead is left in flight) and write
        // it back (dirty pages stay), then drop it from the page cache.
        let evict = || {
            let mut all = vec![0u8; 64 << 10];
            f.read_exact_at(&mut all, 0).unwrap();
            f.sync_data().unwrap();
            // SAFETY: our descriptor; advice names no memory.
            let r = unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
            assert_eq!(r, 0);
        };
        let keep = || {};
        let read = |fd, off: usize, len: usize, offset, nowait| Op::Read {
            fd,
            // SAFETY: every case stays inside the 64 KiB allocation.
            buf: unsafe { base.add(off) },
            len: len as u32,
            offset,
            fixed: None,
            nowait,
        };
        let write = |fd| Op::Write {
            fd,
            buf: base,
            len: 4096,
            offset: 8192,
            fixed: None,
        };
        let dfd = dio.as_raw_fd();
        let (ebadf, einval) = (-libc::EBADF, -libc::EINVAL);
        let cases: Vec<(&str, Op, &dyn Fn(), i32)> = vec![
            ("read", read(fd, 0, 4096, 0, false), &keep, 4096),
            (
                "short read",
                read(fd, 0, 8192, 60 << 10, false),
                &keep,
                4096,
            ),
            (
                "read at the end",
                read(fd, 0, 4096, 64 << 10, false),
                &keep,
                0,
            ),
            (
                "cached nowait read",
                read(fd, 0, 8192, 0, true),
                &keep,
                8192,
            ),
            (
                "uncached nowait read",
                read(fd, 0, 8192, 0, true),
                &evict,
                -libc::EAGAIN,
            ),
            (
                "O_DIRECT read",
                read(dfd, 0, 8192, 4096, false),
                &keep,
                8192,
            ),
            (
                "unaligned O_DIRECT buffer",
                read(dfd, 1, 8192, 0, false),
                &keep,
                einval,
            ),
            (
                "unaligned O_DIRECT length",
                read(dfd, 0, 100, 0, false),
                &keep,
                einval,
            ),
            ("bad descriptor", read(-1, 0, 8, 0, false), &keep, ebadf),
            ("write", write(fd), &keep, 4096),
            ("write to O_RDONLY", write(dfd), &keep, ebadf),
            ("fdatasync", Op::Fsync { fd, datasync: true }, &keep, 0),
            (
                "fsync",
                Op::Fsync {
                    fd,
                    datasync: false,
                },
                &keep,
                0,
            ),
            (
                "bad fsync",
                Op::Fsync {
                    fd: -1,
                    datasync: true,
                },
                &keep,
                ebadf,
            ),
        ];
        let mut uring = crate::ring::Ring::new(8).expect("io_uring");
        for (name, op, prepare, want) in cases {
            prepare();
            // SAFETY: the op names the live allocation; reaped before the next case.
            unsafe { uring.push(op, 1).unwrap() };
            uring.submit_and_wait(1).unwrap();
            let mut out = Vec::new();
            uring.reap(&mut out);
            assert_eq!(out[0].result, want, "io_uring: {name}");
            prepare();
            assert_eq!(run(op), want, "posix: {name}");
        }
    }
}
