//! Small page-cache reads that a thread serves from what it remembers of its
//! last read (`hipfile_engine::fast`): the bytes are right, and nothing
//! that changed since (a deregistration, a buffer registration, a closed
//! driver, a fork, the end of the file) is missed.

#![allow(clippy::undocumented_unsafe_blocks)] // every call here is an unsafe C entry point on test-owned locals

mod common;

use common::*;
use hipfile::*;
use hipfile_engine::fast;
use std::ffi::c_void;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const LEN: usize = 1 << 20;
const BS: usize = 4096;

fn read(fh: *mut c_void, buf: &mut [u8], size: usize, off: usize) -> isize {
    hipFileRead(fh, buf.as_mut_ptr().cast(), size, off as i64, 0)
}

/// Read 4 KiB blocks of `tf` into `buf` until the thread serves them from
/// what it remembers (the file's page-cache probes must all hit first),
/// checking every block.
fn warm_up(tf: &TestFile, buf: &mut [u8]) {
    for i in 0..1000 {
        let off = (i * 7919 % (LEN / BS)) * BS;
        assert_eq!(read(tf.fh, buf, BS, off), BS as isize);
        assert!(buf[..BS] == tf.data[off..off + BS], "block at {off}");
        if fast::served() > 10 {
            return;
        }
    }
    panic!("1000 page-cache reads of one file into one buffer never took the remembered way");
}

#[test]
fn remembered_reads_return_the_file_s_bytes() {
    let (_g, _gpu) = setup();
    let tf = TestFile::new("fast-bytes", LEN);
    let mut buf = vec![0u8; 2 * BS];
    warm_up(&tf, &mut buf);
    let before = fast::served();
    for i in 0..2000 {
        let off = (i * 104729 % (LEN / BS)) * BS;
        let len = 512 + i % 3584;
        buf.fill(0xEE);
        assert_eq!(read(tf.fh, &mut buf, len, off), len as isize);
        assert!(
            buf[..len] == tf.data[off..off + len],
            "{len} bytes at {off}"
        );
        assert!(
            buf[len..].iter().all(|&b| b == 0xEE),
            "wrote past {len} bytes"
        );
    }
    // Most of them took the remembered way (one in 64 probes the page cache).
    assert!(
        fast::served() - before > 1500,
        "{}",
        fast::served() - before
    );
    // With a buffer offset, into the same base.
    assert_eq!(
        hipFileRead(tf.fh, buf.as_mut_ptr().cast(), BS, 8192, 100),
        BS as isize
    );
    assert!(buf[100..100 + BS] == tf.data[8192..8192 + BS]);
    // The file changes under the handle: the page cache has the new bytes.
    let new = vec![0x5Au8; BS];
    tf.file.write_all_at(&new, 0).unwrap();
    assert_eq!(read(tf.fh, &mut buf, BS, 0), BS as isize);
    assert!(buf[..BS] == new[..]);
    drop(tf);
    teardown();
}

#[test]
fn a_deregistered_handle_is_refused_after_remembered_reads() {
    let (_g, _gpu) = setup();
    let tf = TestFile::new("fast-dereg", LEN);
    let mut buf = vec![0u8; BS];
    warm_up(&tf, &mut buf);
    hipFileHandleDeregister(tf.fh);
    let served = fast::served();
    assert_eq!(read(tf.fh, &mut buf, BS, 0), -5027);
    assert_eq!(fast::served(), served);
    // Registered again (a new handle): the old one stays refused.
    let (_f, fh2) = open_registered(&tf.path);
    assert_eq!(read(tf.fh, &mut buf, BS, 0), -5027);
    assert_eq!(read(fh2, &mut buf, BS, 0), BS as isize);
    hipFileHandleDeregister(fh2);
    teardown();
}

#[test]
fn a_deregistration_on_another_thread_is_seen_by_the_next_read() {
    let (_g, _gpu) = setup();
    let tf = Arc::new(TestFile::new("fast-race", LEN));
    let gone = Arc::new(AtomicBool::new(false));
    let warm = Arc::new(AtomicBool::new(false));
    let reader = {
        let (tf, gone, warm) = (tf.clone(), gone.clone(), warm.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; BS];
            warm_up(&tf, &mut buf);
            warm.store(true, Ordering::Release);
            let mut after = 0;
            for i in 0.. {
                // Loaded before the read starts: a deregistration that had
                // returned by then must make this read fail.
                let was_gone = gone.load(Ordering::Acquire);
                let r = read(tf.fh, &mut buf, BS, (i % 256) * BS);
                if was_gone {
                    assert_eq!(r, -5027, "read {i} after the deregistration returned");
                    after += 1;
                    if after == 100 {
                        return;
                    }
                } else {
                    assert!(r == BS as isize || r == -5027, "read {i}: {r}");
                }
            }
            unreachable!()
        })
    };
    // Let the reader reach its remembered reads, then take the handle away.
    wait_until("the reader warms up", || warm.load(Ordering::Acquire));
    std::thread::sleep(std::time::Duration::from_millis(20));
    hipFileHandleDeregister(tf.fh);
    gone.store(true, Ordering::Release);
    reader.join().unwrap();
    drop(tf);
    teardown();
}

#[test]
fn registering_the_buffer_afterwards_applies_its_bounds() {
    let (_g, _gpu) = setup();
    let tf = TestFile::new("fast-bufreg", LEN);
    let mut buf = vec![0u8; 4 * BS];
    warm_up(&tf, &mut buf);
    let p = buf.as_mut_ptr() as *mut c_void;
    assert_eq!(hipFileBufRegister(p, BS, 0).err, 0);
    // Past the registered length: refused (hipFileInvalidValue), where the
    // unregistered pointer had no bounds.
    assert_eq!(hipFileRead(tf.fh, p, 2 * BS, 0, 0), -5022);
    assert_eq!(hipFileRead(tf.fh, p, BS, 0, 0), BS as isize);
    // Reads within the registration are remembered with its length.
    warm_up(&tf, &mut buf);
    assert_eq!(hipFileRead(tf.fh, p, 2 * BS, 0, 0), -5022);
    assert_eq!(hipFileRead(tf.fh, p, BS, 0, 1), -5022);
    assert_eq!(hipFileRead(tf.fh, p, BS - 8, 0, 8), (BS - 8) as isize);
    assert_eq!(hipFileBufDeregister(p).err, 0);
    // Deregistered: unbounded host memory again.
    assert_eq!(hipFileRead(tf.fh, p, 2 * BS, 0, 0), 2 * BS as isize);
    drop(tf);
    teardown();
}

#[test]
fn a_read_past_the_end_and_a_closed_driver_are_answered_as_always() {
    let (_g, _gpu) = setup();
    let tf = TestFile::new("fast-eof", LEN);
    let mut buf = vec![0u8; 2 * BS];
    warm_up(&tf, &mut buf);
    assert_eq!(read(tf.fh, &mut buf, 2 * BS, LEN - BS), BS as isize);
    assert!(buf[..BS] == tf.data[LEN - BS..]);
    assert_eq!(read(tf.fh, &mut buf, BS, LEN), 0);
    warm_up(&tf, &mut buf);
    while hipFileUseCount() > 0 {
        hipFileDriverClose();
    }
    assert_eq!(read(tf.fh, &mut buf, BS, 0), -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EINVAL)
    );
    drop(tf);
    teardown();
}

#[test]
fn a_child_after_fork_does_not_read_through_the_parent_s_handle() {
    let (_g, _gpu) = setup();
    let tf = TestFile::new("fast-fork", LEN);
    let mut buf = vec![0u8; BS];
    warm_up(&tf, &mut buf);
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // The child's driver is its own: the parent's handle means nothing.
        let r = read(tf.fh, &mut buf, BS, 0);
        unsafe { libc::_exit(if r == BS as isize { 1 } else { 0 }) };
    }
    let mut status = 0;
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child read through its parent's handle (status {status:#x})"
    );
    assert_eq!(read(tf.fh, &mut buf, BS, 0), BS as isize);
    drop(tf);
    teardown();
}

#[test]
fn a_file_that_leaves_the_page_cache_is_read_right_and_loses_the_remembered_way() {
    let (_g, _gpu) = setup();
    // Large enough that the reads between two probes, with their
    // readahead, bring back only a small part of it.
    const BIG: usize = 64 << 20;
    let tf = TestFile::new("fast-evict", BIG);
    let mut buf = vec![0u8; 2 * BS];
    // Page-aligned reads: the ones that need the page cache's trust.
    let at = buf.as_ptr().align_offset(BS);
    let (_, aligned) = buf.split_at_mut(at.min(BS));
    let aligned = &mut aligned[..BS];
    let mut served_warm = 0;
    for i in 0..1000 {
        let off = (i * 7919 % (BIG / BS)) * BS;
        assert_eq!(read(tf.fh, aligned, BS, off), BS as isize);
        served_warm = fast::served();
        if served_warm > 100 {
            break;
        }
    }
    assert!(
        served_warm > 100,
        "aligned reads never took the remembered way"
    );
    // Out of the page cache (and written back first, so it can leave).
    let fd = std::os::fd::AsRawFd::as_raw_fd(&tf.file);
    assert_eq!(unsafe { libc::fdatasync(fd) }, 0);
    assert_eq!(
        unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) },
        0
    );
    let before = fast::served();
    for i in 0..1000 {
        let off = (i * 104729 % (BIG / BS)) * BS;
        assert_eq!(read(tf.fh, aligned, BS, off), BS as isize);
        assert!(aligned[..] == tf.data[off..off + BS], "block at {off}");
    }
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    let path = std::ffi::CString::new(tf.path.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::statfs(path.as_ptr(), &mut fs) }, 0);
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    if fs.f_type as i64 != TMPFS_MAGIC {
        // Every 64th read probes; the first probe that lands on a page not
        // read back since ends the file's trust (the full path's reads then
        // go O_DIRECT, which does not bring the file back). Without the
        // probe all 1000 would be remembered reads.
        let after = fast::served() - before;
        assert!(
            after < 500,
            "{after} of 1000 reads of an evicted file were remembered"
        );
    }
    drop(tf);
    teardown();
}
