//! Seeded random-input tests (a fuzzing equivalent that runs in CI): the batch
//! parameter validation and the configuration parser get thousands of
//! malformed inputs and must answer each with a defined code or value, never
//! a crash, a panic or I/O outside the buffers given. Reproduce a failure with
//! HIPFILE_FUZZ_SEED=<seed>; HIPFILE_FUZZ_ITERS sets the count.

#![allow(clippy::undocumented_unsafe_blocks)] // every call here is an unsafe C entry point on test-owned locals

mod common;

use hipfile::types::{HipFileIoEvents, HipFileIoParams};
use hipfile::*;
use hipfile_engine::config::{parse_bool, parse_unsigned, Config};
use std::ffi::c_void;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[(self.next() % v.len() as u64) as usize]
    }
}

fn seed_and_iters() -> (u64, u64) {
    let seed = std::env::var("HIPFILE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xf0220);
    let iters = std::env::var("HIPFILE_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4000);
    eprintln!("HIPFILE_FUZZ_SEED={seed} HIPFILE_FUZZ_ITERS={iters}");
    (seed, iters)
}

#[test]
fn batch_submit_with_random_entries() {
    let (seed, iters) = seed_and_iters();
    let mut rng = Rng(seed | 1);
    let path = common::test_dir().join(format!("fuzz-{}", std::process::id()));
    std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
    let (_file, fh) = common::open_registered(&path);
    // The only memory entries may name: a registered buffer (with a guard area
    // after it that must stay untouched), NULL, and unmapped low addresses.
    let mut buf = vec![0u8; (64 << 10) + 4096];
    let base = buf.as_mut_ptr();
    assert_eq!(hipFileBufRegister(base.cast(), 64 << 10, 0).err, 0);
    let mut b = std::ptr::null_mut();
    assert_eq!(unsafe { hipFileBatchIOSetUp(&mut b, 128) }.err, 0);
    let allowed = [0, 5022, 5027, 5037, 5013, 5014];
    let mut accepted = 0u64;
    let mut outstanding = 0usize;
    for i in 0..iters {
        let n = 1 + (rng.next() % 4) as usize;
        let mut ps: Vec<HipFileIoParams> = (0..n)
            .map(|_| {
                let r1 = (rng.next() % (2 << 20)) as i64;
                let r2 = (rng.next() % (80 << 10)) as usize;
                HipFileIoParams {
                    mode: rng.pick(&[1, 1, 1, 0, 2, -1, i32::MAX]),
                    dev_ptr_base: rng.pick(&[
                        base.cast::<c_void>(),
                        base.cast(),
                        std::ptr::null_mut(),
                        16 as *mut c_void,
                    ]),
                    file_offset: rng.pick(&[
                        0,
                        4096,
                        1 << 20,
                        (1 << 20) + 5,
                        -1,
                        i64::MIN,
                        i64::MAX,
                        r1,
                    ]),
                    dev_ptr_offset: rng.pick(&[0, 1, 4095, 64 << 10, (64 << 10) - 1, -1, i64::MAX]),
                    size: rng.pick(&[0, 1, 4096, 64 << 10, (64 << 10) + 1, usize::MAX, r2]),
                    fh: rng.pick(&[fh, fh, std::ptr::null_mut(), 8 as *mut c_void]),
                    opcode: rng.pick(&[0, 0, 1, 2, -1]),
                    cookie: i as *mut c_void,
                }
            })
            .collect();
        // Writes must not change the file beyond what the entries allow: make them reads
        // of our buffer except where they are rejected anyway.
        for p in &mut ps {
            if p.opcode == 1 && p.dev_ptr_base == base.cast() {
                p.opcode = 0;
            }
        }
        let e = unsafe { hipFileBatchIOSubmit(b, n as u32, ps.as_mut_ptr(), 0) };
        assert!(
            allowed.contains(&e.err),
            "iteration {i}: unexpected code {} for {ps:?}",
            e.err
        );
        if e.err == 0 {
            accepted += 1;
        }
        if e.err == 0 {
            outstanding += n;
        }
        // Random GetStatus arguments now and then: defined codes only.
        let mut ev = [HipFileIoEvents {
            cookie: std::ptr::null_mut(),
            status: 0,
            ret: 0,
        }; 128];
        let mut nr = rng.pick(&[0u32, 1, 4, 128]);
        let min_nr = rng.pick(&[0u32, 1, 200]);
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: rng.pick(&[0, 1000, -1, 2_000_000_000]),
        };
        let r = unsafe { hipFileBatchIOGetStatus(b, min_nr, &mut nr, ev.as_mut_ptr(), &mut ts) };
        assert!(r.err == 0 || r.err == 5022, "getstatus code {}", r.err);
        if r.err == 0 {
            outstanding -= nr as usize;
        }
        // Drain everything: each event once, with a terminal status.
        while outstanding > 0 {
            let mut nr = 128u32;
            let r = unsafe {
                hipFileBatchIOGetStatus(
                    b,
                    outstanding as u32,
                    &mut nr,
                    ev.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            assert_eq!(r.err, 0);
            for e in &ev[..nr as usize] {
                assert!(
                    [0x08, 0x10, 0x40].contains(&e.status),
                    "status {:#x}",
                    e.status
                );
            }
            outstanding -= nr as usize;
        }
        assert!(
            buf[64 << 10..].iter().all(|&x| x == 0),
            "iteration {i}: wrote past the registered buffer"
        );
    }
    eprintln!("fuzz: {iters} random submissions, {accepted} accepted");
    hipFileBatchIODestroy(b);
    assert_eq!(hipFileBufDeregister(base.cast()).err, 0);
    hipFileHandleDeregister(fh);
    while hipFileUseCount() > 0 {
        hipFileDriverClose();
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn config_parser_with_random_values() {
    let (seed, iters) = seed_and_iters();
    let mut rng = Rng(seed ^ 0x5555 | 1);
    let alphabet: Vec<char> = "0123456789 -+xXtTrRuUeEfFaAlLsS\u{e9}\t\n.,=kKmMgG"
        .chars()
        .collect();
    let names = [
        "HIPFILE_IO_THREADS",
        "HIPFILE_COLD_IO_THREADS",
        "HIPFILE_CHUNK_KB",
        "HIPFILE_QUEUE_DEPTH",
        "HIPFILE_INLINE_KB",
        "HIPFILE_READ_MODE",
        "HIPFILE_GPU_RUNTIME",
        "HIPFILE_REGISTER_BUFFERS",
        "HIPFILE_HUGE_PAGES",
        "HIPFILE_ALLOW_COMPAT_MODE",
        "HIPFILE_FORCE_COMPAT_MODE",
        "HIPFILE_STATS_LEVEL",
    ];
    for _ in 0..iters {
        let len = (rng.next() % 24) as usize;
        let v: String = (0..len).map(|_| rng.pick(&alphabet)).collect();
        let _ = parse_bool("X", &v);
        if let Some(n) = parse_unsigned("X", &v) {
            assert!(
                v.bytes().all(|b| b.is_ascii_digit()) && !v.is_empty(),
                "{v:?} parsed as {n}"
            );
        }
        let name = rng.pick(&names);
        let env: &[(&str, &str)] = &[(name, v.as_str())];
        let c = Config::from_env_with(env);
        assert!((1..=256).contains(&c.io_threads));
        assert!(c.cold_io_threads <= c.io_threads);
        assert!(c.chunk_bytes >= 4096 && c.chunk_bytes % 4096 == 0 && c.chunk_bytes <= 256 << 20);
        assert!((1..=64).contains(&c.slots_per_worker));
        assert!(c.stats_level <= 3);
        assert!(c.inline_max_bytes <= 1 << 20);
    }
}
