//! Engine data-path tests: host memory and the test GPU double (whose copies
//! run asynchronously on their own threads), checked byte for byte against pread.

mod common;

use common::{device0, open_rw, temp_file};
use hipfile_engine::config::ReadMode;
use hipfile_engine::gpu::testgpu::TestGpu;
use hipfile_engine::gpu::{Gpu, NoGpu};
use hipfile_engine::ring::{Cqe, FaultPlan, Op};
use hipfile_engine::stats::Stage;
use hipfile_engine::worker::FaultFactory;
use hipfile_engine::{Completion, Direction, IoRequest};
use hipfile_engine::{Config, Engine, Error, File, Memory};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn seed() -> u64 {
    let s = std::env::var("HIPFILE_TEST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_1234);
    eprintln!("HIPFILE_TEST_SEED={s}");
    s
}

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[1] ^ salt)
        .collect()
}

fn small_config() -> Config {
    Config {
        io_threads: 2,
        chunk_bytes: 256 << 10,
        slots_per_worker: 3,
        // Host reads above 64 KiB go through the workers, whose paths these
        // tests are about (the default, 1 MiB, would take most inline).
        inline_max_bytes: 64 << 10,
        ..Config::default()
    }
}

fn engine(gpu: Arc<dyn Gpu>, mode: ReadMode) -> Engine {
    Engine::with_gpu(
        Config {
            read_mode: mode,
            ..small_config()
        },
        gpu,
    )
    .unwrap()
}

fn no_gpu() -> Arc<dyn Gpu> {
    Arc::new(NoGpu { why: "test".into() })
}

#[test]
fn host_reads_at_random_offsets_sizes_and_alignments() {
    let len = 3 << 20;
    let data = pattern(len, 7);
    let (path, _f) = temp_file("host-rand", &data);
    let mut rng = Rng(seed());
    // The last pass keeps the default inline limit: reads of up to 1 MiB on
    // the caller's thread, cold ones (the O_DIRECT descriptor) by O_DIRECT.
    for (mode, inline) in [
        (ReadMode::Auto, false),
        (ReadMode::Direct, false),
        (ReadMode::Buffered, false),
        (ReadMode::Auto, true),
    ] {
        let e = if inline {
            let cfg = Config {
                inline_max_bytes: 1 << 20,
                ..small_config()
            };
            Engine::with_gpu(cfg, no_gpu()).unwrap()
        } else {
            engine(no_gpu(), mode)
        };
        for direct_fd in [false, true] {
            let f = open_rw(&path, direct_fd);
            let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
            for _ in 0..40 {
                let off = rng.below(len as u64 + 8192);
                let size = 1 + rng.below(1 << 20) as usize;
                let skew = rng.below(4096) as usize;
                let mut buf = vec![0xaau8; size + 4096];
                // SAFETY: the memory named is owned by this test and outlives the call.
                let r = unsafe {
                    e.read(
                        &file,
                        Memory::Host(buf.as_mut_ptr() as usize + skew),
                        size,
                        off,
                    )
                }
                .unwrap();
                let want = (len as u64).saturating_sub(off).min(size as u64) as usize;
                assert_eq!(
                    r, want,
                    "mode {mode:?} direct_fd {direct_fd} off {off} size {size}"
                );
                if want > 0 {
                    assert_eq!(
                        &buf[skew..skew + want],
                        &data[off as usize..off as usize + want]
                    );
                }
                assert!(
                    buf[skew + want..].iter().all(|&b| b == 0xaa),
                    "wrote past the count"
                );
            }
        }
        let st = e.stats();
        match mode {
            ReadMode::Direct => assert!(
                st.direct_read_bytes > 0 && st.cache_hit_bytes == 0,
                "{st:?}"
            ),
            ReadMode::Buffered => assert!(
                st.direct_read_bytes == 0 && st.buffered_read_bytes > 0,
                "{st:?}"
            ),
            ReadMode::Auto if inline => assert!(st.inline_bytes > 0, "{st:?}"),
            // The file was just written: its pages are cached, so the probe serves them.
            ReadMode::Auto => assert!(st.cache_hit_bytes > 0, "{st:?}"),
        }
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn host_writes_land_exactly_where_asked() {
    let len = 2 << 20;
    let (path, f) = temp_file("host-write", &vec![0u8; len]);
    let mut mirror = vec![0u8; len];
    let mut rng = Rng(seed() ^ 1);
    let e = engine(no_gpu(), ReadMode::Auto);
    for direct_fd in [false, true] {
        let fd = open_rw(&path, direct_fd);
        let file = Arc::new(File::probe(fd.as_raw_fd()).unwrap());
        for i in 0..30 {
            // Every other write is 4 KiB aligned in file, size and memory, so an
            // O_DIRECT descriptor really writes around the page cache.
            let aligned = i % 2 == 0;
            let off = if aligned {
                rng.below(len as u64 / 4096 - 1) * 4096
            } else {
                rng.below(len as u64 - 1)
            };
            let mut size = 1 + rng.below((len as u64 - off).min(700_000)) as usize;
            if aligned {
                size = (size.div_ceil(4096) * 4096).min(len - off as usize);
            }
            let mut src = vec![0u8; size + 8192];
            let skew = if aligned {
                4096 - (src.as_ptr() as usize % 4096)
            } else {
                1
            };
            src[skew..skew + size].copy_from_slice(&pattern(size, i as u8));
            // SAFETY: the memory named is owned by this test and outlives the call.
            let n =
                unsafe { e.write(&file, Memory::Host(src.as_ptr() as usize + skew), size, off) }
                    .unwrap();
            assert_eq!(n, size);
            mirror[off as usize..off as usize + size].copy_from_slice(&src[skew..skew + size]);
        }
    }
    let st = e.stats();
    assert!(
        st.direct_write_bytes > 0 && st.buffered_write_bytes > 0,
        "{st:?}"
    );
    let mut back = vec![0u8; len];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == mirror, "file content differs from the writes");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn device_round_trip_through_async_test_double() {
    let len = (5 << 20) + 12345;
    let data = pattern(len, 3);
    let (path, _f) = temp_file("dev-rt", &data);
    let gpu = Arc::new(TestGpu::new(2));
    // Slow copies make a slot reused too early show up as corrupt data.
    gpu.set_copy_delay(Duration::from_micros(300));
    let mut rng = Rng(seed() ^ 2);
    // The last pass bounces through huge-page slabs.
    let passes = [
        (ReadMode::Auto, false),
        (ReadMode::Direct, false),
        (ReadMode::Buffered, false),
        (ReadMode::Direct, true),
    ];
    for (mode, huge_pages) in passes {
        let cfg = Config {
            read_mode: mode,
            huge_pages,
            ..small_config()
        };
        let e = Engine::with_gpu(cfg, gpu.clone()).unwrap();
        for direct_fd in [false, true] {
            let f = open_rw(&path, direct_fd);
            let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
            for _ in 0..12 {
                let device = rng.below(2) as i32;
                let dev = gpu.device_alloc(device, 2 << 20).unwrap();
                let off = rng.below(len as u64 + 4096);
                let size = 1 + rng.below(2 << 20) as usize;
                let (mem, _) = e.memory(dev).unwrap();
                assert_eq!(mem, Memory::Device { ptr: dev, device });
                // SAFETY: the memory named is owned by this test and outlives the call.
                let n = unsafe { e.read(&file, mem, size, off) }.unwrap();
                let want = (len as u64).saturating_sub(off).min(size as u64) as usize;
                assert_eq!(n, want);
                assert_eq!(
                    gpu.read_device(dev, want),
                    &data[off as usize..off as usize + want]
                );
                // SAFETY: the allocation is no longer used.
                unsafe { gpu.device_free(dev).unwrap() };
            }
        }
        // Stage timings partition each chunk's time, and every copy's
        // 300 µs delay shows in the GPU stage.
        let st = e.stats();
        assert!(st.chunks > 0 && st.gpu_copies > 0, "{st:?}");
        assert_eq!(st.stage_ns.iter().sum::<u64>(), st.chunk_ns, "{st:?}");
        assert!(
            st.stage_ns[Stage::Gpu as usize] >= st.gpu_copies * 300_000,
            "{st:?}"
        );
        assert!(st.stage_ns[Stage::Storage as usize] > 0, "{st:?}");
        assert!(st.stage_summary().is_some());
    }
    assert!(gpu.copies_issued() > 0);
    std::fs::remove_file(&path).unwrap();
}

/// A worker whose only work left is a GPU copy asks the copy's event
/// (`Config::copy_spin`) before it sleeps on it: with a spin longer than
/// the copies take it never sleeps, with none it sleeps on every request.
#[test]
fn a_worker_asks_the_copy_event_before_it_sleeps_on_it() {
    let len = 4 << 20;
    let data = pattern(len, 0x11);
    let (path, f) = temp_file("copy-spin", &data);
    let mut sink = vec![0u8; len];
    f.read_exact_at(&mut sink, 0).unwrap();
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    for (spin, sleeps) in [(Duration::from_secs(5), false), (Duration::ZERO, true)] {
        let gpu = Arc::new(TestGpu::new(1));
        gpu.set_copy_delay(Duration::from_micros(500));
        let cfg = Config {
            copy_spin: spin,
            // No inline reads: every request goes through the workers.
            inline_max_bytes: 0,
            ..small_config()
        };
        let e = Engine::with_gpu(cfg, gpu.clone()).unwrap();
        let dev = gpu.device_alloc(0, 1 << 20).unwrap();
        for k in 0..8 {
            let off = k << 18;
            let mem = Memory::Device {
                ptr: dev,
                device: 0,
            };
            // SAFETY: the memory named is owned by this test and outlives the call.
            let n = unsafe { e.read(&file, mem, 1 << 20, off as u64) }.unwrap();
            assert_eq!(n, 1 << 20);
            assert!(gpu.read_device(dev, n) == data[off..off + n], "at {off}");
        }
        assert_eq!(
            gpu.event_sleeps() > 0,
            sleeps,
            "spin {spin:?}: {} sleeps",
            gpu.event_sleeps()
        );
        // SAFETY: no longer used.
        unsafe { gpu.device_free(dev).unwrap() };
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn device_writes_through_test_double() {
    let len = 3 << 20;
    let (path, f) = temp_file("dev-write", &vec![0u8; len]);
    let gpu = Arc::new(TestGpu::new(1));
    gpu.set_copy_delay(Duration::from_micros(200));
    let e = engine(gpu.clone(), ReadMode::Auto);
    let mut mirror = vec![0u8; len];
    let mut rng = Rng(seed() ^ 3);
    for direct_fd in [false, true] {
        let fd = open_rw(&path, direct_fd);
        let file = Arc::new(File::probe(fd.as_raw_fd()).unwrap());
        for i in 0..10 {
            let off = if i % 2 == 0 {
                rng.below(len as u64 / 4096) * 4096
            } else {
                rng.below(len as u64 - 1)
            };
            let size = 1 + rng.below((len as u64 - off).min(1 << 20)) as usize;
            let size = if i % 2 == 0 {
                size.div_ceil(4096) * 4096
            } else {
                size
            }
            .min(len - off as usize);
            let src = pattern(size, 100 + i);
            let dev = gpu.device_alloc(0, size).unwrap();
            gpu.write_device(dev, &src);
            // SAFETY: the memory named is owned by this test and outlives the call.
            let n = unsafe { e.write(&file, device0(dev), size, off) }.unwrap();
            assert_eq!(n, size);
            mirror[off as usize..off as usize + size].copy_from_slice(&src);
            // SAFETY: no longer used.
            unsafe { gpu.device_free(dev).unwrap() };
        }
    }
    let mut back = vec![0u8; len];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == mirror);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn failing_gpu_copy_is_an_error_not_data() {
    let data = pattern(1 << 20, 9);
    let (path, f) = temp_file("dev-fail", &data);
    let gpu = Arc::new(TestGpu::new(1));
    let e = engine(gpu.clone(), ReadMode::Auto);
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let dev = gpu.device_alloc(0, 1 << 20).unwrap();
    gpu.fail_next_copies(1);
    // SAFETY: the memory named is owned by this test and outlives the call.
    let r = unsafe { e.read(&file, device0(dev), 1 << 20, 0) };
    assert!(matches!(r, Err(Error::Gpu(_))), "got {r:?}");
    // The engine keeps working afterwards.
    // SAFETY: the memory named is owned by this test and outlives the call.
    let n = unsafe { e.read(&file, device0(dev), 1 << 20, 0) }.unwrap();
    assert_eq!(n, 1 << 20);
    assert!(gpu.read_device(dev, 1 << 20) == data);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn unregistered_buffers_and_low_memlock_degrade_cleanly() {
    // Registration and pinning switched off behave like a failed registration.
    let data = pattern(1 << 20, 5);
    let (path, f) = temp_file("noreg", &data);
    let gpu = Arc::new(TestGpu::new(1));
    let e = Engine::with_gpu(
        Config {
            register_buffers: false,
            pin_buffers: false,
            ..small_config()
        },
        gpu.clone(),
    )
    .unwrap();
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let dev = gpu.device_alloc(0, 1 << 20).unwrap();
    assert_eq!(
        // SAFETY: the memory named is owned by this test and outlives the call.
        unsafe { e.read(&file, device0(dev), 1 << 20, 0,) }.unwrap(),
        1 << 20
    );
    assert!(gpu.read_device(dev, 1 << 20) == data);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn read_only_descriptor_refuses_writes() {
    let (path, _f) = temp_file("ro", b"abc");
    let ro = std::fs::File::open(&path).unwrap();
    let file = Arc::new(File::probe(ro.as_raw_fd()).unwrap());
    let e = engine(no_gpu(), ReadMode::Auto);
    let src = [1u8; 3];
    assert_eq!(
        // SAFETY: the memory named is owned by this test and outlives the call.
        unsafe { e.write(&file, Memory::Host(src.as_ptr() as usize), 3, 0) },
        Err(Error::Os(libc::EBADF))
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn small_device_transfers_run_inline_and_are_exact() {
    let len = 1 << 20;
    let data = pattern(len, 0x44);
    let (path, f) = temp_file("dev-small", &data);
    let gpu = Arc::new(TestGpu::new(2));
    gpu.set_copy_delay(Duration::from_micros(100));
    let e = engine(gpu.clone(), ReadMode::Auto);
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let mut rng = Rng(seed() ^ 9);
    let mut mirror = data.clone();
    for i in 0..60 {
        let device = i % 2;
        let dev = gpu.device_alloc(device, 65536).unwrap();
        let off = rng.below(len as u64 - 1);
        let size = 1 + rng.below(65536.min(len as u64 - off)) as usize;
        if i % 3 == 0 {
            let src = pattern(size, i as u8);
            gpu.write_device(dev, &src);
            assert_eq!(
                // SAFETY: the memory named is owned by this test and outlives the call.
                unsafe { e.write(&file, Memory::Device { ptr: dev, device }, size, off) }.unwrap(),
                size
            );
            mirror[off as usize..off as usize + size].copy_from_slice(&src);
        } else {
            assert_eq!(
                // SAFETY: the memory named is owned by this test and outlives the call.
                unsafe { e.read(&file, Memory::Device { ptr: dev, device }, size, off) }.unwrap(),
                size
            );
            assert!(gpu.read_device(dev, size) == mirror[off as usize..off as usize + size]);
        }
        // SAFETY: no longer used.
        unsafe { gpu.device_free(dev).unwrap() };
    }
    assert!(e.stats().inline_bytes > 0, "{:?}", e.stats());
    let mut back = vec![0u8; len];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == mirror);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn hot_device_reads_up_to_256k_run_inline_and_cold_ones_on_the_workers() {
    let len = 4 << 20;
    let data = pattern(len, 0x5a);
    let (path, f) = temp_file("dev-hot-inline", &data);
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let gpu = Arc::new(TestGpu::new(1));
    let e = engine(gpu.clone(), ReadMode::Auto);
    let dev = gpu.device_alloc(0, 1 << 20).unwrap();
    let cachestat = hipfile_engine::file::fully_cached(f.as_raw_fd(), 0, 4096).is_some();
    let read = |size: usize, off: usize| {
        let before = e.stats().inline_bytes;
        // SAFETY: the memory named is owned by this test and outlives the call.
        let n = unsafe {
            e.read(
                &file,
                Memory::Device {
                    ptr: dev,
                    device: 0,
                },
                size,
                off as u64,
            )
        };
        assert_eq!(n.unwrap(), size);
        assert!(
            gpu.read_device(dev, size) == data[off..off + size],
            "{size} at {off}"
        );
        e.stats().inline_bytes - before
    };
    // Cold: the storage workers read it (O_DIRECT where the file allows).
    make_cold(&f);
    assert_eq!(
        read(256 << 10, 1 << 20),
        0,
        "a cold 256 KiB device read ran inline"
    );
    // Hot (every page cached): on the caller's thread, up to 256 KiB.
    let mut sink = vec![0u8; len];
    f.read_exact_at(&mut sink, 0).unwrap();
    if cachestat {
        assert_eq!(read(256 << 10, 2 << 20), 256 << 10);
        assert_eq!(read(100_000, 12_345), 100_000);
    } else {
        eprintln!("SKIPPED (inline part): this kernel has no cachestat");
    }
    // Above the limit, or one page short of fully cached: the workers.
    assert_eq!(read(512 << 10, 0), 0);
    // SAFETY: plain advice on our own descriptor, one page of the range.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 3 << 20, 4096, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(
        read(256 << 10, 3 << 20),
        0,
        "a partly cached read ran inline"
    );
    // SAFETY: no longer used.
    unsafe { gpu.device_free(dev).unwrap() };
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn hot_host_reads_up_to_256k_run_inline_and_cold_ones_on_the_workers() {
    // Above the inline limit (64 KiB here, as with more than two workers),
    // a host read whose range is all in the page cache still runs on the
    // caller's thread up to 256 KiB; a cold or partly cached one, or a
    // larger one, goes to the workers.
    let len = 4 << 20;
    let data = pattern(len, 0x3c);
    let (path, f) = temp_file("host-hot-inline", &data);
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let e = engine(no_gpu(), ReadMode::Auto);
    let mut buf = vec![0u8; 1 << 20];
    let cachestat = hipfile_engine::file::fully_cached(f.as_raw_fd(), 0, 4096).is_some();
    let mut read = |size: usize, off: usize| {
        let before = e.stats().inline_bytes;
        buf.fill(0);
        // SAFETY: the memory named is owned by this test and outlives the call.
        let n = unsafe {
            e.read(
                &file,
                Memory::Host(buf.as_mut_ptr() as usize),
                size,
                off as u64,
            )
        };
        assert_eq!(n.unwrap(), size);
        assert!(buf[..size] == data[off..off + size], "{size} at {off}");
        e.stats().inline_bytes - before
    };
    make_cold(&f);
    assert_eq!(
        read(256 << 10, 1 << 20),
        0,
        "a cold 256 KiB host read ran inline"
    );
    let mut sink = vec![0u8; len];
    f.read_exact_at(&mut sink, 0).unwrap();
    if cachestat {
        assert_eq!(read(256 << 10, 2 << 20), 256 << 10);
        assert_eq!(read(100_000, 12_345), 100_000);
    } else {
        eprintln!("SKIPPED (inline part): this kernel has no cachestat");
    }
    assert_eq!(read(512 << 10, 0), 0);
    // SAFETY: plain advice on our own descriptor, one page of the range.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 3 << 20, 4096, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(
        read(256 << 10, 3 << 20),
        0,
        "a partly cached read ran inline"
    );
    std::fs::remove_file(&path).unwrap();
}

/// Holds back completions until `open` is set: with `first_only`, the
/// first one any of the engine's rings produces (the worker that got it is
/// stuck with its only slot; `taken` tells that it came), else every one.
struct Gate {
    first_only: bool,
    taken: Arc<std::sync::atomic::AtomicBool>,
    open: Arc<std::sync::atomic::AtomicBool>,
    held: Vec<Cqe>,
}

impl FaultPlan for Gate {
    fn on_complete(&mut self, _op: &Op, cqe: Cqe, out: &mut Vec<Cqe>) {
        if self.first_only && self.taken.swap(true, Ordering::SeqCst) {
            out.push(cqe);
        } else {
            self.held.push(cqe);
            self.flush(out);
        }
    }
    fn flush(&mut self, out: &mut Vec<Cqe>) {
        if self.open.load(Ordering::SeqCst) {
            out.append(&mut self.held);
        }
    }
    fn holding(&self) -> usize {
        self.held.len()
    }
}

#[test]
fn chunks_go_to_a_worker_that_can_start_them() {
    use std::sync::atomic::AtomicBool;
    let chunk = 256 << 10;
    let data = pattern(3 * chunk, 9);
    let (path, f) = temp_file("pull", &data);
    let gpu = Arc::new(TestGpu::new(1));
    let taken = Arc::new(AtomicBool::new(false));
    let open = Arc::new(AtomicBool::new(false));
    let (t, o) = (taken.clone(), open.clone());
    let factory: FaultFactory = Arc::new(move |_| {
        Some(Box::new(Gate {
            first_only: true,
            taken: t.clone(),
            open: o.clone(),
            held: Vec::new(),
        }) as Box<dyn FaultPlan>)
    });
    // Two workers with one slot each and no small or mid-size slots.
    let cfg = Config {
        io_threads: 2,
        chunk_bytes: chunk,
        slots_per_worker: 1,
        small_slots_per_worker: 0,
        mid_slots_per_worker: 0,
        read_mode: ReadMode::Buffered,
        ..Config::default()
    };
    let e = Engine::with_faults(cfg, gpu.clone(), Some(factory)).unwrap();
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let dev = gpu.device_alloc(0, 3 * chunk).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let submit = |name: &'static str, off: usize, len: usize| {
        let tx = tx.clone();
        // SAFETY: the memory named is owned by this test, which waits for
        // every completion before it frees anything.
        unsafe {
            e.submit(
                IoRequest {
                    file: file.clone(),
                    dir: Direction::Read,
                    mem: Memory::Device {
                        ptr: dev + off as u64,
                        device: 0,
                    },
                    size: len,
                    file_offset: off as u64,
                    cancel: None,
                    durable: false,
                },
                Completion::Callback(Box::new(move |r| {
                    let _ = tx.send((name, r.ok()));
                })),
            )
        }
    };
    // A: one chunk, whose read completion is held: its worker is stuck.
    submit("a", 0, chunk);
    for _ in 0..2000 {
        if taken.load(Ordering::SeqCst) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        taken.load(Ordering::SeqCst),
        "request A never reached the ring"
    );
    // B: two chunks. Both must run on the other worker; dealt round-robin, one
    // of them would wait for the stuck worker's slot until A is released.
    submit("b", chunk, 2 * chunk);
    let first = rx.recv_timeout(Duration::from_secs(30));
    open.store(true, Ordering::SeqCst);
    assert_eq!(
        first.ok(),
        Some(("b", Some(2 * chunk))),
        "request B waited behind the stalled worker"
    );
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(30)).ok(),
        Some(("a", Some(chunk)))
    );
    assert_eq!(gpu.read_device(dev, 3 * chunk), data);
    drop(e);
    // SAFETY: no I/O uses the allocation any more.
    unsafe { gpu.device_free(dev).unwrap() };
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn sync_callers_waiting_together_cut_their_reads_for_their_share_of_the_workers() {
    use std::sync::atomic::AtomicBool;
    let size = 4 << 20;
    let callers = 8;
    let data = pattern(size, 61);
    let (path, f) = temp_file("share", &data);
    let open = Arc::new(AtomicBool::new(false));
    let o = open.clone();
    let factory: FaultFactory = Arc::new(move |_| {
        Some(Box::new(Gate {
            first_only: false,
            taken: Default::default(),
            open: o.clone(),
            held: Vec::new(),
        }) as Box<dyn FaultPlan>)
    });
    let cfg = Config {
        io_threads: 16,
        chunk_bytes: 4 << 20,
        read_mode: ReadMode::Buffered,
        ..Config::default()
    };
    let e = Engine::with_faults(cfg, no_gpu(), Some(factory)).unwrap();
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let mut bufs: Vec<Vec<u8>> = (0..callers).map(|_| vec![0u8; size]).collect();
    std::thread::scope(|s| {
        let reads: Vec<_> = bufs
            .iter_mut()
            .map(|b| {
                let (e, file) = (&e, &file);
                let ptr = b.as_mut_ptr() as usize;
                // SAFETY: each thread's buffer is its own and outlives the call.
                s.spawn(move || unsafe { e.read(file, Memory::Host(ptr), size, 0) })
            })
            .collect();
        // No read can finish before the gate opens, so the callers enter
        // one by one and the k-th finds k waiting, itself included.
        for _ in 0..2000 {
            if e.sync_callers_waiting() == callers {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            e.sync_callers_waiting(),
            callers,
            "the callers never all waited"
        );
        open.store(true, Ordering::SeqCst);
        for r in reads {
            assert_eq!(r.join().unwrap().unwrap(), size);
        }
    });
    assert_eq!(
        e.sync_callers_waiting(),
        0,
        "a finished call is still counted"
    );
    for b in &bufs {
        assert!(b == &data, "a read's bytes differ from the file's");
    }
    // The first caller alone cuts its 4 MiB read for eight workers (eight
    // pieces of 512 KiB); the k-th of callers waiting together shares the
    // eight readers, one piece each: 8 / k readers (at least one), so 1 MiB
    // pieces for the second (4), 2 MiB for the third and fourth (2 each) and
    // whole reads for the rest (1 each): 20 chunks, where eight lone
    // callers would have made 64.
    assert_eq!(e.stats().chunks, 20);
    drop(e);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn one_event_ends_every_copy_queued_before_it() {
    // Reads that complete together have their copies covered by one
    // completion event per device. Every request must still see all of its
    // bytes on the device when it is reported done, on either device.
    let piece = 96 << 10;
    let n = 48;
    let data = pattern(n * piece, 21);
    let (path, f) = temp_file("events", &data);
    let gpu = Arc::new(TestGpu::new(2));
    // Slow copies: a request reported before its copy ran sees fresh bytes.
    gpu.set_copy_delay(Duration::from_micros(200));
    let cfg = Config {
        read_mode: ReadMode::Buffered,
        ..small_config()
    };
    let e = Engine::with_gpu(cfg, gpu.clone()).unwrap();
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let devs = [
        gpu.device_alloc(0, 2 * n * piece).unwrap(),
        gpu.device_alloc(1, 2 * n * piece).unwrap(),
    ];
    let (tx, rx) = std::sync::mpsc::channel();
    for i in 0..n {
        let device = i % 2;
        // Pieces land in reverse order with gaps, none next to another.
        let ptr = devs[device] + (2 * (n - 1 - i) * piece) as u64;
        let (tx, g) = (tx.clone(), gpu.clone());
        let want = data[i * piece..(i + 1) * piece].to_vec();
        // SAFETY: the memory named is owned by this test, which waits for
        // every completion before it frees anything.
        unsafe {
            e.submit(
                IoRequest {
                    file: file.clone(),
                    dir: Direction::Read,
                    mem: Memory::Device {
                        ptr,
                        device: device as i32,
                    },
                    size: piece,
                    file_offset: (i * piece) as u64,
                    cancel: None,
                    durable: false,
                },
                Completion::Callback(Box::new(move |r| {
                    let intact = g.read_device(ptr, piece) == want;
                    let _ = tx.send((i, r.ok(), intact));
                })),
            )
        };
    }
    for _ in 0..n {
        let (i, r, intact) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(r, Some(piece), "request {i}");
        assert!(
            intact,
            "request {i} was reported before its bytes reached the device"
        );
    }
    let st = e.stats();
    assert!(st.gpu_copies >= n as u64, "{st:?}");
    assert!(
        st.gpu_events > 0 && st.gpu_events < st.gpu_copies,
        "no copies shared an event: {st:?}"
    );
    // The copies of one pass went to the runtime as one batch per device.
    assert!(st.gpu_copy_batches > 0, "no batched copies: {st:?}");
    assert_eq!(st.gpu_copy_batches, gpu.copy_batches(), "{st:?}");
    drop(e);
    for d in devs {
        // SAFETY: no I/O uses the allocations any more.
        unsafe { gpu.device_free(d).unwrap() };
    }
    std::fs::remove_file(&path).unwrap();
}

/// Counts the reads (or writes) each worker's ring completes, and the
/// longest of them.
struct CountOps {
    count: Arc<AtomicUsize>,
    writes: bool,
    longest: Arc<AtomicUsize>,
    /// For a control that expects the ops to spread over the workers.
    hold: Option<Arc<HoldUntilSpread>>,
}

/// Keeps a worker that finished a counted op from taking the next chunk
/// until a second worker has finished one too (or 10 s pass, once). A worker
/// that wakes first can otherwise drain a whole request before the others
/// are scheduled (a 2-core CI machine running other tests at once), and a
/// control meant to show the ops spread would then see one worker only.
struct HoldUntilSpread {
    counts: Vec<Arc<AtomicUsize>>,
    armed: std::sync::atomic::AtomicBool,
}

impl HoldUntilSpread {
    fn wait(&self) {
        if !self.armed.load(Ordering::SeqCst) {
            return;
        }
        let t0 = std::time::Instant::now();
        let spread = || {
            self.counts
                .iter()
                .filter(|c| c.load(Ordering::SeqCst) > 0)
                .count()
                > 1
        };
        while !spread() {
            if t0.elapsed() > Duration::from_secs(10) {
                // No other worker took any: the control fails on its counts
                // without waiting out every later op as well.
                self.armed.store(false, Ordering::SeqCst);
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl FaultPlan for CountOps {
    fn on_complete(&mut self, op: &Op, cqe: Cqe, out: &mut Vec<Cqe>) {
        if matches!(op, Op::Write { .. }) == self.writes && !matches!(op, Op::Fsync { .. }) {
            self.count.fetch_add(1, Ordering::SeqCst);
            self.longest.fetch_max(op.len() as usize, Ordering::SeqCst);
            if let Some(h) = &self.hold {
                h.wait();
            }
        }
        out.push(cqe);
    }
    fn flush(&mut self, _out: &mut Vec<Cqe>) {}
    fn holding(&self) -> usize {
        0
    }
}

use std::sync::atomic::AtomicUsize;

/// Reads per worker for 48 concurrent 64 KiB reads through an O_DIRECT
/// descriptor (every chunk goes to storage), with `cold_io_threads` set.
fn reads_per_worker(cold_io_threads: usize) -> Vec<usize> {
    let piece = 64 << 10;
    let n = 48;
    let data = pattern(n * piece, 33);
    let (path, _f) = temp_file(&format!("cold{cold_io_threads}"), &data);
    let counts: Vec<Arc<AtomicUsize>> = (0..3).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    // The control (no limit) holds a worker until a second one has read.
    let hold = Arc::new(HoldUntilSpread {
        counts: counts.clone(),
        armed: false.into(),
    });
    let (c, h) = (counts.clone(), hold.clone());
    let factory: FaultFactory = Arc::new(move |id| {
        Some(Box::new(CountOps {
            count: c[id].clone(),
            writes: false,
            longest: Arc::new(AtomicUsize::new(0)),
            hold: (cold_io_threads == 0).then(|| h.clone()),
        }) as Box<dyn FaultPlan>)
    });
    let cfg = Config {
        io_threads: 3,
        cold_io_threads,
        ..Config::default()
    };
    let e =
        Engine::with_faults(cfg, Arc::new(NoGpu { why: "test".into() }), Some(factory)).unwrap();
    let mut buf = vec![0u8; n * piece + 4096];
    let base = (buf.as_mut_ptr() as usize).next_multiple_of(4096);
    // Workers start as work needs them: start all three with one read of
    // the (page-cache hot) file through a buffered descriptor, whose chunks
    // any worker may take, and count only the reads after it.
    let warm = open_rw(&path, false);
    let warm = Arc::new(File::probe(warm.as_raw_fd()).unwrap());
    // SAFETY: the memory named is owned by this test and outlives the call.
    let got = unsafe { e.read(&warm, Memory::Host(base), n * piece, 0) };
    assert_eq!(got, Ok(n * piece));
    let t0 = std::time::Instant::now();
    while e.workers() < 3 && t0.elapsed() < Duration::from_secs(30) {
        std::thread::yield_now();
    }
    assert_eq!(e.workers(), 3, "the workers did not start");
    for c in &counts {
        c.store(0, Ordering::SeqCst);
    }
    hold.armed.store(true, Ordering::SeqCst);
    let fd = open_rw(&path, true);
    let file = Arc::new(File::probe(fd.as_raw_fd()).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    for i in 0..n {
        let tx = tx.clone();
        // SAFETY: the memory named is owned by this test, which waits for
        // every completion before it frees anything.
        unsafe {
            e.submit(
                IoRequest::new(
                    file.clone(),
                    Direction::Read,
                    Memory::Host(base + i * piece),
                    piece,
                    (i * piece) as u64,
                ),
                Completion::Callback(Box::new(move |r| {
                    let _ = tx.send(r.ok());
                })),
            )
        };
    }
    for _ in 0..n {
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(30)).unwrap(),
            Some(piece)
        );
    }
    let off = base - buf.as_ptr() as usize;
    assert!(buf[off..off + n * piece] == data[..], "data differs");
    drop(e);
    std::fs::remove_file(&path).unwrap();
    counts.iter().map(|c| c.load(Ordering::SeqCst)).collect()
}

#[test]
fn storage_reads_go_only_to_the_cold_workers() {
    let limited = reads_per_worker(1);
    assert!(
        limited[0] >= 48 && limited[1] == 0 && limited[2] == 0,
        "{limited:?}"
    );
    // The control: without the limit the same reads spread over the workers.
    let spread = reads_per_worker(0);
    assert!(spread.iter().filter(|&&r| r > 0).count() > 1, "{spread:?}");
}

/// Records the file range of every read each worker's ring completes.
struct RecordReads {
    id: usize,
    seen: Arc<std::sync::Mutex<Vec<(usize, u64, u32)>>>,
    hold: Arc<HoldUntilSpread>,
    count: Arc<AtomicUsize>,
}

impl FaultPlan for RecordReads {
    fn on_complete(&mut self, op: &Op, cqe: Cqe, out: &mut Vec<Cqe>) {
        if let Op::Read { offset, len, .. } = *op {
            self.seen.lock().unwrap().push((self.id, offset, len));
            self.count.fetch_add(1, Ordering::SeqCst);
            self.hold.wait();
        }
        out.push(cqe);
    }
    fn flush(&mut self, _out: &mut Vec<Cqe>) {}
    fn holding(&self) -> usize {
        0
    }
}

#[test]
fn cold_pieces_of_a_partly_cached_read_go_only_to_the_cold_workers() {
    // A buffered descriptor, sixteen 256 KiB pieces, three of them not cached:
    // the first piece (asked about alone), one inside a wave of four and one
    // inside the last wave of eight. Only worker 0 may read storage, so
    // every read that touches an evicted piece must be its, while the
    // cached pieces spread over all three.
    let piece = 256u64 << 10;
    let n = 16u64;
    let data = pattern((n * piece) as usize, 47);
    let (path, f) = temp_file("partly-cold", &data);
    let counts: Vec<Arc<AtomicUsize>> = (0..3).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    let hold = Arc::new(HoldUntilSpread {
        counts: counts.clone(),
        armed: false.into(),
    });
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (c, h, s) = (counts.clone(), hold.clone(), seen.clone());
    let factory: FaultFactory = Arc::new(move |id| {
        Some(Box::new(RecordReads {
            id,
            seen: s.clone(),
            hold: h.clone(),
            count: c[id].clone(),
        }) as Box<dyn FaultPlan>)
    });
    let cfg = Config {
        io_threads: 3,
        cold_io_threads: 1,
        chunk_bytes: piece as usize,
        ..Config::default()
    };
    let e =
        Engine::with_faults(cfg, Arc::new(NoGpu { why: "test".into() }), Some(factory)).unwrap();
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    if file.direct().is_none()
        || hipfile_engine::file::fully_cached(f.as_raw_fd(), 0, 4096).is_none()
    {
        eprintln!("SKIPPED: no O_DIRECT or no cachestat here, so no read counts as cold");
        std::fs::remove_file(&path).unwrap();
        return;
    }
    let len = (n * piece) as usize;
    let mut buf = vec![0u8; len + 4096];
    let base = (buf.as_mut_ptr() as usize).next_multiple_of(4096);
    // Start all three workers with a read of the whole (hot) file.
    // SAFETY: the memory named is owned by this test and outlives the call.
    let got = unsafe { e.read(&file, Memory::Host(base), len, 0) };
    assert_eq!(got, Ok(len));
    let t0 = std::time::Instant::now();
    while e.workers() < 3 && t0.elapsed() < Duration::from_secs(30) {
        std::thread::yield_now();
    }
    assert_eq!(e.workers(), 3, "the workers did not start");
    // Evict the file, then read back the other pieces one by one without
    // readahead (a 256 KiB advice inside a larger folio evicts nothing, so
    // the pieces are made hot rather than cold).
    let evicted = [0u64, 6, 13];
    make_cold(&f);
    // SAFETY: plain advice on our own descriptor.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    let mut sink = vec![0u8; piece as usize];
    for i in (0..n).filter(|i| !evicted.contains(i)) {
        f.read_exact_at(&mut sink, i * piece).unwrap();
    }
    for i in 0..n {
        let resident = resident_pages(&f, (i * piece) as usize, piece as usize);
        let want = if evicted.contains(&i) { 0 } else { 64 };
        assert_eq!(resident, want, "piece {i} is not as the test made it");
    }
    seen.lock().unwrap().clear();
    for c in &counts {
        c.store(0, Ordering::SeqCst);
    }
    hold.armed.store(true, Ordering::SeqCst);
    buf.fill(0);
    // SAFETY: as above.
    let got = unsafe { e.read(&file, Memory::Host(base), len, 0) };
    assert_eq!(got, Ok(len));
    let o = base - buf.as_ptr() as usize;
    assert!(buf[o..o + len] == data[..], "data differs");
    let seen = seen.lock().unwrap().clone();
    let touches_evicted = |off: u64, len: u32| {
        evicted
            .iter()
            .any(|&i| off < (i + 1) * piece && off + len as u64 > i * piece)
    };
    let wrong: Vec<_> = seen
        .iter()
        .filter(|&&(id, off, len)| id != 0 && touches_evicted(off, len))
        .collect();
    assert!(
        wrong.is_empty(),
        "reads of evicted pieces on other workers: {wrong:?}"
    );
    for &i in &evicted {
        assert!(
            seen.iter().any(|&(id, off, _)| id == 0 && off / piece == i),
            "worker 0 never read evicted piece {i}: {seen:?}"
        );
    }
    let others = seen.iter().filter(|&&(id, _, _)| id != 0).count();
    assert!(others > 0, "the cached pieces did not spread: {seen:?}");
    drop(e);
    std::fs::remove_file(&path).unwrap();
}

/// Writes per worker, and the longest, for one durable 8 MiB sync write
/// through an O_DIRECT (`direct`) or a buffered descriptor, with
/// `cold_io_threads` set.
fn durable_writes_per_worker(cold_io_threads: usize, direct: bool) -> (Vec<usize>, usize) {
    let size = 8 << 20;
    let data = pattern(size, 41);
    let (path, _f) = temp_file(
        &format!("coldw{cold_io_threads}-{direct}"),
        &vec![0u8; size],
    );
    let counts: Vec<Arc<AtomicUsize>> = (0..3).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    let longest = Arc::new(AtomicUsize::new(0));
    // The control (no limit) holds a worker until a second one has written;
    // the warm-up read below counts nothing.
    let hold = Arc::new(HoldUntilSpread {
        counts: counts.clone(),
        armed: true.into(),
    });
    let (c, l) = (counts.clone(), longest.clone());
    let factory: FaultFactory = Arc::new(move |id| {
        Some(Box::new(CountOps {
            count: c[id].clone(),
            writes: true,
            longest: l.clone(),
            hold: (cold_io_threads == 0).then(|| hold.clone()),
        }) as Box<dyn FaultPlan>)
    });
    let cfg = Config {
        io_threads: 3,
        cold_io_threads,
        ..Config::default()
    };
    assert!(cfg.write_sync, "sync writes are durable by default");
    let e =
        Engine::with_faults(cfg, Arc::new(NoGpu { why: "test".into() }), Some(factory)).unwrap();
    let fd = open_rw(&path, direct);
    let file = Arc::new(File::probe(fd.as_raw_fd()).unwrap());
    // O_DIRECT transfers need aligned memory: a 4 KiB-aligned copy of `data`.
    let (mut src, at) = small_page_buffer(size, 0);
    let o = at - src.as_ptr() as usize;
    src[o..o + size].copy_from_slice(&data);
    let (_buf, dst) = small_page_buffer(size, 0);
    // Start all three workers with a read of the (page-cache hot) file
    // through a buffered descriptor (an O_DIRECT read would be storage-bound).
    let warm_fd = open_rw(&path, false);
    let warm = Arc::new(File::probe(warm_fd.as_raw_fd()).unwrap());
    // SAFETY: the memory named is owned by this test and outlives the call.
    let got = unsafe { e.read(&warm, Memory::Host(dst), size, 0) };
    assert_eq!(got, Ok(size));
    let t0 = std::time::Instant::now();
    while e.workers() < 3 && t0.elapsed() < Duration::from_secs(30) {
        std::thread::yield_now();
    }
    assert_eq!(e.workers(), 3, "the workers did not start");
    // SAFETY: as above; `src` outlives the call.
    let got = unsafe { e.write(&file, Memory::Host(at), size, 0) };
    assert_eq!(got, Ok(size));
    drop(e);
    assert!(std::fs::read(&path).unwrap() == data, "data differs");
    std::fs::remove_file(&path).unwrap();
    let per_worker = counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    (per_worker, longest.load(Ordering::SeqCst))
}

/// A durable 8 MiB write through an O_DIRECT (`direct`) or a buffered
/// descriptor goes, in storage pieces, to the one cold worker the engine
/// allows; with no limit (the control) its pieces spread over the workers.
fn durable_writes_go_to_the_cold_workers(direct: bool) {
    let piece = hipfile_engine::config::STORAGE_WRITE_PIECE_BYTES;
    let (limited, longest) = durable_writes_per_worker(1, direct);
    assert!(
        limited[0] >= 8 && limited[1] == 0 && limited[2] == 0,
        "{limited:?}"
    );
    assert!(longest <= piece, "a write of {longest} bytes");
    let (spread, longest) = durable_writes_per_worker(0, direct);
    assert!(spread.iter().filter(|&&w| w > 0).count() > 1, "{spread:?}");
    assert!(longest <= piece, "a write of {longest} bytes");
}

#[test]
fn o_direct_writes_go_to_the_cold_workers_in_storage_pieces() {
    durable_writes_go_to_the_cold_workers(true);
}

#[test]
fn durable_page_cache_writes_go_to_the_cold_workers_in_storage_pieces() {
    // A durable write through the page cache is bound by the disk and by the
    // inode's lock: more workers than the storage ones would only contend.
    durable_writes_go_to_the_cold_workers(false);
}

/// Pages of `f`'s `[off, off + len)` in the page cache (mincore on a mapping).
fn resident_pages(f: &std::fs::File, off: usize, len: usize) -> usize {
    // SAFETY: a private read-only mapping of the file, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            off + len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let pages = (off + len).div_ceil(4096);
    let mut vec = vec![0u8; pages];
    // SAFETY: `vec` holds one byte per page of the mapping.
    let r = unsafe { libc::mincore(p, off + len, vec.as_mut_ptr()) };
    assert_eq!(r, 0);
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, off + len) };
    vec[off / 4096..].iter().filter(|&&b| b & 1 != 0).count()
}

#[test]
fn a_cold_inline_read_goes_around_the_page_cache() {
    // A 1 MiB read runs on the caller's thread. Its range is not cached, so
    // it must be read by O_DIRECT: a page-cache probe that misses starts
    // readahead, which reads the range (and more) a second time.
    let len = 4 << 20;
    let data = pattern(len, 41);
    let (path, f) = temp_file("cold-inline", &data);
    // SAFETY: plain advice on our own descriptor (temp_file synced the data).
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(
        resident_pages(&f, 0, len),
        0,
        "the test could not evict the file"
    );
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    if file.direct().is_none() {
        eprintln!(
            "SKIPPED: {} has no O_DIRECT; only the data is checked",
            path.display()
        );
    }
    let cfg = Config {
        inline_max_bytes: 1 << 20,
        ..Config::default()
    };
    let e = Engine::with_gpu(cfg, no_gpu()).unwrap();
    let mut buf = vec![0u8; (1 << 20) + 4096];
    let at = (buf.as_mut_ptr() as usize).next_multiple_of(4096);
    // SAFETY: the memory named is owned by this test and outlives the call.
    let n = unsafe { e.read(&file, Memory::Host(at), 1 << 20, 1 << 20) }.unwrap();
    assert_eq!(n, 1 << 20);
    let o = at - buf.as_ptr() as usize;
    assert!(buf[o..o + n] == data[1 << 20..2 << 20]);
    assert!(e.stats().inline_bytes >= 1 << 20, "{:?}", e.stats());
    if file.direct().is_some()
        && hipfile_engine::file::fully_cached(f.as_raw_fd(), 0, 4096).is_some()
    {
        assert_eq!(
            resident_pages(&f, 1 << 20, 3 << 20),
            0,
            "the read went through the page cache"
        );
    }
    std::fs::remove_file(&path).unwrap();
}

/// Drop `f`'s pages from the page cache (the test file was synced).
fn make_cold(f: &std::fs::File) {
    // SAFETY: plain advice on our own descriptor.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

/// A fresh anonymous mapping for a test buffer, with `madvise` advice on
/// transparent huge pages.
struct Mapping {
    base: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize, thp_advice: libc::c_int) -> Mapping {
        // SAFETY: a fresh anonymous mapping, checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap of {len} bytes");
        // SAFETY: the mapping just made.
        unsafe { libc::madvise(base, len, thp_advice) };
        Mapping {
            base: base.cast(),
            len,
        }
    }
}

impl std::ops::Deref for Mapping {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the mapping lives as long as `self` (zero-filled on first touch).
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }
}

impl std::ops::DerefMut for Mapping {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is the only way in.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `new`, once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

// SAFETY: plain memory, owned by the value; tests hand its address to
// other threads only while it is alive.
unsafe impl Send for Mapping {}

/// A buffer of `len` bytes at a 4 KiB-aligned address plus `skew`, in
/// small pages not yet touched: absent from the page tables, so scattered to
/// the library whatever the kernel's THP setting and whether frame numbers
/// are visible (the value keeps the memory alive).
fn small_page_buffer(len: usize, skew: usize) -> (Mapping, usize) {
    let buf = Mapping::new(len + 8192, libc::MADV_NOHUGEPAGE);
    let at = buf.base as usize + skew;
    (buf, at)
}

#[test]
fn cold_inline_reads_of_small_pages_go_through_a_huge_page() {
    // A cold O_DIRECT read into 4 KiB pages reaches the disk as about one
    // segment per page; the caller's thread reads it into a huge page and
    // copies it out. The file ends 12345 bytes past 2 MiB: the last read
    // meets EOF inside the huge page.
    let len = (2 << 20) + 12345;
    let data = pattern(len, 61);
    let (path, f) = temp_file("inline-huge", &data);
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    if file.direct().is_none() {
        eprintln!("SKIPPED: {} has no O_DIRECT", path.display());
        return;
    }
    let thp = hipfile_engine::bounce::thp_allowed();
    let cfg = Config {
        inline_max_bytes: 1 << 20,
        ..Config::default()
    };
    let e = Engine::with_gpu(cfg, no_gpu()).unwrap();
    // (file offset, size, buffer skew, bytes read, bounced?)
    let cases = [
        (1 << 20, 1 << 20, 0, 1 << 20, true),
        (0, 68 << 10, 0, 68 << 10, true),
        // Up to the disk's small-slot size: straight in.
        (4096, 64 << 10, 0, 64 << 10, false),
        // Past EOF: O_DIRECT reads up to it, the page cache ends it.
        (2 << 20, 1 << 20, 0, 12345, true),
        // An unaligned buffer is read through the page cache, as before.
        (8192, 256 << 10, 1, 256 << 10, false),
    ];
    for (off, size, skew, want, bounced) in cases {
        make_cold(&f);
        let before = e.stats().host_bounce_bytes;
        let (buf, at) = small_page_buffer(size, skew);
        // SAFETY: the memory named is owned by this test and outlives the call.
        let n = unsafe { e.read(&file, Memory::Host(at), size, off as u64) }.unwrap();
        assert_eq!(n, want, "at {off}, {size} bytes");
        let o = at - buf.as_ptr() as usize;
        assert!(
            buf[o..o + n] == data[off..off + n],
            "at {off}, {size} bytes"
        );
        let through_huge = e.stats().host_bounce_bytes - before;
        if bounced && thp {
            // EOF: the O_DIRECT read returns what lies before it.
            assert_eq!(
                through_huge,
                want.min(size) as u64,
                "at {off}, {size} bytes"
            );
        } else {
            assert_eq!(through_huge, 0, "at {off}, {size} bytes, THP {thp}");
        }
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn hot_inline_reads_and_threads_without_thp_read_straight() {
    let len = 2 << 20;
    let data = pattern(len, 67);
    let (path, f) = temp_file("inline-straight", &data);
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    if file.direct().is_none() {
        eprintln!("SKIPPED: {} has no O_DIRECT", path.display());
        return;
    }
    let cfg = Config {
        inline_max_bytes: 1 << 20,
        ..Config::default()
    };
    let e = Arc::new(Engine::with_gpu(cfg, no_gpu()).unwrap());
    // Page-cache hits: the kernel copies them already, no second copy.
    let mut warm = vec![0u8; len];
    f.read_exact_at(&mut warm, 0).unwrap();
    let (buf, at) = small_page_buffer(1 << 20, 0);
    // SAFETY: the memory named is owned by this test and outlives the call.
    let n = unsafe { e.read(&file, Memory::Host(at), 1 << 20, 1 << 20) }.unwrap();
    let o = at - buf.as_ptr() as usize;
    assert!(n == 1 << 20 && buf[o..o + n] == data[1 << 20..]);
    let s = e.stats();
    assert_eq!(s.host_bounce_bytes, 0, "a hot read was bounced: {s:?}");
    // A thread whose kernel has THP off reads cold ranges straight.
    make_cold(&f);
    let (e2, file2, data2) = (e.clone(), file.clone(), data.clone());
    std::thread::spawn(move || {
        hipfile_engine::host_bounce::pretend_thp_off_on_this_thread();
        let (buf, at) = small_page_buffer(1 << 20, 0);
        // SAFETY: as above.
        let n = unsafe { e2.read(&file2, Memory::Host(at), 1 << 20, 0) }.unwrap();
        let o = at - buf.as_ptr() as usize;
        assert!(n == 1 << 20 && buf[o..o + n] == data2[..1 << 20]);
    })
    .join()
    .unwrap();
    let s = e.stats();
    assert_eq!(s.host_bounce_bytes, 0, "bounced without THP: {s:?}");
    std::fs::remove_file(&path).unwrap();
}

/// Both storage backends, for the tests of the workers' huge-page slots.
const BOTH_BACKENDS: [hipfile_engine::storage::BackendSetting; 2] = [
    hipfile_engine::storage::BackendSetting::Auto,
    hipfile_engine::storage::BackendSetting::Posix,
];

/// Chunk sizes and the pieces of a 1 MiB transfer they cut: above the
/// small-slot size (through a huge slot), and at it (straight).
const SLOT_CASES: [(usize, u64); 2] = [(256 << 10, 4), (64 << 10, 16)];

/// A two-worker engine with `chunk`-byte pieces on `backend`.
fn cut_engine(chunk: usize, backend: hipfile_engine::storage::BackendSetting) -> Engine {
    let cfg = Config {
        chunk_bytes: chunk,
        io_backend: backend,
        ..small_config()
    };
    Engine::with_gpu(cfg, no_gpu()).unwrap()
}

#[test]
fn cold_worker_reads_of_small_pages_go_through_huge_slots() {
    // The workers' pieces of a cold read into 4 KiB pages take a slot of
    // their huge-page slab, on either storage backend; pieces up to 64 KiB
    // (the small-slot size) go straight in.
    let len = 2 << 20;
    let data = pattern(len, 53);
    let (path, f) = temp_file("worker-huge", &data);
    let thp = hipfile_engine::bounce::thp_allowed();
    for backend in BOTH_BACKENDS {
        for (chunk, pieces) in SLOT_CASES {
            make_cold(&f);
            let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
            if file.direct().is_none() {
                eprintln!("SKIPPED: {} has no O_DIRECT", path.display());
                return;
            }
            let e = cut_engine(chunk, backend);
            let (buf, at) = small_page_buffer(1 << 20, 0);
            // SAFETY: the memory named is owned by this test and outlives the call.
            let n = unsafe { e.read(&file, Memory::Host(at), 1 << 20, 1 << 20) }.unwrap();
            assert_eq!(n, 1 << 20);
            let o = at - buf.as_ptr() as usize;
            assert!(
                buf[o..o + n] == data[1 << 20..2 << 20],
                "{backend:?} {chunk}"
            );
            let s = e.stats();
            assert_eq!(s.direct_read_bytes, 1 << 20, "{s:?}");
            let bounced = thp && chunk > 64 << 10;
            let want = if bounced { (pieces, 1 << 20) } else { (0, 0) };
            assert_eq!(
                (s.bounced_chunks, s.host_bounce_bytes),
                want,
                "{backend:?}, {chunk}-byte pieces, THP {thp}: {s:?}"
            );
        }
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn o_direct_writes_from_small_pages_go_through_huge_slots() {
    // A write on an O_DIRECT descriptor from 4 KiB pages is copied into a
    // slot of the worker's huge-page slab and written from there, on either
    // storage backend; pieces up to 64 KiB go straight. A source whose
    // second half cannot be read gives EFAULT for its pieces: what the call
    // reports written is in the file, and the file grows no further.
    let len = 1 << 20;
    let data = pattern(len, 59);
    let thp = hipfile_engine::bounce::thp_allowed();
    for backend in BOTH_BACKENDS {
        for (chunk, pieces) in SLOT_CASES {
            let (path, _f) = temp_file("write-huge", &[]);
            let fd = open_rw(&path, true);
            let file = Arc::new(File::probe(fd.as_raw_fd()).unwrap());
            if file.direct().is_none() {
                eprintln!("SKIPPED: {} has no O_DIRECT", path.display());
                std::fs::remove_file(&path).unwrap();
                return;
            }
            let e = cut_engine(chunk, backend);
            let (src, at) = small_page_buffer(len, 0);
            let o = at - src.as_ptr() as usize;
            // SAFETY: the mapping is ours, writable, and `len + 8192` bytes long.
            let bytes = unsafe { std::slice::from_raw_parts_mut(src.base.add(o), len) };
            // The even pages touched first, then the odd ones, so that no two
            // neighbouring pages get neighbouring frames: where the library
            // may see frame numbers (root), pages faulted in order can come
            // out physically contiguous, and such a source is rightly written
            // straight.
            for first in [0, 1] {
                for page in bytes.chunks_mut(4096).skip(first).step_by(2) {
                    page[0] = 1;
                }
            }
            bytes.copy_from_slice(&data);
            // SAFETY: the memory named is owned by this test and outlives the call.
            let n = unsafe { e.write(&file, Memory::Host(at), len, 1 << 20) }.unwrap();
            assert_eq!(n, len);
            let back = std::fs::read(&path).unwrap();
            assert_eq!(back.len(), 2 << 20);
            assert!(back[1 << 20..] == data[..], "{backend:?} {chunk}");
            let s = e.stats();
            assert_eq!(s.direct_write_bytes, len as u64, "{s:?}");
            let bounced = thp && chunk > 64 << 10;
            let want = if bounced {
                (pieces, len as u64)
            } else {
                (0, 0)
            };
            assert_eq!(
                (s.bounced_chunks, s.host_bounce_bytes),
                want,
                "{backend:?}, {chunk}-byte pieces, THP {thp}: {s:?}"
            );
            // The second half of the source made unreadable.
            // SAFETY: the second half of our own mapping.
            let r = unsafe {
                libc::mprotect(src.base.add(o + len / 2).cast(), len / 2, libc::PROT_NONE)
            };
            assert_eq!(r, 0);
            // SAFETY: as above; the unreadable half must give EFAULT, not a fault.
            let got = unsafe { e.write(&file, Memory::Host(at), len, 4 << 20) };
            let size = std::fs::metadata(&path).unwrap().len();
            match got {
                Ok(n) => {
                    assert!(n < len, "{backend:?} {chunk}: {n}");
                    assert!(size <= (4 << 20) + n as u64, "{backend:?} {chunk}: {size}");
                    let back = std::fs::read(&path).unwrap();
                    assert!(back[4 << 20..(4 << 20) + n] == data[..n]);
                }
                Err(err) => {
                    assert_eq!(err, Error::Os(libc::EFAULT), "{backend:?} {chunk}");
                    assert_eq!(
                        size,
                        2 << 20,
                        "{backend:?} {chunk}: nothing reported, yet the file grew"
                    );
                }
            }
            // SAFETY: restoring our own mapping before it is dropped.
            let r = unsafe {
                libc::mprotect(
                    src.base.add(o + len / 2).cast(),
                    len / 2,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            assert_eq!(r, 0);
            drop(e);
            std::fs::remove_file(&path).unwrap();
        }
    }
}

/// The bytes of transparent huge pages backing the mapping that holds
/// `addr`, from `/proc/self/smaps` (the kernel's account, independent of the
/// library's own probe).
fn anon_huge_bytes(addr: usize) -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut inside = false;
    for line in smaps.lines() {
        let range = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'));
        let bounds = range.and_then(|(a, b)| {
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        });
        if let Some((start, end)) = bounds {
            inside = (start..end).contains(&addr);
        } else if let Some(kb) = line.strip_prefix("AnonHugePages:").filter(|_| inside) {
            let kb = kb.trim().trim_end_matches("kB").trim();
            return kb.parse::<usize>().unwrap_or(0) << 10;
        }
    }
    0
}

#[test]
fn cold_reads_into_huge_pages_go_straight() {
    // Memory the kernel maps with huge pages reaches the disk in few
    // segments already: neither the caller's inline read nor the workers'
    // pieces copy it through a huge page of their own. The same reads into
    // small pages do.
    let len = 4 << 20;
    let data = pattern(len, 79);
    let (path, f) = temp_file("huge-straight", &data);
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    if file.direct().is_none() {
        eprintln!("SKIPPED: {} has no O_DIRECT", path.display());
        return;
    }
    let huge = 2 << 20;
    let region = Mapping::new(len + huge, libc::MADV_HUGEPAGE);
    let base = (region.base as usize).next_multiple_of(huge);
    // SAFETY: `[base, base + len)` lies inside `region`.
    unsafe { std::ptr::write_bytes(base as *mut u8, 0, len) };
    let given = anon_huge_bytes(base);
    if given < len {
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
        eprintln!("SKIPPED: the kernel gave {given} bytes of huge pages here (THP: {thp:?})");
        return;
    }
    let cfg = Config {
        inline_max_bytes: 1 << 20,
        chunk_bytes: 512 << 10,
        ..small_config()
    };
    let e = Engine::with_gpu(cfg, no_gpu()).unwrap();
    let (small, small_at) = small_page_buffer(len, 0);
    for (dst, into_huge) in [(base, true), (small_at, false)] {
        // (file offset, size): one inline read, one cut into worker pieces.
        for (off, size) in [(0, 1 << 20), (1 << 20, 3 << 20)] {
            make_cold(&f);
            let before = e.stats();
            // SAFETY: both buffers are owned by this test and outlive the call.
            let n = unsafe { e.read(&file, Memory::Host(dst + off), size, off as u64) }.unwrap();
            assert_eq!(n, size);
            // SAFETY: the range just read, inside its buffer.
            let got = unsafe { std::slice::from_raw_parts((dst + off) as *const u8, n) };
            assert!(
                got == &data[off..off + n],
                "at {off}, huge pages {into_huge}"
            );
            let s = e.stats();
            let bounced = s.host_bounce_bytes - before.host_bounce_bytes;
            if into_huge {
                assert_eq!(bounced, 0, "huge pages bounced at {off}: {s:?}");
            } else if hipfile_engine::bounce::thp_allowed() {
                assert_eq!(
                    bounced, size as u64,
                    "small pages read straight at {off}: {s:?}"
                );
            }
        }
    }
    drop(small);
    std::fs::remove_file(&path).unwrap();
}

/// Whether this process sees page frame numbers in `/proc/self/pagemap`
/// (CAP_SYS_ADMIN): the frame of the touched page at `addr`, or None.
fn own_frame(addr: usize) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let map = std::fs::File::open("/proc/self/pagemap").ok()?;
    let mut e = [0u8; 8];
    map.read_exact_at(&mut e, (addr / 4096 * 8) as u64).ok()?;
    let e = u64::from_le_bytes(e);
    let pfn = e & ((1 << 55) - 1);
    (e >> 63 == 1 && pfn != 0).then_some(pfn)
}

#[test]
fn cold_reads_into_small_pages_in_physical_order_go_straight_where_frames_show() {
    // Small pages that lie in physical order reach the disk in few segments
    // too. A huge page split into 4 KiB mappings (mprotect of one page splits
    // the PMD and leaves the frames where they were) is such a buffer: no
    // longer huge to PAGEMAP_SCAN, one physical run to the page frame numbers.
    // Where the process may see frames it is read straight; elsewhere the
    // library cannot tell it from scattered pages and copies.
    let len = 4 << 20;
    let data = pattern(len, 83);
    let (path, f) = temp_file("ordered-straight", &data);
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    if file.direct().is_none() {
        eprintln!("SKIPPED: {} has no O_DIRECT", path.display());
        return;
    }
    if !hipfile_engine::bounce::thp_allowed() {
        eprintln!("SKIPPED: transparent huge pages are off; every cold read goes straight");
        return;
    }
    let huge = 2 << 20;
    let region = Mapping::new(len + huge, libc::MADV_HUGEPAGE);
    let base = (region.base as usize).next_multiple_of(huge);
    // SAFETY: `[base, base + len)` lies inside `region`.
    unsafe { std::ptr::write_bytes(base as *mut u8, 0, len) };
    if anon_huge_bytes(base) < len {
        eprintln!("SKIPPED: the kernel gave no huge pages here");
        return;
    }
    for piece in [base, base + huge] {
        let page = (piece + 4096) as *mut libc::c_void;
        // SAFETY: one page inside the region; protection restored at once.
        unsafe {
            assert_eq!(libc::mprotect(page, 4096, libc::PROT_READ), 0);
            assert_eq!(
                libc::mprotect(page, 4096, libc::PROT_READ | libc::PROT_WRITE),
                0
            );
        }
    }
    // Keep khugepaged from collapsing them again, and the mapping from
    // merging with another test's huge-page mapping next to it (smaps would
    // count that one's huge pages as ours).
    // SAFETY: advice on the region just made.
    unsafe { libc::madvise(region.base.cast(), region.len, libc::MADV_NOHUGEPAGE) };
    assert_eq!(anon_huge_bytes(base), 0, "the huge pages were split");
    let frames_show = own_frame(base).is_some();
    // Each former huge page is one run of frames (the split moved nothing).
    let in_order = [base, base + huge].iter().all(|&h| {
        let first = own_frame(h);
        (0..huge / 4096)
            .all(|i| own_frame(h + i * 4096) == first.map(|f| f + i as u64) && first.is_some())
    });
    assert_eq!(in_order, frames_show, "split huge pages keep their frames");
    let cfg = Config {
        inline_max_bytes: 1 << 20,
        chunk_bytes: 512 << 10,
        ..small_config()
    };
    let e = Engine::with_gpu(cfg, no_gpu()).unwrap();
    for (off, size) in [(0, 1 << 20), (1 << 20, 3 << 20)] {
        make_cold(&f);
        let before = e.stats();
        // SAFETY: the region is owned by this test and outlives the call.
        let n = unsafe { e.read(&file, Memory::Host(base + off), size, off as u64) }.unwrap();
        assert_eq!(n, size);
        // SAFETY: the range just read, inside the region.
        let got = unsafe { std::slice::from_raw_parts((base + off) as *const u8, n) };
        assert!(got == &data[off..off + n], "bytes at {off}");
        let s = e.stats();
        let bounced = s.host_bounce_bytes - before.host_bounce_bytes;
        if frames_show {
            assert_eq!(bounced, 0, "pages in order bounced at {off}: {s:?}");
        } else {
            assert_eq!(bounced, size as u64, "read straight unseen at {off}: {s:?}");
        }
    }
    if !frames_show {
        eprintln!("frame numbers hidden here (no CAP_SYS_ADMIN): checked the copy only");
    }
    std::fs::remove_file(&path).unwrap();
}

/// Passes completions through and notes, for each one, how many GPU copies
/// the test device had been given by then.
struct CopiesSeen {
    gpu: Arc<TestGpu>,
    seen: Arc<std::sync::Mutex<Vec<u64>>>,
}

impl FaultPlan for CopiesSeen {
    fn on_complete(&mut self, op: &Op, cqe: Cqe, out: &mut Vec<Cqe>) {
        if matches!(op, Op::Read { .. }) {
            self.seen.lock().unwrap().push(self.gpu.copies_issued());
        }
        out.push(cqe);
    }
    fn flush(&mut self, _out: &mut Vec<Cqe>) {}
    fn holding(&self) -> usize {
        0
    }
}

/// For a two-chunk page-cache read into device memory on one worker: how
/// many GPU copies had been issued when each read completed.
fn copies_seen_at_read_completions(first_read_alone: bool) -> Vec<u64> {
    let chunk = 256 << 10;
    let data = pattern(2 * chunk, 17);
    let (path, f) = temp_file("first-copy", &data);
    // The reads must be page-cache hits (the kernel then completes them
    // inside the submitting io_uring_enter): touch every page once.
    let mut warm = vec![0u8; data.len()];
    f.read_exact_at(&mut warm, 0).unwrap();
    let gpu = Arc::new(TestGpu::new(1));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (g, s) = (gpu.clone(), seen.clone());
    let factory: FaultFactory = Arc::new(move |_| {
        Some(Box::new(CopiesSeen {
            gpu: g.clone(),
            seen: s.clone(),
        }) as Box<dyn FaultPlan>)
    });
    let cfg = Config {
        io_threads: 1,
        chunk_bytes: chunk,
        slots_per_worker: 2,
        small_slots_per_worker: 0,
        mid_slots_per_worker: 0,
        read_mode: ReadMode::Buffered,
        first_read_alone,
        ..Config::default()
    };
    let e = Engine::with_faults(cfg, gpu.clone(), Some(factory)).unwrap();
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    let dev = gpu.device_alloc(0, 2 * chunk).unwrap();
    let mem = device0(dev);
    // SAFETY: the memory named is owned by this test and outlives the call.
    let n = unsafe { e.read(&file, mem, 2 * chunk, 0) }.unwrap();
    assert_eq!(n, 2 * chunk);
    assert_eq!(gpu.read_device(dev, 2 * chunk), data);
    drop(e);
    // SAFETY: no I/O uses the allocation any more.
    unsafe { gpu.device_free(dev).unwrap() };
    std::fs::remove_file(&path).unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "two page-cache reads: {seen:?}");
    seen
}

#[test]
fn an_idle_worker_can_start_its_first_copy_after_one_page_cache_read() {
    // The kernel copies a cached read inside io_uring_enter, so two reads
    // submitted together both finish before the first GPU copy can start.
    // With `first_read_alone` (the engine's behaviour) a worker with no copy
    // on its way submits one read alone, copies it, and reads the second
    // meanwhile: the second read's completion then finds the first chunk's
    // copy issued. Without it both reads go in one submission.
    let alone = copies_seen_at_read_completions(true);
    assert_eq!(alone[0], 0, "{alone:?}");
    assert!(
        alone[1] >= 1,
        "the second read finished before the first chunk's copy was issued: {alone:?}"
    );
    let together = copies_seen_at_read_completions(false);
    assert_eq!(together, vec![0, 0], "both reads in one submission");
}

/// An engine of up to 16 workers with small slabs (64 KiB chunks, a few
/// small slots), host reads all through the workers.
fn growing_engine() -> Engine {
    let cfg = Config {
        io_threads: 16,
        chunk_bytes: 64 << 10,
        slots_per_worker: 2,
        small_slots_per_worker: 2,
        mid_slots_per_worker: 0,
        inline_max_bytes: 0,
        huge_pages: false,
        ..Config::default()
    };
    Engine::with_gpu(cfg, no_gpu()).unwrap()
}

#[test]
fn one_request_at_a_time_holds_one_worker() {
    let piece = 64 << 10;
    let data = pattern(64 * piece, 71);
    let (path, _f) = temp_file("one-at-a-time", &data);
    let e = growing_engine();
    assert_eq!(e.workers(), 1, "an engine opens with one worker");
    let one_slab = e.stats().bounce_bytes;
    assert!(one_slab > 0);
    let fd = open_rw(&path, false);
    let file = Arc::new(File::probe(fd.as_raw_fd()).unwrap());
    let mut buf = vec![0u8; piece];
    for i in 0..64 {
        // SAFETY: `buf` is owned by this test and outlives the call.
        let n = unsafe {
            e.read(
                &file,
                Memory::Host(buf.as_mut_ptr() as usize),
                piece,
                (i * piece) as u64,
            )
        };
        assert_eq!(n, Ok(piece));
        assert!(buf[..] == data[i * piece..(i + 1) * piece], "piece {i}");
    }
    assert_eq!(e.stats().chunks, 64, "the reads went through the workers");
    // Each read was one chunk, and the worker was idle again before its
    // caller heard the read had ended: no read found work queued and no
    // worker idle.
    assert_eq!(e.workers(), 1);
    assert_eq!(e.stats().bounce_bytes, one_slab);
    drop(e);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn many_queued_chunks_start_workers_up_to_the_maximum() {
    let piece = 64 << 10;
    let data = pattern(64 * piece, 72);
    let (path, _f) = temp_file("grow", &data);
    let e = growing_engine();
    let one_slab = e.stats().bounce_bytes;
    let fd = open_rw(&path, false);
    let file = Arc::new(File::probe(fd.as_raw_fd()).unwrap());
    let mut buf = vec![0u8; data.len()];
    // One 4 MiB read is cut into 64 chunks of 64 KiB, queued at once: more
    // than the one idle worker, so the engine starts the other fifteen.
    // SAFETY: `buf` is owned by this test and outlives the call.
    let n = unsafe { e.read(&file, Memory::Host(buf.as_mut_ptr() as usize), buf.len(), 0) };
    assert_eq!(n, Ok(data.len()));
    assert!(buf == data, "data differs");
    // The new workers map their slabs on their own threads: wait for them.
    let t0 = std::time::Instant::now();
    while e.workers() < 16 && t0.elapsed() < Duration::from_secs(30) {
        std::thread::yield_now();
    }
    assert_eq!(e.workers(), 16);
    assert_eq!(e.stats().bounce_bytes, 16 * one_slab);
    // The maximum holds: another burst starts no more.
    // SAFETY: as above.
    let n = unsafe { e.read(&file, Memory::Host(buf.as_mut_ptr() as usize), buf.len(), 0) };
    assert_eq!(n, Ok(data.len()));
    assert_eq!(e.workers(), 16);
    drop(e);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn small_reads_of_a_file_that_left_the_page_cache_stay_correct_and_probe_again() {
    // After CACHE_TRUST probes in a row hit, small reads of the file skip
    // the probe (plain pread). Evicted then, the file must still read right,
    // and a probe (one in REPROBE_EVERY of this thread's reads) must notice
    // the miss and take the trust back.
    use hipfile_engine::file::{CACHE_TRUST, REPROBE_EVERY};
    let len = 1 << 20;
    let data = pattern(len, 73);
    let (path, f) = temp_file("cache-trust", &data);
    let file = Arc::new(File::probe(f.as_raw_fd()).unwrap());
    if file.direct().is_none() {
        eprintln!(
            "SKIPPED: {} has no O_DIRECT (small reads never probe)",
            path.display()
        );
        return;
    }
    let mut all = vec![0u8; len];
    std::io::Read::read_exact(&mut &f, &mut all).unwrap(); // into the page cache
    let e = Engine::with_gpu(Config::default(), no_gpu()).unwrap();
    let (buf, at) = small_page_buffer(4096, 0);
    let read_at = |k: usize| {
        let off = (k * 4096) % len;
        // SAFETY: `buf` (owned by this test) covers [at, at + 4096).
        let n = unsafe { e.read(&file, Memory::Host(at), 4096, off as u64) }.unwrap();
        assert_eq!(n, 4096);
        let o = at - buf.as_ptr() as usize;
        assert!(
            buf[o..o + 4096] == data[off..off + 4096],
            "read {k} at {off}"
        );
    };
    for k in 0..CACHE_TRUST as usize {
        read_at(k);
    }
    assert!(file.trusts_page_cache(), "{CACHE_TRUST} hits in a row");
    make_cold(&f);
    // Every read stays right; within REPROBE_EVERY of them one probes,
    // misses (the range is not resident) and ends the trust. The advice
    // that evicts is not always taken at once (a page under writeback, or
    // brought back by readahead, stays), so a probe may still hit: allow
    // four probe intervals for one miss.
    for k in 0..4 * REPROBE_EVERY as usize {
        read_at(k * 7 + 3);
        make_cold(&f);
        if !file.trusts_page_cache() {
            break;
        }
    }
    assert!(
        !file.trusts_page_cache(),
        "no probe noticed the file left the page cache"
    );
    std::fs::remove_file(&path).unwrap();
}
