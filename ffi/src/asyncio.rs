//! Stream-ordered I/O (spec §5.6): `hipFileReadAsync`/`WriteAsync` and stream
//! registration.
//!
//! Design: the user's stream is *parked* on a word of pinned host memory.
//! For each op we enqueue on the user's stream
//!
//! 1. write_value32(start, gen)   – "the stream has reached this op"
//! 2. wait_value32(done >= gen)   – "later work waits for the transfer"
//!
//! A monitor thread sees `start == gen`, binds the parameters the stream flags
//! left open (execution-time binding: it reads `*size_p` etc. only now),
//! validates them and hands the transfer to the engine, which turns it into
//! ring submissions and GPU copies on its own worker streams. The engine's
//! completion stores the result in `*bytes_p`, then `done = gen`, which
//! releases the user's stream. No GPU-runtime callback thread is involved, so
//! ops on different streams run concurrently, and submission never blocks.
//!
//! Words are reused with increasing generations, so a word is free again as
//! soon as its op completed: an old wait (done >= g) stays satisfied forever.
//! The word page is never freed (a stream may still be parked on it at exit).

use crate::passthrough::{self, passthrough};
use crate::types::HipFileError;
use crate::{guard, inval, prepare};
use hipfile_engine::batch::negative_code;
use hipfile_engine::error::{Error, OpError};
use hipfile_engine::gpu::{Gpu, MemKind, Stream};
use hipfile_engine::pipeline::{Completion, Direction, Engine, IoRequest, StreamOpTicket};
use hipfile_engine::registry::{driver, BufferUse, StreamReg};
use hipfile_engine::{log_debug, log_warn, MAX_RW_COUNT};
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

pub const FIXED_BUF_OFFSET: u32 = 1;
pub const FIXED_FILE_OFFSET: u32 = 2;
pub const FIXED_FILE_SIZE: u32 = 4;
pub const PAGE_ALIGNED_INPUTS: u32 = 8;
pub const FLAGS_MASK: u32 = 0xf;

const WORD_PAIRS: usize = 2048;

/// Pinned words: pair i is (start, done) at u32 index 2i, 2i+1.
struct Words {
    base: *mut AtomicU32,
    free: Mutex<Vec<usize>>,
    gens: Mutex<Vec<u32>>,
}

// SAFETY: the words are atomics in a mapping that lives for the process.
unsafe impl Send for Words {}
// SAFETY: as above; all access goes through AtomicU32.
unsafe impl Sync for Words {}

impl Words {
    fn new(gpu: &Arc<dyn Gpu>) -> Result<Words, Error> {
        let bytes = WORD_PAIRS * 8;
        // SAFETY: anonymous mapping, no preconditions.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last_os());
        }
        // SAFETY: the mapping is never unmapped, so the registration outlives every use.
        unsafe { gpu.host_register(p.cast(), bytes) }?;
        Ok(Words {
            base: p.cast(),
            free: Mutex::new((0..WORD_PAIRS).rev().collect()),
            gens: Mutex::new(vec![0; WORD_PAIRS]),
        })
    }

    fn word(&self, i: usize) -> &AtomicU32 {
        // SAFETY: i < 2 * WORD_PAIRS, inside the mapping; zeroed memory is a valid AtomicU32.
        unsafe { &*self.base.add(i) }
    }

    /// A free pair and its next generation.
    fn take(&self) -> Option<(usize, u32)> {
        let i = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop()?;
        let mut g = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        g[i] = g[i].wrapping_add(1).max(1);
        Some((i, g[i]))
    }

    fn give_back(&self, i: usize) {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).push(i);
    }
}

/// An op whose stream has not reached it yet.
struct Pending {
    pair: usize,
    gen: u32,
    engine: Engine,
    proto: IoRequest,
    flags: u32,
    submitted_size: usize,
    buf_len: u64,
    buf_base: u64,
    size_p: usize,
    file_offset_p: usize,
    buffer_offset_p: usize,
    bytes_p: usize,
    fixed: (usize, i64, i64),
    hold: BufferUse,
    /// Counts the op as outstanding in its engine until it completes.
    ticket: StreamOpTicket,
}

struct Monitor {
    words: Words,
    pending: Mutex<Vec<Pending>>,
    cv: Condvar,
}

static MONITOR: OnceLock<Result<Arc<Monitor>, Error>> = OnceLock::new();

fn monitor(gpu: &Arc<dyn Gpu>) -> Result<Arc<Monitor>, Error> {
    MONITOR
        .get_or_init(|| {
            let m = Arc::new(Monitor {
                words: Words::new(gpu)?,
                pending: Mutex::new(Vec::new()),
                cv: Condvar::new(),
            });
            let m2 = m.clone();
            std::thread::Builder::new()
                .name("hipfile-stream".into())
                .spawn(move || m2.run())
                .map_err(|_| Error::Op(OpError::InternalError))?;
            Ok(m)
        })
        .clone()
}

impl Monitor {
    fn run(self: Arc<Self>) {
        let mut idle_polls = 0u32;
        loop {
            let ready: Vec<Pending> = {
                let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                while p.is_empty() {
                    p = self.cv.wait(p).unwrap_or_else(|e| e.into_inner());
                }
                let mut ready = Vec::new();
                let mut i = 0;
                while i < p.len() {
                    let start = self.words.word(2 * p[i].pair).load(Ordering::Acquire);
                    if start == p[i].gen {
                        ready.push(p.swap_remove(i));
                    } else {
                        i += 1;
                    }
                }
                ready
            };
            if ready.is_empty() {
                // Spin briefly for latency, then back off so a parked op costs little CPU.
                idle_polls += 1;
                if idle_polls < 64 {
                    std::hint::spin_loop();
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(20));
                }
                continue;
            }
            idle_polls = 0;
            for op in ready {
                self.clone().launch(op);
            }
        }
    }

    /// The stream reached `op`: bind the open parameters, validate, start it.
    fn launch(self: Arc<Self>, op: Pending) {
        log_debug!(
            "stream op pair {} gen {}: reached by its stream, starting",
            op.pair,
            op.gen
        );
        // SAFETY: the caller keeps parameter storage alive until the op has executed
        // (the stream API's contract); reads are of plain integers.
        let (size, foff, boff) = unsafe {
            (
                if op.flags & FIXED_FILE_SIZE != 0 {
                    op.fixed.0
                } else {
                    (*(op.size_p as *const usize)).min(MAX_RW_COUNT)
                },
                if op.flags & FIXED_FILE_OFFSET != 0 {
                    op.fixed.1
                } else {
                    *(op.file_offset_p as *const i64)
                },
                if op.flags & FIXED_BUF_OFFSET != 0 {
                    op.fixed.2
                } else {
                    *(op.buffer_offset_p as *const i64)
                },
            )
        };
        let invalid = size > op.submitted_size
            || foff < 0
            || boff < 0
            || boff as u64 >= op.buf_len
            || size as u64 > op.buf_len - boff as u64;
        if invalid || size == 0 {
            let v = if invalid {
                -(OpError::InvalidValue.code() as isize)
            } else {
                0
            };
            self.complete(op.pair, op.gen, op.bytes_p, v);
            return;
        }
        let mem = match op.proto.mem {
            hipfile_engine::Memory::Host(_) => {
                hipfile_engine::Memory::Host((op.buf_base + boff as u64) as usize)
            }
            hipfile_engine::Memory::Device { device, .. } => hipfile_engine::Memory::Device {
                ptr: op.buf_base + boff as u64,
                device,
            },
        };
        let req = IoRequest {
            mem,
            size,
            file_offset: foff as u64,
            ..op.proto
        };
        let (pair, gen, bytes_p, hold, ticket) = (op.pair, op.gen, op.bytes_p, op.hold, op.ticket);
        let me = self.clone();
        op.engine.submit(
            req,
            Completion::Callback(Box::new(move |r| {
                drop(hold);
                let v = match r {
                    Ok(n) => n as isize,
                    // The stream convention: −1 for an I/O (system) error.
                    Err(Error::Os(_)) => -1,
                    Err(e) => negative_code(&e) as isize,
                };
                me.complete(pair, gen, bytes_p, v);
                drop(ticket);
            })),
        );
    }

    fn complete(&self, pair: usize, gen: u32, bytes_p: usize, v: isize) {
        log_debug!("stream op pair {pair} gen {gen}: done ({v}), releasing its stream");
        // SAFETY: bytes_p is the caller's result storage, alive until the stream passes.
        unsafe { (bytes_p as *mut isize).write_volatile(v) };
        self.words.word(2 * pair + 1).store(gen, Ordering::Release);
        self.words.give_back(pair);
    }
}

fn stream_reg(stream: *mut c_void) -> StreamReg {
    driver()
        .read()
        .streams
        .get(&(stream as usize))
        .copied()
        .unwrap_or(StreamReg {
            flags: 0,
            device: -1,
        })
}

#[allow(clippy::too_many_arguments)]
unsafe fn submit_async(
    dir: Direction,
    fh: *mut c_void,
    buffer_base: *const c_void,
    size_p: *mut usize,
    file_offset_p: *mut i64,
    buffer_offset_p: *mut i64,
    bytes_p: *mut isize,
    stream: *mut c_void,
) -> Result<(), Error> {
    let d = driver();
    if d.use_count() == 0 {
        // Spec §5.1: implicit initialisation, then 5022 and no I/O.
        d.implicit_open()?;
        return Err(inval());
    }
    if buffer_base.is_null()
        || size_p.is_null()
        || file_offset_p.is_null()
        || buffer_offset_p.is_null()
        || bytes_p.is_null()
    {
        return Err(inval());
    }
    // SAFETY: the pointers are non-NULL caller storage (checked above).
    let (size, foff, boff) = unsafe { (*size_p, *file_offset_p, *buffer_offset_p) };
    let reg = stream_reg(stream);
    let (req, buf) = prepare(fh, buffer_base, size, foff, boff, dir)?;
    let engine = d.engine().ok_or_else(inval)?;
    let gpu = engine.gpu().clone();
    if let MemKind::Device { device } = buf.info.kind {
        let sdev = if reg.device >= 0 {
            reg.device
        } else {
            gpu.stream_device(Stream(stream as usize)).unwrap_or(device)
        };
        if sdev != device {
            return Err(inval());
        }
    }
    // SAFETY: bytes_p is non-NULL caller storage.
    unsafe { *bytes_p = 0 };
    if req.size == 0 {
        return Ok(());
    }
    let submitted_size = req.size;
    if !gpu.has_devices() {
        // No GPU runtime, so no streams: the call is synchronous (cuFile's NULL-stream rule).
        let _busy = BufferUse::new(buf.reg.clone());
        let v = match engine.transfer(req) {
            Ok(n) => n as isize,
            Err(Error::Os(_)) => -1,
            Err(e) => negative_code(&e) as isize,
        };
        // SAFETY: as above.
        unsafe { *bytes_p = v };
        return Ok(());
    }
    if let hipfile_engine::Memory::Device { device, .. } = req.mem {
        // The workers' streams on this device must exist before a user's
        // stream is parked on it (Engine::prepare_stream_ops says why).
        engine.prepare_stream_ops(device)?;
    }
    let m = monitor(&gpu)?;
    let Some((pair, gen)) = m.words.take() else {
        log_warn!("too many stream operations in flight ({WORD_PAIRS})");
        return Err(Error::Gpu(hipfile_engine::gpu::GpuError::Driver {
            call: "stream op pool",
            code: 2, // hipErrorOutOfMemory
        }));
    };
    let s = Stream(stream as usize);
    let start = m.words.word(2 * pair).as_ptr();
    let done = m.words.word(2 * pair + 1).as_ptr();
    let pending = Pending {
        pair,
        gen,
        ticket: engine.stream_op(),
        engine,
        proto: req,
        flags: reg.flags,
        submitted_size,
        buf_len: buf.len,
        buf_base: buffer_base as u64,
        size_p: size_p as usize,
        file_offset_p: file_offset_p as usize,
        buffer_offset_p: buffer_offset_p as usize,
        bytes_p: bytes_p as usize,
        fixed: (submitted_size, foff, boff),
        hold: BufferUse::new(buf.reg),
    };
    m.pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(pending);
    m.cv.notify_one();
    // SAFETY: both words are in the pinned, never-freed word page.
    let r = unsafe {
        gpu.stream_write_value32(s, start, gen)
            .and_then(|_| gpu.stream_wait_value32(s, done, gen))
    };
    if let Err(e) = r {
        // Withdraw the op if the stream never got the signal.
        let mut p = m.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = p.iter().position(|x| x.pair == pair && x.gen == gen) {
            p.swap_remove(i);
            m.words.give_back(pair);
        }
        return Err(Error::Gpu(e));
    }
    Ok(())
}

/// Enqueues a read on `stream` (stream-ordered; spec §5.6); the result lands in
/// `*bytes_read_p` when the stream reaches the operation.
///
/// # Safety
///
/// `size_p`, `file_offset_p` and `buffer_offset_p` must be NULL or point to readable
/// values, and `bytes_read_p` NULL or writable, and all four must stay valid until the
/// stream has executed the operation: a value whose stream flag is clear is read
/// then, and the result is written then. The buffer must stay valid, and must not
/// be otherwise accessed, until then.
#[no_mangle]
pub unsafe extern "C" fn hipFileReadAsync(
    fh: *mut c_void,
    buffer_base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut i64,
    buffer_offset_p: *mut i64,
    bytes_read_p: *mut isize,
    stream: *mut c_void,
) -> HipFileError {
    passthrough!("hipFileReadAsync", |cu| {
        passthrough::io_async(
            cu,
            false,
            fh,
            buffer_base,
            size_p,
            file_offset_p,
            buffer_offset_p,
            bytes_read_p,
            stream,
        )
    });
    guard("hipFileReadAsync", || {
        // SAFETY: arguments are the caller's, checked inside.
        unsafe {
            submit_async(
                Direction::Read,
                fh,
                buffer_base,
                size_p,
                file_offset_p,
                buffer_offset_p,
                bytes_read_p,
                stream,
            )
        }
    })
}

/// Enqueues a write on `stream` (stream-ordered; spec §5.6); the result lands in
/// `*bytes_written_p` when the stream reaches the operation.
///
/// # Safety
///
/// `size_p`, `file_offset_p` and `buffer_offset_p` must be NULL or point to readable
/// values, and `bytes_written_p` NULL or writable, and all four must stay valid until the
/// stream has executed the operation: a value whose stream flag is clear is read
/// then, and the result is written then. The buffer must stay valid, and must not
/// be otherwise accessed, until then.
#[no_mangle]
pub unsafe extern "C" fn hipFileWriteAsync(
    fh: *mut c_void,
    buffer_base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut i64,
    buffer_offset_p: *mut i64,
    bytes_written_p: *mut isize,
    stream: *mut c_void,
) -> HipFileError {
    passthrough!("hipFileWriteAsync", |cu| {
        passthrough::io_async(
            cu,
            true,
            fh,
            buffer_base,
            size_p,
            file_offset_p,
            buffer_offset_p,
            bytes_written_p,
            stream,
        )
    });
    guard("hipFileWriteAsync", || {
        // SAFETY: arguments are the caller's, checked inside.
        unsafe {
            submit_async(
                Direction::Write,
                fh,
                buffer_base,
                size_p,
                file_offset_p,
                buffer_offset_p,
                bytes_written_p,
                stream,
            )
        }
    })
}

#[no_mangle]
pub extern "C" fn hipFileStreamRegister(stream: *mut c_void, flags: c_uint) -> HipFileError {
    passthrough!("hipFileStreamRegister", |cu| {
        passthrough::stream_register(cu, stream, flags)
    });
    guard("hipFileStreamRegister", || {
        if flags & !FLAGS_MASK != 0 {
            return Err(inval());
        }
        let d = driver();
        let gpu = d.gpu();
        let device = if gpu.has_devices() {
            gpu.stream_device(Stream(stream as usize))
                .map_err(Error::Gpu)?
        } else {
            0
        };
        let mut st = d.write();
        if st.streams.contains_key(&(stream as usize)) {
            return Err(inval());
        }
        st.streams
            .insert(stream as usize, StreamReg { flags, device });
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn hipFileStreamDeregister(stream: *mut c_void) -> HipFileError {
    passthrough!("hipFileStreamDeregister", |cu| {
        passthrough::stream_deregister(cu, stream)
    });
    guard("hipFileStreamDeregister", || {
        match driver().write().streams.remove(&(stream as usize)) {
            Some(_) => Ok(()),
            None => Err(inval()),
        }
    })
}
