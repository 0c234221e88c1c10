//! Real faults where the machine allows them: a full filesystem (a 2 MiB
//! tmpfs and a 16 MiB loop-mounted ext4, when this process may mount them),
//! a file truncated while it is read, and a descriptor closed behind the
//! library's back. Each returns the right bytes and count or the right
//! error, never a partial success reported as whole.

mod common;

use common::{test_dir, workers_config};
use hipfile_engine::gpu::{Gpu, NoGpu};
use hipfile_engine::{Engine, Error, File, Memory};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

fn engine() -> Engine {
    let gpu: Arc<dyn Gpu> = Arc::new(NoGpu { why: "test".into() });
    Engine::with_gpu(workers_config(), gpu).unwrap()
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// Say on the terminal that a test could not run its real case here. Written
/// straight to stderr: the test harness would hide an eprintln of a test
/// that passes.
fn skipped(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {msg}");
}

/// Fill the filesystem mounted at `mnt` with one write of `len` bytes from
/// offset 0, through a buffered or an O_DIRECT descriptor: the write reports
/// the bytes it wrote from the start (or ENOSPC when none), the file holds
/// exactly those, and is no longer; writing the rest ends with ENOSPC, and
/// once the file is emptied a write that fits lands whole.
fn fill(mnt: &std::path::Path, len: usize, direct: bool) {
    use std::os::unix::fs::OpenOptionsExt;
    let what = format!("{} (O_DIRECT {direct})", mnt.display());
    let path = mnt.join(format!("f-{direct}"));
    let opened = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .custom_flags(if direct { libc::O_DIRECT } else { 0 })
        .open(&path);
    let f = match opened {
        Ok(f) => f,
        Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
            skipped(&format!("{what}: O_DIRECT refused here"));
            return;
        }
        Err(e) => panic!("{what}: {e}"),
    };
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let e = engine();
    let src = pattern(len);
    // Pieces run in parallel, so a piece past the first failure may have
    // taken space that the write then gave back: the next write can still
    // get some. Keep writing the rest until the filesystem says ENOSPC.
    let mut n = 0usize;
    for round in 0.. {
        assert!(round < 64, "{what}: no ENOSPC after 64 writes");
        // SAFETY: the memory named is owned by this test and outlives the call.
        let r = unsafe {
            e.write(
                &file,
                Memory::Host(src.as_ptr() as usize + n),
                len - n,
                n as u64,
            )
        };
        let got = match r {
            Ok(m) => m,
            Err(Error::Os(libc::ENOSPC)) => 0,
            Err(err) => panic!("{what}: {err:?}"),
        };
        assert!(n + got < len, "{what}: {len} bytes fit");
        n += got;
        let check = std::fs::read(&path).unwrap();
        assert_eq!(
            check.len(),
            n,
            "{what}: the file is not the {n} bytes reported"
        );
        assert!(
            check[..] == src[..n],
            "{what}: the reported bytes are not in the file"
        );
        if got == 0 {
            break;
        }
    }
    // Emptied, the filesystem takes a write that fits.
    f.set_len(0).unwrap();
    // SAFETY: the memory named is owned by this test and outlives the call.
    let r = unsafe { e.write(&file, Memory::Host(src.as_ptr() as usize), 1 << 20, 0) };
    assert_eq!(r, Ok(1 << 20), "{what}: a write that fits");
    let mut back = vec![0u8; 1 << 20];
    std::fs::File::open(&path)
        .unwrap()
        .read_exact_at(&mut back, 0)
        .unwrap();
    assert!(back == src[..1 << 20], "{what}");
    drop((file, f));
    std::fs::remove_file(&path).unwrap();
}

/// A directory for a mount point, unique to this process and `name`.
fn mount_point(name: &str) -> (std::path::PathBuf, std::ffi::CString) {
    let mnt = test_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&mnt).unwrap();
    let c = std::ffi::CString::new(mnt.to_str().unwrap()).unwrap();
    (mnt, c)
}

#[test]
fn a_full_tmpfs_gets_what_fits_and_no_more() {
    let (mnt, c) = mount_point("tiny-tmpfs");
    // SAFETY: plain mount(2) with NUL-terminated strings.
    let rc = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            c.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"size=2m".as_ptr().cast(),
        )
    };
    if rc != 0 {
        // Visible, not silent: this environment cannot mount (no CAP_SYS_ADMIN).
        skipped(&format!(
            "a_full_tmpfs_gets_what_fits_and_no_more: cannot mount a 2 MiB tmpfs here ({})",
            std::io::Error::last_os_error()
        ));
        let _ = std::fs::remove_dir(&mnt);
        return;
    }
    fill(&mnt, 4 << 20, false);
    fill(&mnt, 4 << 20, true);
    // SAFETY: unmounting what we mounted.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    let _ = std::fs::remove_dir(&mnt);
}

#[test]
fn a_full_ext4_gets_what_fits_and_no_more() {
    use std::process::Command;
    let (mnt, c) = mount_point("tiny-ext4");
    let img = test_dir().join(format!("tiny-ext4-{}.img", std::process::id()));
    std::fs::File::create(&img)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let made = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .arg(&img)
        .status()
        .map(|s| s.success());
    let mounted = made.as_ref().is_ok_and(|&ok| ok)
        && Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(&mnt)
            .status()
            .is_ok_and(|s| s.success());
    if !mounted {
        skipped(&format!(
            "a_full_ext4_gets_what_fits_and_no_more: cannot make and loop-mount a 16 MiB ext4 \
             here (mkfs.ext4: {made:?}; mounting needs root and a loop device)"
        ));
    } else {
        fill(&mnt, 32 << 20, false);
        fill(&mnt, 32 << 20, true);
        // SAFETY: unmounting what we mounted (the loop device goes with it).
        unsafe { libc::umount2(c.as_ptr(), 0) };
    }
    let _ = std::fs::remove_dir(&mnt);
    let _ = std::fs::remove_file(&img);
}

#[test]
fn file_truncated_while_read() {
    let len = 16 << 20;
    let data = pattern(len);
    let path = test_dir().join(format!("trunc-{}", std::process::id()));
    let e = engine();
    for round in 0..10 {
        std::fs::write(&path, &data).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
        let cut = (round + 1) << 20;
        let p2 = path.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_micros(200 * round as u64));
            std::fs::OpenOptions::new()
                .write(true)
                .open(&p2)
                .unwrap()
                .set_len(cut as u64)
                .unwrap();
        });
        let mut buf = vec![0u8; len];
        // SAFETY: the memory named is owned by this test and outlives the call.
        let r = unsafe { e.read(&file, Memory::Host(buf.as_mut_ptr() as usize), len, 0) };
        t.join().unwrap();
        match r {
            Ok(n) => {
                // Whatever the race gave, the count is a prefix and the prefix
                // up to the new end of file is the file's data.
                assert!(n <= len);
                let check = n.min(cut);
                assert!(
                    buf[..check] == data[..check],
                    "round {round}: wrong bytes in the first {check}"
                );
            }
            Err(err) => panic!("round {round}: truncation is not an error for a read: {err:?}"),
        }
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn descriptor_closed_behind_the_librarys_back() {
    let data = pattern(2 << 20);
    let path = test_dir().join(format!("closed-{}", std::process::id()));
    std::fs::write(&path, &data).unwrap();
    let e = engine();
    let fd = std::fs::File::open(&path).unwrap().into_raw_fd();
    let file = Arc::new(File::probe(fd).unwrap());
    // Workers start as work needs them, and each opens a ring: let every one
    // start now, or the read below could start one that gets the closed
    // descriptor's number (and read from its own ring or event descriptor).
    let mut buf = vec![0u8; 2 << 20];
    // SAFETY: the memory named is owned by this test and outlives the call.
    let n = unsafe { e.read(&file, Memory::Host(buf.as_mut_ptr() as usize), 2 << 20, 0) };
    assert_eq!(n, Ok(2 << 20));
    let t0 = std::time::Instant::now();
    while e.workers() < e.config().io_threads && t0.elapsed().as_secs() < 30 {
        std::thread::yield_now();
    }
    assert_eq!(
        e.workers(),
        e.config().io_threads,
        "the workers did not start"
    );
    // SAFETY: closing our own descriptor, which the library uses as its buffered one.
    unsafe { libc::close(fd) };
    buf.fill(0);
    // SAFETY: the memory named is owned by this test and outlives the call.
    match unsafe { e.read(&file, Memory::Host(buf.as_mut_ptr() as usize), 2 << 20, 0) } {
        // The O_DIRECT descriptor the library opened itself still works.
        Ok(n) => {
            assert_eq!(n, 2 << 20);
            assert!(buf == data);
        }
        Err(err) => assert_eq!(err, Error::Os(libc::EBADF)),
    }
    std::fs::remove_file(&path).ok();
}
