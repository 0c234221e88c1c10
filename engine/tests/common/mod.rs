//! What the engine's integration tests share: where their files go, how
//! they open them, device memory on device 0, and a configuration whose
//! transfers all go through the workers.

#![allow(dead_code)] // each test binary uses its own subset

use hipfile_engine::{Config, Memory};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::path::PathBuf;

/// Where test files go: `$HIPFILE_TEST_DIR` (CI points it at a filesystem
/// that takes O_DIRECT), else the system's temporary directory.
pub fn test_dir() -> PathBuf {
    let d = std::env::var("HIPFILE_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A file `name-PID` in [`test_dir`] holding `bytes` (synced), opened for
/// reading and writing.
pub fn temp_file(name: &str, bytes: &[u8]) -> (PathBuf, std::fs::File) {
    let p = test_dir().join(format!("{name}-{}", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    f.write_all_at(bytes, 0).unwrap();
    f.sync_all().unwrap();
    (p, f)
}

/// Device memory at `ptr` on device 0.
pub fn device0(ptr: u64) -> Memory {
    Memory::Device { ptr, device: 0 }
}

/// `path` opened for reading and writing, through O_DIRECT when `direct`.
pub fn open_rw(path: &Path, direct: bool) -> std::fs::File {
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(true);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path).unwrap()
}

/// Two I/O threads and 256 KiB chunks, everything through the workers
/// (whose pieces run in parallel), nothing inline.
pub fn workers_config() -> Config {
    Config {
        io_threads: 2,
        chunk_bytes: 256 << 10,
        inline_max_bytes: 0,
        ..Config::default()
    }
}
