//! Workers as many as the process's CPUs each run on a CPU of their own
//! (`worker::bind_to_own_cpu`). Its own test binary: the threads it looks at
//! are this engine's workers only.

use hipfile_engine::gpu::NoGpu;
use hipfile_engine::{Config, Engine, File, Memory};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// CPUs this thread may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is an empty set, filled by the kernel.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is a cpu_set_t of `size` bytes.
    assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut set) }, 0);
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: c < CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// `Cpus_allowed_list` of each of this process's `hipfile-io-*` threads.
fn worker_cpu_lists() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let comm = comm.trim().to_string();
        if !comm.starts_with("hipfile-io-") {
            continue;
        }
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or("")
            .trim()
            .to_string();
        out.push((comm, list));
    }
    out.sort();
    out
}

#[test]
fn workers_as_many_as_the_cpus_each_run_on_their_own() {
    let cpus = allowed_cpus();
    let cfg = Config {
        io_threads: cpus.len(),
        ..Config::default()
    };
    let e = Engine::with_gpu(cfg, Arc::new(NoGpu { why: "test".into() })).unwrap();
    let n = e.config().io_threads;
    if n < 2 || n != cpus.len() || n > hipfile_engine::worker::BIND_MAX_CPUS {
        eprintln!(
            "SKIPPED: {} CPUs, {n} workers: no worker is bound",
            cpus.len()
        );
        return;
    }
    // A read larger than the inline limit is cut for every worker, which
    // starts them all.
    let len = 16 << 20;
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let dir = std::env::var("HIPFILE_TEST_DIR")
        .map(Into::into)
        .unwrap_or_else(|_| std::env::temp_dir());
    let path = dir.join(format!("worker-cpus-{}", std::process::id()));
    let f = std::fs::File::create_new(&path).unwrap();
    f.write_all_at(&data, 0).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` is ours and outlives the call.
    let got = unsafe { e.read(&file, Memory::Host(buf.as_mut_ptr() as usize), len, 0) };
    std::fs::remove_file(&path).unwrap();
    assert_eq!(got.unwrap(), len);
    assert!(buf == data);
    // Each worker binds itself as its thread starts: wait for the last.
    let want: Vec<(String, String)> = (0..n)
        .map(|i| (format!("hipfile-io-{i}"), cpus[i].to_string()))
        .collect();
    let until = Instant::now() + Duration::from_secs(5);
    let mut seen = worker_cpu_lists();
    while seen != want && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
        seen = worker_cpu_lists();
    }
    assert_eq!(seen, want, "workers and the CPUs they may run on");
}
