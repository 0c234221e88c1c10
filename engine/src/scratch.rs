//! Scratch files for the unit tests: in `HIPFILE_TEST_DIR` when set (a
//! disk-backed directory: tmpfs refuses O_DIRECT), else the temporary
//! directory; removed when dropped.

use std::path::PathBuf;

pub(crate) struct ScratchFile {
    pub path: PathBuf,
    pub file: std::fs::File,
}

impl ScratchFile {
    /// A file named after `name` and this process, holding `bytes`.
    pub(crate) fn new(name: &str, bytes: &[u8]) -> ScratchFile {
        let dir = std::env::var("HIPFILE_TEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| std::env::temp_dir());
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("hipfile-{name}-{}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        ScratchFile { path, file }
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
