//! What the engine's integration tests share: where their files go.

#![allow(dead_code)] // each test binary uses its own subset

use std::os::unix::fs::FileExt;
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
