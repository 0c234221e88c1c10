//! O_APPEND set with fcntl after registration, on a kernel without
//! RWF_NOAPPEND (simulated: the switch is process-wide, hence a test binary
//! of its own): every write is refused with 5019 and the file stays as it
//! was, through the inline path, the workers, and both descriptor kinds.

mod common;

use common::{open_rw, test_dir};
use hipfile_engine::gpu::{Gpu, NoGpu};
use hipfile_engine::{Config, Engine, Error, File, Memory, OpError};
use std::os::fd::AsRawFd;
use std::sync::Arc;

fn set_append(f: &std::fs::File, on: bool) {
    // SAFETY: F_GETFL/F_SETFL on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        let fl = if on {
            fl | libc::O_APPEND
        } else {
            fl & !libc::O_APPEND
        };
        assert_eq!(libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl), 0);
    }
}

#[test]
fn o_append_set_after_registration_is_refused_without_rwf_noappend() {
    hipfile_engine::file::disable_noappend_for_tests();
    assert_eq!(hipfile_engine::file::noappend_flag(), 0);
    let gpu: Arc<dyn Gpu> = Arc::new(NoGpu { why: "test".into() });
    let e = Engine::with_gpu(
        Config {
            io_threads: 2,
            ..Config::default()
        },
        gpu,
    )
    .unwrap();
    let len = 8 << 20;
    let old: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
    let src = vec![0xA5u8; 4 << 20];
    for direct in [false, true] {
        let path = test_dir().join(format!("append-fallback-{direct}-{}", std::process::id()));
        std::fs::write(&path, &old).unwrap();
        let f = open_rw(&path, direct);
        let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
        set_append(&f, true);
        // 100 bytes (the caller's thread) and 4 MiB (the workers).
        for size in [100, 4 << 20] {
            // SAFETY: the memory named is owned by this test and outlives the call.
            let r = unsafe { e.write(&file, Memory::Host(src.as_ptr() as usize), size, 4096) };
            assert_eq!(
                r,
                Err(Error::Op(OpError::InvalidFileOpenFlag)),
                "direct {direct} size {size}"
            );
            assert!(
                std::fs::read(&path).unwrap() == old,
                "direct {direct} size {size}: file changed"
            );
        }
        // Without O_APPEND again, writes go through.
        set_append(&f, false);
        assert_eq!(
            // SAFETY: the memory named is owned by this test and outlives the call.
            unsafe { e.write(&file, Memory::Host(src.as_ptr() as usize), 4 << 20, 4096) },
            Ok(4 << 20)
        );
        let now = std::fs::read(&path).unwrap();
        assert_eq!(now.len(), len);
        assert!(now[4096..4096 + (4 << 20)] == src[..]);
        std::fs::remove_file(&path).ok();
    }
}
