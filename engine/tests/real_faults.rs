//! Real faults where the machine allows them: a full filesystem (a 2 MiB
//! tmpfs, when this process may mount one), a file truncated while it is
//! read, and a descriptor closed behind the library's back. Each returns the
//! right bytes or the right error, never a partial success reported as whole.

use hipfile_engine::gpu::{Gpu, NoGpu};
use hipfile_engine::{Config, Engine, Error, File, Memory};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

fn engine() -> Engine {
    let gpu: Arc<dyn Gpu> = Arc::new(NoGpu { why: "test".into() });
    Engine::with_gpu(
        Config {
            io_threads: 2,
            chunk_bytes: 256 << 10,
            inline_max_bytes: 0,
            ..Config::default()
        },
        gpu,
    )
    .unwrap()
}

fn dir() -> std::path::PathBuf {
    let d = std::env::var("HIPFILE_TEST_DIR")
        .map(Into::into)
        .unwrap_or_else(|_| std::env::temp_dir());
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

#[test]
fn full_filesystem_reports_enospc() {
    let mnt = dir().join(format!("tiny-fs-{}", std::process::id()));
    std::fs::create_dir_all(&mnt).unwrap();
    let c = std::ffi::CString::new(mnt.to_str().unwrap()).unwrap();
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
        eprintln!(
            "SKIPPED full_filesystem_reports_enospc: cannot mount a 2 MiB tmpfs here ({})",
            std::io::Error::last_os_error()
        );
        let _ = std::fs::remove_dir(&mnt);
        return;
    }
    let path = mnt.join("f");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let e = engine();
    let src = pattern(4 << 20);
    // SAFETY: the memory named is owned by this test and outlives the call.
    let r = unsafe { e.write(&file, Memory::Host(src.as_ptr() as usize), src.len(), 0) };
    assert_eq!(
        r,
        Err(Error::Os(libc::ENOSPC)),
        "4 MiB into a 2 MiB filesystem"
    );
    // A write that fits still works, and its bytes are there.
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    // SAFETY: the memory named is owned by this test and outlives the call.
    let r = unsafe { e.write(&file, Memory::Host(src.as_ptr() as usize), 1 << 20, 0) };
    assert_eq!(r, Ok(1 << 20));
    let mut back = vec![0u8; 1 << 20];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == src[..1 << 20]);
    drop((file, f));
    // SAFETY: unmounting what we mounted.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    let _ = std::fs::remove_dir(&mnt);
}

#[test]
fn file_truncated_while_read() {
    let len = 16 << 20;
    let data = pattern(len);
    let path = dir().join(format!("trunc-{}", std::process::id()));
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
    let path = dir().join(format!("closed-{}", std::process::id()));
    std::fs::write(&path, &data).unwrap();
    let e = engine();
    let fd = std::fs::File::open(&path).unwrap().into_raw_fd();
    let file = Arc::new(File::probe(fd).unwrap());
    // SAFETY: closing our own descriptor, which the library uses as its buffered one.
    unsafe { libc::close(fd) };
    let mut buf = vec![0u8; 2 << 20];
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
