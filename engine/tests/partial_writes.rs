//! A write that fails part way returns what pwrite would (the bytes written
//! contiguously from its start) or its error when that is none, and never
//! leaves the file longer than max(size before, offset + count), although
//! its pieces run in parallel and pieces after the failure may have landed.
//!
//! The filesystem filling up is simulated at the ring: a fault plan lets the
//! kernel write, then reports writes at or past a limit as ENOSPC and the one
//! across it as short, as a full disk would. Host and device memory (test
//! double), buffered and O_DIRECT descriptors.

mod common;

use common::{device0, open_rw, test_dir, workers_config};
use hipfile_engine::gpu::flaky::write_device;
use hipfile_engine::gpu::testgpu::TestGpu;
use hipfile_engine::gpu::Gpu;
use hipfile_engine::ring::{Cqe, FaultPlan, Op};
use hipfile_engine::worker::FaultFactory;
use hipfile_engine::{Engine, Error, File, Memory};
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// The disk is full from file offset `limit` on.
struct FullAt {
    limit: u64,
}

impl FaultPlan for FullAt {
    fn on_complete(&mut self, op: &Op, cqe: Cqe, out: &mut Vec<Cqe>) {
        let result = match *op {
            Op::Write { offset, .. } if cqe.result > 0 => {
                if offset >= self.limit {
                    -libc::ENOSPC
                } else {
                    (cqe.result as u64).min(self.limit - offset) as i32
                }
            }
            _ => cqe.result,
        };
        out.push(Cqe {
            user_data: cqe.user_data,
            result,
        });
    }
    fn flush(&mut self, _out: &mut Vec<Cqe>) {}
    fn holding(&self) -> usize {
        0
    }
}

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[1] ^ salt)
        .collect()
}

fn engine(gpu: Arc<dyn Gpu>, limit: u64) -> Engine {
    let factory: FaultFactory =
        Arc::new(move |_| Some(Box::new(FullAt { limit }) as Box<dyn FaultPlan>));
    Engine::with_faults(workers_config(), gpu, Some(factory)).unwrap()
}

struct Case {
    what: &'static str,
    old_len: usize,
    offset: u64,
    len: usize,
    limit: u64,
}

/// Run `case` with host or device memory through a buffered or O_DIRECT
/// descriptor and check the count, the file's size and its bytes.
fn run(case: &Case, device: bool, direct: bool) {
    let what = format!("{} (device {device}, O_DIRECT {direct})", case.what);
    let gpu = Arc::new(TestGpu::new(1));
    let e = engine(gpu.clone(), case.limit);
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = test_dir().join(format!("partial-{}-{n}", std::process::id()));
    let old = pattern(case.old_len, 1);
    std::fs::write(&path, &old).unwrap();
    let f = open_rw(&path, direct);
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let src = pattern(case.len, 2);
    // Page-aligned host source, so O_DIRECT pieces go straight from it.
    let mut host = vec![0u8; case.len + 4096];
    let at = host.as_ptr().align_offset(4096);
    host[at..at + case.len].copy_from_slice(&src);
    let dev = gpu.device_alloc(0, case.len).unwrap();
    let mem = if device {
        write_device(gpu.as_ref(), 0, dev, &src).unwrap();
        device0(dev)
    } else {
        Memory::Host(host.as_ptr() as usize + at)
    };
    // SAFETY: the memory named is owned by this test and outlives the call.
    let r = unsafe { e.write(&file, mem, case.len, case.offset) };

    let want = case.limit.saturating_sub(case.offset).min(case.len as u64) as usize;
    if want == 0 {
        assert_eq!(r, Err(Error::Os(libc::ENOSPC)), "{what}");
    } else {
        assert_eq!(r, Ok(want), "{what}: the count written from the start");
    }
    let mut expect = old.clone();
    let end = case.offset as usize + want;
    if expect.len() < end {
        expect.resize(end, 0);
    }
    expect[case.offset as usize..end].copy_from_slice(&src[..want]);
    let got = std::fs::read(&path).unwrap();
    assert_eq!(
        got.len(),
        expect.len(),
        "{what}: the file's size is max(size before, offset + count)"
    );
    // Past the old end and the count, nothing may survive; inside the old
    // file, bytes past the count may hold new data (pieces ran in parallel).
    let same_upto = end.max(case.old_len.min(case.offset as usize));
    assert!(
        got[..same_upto] == expect[..same_upto],
        "{what}: wrong bytes before offset + count"
    );
    drop(e);
    // SAFETY: allocated above, no longer used.
    unsafe { gpu.device_free(dev).unwrap() };
    std::fs::remove_file(&path).ok();
}

const MIB: usize = 1 << 20;

#[test]
fn a_write_that_fills_the_disk_reports_what_it_wrote_and_no_more() {
    let cases = [
        Case {
            what: "empty file, full 12 KiB into the fifth piece",
            old_len: 0,
            offset: 0,
            len: 4 * MIB,
            limit: (MIB + 12288) as u64,
        },
        Case {
            what: "past the end of a 2 MiB file",
            old_len: 2 * MIB,
            offset: (MIB + 4096) as u64,
            len: 4 * MIB,
            limit: (3 * MIB) as u64,
        },
        Case {
            what: "full at the write's offset",
            old_len: MIB,
            offset: MIB as u64,
            len: 2 * MIB,
            limit: MIB as u64,
        },
        Case {
            what: "inside an 8 MiB file (no growth)",
            old_len: 8 * MIB,
            offset: MIB as u64,
            len: 4 * MIB,
            limit: (2 * MIB + 8192) as u64,
        },
    ];
    for case in &cases {
        for device in [false, true] {
            for direct in [false, true] {
                run(case, device, direct);
            }
        }
    }
}

#[test]
fn an_unaligned_write_that_fills_the_disk_is_cut_back_too() {
    // Offsets and lengths off every alignment: pieces go through the page
    // cache even on the O_DIRECT descriptor.
    let case = Case {
        what: "unaligned",
        old_len: 100_000,
        offset: 300_001,
        len: 3 * MIB + 777,
        limit: 1_500_000,
    };
    for device in [false, true] {
        for direct in [false, true] {
            run(&case, device, direct);
        }
    }
}
