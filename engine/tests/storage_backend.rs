//! The storage backend an engine picks, and the POSIX backend serving the
//! whole data path. scripts/test.sh runs the suite once as the system is and
//! twice more with io_uring refused by a seccomp filter (EPERM, then ENOSYS);
//! it sets `HIPFILE_TEST_EXPECT_BACKEND` to the backend each pass must get.

mod common;

use common::{device0, open_rw};
use hipfile_engine::config::ReadMode;
use hipfile_engine::gpu::testgpu::TestGpu;
use hipfile_engine::gpu::{Gpu, NoGpu};
use hipfile_engine::storage::{self, Backend, BackendSetting};
use hipfile_engine::{Config, Engine, Error, File, Memory, OpError};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

fn config(io_backend: BackendSetting) -> Config {
    Config {
        io_threads: 2,
        chunk_bytes: 256 << 10,
        // Host reads above 64 KiB go through the workers and their backend.
        inline_max_bytes: 64 << 10,
        io_backend,
        ..Config::default()
    }
}

fn no_gpu() -> Arc<dyn Gpu> {
    Arc::new(NoGpu { why: "test".into() })
}

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[2] ^ salt)
        .collect()
}

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    common::temp_file(&format!("backend-{name}"), bytes).0
}

/// What the kernel answers this process's `io_uring_setup`, asked directly.
fn kernel_allows_io_uring() -> Result<(), i32> {
    // struct io_uring_params: 120 bytes, all zero asks for nothing special.
    let mut params = [0u8; 120];
    // SAFETY: io_uring_setup reads and writes the 120-byte params block.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4u32, params.as_mut_ptr()) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    // SAFETY: the ring's descriptor, ours to close.
    unsafe { libc::close(fd as i32) };
    Ok(())
}

#[test]
fn auto_serves_with_io_uring_exactly_where_the_kernel_allows_it() {
    let e = Engine::with_gpu(config(BackendSetting::Auto), no_gpu()).unwrap();
    let choice = storage::choice(BackendSetting::Auto);
    assert_eq!(choice.backend, e.storage_backend());
    match kernel_allows_io_uring() {
        Ok(()) => assert_eq!(e.storage_backend(), Backend::IoUring),
        Err(errno) => {
            assert_eq!(e.storage_backend(), Backend::Posix);
            let name = storage::errno_name(errno);
            assert!(
                choice.why.contains(&format!("io_uring_setup: {name}")),
                "{}",
                choice.why
            );
        }
    }
    if let Ok(want) = std::env::var("HIPFILE_TEST_EXPECT_BACKEND") {
        assert_eq!(e.storage_backend().name(), want, "{}", choice.why);
    }
}

#[test]
fn insisting_on_io_uring_fails_driver_open_exactly_where_it_is_refused() {
    let r = Engine::with_gpu(config(BackendSetting::IoUring), no_gpu());
    match kernel_allows_io_uring() {
        Ok(()) => assert_eq!(r.unwrap().storage_backend(), Backend::IoUring),
        Err(_) => assert!(
            matches!(r, Err(Error::Op(OpError::DriverSetupError))),
            "{:?}",
            r.map(|e| e.storage_backend())
        ),
    }
}

#[test]
fn the_posix_setting_serves_host_and_device_reads_and_writes() {
    let len = 3 << 20;
    let data = pattern(len, 3);
    let path = temp_file("posix-io", &data);
    let gpu = Arc::new(TestGpu::new(1));
    let dev = gpu.device_alloc(0, len).unwrap();
    for mode in [ReadMode::Auto, ReadMode::Direct, ReadMode::Buffered] {
        let cfg = Config {
            read_mode: mode,
            ..config(BackendSetting::Posix)
        };
        let e = Engine::with_gpu(cfg, gpu.clone()).unwrap();
        assert_eq!(e.storage_backend(), Backend::Posix);
        for direct in [false, true] {
            let f = open_rw(&path, direct);
            let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
            // Host memory, unaligned start and length, through the workers.
            let mut buf = vec![0u8; len];
            // SAFETY: the memory named is owned by this test and outlives the call.
            let n = unsafe {
                e.read(
                    &file,
                    Memory::Host(buf.as_mut_ptr() as usize + 1),
                    len - 4097,
                    4095,
                )
            }
            .unwrap();
            assert_eq!(n, len - 4097);
            assert!(
                buf[1..1 + n] == data[4095..4095 + n],
                "{mode:?} direct={direct}"
            );
            // Device memory: bounce slot, then the test GPU's async copy.
            let dmem = device0(dev);
            // SAFETY: the memory named is owned by this test and outlives the call.
            assert_eq!(unsafe { e.read(&file, dmem, len, 0).unwrap() }, len);
            assert!(gpu.read_device(dev, len) == data);
            // Past the end: short, then nothing.
            assert_eq!(
                // SAFETY: the memory named is owned by this test and outlives the call.
                unsafe { e.read(&file, dmem, 1 << 20, len as u64 - 1000).unwrap() },
                1000
            );
            assert_eq!(
                // SAFETY: the memory named is owned by this test and outlives the call.
                unsafe { e.read(&file, dmem, 1 << 20, len as u64).unwrap() },
                0
            );
            // Writes from device memory come back as written.
            let other = pattern(1 << 20, 9);
            gpu.write_device(dev, &other);
            assert_eq!(
                // SAFETY: the memory named is owned by this test and outlives the call.
                unsafe { e.write(&file, dmem, 1 << 20, 1 << 20).unwrap() },
                1 << 20
            );
            // (Checked and restored through a buffered descriptor: the
            // O_DIRECT one takes aligned buffers only.)
            let plain = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            let mut back = vec![0u8; 1 << 20];
            plain.read_exact_at(&mut back, 1 << 20).unwrap();
            assert!(back == other);
            plain
                .write_all_at(&data[1 << 20..2 << 20], 1 << 20)
                .unwrap();
        }
        let s = e.stats();
        assert!(s.gpu_copies > 0 && s.bounced_chunks > 0, "{s:?}");
    }
    std::fs::remove_file(&path).unwrap();
}
