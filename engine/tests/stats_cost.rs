//! What statistics level 1 costs a hot 4 KiB read into host memory: a
//! measurement, not a check (ignored; run it on a quiet machine):
//!
//! ```sh
//! HIPFILE_TEST_DIR=target/test-files cargo test --release -p hipfile-engine \
//!     --test stats_cost -- --ignored --nocapture
//! ```
//!
//! Two threads read random 4 KiB blocks of a page-cached file through
//! `Engine::read` (served inline, as `hipFileRead` of a small host buffer
//! is) in rounds of `STATS_COST_CALLS` calls each; the level alternates
//! between 0 and 1 from round to round in one process, so drift in the
//! machine's speed falls on both levels alike. It prints the median time
//! per call at each level and the median ratio of neighbouring rounds.

use hipfile_engine::gpu::NoGpu;
use hipfile_engine::{Config, Engine, File, Memory};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Barrier};
use std::time::Instant;

const FILE_BYTES: u64 = 64 << 20;
const BS: usize = 4096;
const THREADS: usize = 2;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore = "a measurement: run it alone, with --ignored --nocapture"]
fn level_one_against_level_zero_on_hot_4k_host_reads() {
    let calls = env("STATS_COST_CALLS", 200_000);
    let rounds = env("STATS_COST_ROUNDS", 20) & !1;
    let dir = std::env::var("HIPFILE_TEST_DIR").unwrap_or_else(|_| "/tmp".into());
    let path = std::path::Path::new(&dir).join(format!("stats-cost-{}", std::process::id()));
    let f = std::fs::File::create_new(&path).unwrap();
    let block: Vec<u8> = (0..1 << 20).map(|i| (i * 7) as u8).collect();
    for off in (0..FILE_BYTES).step_by(block.len()) {
        f.write_all_at(&block, off).unwrap();
    }
    drop(f);
    let f = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let cfg = Config {
        stats_level: 1,
        ..Config::default()
    };
    let e = Arc::new(
        Engine::with_gpu(
            cfg,
            Arc::new(NoGpu {
                why: "host memory only".into(),
            }),
        )
        .unwrap(),
    );

    let start = Arc::new(Barrier::new(THREADS + 1));
    let done = Arc::new(Barrier::new(THREADS + 1));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (e, file, start, done) = (e.clone(), file.clone(), start.clone(), done.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; BS];
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
                // One warm-up pass over the file, then the rounds.
                for r in 0..=rounds {
                    start.wait();
                    let n = if r == 0 {
                        (FILE_BYTES as usize / BS) / THREADS
                    } else {
                        calls
                    };
                    for i in 0..n {
                        let off = if r == 0 {
                            ((i * THREADS + t) * BS) as u64
                        } else {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            (x % (FILE_BYTES / BS as u64)) * BS as u64
                        };
                        // SAFETY: `buf` is this thread's and outlives the call.
                        let got = unsafe {
                            e.read(&file, Memory::Host(buf.as_mut_ptr() as usize), BS, off)
                        };
                        assert_eq!(got.unwrap(), BS);
                    }
                    done.wait();
                }
            })
        })
        .collect();

    let mut per_call = [Vec::new(), Vec::new()];
    let mut ratios = Vec::new();
    for r in 0..=rounds {
        let level = if r == 0 { 1 } else { (r as u32 + 1) % 2 };
        hipfile_engine::stats::set_level(level);
        let t0 = Instant::now();
        start.wait();
        done.wait();
        let d = t0.elapsed();
        if r == 0 {
            continue;
        }
        let ns = d.as_nanos() as f64 / calls as f64;
        per_call[level as usize].push(ns);
        if level == 1 {
            // This round at level 1 against the round before it at level 0.
            ratios.push(per_call[0].last().unwrap() / ns);
        }
    }
    for w in workers {
        w.join().unwrap();
    }
    let l0 = median(&mut per_call[0]);
    let l1 = median(&mut per_call[1]);
    println!(
        "{THREADS} threads, {rounds} rounds of {calls} calls each: level 0 {l0:.0} ns/call, \
         level 1 {l1:.0} ns/call (medians, wall time per call of one thread); \
         level 1 / level 0 throughput: median {:.4} over {} pairs",
        median(&mut ratios),
        ratios.len()
    );
}
