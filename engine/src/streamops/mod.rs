//! Stream-ordered I/O (`hipFileReadAsync` / `hipFileWriteAsync`, spec §5.6).
//!
//! # What a parked stream may depend on
//!
//! A stream op runs when the application's stream reaches it, so the library
//! *parks* the stream (a `cuStreamWaitValue32` on a word of pinned host
//! memory) until the file I/O is done. While a stream is parked, the
//! application may call the GPU runtime. Several CUDA calls take a driver lock
//! and then wait for the device or for that very stream to drain:
//! `cudaFree`, `cudaMalloc` followed by `cudaFree`, `cudaHostAlloc` /
//! `cudaFreeHost`, a pageable `cudaMemcpyAsync` on the parked stream. Most
//! other driver calls made meanwhile, on any thread, block on that lock
//! (`cuEventCreate`, `cuMemcpyHtoDAsync`, `cuLaunchKernel`, …). So if
//! releasing a parked stream needs *any* GPU-runtime call, the application can
//! deadlock the process with an ordinary call: the caller holds the lock and
//! waits for the stream, the stream waits for the library, the library waits
//! for the lock.
//!
//! The rule this module is built on: **releasing a parked stream never needs a
//! GPU-runtime call.** Every GPU call of an op is made at submit time, on the
//! caller's thread, before the call returns; from then on the op's progress
//! needs only file I/O into pinned host memory and stores to 32-bit words
//! that the stream waits on. The threads that do that work
//! (`service.rs`) have no GPU runtime to call: nothing in that module can
//! reach one.
//!
//! # The op on the stream
//!
//! Per user stream there is a lane (`lane.rs`): R stages, each a pinned host
//! slot of S bytes (S = the engine's chunk size, 4 MiB by default; R =
//! `HIPFILE_STREAM_STAGES`, 8 by default), a flag word `ready` and `back` per
//! stage, one copy descriptor per stage (all in pinned, device-mapped host
//! memory), the words `started`, `done` and `passed`, and one device staging
//! buffer of S bytes: a stream runs the lane's GPU work in order, so a second
//! device buffer would never be in use while the first is. Stage sequence
//! numbers q run on per lane; stage q uses slot q mod R. A read of `submitted_size` bytes (an upper bound: a larger
//! size at execution fails the op with −5022, spec §5.6) needs
//! K = ⌈submitted_size / S⌉ stages, all enqueued at submit, holding the lane's
//! lock so that sequence numbers follow stream order:
//!
//! ```text
//! write(started = gen)
//! for each stage k (q = first + k, slot = q mod R):
//!   read:  wait(ready[slot] == q+1) → copy host slot → device staging
//!          → place kernel (reads {dst, src, len} from descriptor[slot] when it
//!            runs: the execution-time buffer offset and size)
//!          → write(back[slot] = q+1)
//!   write: wait(ready[slot] == q+1) → place kernel (gathers from the user's
//!            buffer into the staging) → copy staging → host slot
//!          → write(back[slot] = q+1)
//! wait(done == gen); write(passed = gen)
//! ```
//!
//! The service sees `started == gen`, binds the parameters the stream's flags
//! leave open (execution-time binding: `*size_p` and the offsets are read
//! only now), validates them, then for each stage, as soon as its slot's
//! previous occupant is released (`back` written by the stream, and for a
//! write its `pwrite` done): a read `pread`s into the slot in 1 MiB pieces
//! on several I/O threads, and the last piece to finish writes the
//! descriptor and sets `ready`; a write writes the descriptor and sets
//! `ready`, waits for `back` (the bytes are in the slot), then `pwrite`s.
//! Stages past the execution-time size, or after EOF or an error, get a
//! descriptor of length 0 and are released at once. Finally the result
//! (bytes, −1 for an I/O error, −code otherwise) goes to `*bytes_p`, then
//! `done = gen`. Host-memory buffers need no stages: the service reads and
//! writes the caller's memory directly between `started` and `done`.
//!
//! Waits compare for equality and sequence numbers are 64-bit on the host,
//! so wrapping u32 words stay correct; a slot's `ready` is rewritten only
//! after the stream has passed its previous wait (its `back` was seen).
//!
//! # Invariant: a stream is never left parked
//!
//! Every wait enqueued on a stream is eventually released, whatever happens:
//! a validation failure, EOF, an I/O error, the driver closing (the service
//! outlives the engine until its ops are done), or a GPU call failing midway
//! through a submission. For the last, the submitter publishes the effect of
//! each GPU call (stages enqueued, done-wait enqueued, failure) right after
//! it returns and before it makes another, and the service acts only on what
//! was published: it never waits for the submitting thread, which may itself
//! be blocked on the driver lock. Once `started` is on the stream the op is
//! committed: a later failure is reported through `*bytes_p` (the stream
//! still waits for `done` if that wait could be enqueued), and the lane is
//! retired because its flags may never be written again.
//!
//! # Why this also frees the sync path
//!
//! Stream ops share no threads with synchronous and batch I/O: those run on
//! the engine's workers, which do call the GPU runtime. A worker blocked
//! inside CUDA (behind an application's `cudaFree`) therefore cannot hold up
//! a parked stream, and the parked stream drains without it, which releases
//! the application's call and then the worker.
//!
//! # Runtimes
//!
//! CUDA and the test double implement described copies (the place kernel of
//! `gpu/place.ptx`, loaded once per context on the caller's thread before the
//! first stream there is parked). HIP has no code object for that kernel yet,
//! so it keeps the worker-driven path of `legacy.rs`, where releasing a
//! parked stream does need the workers' GPU calls. Without a GPU runtime the
//! calls are synchronous.

mod io;
pub(crate) mod lane;
pub(crate) mod legacy;
pub(crate) mod service;

use crate::error::{Error, Result};
use crate::file::File;
use crate::gpu::Stream;
use crate::pipeline::{Direction, Engine, IoRequest, Memory};
use crate::registry::BufferUse;
use crate::MAX_RW_COUNT;
use std::sync::Arc;

pub use lane::StreamOps;

/// Stream flags (spec §5.6): the value is read at submit time when set.
pub const FIXED_BUF_OFFSET: u32 = 1;
pub const FIXED_FILE_OFFSET: u32 = 2;
pub const FIXED_FILE_SIZE: u32 = 4;
/// Recorded, unused.
pub const PAGE_ALIGNED_INPUTS: u32 = 8;
pub const FLAGS_MASK: u32 = 0xf;

/// Stages per stream by default (`Config::stream_stages`).
pub const DEFAULT_STAGES: usize = 8;
/// At most this many stages per stream (the flag page holds 64 of each word).
pub const MAX_STAGES: usize = 64;
/// Stage sizes are the chunk size kept within these bounds.
pub const MIN_STAGE_BYTES: usize = 64 << 10;
pub const MAX_STAGE_BYTES: usize = 16 << 20;

/// One stream op as the C API validated it at submit time.
pub struct StreamRequest {
    pub stream: Stream,
    pub file: Arc<File>,
    pub dir: Direction,
    /// The caller's `buffer_base`, classified.
    pub buf: Memory,
    /// Bytes usable from `buffer_base` on.
    pub buf_len: u64,
    /// The stream's registration flags (0 when not registered).
    pub flags: u32,
    /// Submit-time values: the size (after the MAX_RW_COUNT clamp) bounds the
    /// op; the others are used where `flags` fix them.
    pub size: usize,
    pub file_offset: i64,
    pub buf_offset: i64,
    pub ptrs: CallerPtrs,
    /// Keeps a registered buffer busy until the op completes.
    pub hold: BufferUse,
}

/// The caller's parameter and result storage, as addresses. The stream API's
/// contract: they stay valid until the stream has passed the op.
#[derive(Clone, Copy, Debug)]
pub struct CallerPtrs {
    pub size_p: usize,
    pub file_offset_p: usize,
    pub buffer_offset_p: usize,
    pub bytes_p: usize,
}

impl CallerPtrs {
    /// Store the op's result.
    ///
    /// # Safety
    /// `bytes_p` must still be the caller's live result storage.
    pub(crate) unsafe fn store_result(&self, v: isize) {
        // SAFETY: the caller's promise; a volatile store, since a host thread
        // of the application reads it after the stream passes.
        unsafe { (self.bytes_p as *mut isize).write_volatile(v) };
    }
}

/// What execution-time binding needs (everything but the I/O itself).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Binding {
    pub flags: u32,
    pub submitted: usize,
    pub fixed_file_offset: i64,
    pub fixed_buf_offset: i64,
    pub buf_base: u64,
    pub buf_len: u64,
    pub ptrs: CallerPtrs,
}

/// Parameters bound when the stream reached the op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bound {
    pub size: usize,
    pub file_offset: u64,
    /// Address of the first byte of the transfer in the caller's buffer.
    pub buf: u64,
}

impl Binding {
    pub(crate) fn of(req: &StreamRequest) -> Binding {
        Binding {
            flags: req.flags,
            submitted: req.size,
            fixed_file_offset: req.file_offset,
            fixed_buf_offset: req.buf_offset,
            buf_base: match req.buf {
                Memory::Host(p) => p as u64,
                Memory::Device { ptr, .. } => ptr,
            },
            buf_len: req.buf_len,
            ptrs: req.ptrs,
        }
    }

    /// Read the open parameters now (the stream has reached the op) and
    /// validate them. `Err(v)`: the op's result without any I/O: −5022 for
    /// a size above the submitted one or a region outside the buffer, 0 for
    /// size 0.
    ///
    /// # Safety
    /// The caller's parameter storage must be live (the stream API's contract
    /// until the op has executed).
    pub(crate) unsafe fn bind(&self) -> std::result::Result<Bound, isize> {
        let p = &self.ptrs;
        // SAFETY: the caller's promise; reads of plain integers.
        let (size, foff, boff) = unsafe {
            (
                if self.flags & FIXED_FILE_SIZE != 0 {
                    self.submitted
                } else {
                    (p.size_p as *const usize).read_volatile().min(MAX_RW_COUNT)
                },
                if self.flags & FIXED_FILE_OFFSET != 0 {
                    self.fixed_file_offset
                } else {
                    (p.file_offset_p as *const i64).read_volatile()
                },
                if self.flags & FIXED_BUF_OFFSET != 0 {
                    self.fixed_buf_offset
                } else {
                    (p.buffer_offset_p as *const i64).read_volatile()
                },
            )
        };
        let inval = -(crate::error::OpError::InvalidValue.code() as isize);
        let invalid = size > self.submitted
            || foff < 0
            || boff < 0
            || boff as u64 >= self.buf_len
            || size as u64 > self.buf_len - boff as u64
            || (foff as u64)
                .checked_add(size as u64)
                .is_none_or(|e| e > i64::MAX as u64);
        if invalid {
            crate::log_debug!(
                "stream op bound to size {size}, file offset {foff}, buffer offset {boff}: \
                 invalid (submitted {} bytes of a {}-byte buffer); -5022",
                self.submitted,
                self.buf_len
            );
            return Err(inval);
        }
        if size == 0 {
            return Err(0);
        }
        Ok(Bound {
            size,
            file_offset: foff as u64,
            buf: self.buf_base + boff as u64,
        })
    }
}

/// The value `*bytes_p` gets for an op result (the stream API's convention:
/// −1 for an I/O error, −code otherwise).
pub(crate) fn result_value(r: &Result<usize>) -> isize {
    match r {
        Ok(n) => *n as isize,
        Err(Error::Os(_)) => -1,
        Err(e) => crate::batch::negative_code(e) as isize,
    }
}

/// Submit a stream op on `engine`: through its lanes where the runtime has
/// described copies, the worker-driven path where it has not (HIP), and
/// synchronously without a GPU runtime (cuFile's rule for no streams).
pub fn submit(engine: &Engine, req: StreamRequest) -> Result<()> {
    let gpu = engine.gpu().clone();
    if !gpu.has_devices() {
        let io = IoRequest::new(
            req.file.clone(),
            req.dir,
            req.buf.offset(req.buf_offset as usize),
            req.size,
            req.file_offset as u64,
        );
        // SAFETY: the caller's buffer is valid for the call (the C contract),
        // and the call is synchronous here.
        let v = result_value(&unsafe { engine.transfer(io) });
        // SAFETY: the caller's result storage, alive during the call.
        unsafe { req.ptrs.store_result(v) };
        return Ok(());
    }
    if !gpu.described_copies() {
        return legacy::submit(engine, req);
    }
    engine.stream_ops().submit(req)
}

/// `hipFileStreamDeregister`: let go of the stream's lane (freed now if its
/// ops are done, else once they are).
pub fn forget_stream(engine: &Engine, stream: Stream) {
    if engine.gpu().described_copies() {
        engine.stream_ops().forget(stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(flags: u32, size: &usize, foff: &i64, boff: &i64) -> Binding {
        Binding {
            flags,
            submitted: 1000,
            fixed_file_offset: 7,
            fixed_buf_offset: 9,
            buf_base: 0x1000,
            buf_len: 2000,
            ptrs: CallerPtrs {
                size_p: size as *const usize as usize,
                file_offset_p: foff as *const i64 as usize,
                buffer_offset_p: boff as *const i64 as usize,
                bytes_p: 0,
            },
        }
    }

    #[test]
    fn open_parameters_are_read_at_binding_and_fixed_ones_are_not() {
        let (size, foff, boff) = (500usize, 100i64, 200i64);
        // SAFETY: the locals outlive the calls.
        unsafe {
            assert_eq!(
                binding(0, &size, &foff, &boff).bind(),
                Ok(Bound {
                    size: 500,
                    file_offset: 100,
                    buf: 0x1000 + 200
                })
            );
            assert_eq!(
                binding(FLAGS_MASK, &size, &foff, &boff).bind(),
                Ok(Bound {
                    size: 1000,
                    file_offset: 7,
                    buf: 0x1000 + 9
                })
            );
        }
    }

    #[test]
    fn a_grown_size_or_a_region_outside_the_buffer_is_invalid_and_zero_is_empty() {
        let (big, zero, ok) = (1001usize, 0usize, 10usize);
        let (foff, neg) = (0i64, -1i64);
        let (boff, past) = (0i64, 1995i64);
        // SAFETY: the locals outlive the calls.
        unsafe {
            assert_eq!(binding(0, &big, &foff, &boff).bind(), Err(-5022));
            assert_eq!(binding(0, &ok, &neg, &boff).bind(), Err(-5022));
            assert_eq!(binding(0, &ok, &foff, &neg).bind(), Err(-5022));
            assert_eq!(binding(0, &ok, &foff, &past).bind(), Err(-5022));
            assert_eq!(binding(0, &zero, &foff, &boff).bind(), Err(0));
        }
    }
}
