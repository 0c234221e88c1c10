//! The worker-driven stream path, for runtimes without described copies
//! (HIP: no code object for the place kernel has been verified on AMD
//! hardware). The user's stream is parked on a pinned word pair:
//!
//! 1. write_value32(start, gen)   – "the stream has reached this op"
//! 2. wait_value32(done >= gen)   – "later work waits for the transfer"
//!
//! A monitor thread sees `start == gen`, binds the parameters and hands the
//! transfer to the engine's workers, whose completion stores the result and
//! sets `done = gen`. Releasing the stream therefore needs the workers' GPU
//! calls (copies, events): an application call that holds the runtime's
//! lock while it waits for the parked stream can deadlock it. README "Known
//! limitations" says so; CUDA and the test double use the lanes instead.
//!
//! Words are reused with increasing generations, so a word is free again as
//! soon as its op completed: an old wait (done >= g) stays satisfied forever.
//! The word page is never freed (a stream may still be parked on it at exit).

use super::{result_value, Binding, StreamRequest};
use crate::error::{Error, OpError, Result};
use crate::gpu::{Gpu, GpuError, Stream};
use crate::pipeline::{Completion, Engine, IoRequest, Memory, StreamOpTicket};
use crate::registry::BufferUse;
use crate::{log_debug, log_warn};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

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
    fn new(gpu: &Arc<dyn Gpu>) -> Result<Words> {
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
    binding: Binding,
    hold: BufferUse,
    /// Counts the op as outstanding in its engine until it completes.
    ticket: StreamOpTicket,
}

struct Monitor {
    words: Words,
    pending: Mutex<Vec<Pending>>,
    cv: Condvar,
}

static MONITOR: OnceLock<std::result::Result<Arc<Monitor>, Error>> = OnceLock::new();

fn monitor(gpu: &Arc<dyn Gpu>) -> Result<Arc<Monitor>> {
    MONITOR
        .get_or_init(|| {
            let m = Arc::new(Monitor {
                words: Words::new(gpu)?,
                pending: Mutex::new(Vec::new()),
                cv: Condvar::new(),
            });
            let m2 = m.clone();
            std::thread::Builder::new()
                .name("hipfile-stream-legacy".into())
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
        let bytes_p = op.binding.ptrs;
        // SAFETY: the caller keeps parameter storage alive until the op has
        // executed (the stream API's contract).
        let b = match unsafe { op.binding.bind() } {
            Ok(b) => b,
            Err(v) => {
                self.complete(op.pair, op.gen, bytes_p, v);
                return;
            }
        };
        let mem = match op.proto.mem {
            Memory::Host(_) => Memory::Host(b.buf as usize),
            Memory::Device { device, .. } => Memory::Device { ptr: b.buf, device },
        };
        let req = IoRequest {
            mem,
            size: b.size,
            file_offset: b.file_offset,
            ..op.proto
        };
        let (pair, gen, hold, ticket) = (op.pair, op.gen, op.hold, op.ticket);
        let me = self.clone();
        // SAFETY: the stream API's contract keeps the caller's buffer valid
        // until the op has executed, and `hold` keeps its registration busy.
        unsafe {
            op.engine.submit(
                req,
                Completion::Callback(Box::new(move |r| {
                    drop(hold);
                    me.complete(pair, gen, bytes_p, result_value(&r));
                    drop(ticket);
                })),
            )
        };
    }

    fn complete(&self, pair: usize, gen: u32, ptrs: super::CallerPtrs, v: isize) {
        log_debug!("stream op pair {pair} gen {gen}: done ({v}), releasing its stream");
        // SAFETY: bytes_p is the caller's result storage, alive until the stream passes.
        unsafe { ptrs.store_result(v) };
        self.words.word(2 * pair + 1).store(gen, Ordering::Release);
        self.words.give_back(pair);
    }
}

/// Submit `req` on the worker-driven path.
pub(crate) fn submit(engine: &Engine, req: StreamRequest) -> Result<()> {
    let gpu = engine.gpu().clone();
    if let Memory::Device { device, .. } = req.buf {
        // The workers' streams on this device must exist before a user's
        // stream is parked on it (Engine::prepare_stream_ops says why).
        engine.prepare_stream_ops(device)?;
    }
    let m = monitor(&gpu)?;
    let Some((pair, gen)) = m.words.take() else {
        log_warn!("too many stream operations in flight ({WORD_PAIRS})");
        return Err(Error::Gpu(GpuError::Driver {
            call: "stream op pool",
            code: 2, // hipErrorOutOfMemory
        }));
    };
    let s: Stream = req.stream;
    let start = m.words.word(2 * pair).as_ptr();
    let done = m.words.word(2 * pair + 1).as_ptr();
    let binding = Binding::of(&req);
    let proto = IoRequest::new(
        req.file.clone(),
        req.dir,
        req.buf,
        req.size,
        req.file_offset as u64,
    );
    let pending = Pending {
        pair,
        gen,
        ticket: engine.stream_op(),
        engine: engine.clone(),
        proto,
        binding,
        hold: req.hold,
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
