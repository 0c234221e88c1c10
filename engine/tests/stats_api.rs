//! The statistics of synchronous calls as `ais-stats` reads them: a call
//! served on the caller's thread counts as `inline`, one the workers serve as
//! `sync`. Its own test binary: the counts are the process's, and no other
//! test may add to them.

mod common;

use common::temp_file;
use hipfile_engine::gpu::{Gpu, NoGpu};
use hipfile_engine::stats::{client, Api};
use hipfile_engine::{Config, Engine, File, Memory};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

#[test]
fn sync_calls_count_as_inline_or_sync_by_who_served_them() {
    let len = 4 << 20;
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let (path, f) = temp_file("stats-api", &data);
    let mut sink = vec![0u8; len];
    f.read_exact_at(&mut sink, 0).unwrap();
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let gpu: Arc<dyn Gpu> = Arc::new(NoGpu { why: "test".into() });
    let cfg = Config {
        io_threads: 2,
        // Host reads up to 64 KiB on the caller's thread, larger ones on the workers.
        inline_max_bytes: 64 << 10,
        stats_level: 1,
        ..Config::default()
    };
    let e = Engine::with_gpu(cfg, gpu).unwrap();
    let region = client::from_proc_fd(std::process::id() as i32)
        .expect("the statistics region")
        .expect("the statistics region of this process");
    let before = region.snapshot();
    let mut buf = vec![0u8; 1 << 20];
    let mem = Memory::Host(buf.as_mut_ptr() as usize);
    for (size, off) in [
        (4096, 0u64),
        (4096, 8192),
        (60_000, 100_000),
        (1 << 20, 0),
        (1 << 20, 1 << 21),
    ] {
        // SAFETY: `buf` holds 1 MiB and outlives the call.
        let n = unsafe { e.read(&file, mem, size, off) }.unwrap();
        assert_eq!(n, size);
        assert!(buf[..size] == data[off as usize..off as usize + size]);
    }
    let d = region.snapshot().since(&before);
    let read = |api: Api| d.class[api as usize][0].ops;
    assert_eq!(read(Api::Inline), 3, "{:?}", d.class);
    assert_eq!(read(Api::Sync), 2, "{:?}", d.class);
    drop(e);
    std::fs::remove_file(&path).unwrap();
}
