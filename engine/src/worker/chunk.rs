//! A chunk's life inside a worker, as types. Each phase is its own type and
//! holds what that phase needs; a transition consumes a phase and returns
//! [`Next`], the phase to enter (with the op or copy to issue) or the end:
//!
//! ```text
//! start ──────> AwaitSlot   device memory; a host range O_DIRECT reads only through a slot
//!          └──> InKernel    host memory: straight into or from the caller's buffer
//! AwaitSlot ── granted ───> InKernel    a read; a host write
//!                      └──> OnGpu       a device write: device → slot first
//! InKernel ── completed ──> InKernel    the rest, a retry, a fallback
//!                      ├──> AwaitSlot   a host range O_DIRECT can read only through a slot
//!                      ├──> OnGpu       a device read's bytes are in the slot: slot → device
//!                      └──> Finished
//! OnGpu ──── copied ──────> Finished    slot → device done
//!                      └──> InKernel    device → slot done: the write
//!       ──── failed ──────> Finished
//! ```
//!
//! - [`AwaitSlot`]: in the worker's slot line, without a slot.
//! - [`InKernel`]: one read or write op in the ring; the op owns the chunk's
//!   bounce slot (if it has one) until its completion hands it back.
//! - [`OnGpu`]: a copy between the chunk's slot and device memory is queued
//!   on the worker's stream; the copy owns the slot until its event completes.
//! - [`Finished`]: the result, and the slot to give back.
//!
//! A completion can only be given to an [`InKernel`], a copy's end only to an
//! [`OnGpu`], a slot only to an [`AwaitSlot`]: an event that does not fit the
//! chunk's phase cannot be expressed. The transitions do no I/O of their own
//! (except the checked copy of a slot into a caller's host buffer at the end
//! of a read); the worker issues what [`Next`] names. What an errno means is
//! [`crate::errno`]'s table.
//!
//! Read into device memory:  [page-cache read | O_DIRECT read] → slot → H2D copy → done
//! Read into host memory:    page-cache read straight into the buffer; what
//!                           the page cache lacks comes by O_DIRECT, straight into the
//!                           buffer when aligned, else through a slot and a checked copy
//! Write from device memory: D2H copy → slot → [O_DIRECT | page-cache] write → done
//! Write from host memory:   straight from the buffer
//!
//! A write uses O_DIRECT only on a descriptor the caller opened so; a durable
//! write through the page cache ends with [`Finished::writeback`] set, on
//! which the worker starts the range's writeback.

use super::slots::Slot;
use crate::bounce::Slab;
use crate::config::ReadMode;
use crate::errno::{verdict, Verdict, Way, MAX_RETRIES};
use crate::error::{Error, OpError, Result};
use crate::gpu::{DevPtr, GpuError, HtodCopy};
use crate::request::{Chunk, Direction, Memory};
use crate::ring::Op;
use crate::stats::{Stage, Stats};
use crate::{log::Level, log_once};
use std::os::fd::RawFd;
use std::time::Instant;

/// What the transitions need from the worker: its slab and settings.
pub(super) struct Ctx<'a> {
    pub read_mode: ReadMode,
    pub slab: &'a Slab,
    /// The slab's slots are registered with the ring (fixed-buffer ops).
    pub fixed: bool,
    pub stats: &'a Stats,
    /// Whether the page cache holds `[off, off + len)` of a descriptor
    /// ([`crate::file::fully_cached`]; tests give their own answer).
    pub cached: fn(RawFd, u64, u64) -> Option<bool>,
}

/// Whether an O_DIRECT transfer of `[addr, addr + len)` of host memory goes
/// through a huge-page slot of the worker's slab: the slab has huge pages
/// and the range lies in scattered small ones ([`crate::host_bounce`]).
fn via_huge_slot(ctx: &Ctx, addr: usize, len: usize) -> bool {
    ctx.slab.huge() && crate::host_bounce::scattered(addr, len)
}

/// How the rest of a chunk may reach storage, learned as it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// Reads ask the page cache first and use O_DIRECT for what it lacks;
    /// writes use O_DIRECT where the caller wants it and it is aligned.
    Either,
    /// The page cache lacked part of the range: read the rest by O_DIRECT.
    Direct,
    /// The kernel refused O_DIRECT (or RWF_NOWAIT) for this file: the page
    /// cache only, from now on.
    PageCache,
}

/// Where the bytes of a chunk's op go to or come from.
#[derive(Debug)]
pub(super) enum Buf {
    /// The caller's host memory, directly.
    Caller,
    /// A bounce slot. For a host chunk it holds the chunk's bytes from chunk
    /// offset `from` on; the bytes before came straight into the caller's
    /// buffer. (32 bits: a chunk is at most 256 MiB, and an `InKernel` that
    /// fits in 128 bytes is moved without a call to memcpy.)
    Slot { slot: Slot, from: u32 },
}

impl Buf {
    fn into_slot(self) -> Option<Slot> {
        match self {
            Buf::Caller => None,
            Buf::Slot { slot, .. } => Some(slot),
        }
    }
}

/// The op a chunk has in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KernelOp {
    /// A page-cache read with RWF_NOWAIT: it fails with EAGAIN rather than
    /// wait for storage.
    Probe,
    /// A page-cache read that may wait for storage.
    Buffered,
    /// An O_DIRECT read of the chunk's rest, widened to the file's alignment
    /// (it starts at the chunk's progress rounded down to the alignment).
    Direct,
    /// A write, with O_DIRECT or through the page cache.
    Write { direct: bool },
}

/// Which way a GPU copy runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CopyDir {
    /// Slot → device memory: the last step of a device read.
    ToDevice,
    /// Device memory → slot: the first step of a device write.
    FromDevice,
}

/// A GPU copy for the worker to queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GpuCopy {
    /// Given to the runtime with the pass's other host-to-device copies.
    Htod(HtodCopy),
    /// Queued at once.
    Dtoh {
        dst: *mut u8,
        src: DevPtr,
        len: usize,
    },
}

/// What a transition leads to.
#[derive(Debug)]
pub(super) enum Next {
    /// Submit `Op` to the ring; its completion goes to [`InKernel::completed`].
    Kernel(InKernel, Op),
    /// Join the slot line; a free slot goes to [`AwaitSlot::granted`].
    Slot(AwaitSlot),
    /// Queue the copy on the worker's stream for the chunk's device; its end
    /// goes to [`OnGpu::copied`] or [`OnGpu::failed`].
    Gpu(OnGpu, GpuCopy),
    /// The chunk is finished.
    Done(Finished),
}

impl Next {
    /// A page-cache read: the kernel copies it inside the next
    /// `io_uring_enter` when the pages are resident.
    pub(super) fn is_cached_read(&self) -> bool {
        matches!(
            self,
            Next::Kernel(
                InKernel {
                    op: KernelOp::Probe | KernelOp::Buffered,
                    ..
                },
                _
            )
        )
    }
}

/// What every phase carries: the chunk and its progress.
#[derive(Debug)]
pub(super) struct ChunkIo {
    pub chunk: Chunk,
    /// Bytes of the chunk finished, contiguous from its start.
    done: usize,
    route: Route,
    /// Transient failures of the current step in a row.
    retries: u32,
    /// The stage being timed, and since when.
    stage: Stage,
    since: Instant,
}

/// A chunk waiting in the worker's slot line.
#[derive(Debug)]
pub(super) struct AwaitSlot(ChunkIo);

/// A chunk with one op in the ring.
#[derive(Debug)]
pub(super) struct InKernel {
    io: ChunkIo,
    op: KernelOp,
    buf: Buf,
}

// An `InKernel` is moved into the worker's table and out again for every op:
// within 128 bytes the compiler moves it with a few vector stores, past that
// with a call to memcpy (two or three per read, about 60 instructions in all).
const _: () = assert!(std::mem::size_of::<InKernel>() <= 128);

/// A chunk whose copy between its slot and device memory is on the GPU.
#[derive(Debug)]
pub(super) struct OnGpu {
    io: ChunkIo,
    slot: Slot,
    pub dir: CopyDir,
    pub device: i32,
}

/// A finished chunk: its result, and the slot it held.
#[derive(Debug)]
pub(super) struct Finished {
    pub io: ChunkIo,
    pub slot: Option<Slot>,
    pub result: Result<usize>,
    /// A durable write that went through the page cache: start writing the
    /// chunk's range back now ([`crate::file::start_writeback`]), so the
    /// request's closing fdatasync finds it on its way.
    pub writeback: bool,
}

impl ChunkIo {
    /// A chunk the worker has just taken from the queue.
    pub(super) fn start(chunk: Chunk, ctx: &Ctx) -> Next {
        let since = chunk.queued_at;
        let mut io = ChunkIo {
            chunk,
            done: 0,
            route: Route::Either,
            retries: 0,
            stage: Stage::Queue,
            since,
        };
        if io.chunk.mem.is_device() {
            io.enter(Stage::Slot, ctx);
            Next::Slot(AwaitSlot(io))
        } else {
            io.enter(Stage::Storage, ctx);
            io.next_op(Buf::Caller, ctx)
        }
    }

    /// The stage being timed, and since when (the worker closes it at the end).
    pub(super) fn stage(&self) -> (Stage, Instant) {
        (self.stage, self.since)
    }

    /// Bytes of the chunk finished, contiguous from its start (for a write
    /// that failed: what it leaves written).
    pub(super) fn done(&self) -> usize {
        self.done
    }

    /// Close the stage being timed and open `next`.
    fn enter(&mut self, next: Stage, ctx: &Ctx) {
        if self.stage != next {
            let now = Instant::now();
            ctx.stats.stage(self.stage, now - self.since);
            self.stage = next;
            self.since = now;
        }
    }

    fn finish(self, slot: Option<Slot>, result: Result<usize>) -> Next {
        Next::Done(Finished {
            io: self,
            slot,
            result,
            writeback: false,
        })
    }

    /// Fail with an internal error: a state the code cannot be in. Logged,
    /// and the chunk fails (it is never dropped: its request would wait forever).
    fn internal(self, slot: Option<Slot>, what: &str) -> Next {
        crate::log_error!("internal error: {what}");
        self.finish(slot, Err(OpError::InternalError.into()))
    }

    /// Where the byte at chunk offset `at` lies in `slot`. A slot holds the
    /// chunk from the start of the 4 KiB unit the chunk starts in.
    fn slot_addr(&self, slot: &Slot, at: usize, ctx: &Ctx) -> *mut u8 {
        let pos = self.chunk.file_offset + at as u64;
        let off = (pos - slot_base(self.chunk.file_offset)) as usize;
        // SAFETY: off < slot bytes by the slot sizing rule (Config::slot_bytes:
        // a chunk plus room to widen both ends to a 4 KiB boundary).
        unsafe { ctx.slab.slot(slot.index()).add(off) }
    }

    /// Where the byte at chunk offset `at` lies in `buf` (None: device memory
    /// without a slot, which no op can address).
    fn addr(&self, buf: &Buf, at: usize, ctx: &Ctx) -> Option<*mut u8> {
        match (buf, self.chunk.mem) {
            (Buf::Slot { slot, .. }, _) => Some(self.slot_addr(slot, at, ctx)),
            (Buf::Caller, Memory::Host(p)) => Some((p + at) as *mut u8),
            (Buf::Caller, Memory::Device { .. }) => None,
        }
    }

    fn fixed(buf: &Buf, ctx: &Ctx) -> Option<u16> {
        match buf {
            Buf::Slot { slot, .. } if ctx.fixed => Some(slot.index() as u16),
            _ => None,
        }
    }

    /// The O_DIRECT descriptor and alignment this chunk may use now.
    fn direct(&self, ctx: &Ctx) -> Option<(RawFd, u64)> {
        let reads_buffered =
            ctx.read_mode == ReadMode::Buffered && self.chunk.dir == Direction::Read;
        if self.route == Route::PageCache || reads_buffered {
            return None;
        }
        self.chunk.file.direct()
    }

    fn next_op(self, buf: Buf, ctx: &Ctx) -> Next {
        match self.chunk.dir {
            Direction::Read => self.next_read(buf, ctx),
            Direction::Write => self.next_write(buf, ctx),
        }
    }

    /// The read of the chunk's rest.
    fn next_read(mut self, buf: Buf, ctx: &Ctx) -> Next {
        let file = &self.chunk.file;
        let (buffered_fd, client_direct) = (file.buffered_fd, file.client_direct);
        let cur = self.chunk.file_offset + self.done as u64;
        let end = self.chunk.file_offset + self.chunk.len as u64;
        let direct = self.direct(ctx);
        // A descriptor opened with O_DIRECT says "bypass the page cache": no probe.
        let mut probe = direct.is_some()
            && ctx.read_mode == ReadMode::Auto
            && !client_direct
            && self.route != Route::Direct;
        // Ask the page cache first when the kernel can say (no I/O).
        if probe && (ctx.cached)(buffered_fd, cur, end - cur) == Some(false) {
            probe = false;
            Stats::add(&ctx.stats.cache_misses, 1);
        }
        match direct {
            Some((dfd, align)) if !probe => {
                let file = &self.chunk.file;
                let start = align_down(cur, align);
                let stop = align_up(end, align);
                let host_aligned = match self.chunk.mem {
                    Memory::Host(p) => {
                        start == cur
                            && stop == end
                            && (p + self.done) as u64 % file.dio_mem_align.max(1) as u64 == 0
                    }
                    Memory::Device { .. } => false,
                };
                // An aligned host range of 4 KiB pages reaches the disk as
                // about one segment per page, a huge-page slot as one per
                // 2 MiB: past a few pages the disk spends more on the
                // segments than the copy out costs (crate::host_bounce).
                let scattered = host_aligned
                    && match self.chunk.mem {
                        Memory::Host(p) => {
                            via_huge_slot(ctx, p + self.done, (stop - start) as usize)
                        }
                        Memory::Device { .. } => false,
                    };
                if matches!(buf, Buf::Caller) && (!host_aligned || scattered) {
                    // Unaligned (or scattered) host range: read through a bounce slot.
                    self.enter(Stage::Slot, ctx);
                    return Next::Slot(AwaitSlot(self));
                }
                let Some(at) = self.addr(&buf, self.done, ctx) else {
                    return self.internal(buf.into_slot(), "a device chunk without a slot");
                };
                // The op starts `cur - start` bytes before the chunk's rest: in
                // a slot that is room the slot keeps (start >= slot_base of the
                // chunk, both aligned down); a caller's range is aligned (start == cur).
                let at = at.wrapping_sub((cur - start) as usize);
                let op = Op::Read {
                    fd: dfd,
                    buf: at,
                    len: (stop - start) as u32,
                    offset: start,
                    fixed: Self::fixed(&buf, ctx),
                    nowait: false,
                };
                let op_kind = KernelOp::Direct;
                Next::Kernel(InKernel::new(self, op_kind, buf), op)
            }
            _ => {
                let Some(at) = self.addr(&buf, self.done, ctx) else {
                    return self.internal(buf.into_slot(), "a device chunk without a slot");
                };
                let op = Op::Read {
                    fd: buffered_fd,
                    buf: at,
                    len: (end - cur) as u32,
                    offset: cur,
                    fixed: Self::fixed(&buf, ctx),
                    nowait: probe,
                };
                let op_kind = if probe {
                    KernelOp::Probe
                } else {
                    KernelOp::Buffered
                };
                Next::Kernel(InKernel::new(self, op_kind, buf), op)
            }
        }
    }

    /// The write of the chunk's rest: O_DIRECT only when the caller opened
    /// the file so and the range is aligned. A direct write beside
    /// page-cache writes to the same pages (ours, the application's, another
    /// process's) fails the kernel's invalidation of those pages, which
    /// records EIO for every later fsync; and on a buffered descriptor the
    /// lazy O_DIRECT one is not even opened.
    fn next_write(mut self, buf: Buf, ctx: &Ctx) -> Next {
        let cur = self.chunk.file_offset + self.done as u64;
        let rem = (self.chunk.len - self.done) as u64;
        let Some(src) = self.addr(&buf, self.done, ctx) else {
            return self.internal(buf.into_slot(), "a device chunk without a slot");
        };
        let file = &self.chunk.file;
        let direct = if file.client_direct {
            self.direct(ctx)
        } else {
            None
        };
        let fd = match direct {
            Some((dfd, align)) if file.dio_fits(align, cur, rem, Some(src as u64)) => dfd,
            _ => file.buffered_fd,
        };
        // An O_DIRECT write from 4 KiB pages reaches the disk as about one
        // segment per page, from a huge-page slot as one: on the 2-core VM
        // raw 1 MiB writes at depth 16 ran 1.78–2.04 GB/s from small pages
        // and 2.91–3.02 from a huge page. The copy into the slot runs while
        // the worker's other writes are at the disk (crate::host_bounce).
        if fd != file.buffered_fd
            && matches!(buf, Buf::Caller)
            && via_huge_slot(ctx, src as usize, rem as usize)
        {
            self.enter(Stage::Slot, ctx);
            return Next::Slot(AwaitSlot(self));
        }
        let op = Op::Write {
            fd,
            buf: src,
            len: rem as u32,
            offset: cur,
            fixed: Self::fixed(&buf, ctx),
        };
        let direct = fd != file.buffered_fd;
        Next::Kernel(InKernel::new(self, KernelOp::Write { direct }, buf), op)
    }

    /// A transient failure: the same step again, or the end after
    /// [`MAX_RETRIES`] in a row.
    fn retry(mut self, errno: i32, buf: Buf, ctx: &Ctx) -> Next {
        Stats::add(&ctx.stats.retries, 1);
        self.retries += 1;
        if self.retries > MAX_RETRIES {
            self.finish(buf.into_slot(), Err(Error::Os(errno)))
        } else {
            self.next_op(buf, ctx)
        }
    }

    /// All bytes of a read chunk (or all there are, at EOF) are in place.
    fn read_complete(mut self, buf: Buf, ctx: &Ctx) -> Next {
        let done = self.done;
        let (slot, from) = match buf {
            Buf::Caller => return self.finish(None, Ok(done)),
            Buf::Slot { slot, from } => (slot, from as usize),
        };
        match self.chunk.mem {
            Memory::Device { ptr, device } if done > 0 => {
                let src = self.slot_addr(&slot, 0, ctx).cast_const();
                self.enter(Stage::Gpu, ctx);
                let copy = GpuCopy::Htod(HtodCopy {
                    dst: ptr,
                    src,
                    len: done,
                });
                let dir = CopyDir::ToDevice;
                Next::Gpu(OnGpu::new(self, slot, dir, device), copy)
            }
            Memory::Host(p) if done > from => {
                let src = self.slot_addr(&slot, from, ctx);
                let r =
                    crate::host_bounce::copy_to_caller(src, p + from, done - from).map(|()| done);
                Stats::add(&ctx.stats.host_bounce_bytes, (done - from) as u64);
                self.finish(Some(slot), r)
            }
            Memory::Device { .. } | Memory::Host(_) => self.finish(Some(slot), Ok(done)),
        }
    }
}

impl AwaitSlot {
    /// Bytes the chunk's slot must hold (before widening to DIO alignment).
    pub(super) fn len(&self) -> usize {
        self.0.chunk.len
    }

    /// The slot line gave this chunk `slot`.
    pub(super) fn granted(self, slot: Slot, ctx: &Ctx) -> Next {
        let mut io = self.0;
        Stats::add(&ctx.stats.bounced_chunks, 1);
        io.enter(Stage::Storage, ctx);
        match (io.chunk.dir, io.chunk.mem) {
            (Direction::Write, Memory::Device { ptr, device }) => {
                // The bytes come from the device first.
                let dst = io.slot_addr(&slot, 0, ctx);
                let len = io.chunk.len;
                io.enter(Stage::Gpu, ctx);
                let copy = GpuCopy::Dtoh { dst, src: ptr, len };
                Next::Gpu(OnGpu::new(io, slot, CopyDir::FromDevice, device), copy)
            }
            (Direction::Write, Memory::Host(p)) => {
                // A scattered O_DIRECT write (`next_write`): the rest of the
                // chunk into the slot first, checked (a bad source gives
                // EFAULT, nothing of the chunk written).
                let from = io.done;
                let dst = io.slot_addr(&slot, from, ctx);
                let len = io.chunk.len - from;
                match crate::host_bounce::copy_from_caller(p + from, dst, len) {
                    Ok(()) => {
                        Stats::add(&ctx.stats.host_bounce_bytes, len as u64);
                        io.next_op(
                            Buf::Slot {
                                slot,
                                from: from as u32,
                            },
                            ctx,
                        )
                    }
                    Err(e) => io.finish(Some(slot), Err(e)),
                }
            }
            (Direction::Read, _) => {
                let from = io.done as u32;
                io.next_op(Buf::Slot { slot, from }, ctx)
            }
        }
    }
}

impl InKernel {
    fn new(io: ChunkIo, op: KernelOp, buf: Buf) -> InKernel {
        InKernel { io, op, buf }
    }

    /// The op could not be submitted (`errno`): the chunk fails.
    pub(super) fn refused(self, errno: i32) -> Finished {
        Finished {
            io: self.io,
            slot: self.buf.into_slot(),
            result: Err(Error::Os(errno)),
            writeback: false,
        }
    }

    /// The op's completion: `res` bytes, or −errno.
    pub(super) fn completed(self, res: i32, ctx: &Ctx) -> Next {
        let InKernel { io, op, buf } = self;
        match op {
            KernelOp::Probe => io.on_page_cache_read(Way::CacheProbe, res, buf, ctx),
            KernelOp::Buffered => io.on_page_cache_read(Way::BufferedRead, res, buf, ctx),
            KernelOp::Direct => io.on_direct_read(res, buf, ctx),
            KernelOp::Write { direct } => io.on_write(direct, res, buf, ctx),
        }
    }
}

impl ChunkIo {
    fn on_page_cache_read(mut self, way: Way, res: i32, buf: Buf, ctx: &Ctx) -> Next {
        match verdict(way, res as isize, self.chunk.len - self.done) {
            Verdict::Miss => {
                // Not (all) in the page cache: what is missing comes by O_DIRECT.
                Stats::add(&ctx.stats.cache_misses, 1);
                self.route = Route::Direct;
                self.retries = 0;
                self.next_read(buf, ctx)
            }
            Verdict::FallBack => {
                // The filesystem cannot do RWF_NOWAIT (tmpfs, some FUSE): plain reads.
                log_once!(
                    Level::Info,
                    "RWF_NOWAIT refused ({}); reading through the page cache",
                    -res
                );
                self.route = Route::PageCache;
                self.next_read(buf, ctx)
            }
            Verdict::Retry(errno) => self.retry(errno, buf, ctx),
            Verdict::Fail(errno) => self.finish(buf.into_slot(), Err(Error::Os(errno))),
            Verdict::Eof => self.read_complete(buf, ctx),
            Verdict::Complete(n) | Verdict::Short(n) => {
                let counter = if way == Way::CacheProbe {
                    &ctx.stats.cache_hit_bytes
                } else {
                    &ctx.stats.buffered_read_bytes
                };
                Stats::add(counter, n as u64);
                self.done += n;
                self.retries = 0;
                if self.done >= self.chunk.len {
                    self.read_complete(buf, ctx)
                } else {
                    // Short: partly cached (probe again from where the cache
                    // stopped), or EOF, which the next read reports as 0.
                    self.next_read(buf, ctx)
                }
            }
        }
    }

    fn on_direct_read(mut self, res: i32, buf: Buf, ctx: &Ctx) -> Next {
        let Some((_, align)) = self.chunk.file.direct() else {
            return self.internal(
                buf.into_slot(),
                "an O_DIRECT read on a file without O_DIRECT",
            );
        };
        let first = self.chunk.file_offset;
        // Where the op started (`next_read`): progress has not moved since.
        let start = align_down(first + self.done as u64, align);
        let end = first + self.chunk.len as u64;
        let asked = (align_up(end, align) - start) as usize;
        match verdict(Way::DirectRead, res as isize, asked) {
            Verdict::Retry(errno) => self.retry(errno, buf, ctx),
            Verdict::FallBack => {
                log_once!(
                    Level::Warn,
                    "an O_DIRECT read was refused with EINVAL although it met the announced \
                     alignment; falling back to the page cache for such reads"
                );
                self.route = Route::PageCache;
                self.next_read(buf, ctx)
            }
            Verdict::Fail(errno) => self.finish(buf.into_slot(), Err(Error::Os(errno))),
            Verdict::Miss => {
                self.internal(buf.into_slot(), "a page-cache miss on an O_DIRECT read")
            }
            Verdict::Eof => self.read_complete(buf, ctx),
            Verdict::Complete(n) | Verdict::Short(n) => {
                Stats::add(&ctx.stats.direct_read_bytes, n as u64);
                let valid_end = start + n as u64;
                let cur = first + self.done as u64;
                if valid_end > cur {
                    self.done = (valid_end.min(end) - first) as usize;
                }
                if self.done >= self.chunk.len || n as u64 % align != 0 {
                    // Complete, or EOF inside the last block.
                    self.read_complete(buf, ctx)
                } else {
                    // Short but block-aligned: read the rest. Counted as a
                    // retry, so a read that keeps ending before `cur` stops.
                    self.retries += 1;
                    if self.retries > MAX_RETRIES {
                        self.finish(buf.into_slot(), Err(Error::Os(libc::EIO)))
                    } else {
                        self.next_read(buf, ctx)
                    }
                }
            }
        }
    }

    fn on_write(mut self, direct: bool, res: i32, buf: Buf, ctx: &Ctx) -> Next {
        let way = if direct {
            Way::DirectWrite
        } else {
            Way::BufferedWrite
        };
        match verdict(way, res as isize, self.chunk.len - self.done) {
            Verdict::Retry(errno) => self.retry(errno, buf, ctx),
            Verdict::FallBack => {
                log_once!(
                    Level::Warn,
                    "an O_DIRECT write was refused with EINVAL; using the page cache for such writes"
                );
                self.route = Route::PageCache;
                self.next_write(buf, ctx)
            }
            Verdict::Fail(errno) => self.finish(buf.into_slot(), Err(Error::Os(errno))),
            Verdict::Eof | Verdict::Miss => {
                self.internal(buf.into_slot(), "a read verdict for a write")
            }
            Verdict::Complete(n) | Verdict::Short(n) => {
                let counter = if direct {
                    &ctx.stats.direct_write_bytes
                } else {
                    &ctx.stats.buffered_write_bytes
                };
                Stats::add(counter, n as u64);
                self.done += n;
                if self.done >= self.chunk.len {
                    let len = self.chunk.len;
                    let writeback = self.chunk.durable && !direct;
                    Next::Done(Finished {
                        io: self,
                        slot: buf.into_slot(),
                        result: Ok(len),
                        writeback,
                    })
                } else {
                    self.retries = 0;
                    self.next_write(buf, ctx)
                }
            }
        }
    }
}

impl OnGpu {
    fn new(io: ChunkIo, slot: Slot, dir: CopyDir, device: i32) -> OnGpu {
        OnGpu {
            io,
            slot,
            dir,
            device,
        }
    }

    /// The copy has finished (an event recorded after it completed).
    pub(super) fn copied(self, ctx: &Ctx) -> Next {
        let OnGpu {
            mut io, slot, dir, ..
        } = self;
        match dir {
            CopyDir::ToDevice => {
                let done = io.done;
                io.finish(Some(slot), Ok(done))
            }
            CopyDir::FromDevice => {
                io.enter(Stage::Storage, ctx);
                io.next_write(Buf::Slot { slot, from: 0 }, ctx)
            }
        }
    }

    /// The copy failed (the worker has synchronised the stream, so the GPU
    /// no longer touches the slot).
    pub(super) fn failed(self, e: GpuError) -> Finished {
        Finished {
            io: self.io,
            slot: Some(self.slot),
            result: Err(Error::Gpu(e)),
            writeback: false,
        }
    }

    /// The slot the copy uses (events are kept per slot and device).
    pub(super) fn slot_index(&self) -> usize {
        self.slot.index()
    }
}

/// File offset rounded down to the 4 KiB unit that slot layouts start at.
fn slot_base(off: u64) -> u64 {
    off & !(crate::file::MAX_DIO_ALIGN as u64 - 1)
}

fn align_down(x: u64, a: u64) -> u64 {
    x & !(a - 1)
}

fn align_up(x: u64, a: u64) -> u64 {
    (x + a - 1) & !(a - 1)
}

#[cfg(test)]
mod tests {
    //! One transition per test: a phase, an event, and what must follow.
    //! Nothing here submits I/O or queues a GPU copy; the ops and copies the
    //! transitions ask for are only looked at.

    use super::super::slots::Slots;
    use super::*;
    use crate::file::File;
    use crate::gpu::{Gpu, NoGpu};
    use crate::request::{Completion, IoRequest, ReqState};
    use crate::scratch::ScratchFile;
    use std::os::fd::AsRawFd;
    use std::sync::Arc;

    const CHUNK: usize = 256 << 10;
    const DEV: u64 = 0x7000_0000;

    fn resident(_: RawFd, _: u64, _: u64) -> Option<bool> {
        Some(true)
    }

    fn absent(_: RawFd, _: u64, _: u64) -> Option<bool> {
        Some(false)
    }

    struct Bench {
        slab: Slab,
        slots: Slots,
        stats: Stats,
        file: Arc<File>,
        /// The descriptor the file claims as its O_DIRECT one (a duplicate
        /// of the buffered one: the transitions only name it in their ops).
        direct_fd: RawFd,
        _backing: ScratchFile,
    }

    /// A slab of two 64 KiB and two chunk-size slots, and a file with an
    /// O_DIRECT descriptor of 4 KiB alignment, opened by the caller so when
    /// `client_direct`.
    fn bench_opened(name: &str, client_direct: bool) -> Bench {
        let gpu: Arc<dyn Gpu> = Arc::new(NoGpu { why: "test".into() });
        let pad = 2 * crate::file::MAX_DIO_ALIGN;
        let slab = Slab::new(&[(2, (64 << 10) + pad), (2, CHUNK + pad)], &gpu, false).unwrap();
        let backing = ScratchFile::new(&format!("chunk-{name}"), &[]);
        let mut file = File::probe(backing.file.as_raw_fd()).unwrap();
        // SAFETY: dup only names a descriptor of ours; the File owns the copy.
        let direct_fd = unsafe { libc::dup(backing.file.as_raw_fd()) };
        assert!(direct_fd >= 0);
        file.set_direct_for_tests(direct_fd, 4096, client_direct);
        Bench {
            slots: Slots::new(&slab),
            slab,
            stats: Stats::default(),
            file: Arc::new(file),
            direct_fd,
            _backing: backing,
        }
    }

    /// [`bench_opened`] for a file the caller opened without O_DIRECT.
    fn bench(name: &str) -> Bench {
        bench_opened(name, false)
    }

    impl Bench {
        fn ctx(&self, read_mode: ReadMode, cached: fn(RawFd, u64, u64) -> Option<bool>) -> Ctx<'_> {
            Ctx {
                read_mode,
                slab: &self.slab,
                fixed: false,
                stats: &self.stats,
                cached,
            }
        }

        fn chunk(&self, dir: Direction, mem: Memory, file_offset: u64, len: usize) -> Chunk {
            let done = Completion::Callback(Box::new(|_| {}));
            let io = IoRequest::new(self.file.clone(), dir, mem, len, file_offset);
            let req = ReqState::new(&io, [len].into_iter(), done);
            Chunk {
                req: Arc::new(req),
                idx: 0,
                file: self.file.clone(),
                dir,
                mem,
                file_offset,
                len,
                durable: false,
                cold: false,
                queued_at: Instant::now(),
            }
        }

        fn slot(&mut self, len: usize) -> Slot {
            self.slots.take_fitting(len).unwrap()
        }

        /// Where chunk offset 0 of a chunk at `file_offset` lies in `slot`.
        fn in_slot(&self, slot: usize, file_offset: u64) -> *mut u8 {
            // SAFETY: the offset within the 4 KiB unit stays inside the slot.
            unsafe { self.slab.slot(slot).add((file_offset % 4096) as usize) }
        }

        /// End a test with a chunk in the kernel: its slot goes back to the pool.
        fn end(&mut self, k: InKernel) {
            let f = k.refused(libc::EIO);
            self.settle(f).unwrap_err();
        }

        /// End a test with a chunk on the GPU.
        fn end_copy(&mut self, g: OnGpu) {
            let f = g.failed(GpuError::InvalidValue("test"));
            self.settle(f).unwrap_err();
        }

        /// End a test: the slot goes back to the pool.
        fn settle(&mut self, f: Finished) -> Result<usize> {
            if let Some(s) = f.slot {
                self.slots.give_back(s);
            }
            f.result
        }

        /// A device read of `len` bytes at `off`, granted a slot.
        fn device_read(
            &mut self,
            ctx_mode: ReadMode,
            off: u64,
            len: usize,
        ) -> (InKernel, Op, usize) {
            let mem = device(0);
            let chunk = self.chunk(Direction::Read, mem, off, len);
            let slot = self.slot(len);
            let index = slot.index();
            let waiting = wait(ChunkIo::start(chunk, &self.ctx(ctx_mode, resident)));
            let (k, op) = kernel(waiting.granted(slot, &self.ctx(ctx_mode, resident)));
            (k, op, index)
        }
    }

    fn device(device: i32) -> Memory {
        Memory::Device { ptr: DEV, device }
    }

    fn count(c: &std::sync::atomic::AtomicU64) -> u64 {
        c.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn kernel(n: Next) -> (InKernel, Op) {
        match n {
            Next::Kernel(k, op) => (k, op),
            other => panic!("expected an op for the kernel, got {other:?}"),
        }
    }

    fn wait(n: Next) -> AwaitSlot {
        match n {
            Next::Slot(w) => w,
            other => panic!("expected the slot line, got {other:?}"),
        }
    }

    fn gpu(n: Next) -> (OnGpu, GpuCopy) {
        match n {
            Next::Gpu(g, c) => (g, c),
            other => panic!("expected a GPU copy, got {other:?}"),
        }
    }

    fn done(n: Next) -> Finished {
        match n {
            Next::Done(f) => f,
            other => panic!("expected the end, got {other:?}"),
        }
    }

    /// The fields of a read op: (fd, buf, len, offset, nowait).
    fn read(op: Op) -> (RawFd, *mut u8, u32, u64, bool) {
        match op {
            Op::Read {
                fd,
                buf,
                len,
                offset,
                nowait,
                ..
            } => (fd, buf, len, offset, nowait),
            other => panic!("expected a read, got {other:?}"),
        }
    }

    /// The fields of a write op: (fd, buf, len, offset).
    fn write(op: Op) -> (RawFd, *const u8, u32, u64) {
        match op {
            Op::Write {
                fd,
                buf,
                len,
                offset,
                ..
            } => (fd, buf, len, offset),
            other => panic!("expected a write, got {other:?}"),
        }
    }

    #[test]
    fn a_device_chunk_starts_in_the_slot_line() {
        let b = bench("dev-start");
        let mem = device(0);
        let chunk = b.chunk(Direction::Read, mem, 0, CHUNK);
        let w = wait(ChunkIo::start(chunk, &b.ctx(ReadMode::Auto, resident)));
        assert_eq!(w.len(), CHUNK);
    }

    #[test]
    fn a_host_read_of_resident_pages_probes_the_page_cache_into_the_caller_buffer() {
        let b = bench("host-probe");
        let chunk = b.chunk(Direction::Read, Memory::Host(0x10_0000), 8192, CHUNK);
        let (k, op) = kernel(ChunkIo::start(chunk, &b.ctx(ReadMode::Auto, resident)));
        assert_eq!(k.op, KernelOp::Probe);
        let buffered = b.file.buffered_fd;
        assert_eq!(
            read(op),
            (buffered, 0x10_0000 as *mut u8, CHUNK as u32, 8192, true)
        );
        drop(k);
    }

    #[test]
    fn an_aligned_host_read_the_page_cache_lacks_goes_straight_by_o_direct() {
        let b = bench("host-direct");
        let chunk = b.chunk(Direction::Read, Memory::Host(0x10_0000), 8192, CHUNK);
        let (k, op) = kernel(ChunkIo::start(chunk, &b.ctx(ReadMode::Auto, absent)));
        assert_eq!(k.op, KernelOp::Direct);
        assert_eq!(
            read(op),
            (b.direct_fd, 0x10_0000 as *mut u8, CHUNK as u32, 8192, false)
        );
        assert_eq!(count(&b.stats.cache_misses), 1);
    }

    #[test]
    fn an_unaligned_host_read_the_page_cache_lacks_waits_for_a_slot() {
        let b = bench("host-unaligned");
        let chunk = b.chunk(Direction::Read, Memory::Host(0x10_0000), 100, 5000);
        let w = wait(ChunkIo::start(chunk, &b.ctx(ReadMode::Auto, absent)));
        assert_eq!(w.len(), 5000);
    }

    #[test]
    fn a_granted_device_read_reads_into_its_slot() {
        let mut b = bench("dev-granted");
        let (k, op, slot) = b.device_read(ReadMode::Auto, 100, 5000);
        assert_eq!(k.op, KernelOp::Probe);
        let (fd, buf, len, offset, nowait) = read(op);
        assert_eq!(
            (fd, len, offset, nowait),
            (b.file.buffered_fd, 5000, 100, true)
        );
        assert_eq!(
            buf,
            b.in_slot(slot, 100),
            "the chunk's bytes keep their offset in 4 KiB"
        );
        assert_eq!(count(&b.stats.bounced_chunks), 1);
        b.end(k);
    }

    #[test]
    fn a_slot_registered_with_the_ring_is_read_with_its_index() {
        let mut b = bench("dev-fixed");
        let mem = device(0);
        let chunk = b.chunk(Direction::Read, mem, 0, 4096);
        let slot = b.slot(4096);
        let index = slot.index();
        let mut ctx = b.ctx(ReadMode::Auto, resident);
        ctx.fixed = true;
        let w = wait(ChunkIo::start(chunk, &ctx));
        let (k, op) = kernel(w.granted(slot, &ctx));
        assert!(matches!(op, Op::Read { fixed: Some(i), .. } if i as usize == index));
        b.end(k);
    }

    #[test]
    fn a_page_cache_miss_reads_the_rest_by_o_direct() {
        let mut b = bench("miss");
        let (k, _, slot) = b.device_read(ReadMode::Auto, 100, 5000);
        let ctx = b.ctx(ReadMode::Auto, resident);
        let (k, op) = kernel(k.completed(-libc::EAGAIN, &ctx));
        assert_eq!(k.op, KernelOp::Direct);
        let (fd, buf, len, offset, _) = read(op);
        assert_eq!(
            (fd, len, offset),
            (b.direct_fd, 8192, 0),
            "widened to 4 KiB blocks"
        );
        assert_eq!(buf, b.slab.slot(slot), "from the slot's start");
        assert_eq!(count(&b.stats.cache_misses), 1);
        b.end(k);
    }

    #[test]
    fn a_file_system_without_rwf_nowait_is_read_through_the_page_cache() {
        let mut b = bench("no-nowait");
        let (k, _, _) = b.device_read(ReadMode::Auto, 0, 8192);
        let ctx = b.ctx(ReadMode::Auto, resident);
        let (k, op) = kernel(k.completed(-libc::EOPNOTSUPP, &ctx));
        assert_eq!(k.op, KernelOp::Buffered);
        assert!(!read(op).4, "no RWF_NOWAIT");
        // From then on, never a probe and never O_DIRECT.
        let (k, op) = kernel(k.completed(4096, &ctx));
        assert_eq!(k.op, KernelOp::Buffered);
        assert_eq!(read(op).3, 4096);
        b.end(k);
    }

    #[test]
    fn a_short_page_cache_read_asks_for_the_rest() {
        let mut b = bench("short-read");
        let (k, _, slot) = b.device_read(ReadMode::Auto, 100, 9000);
        let ctx = b.ctx(ReadMode::Auto, resident);
        let (k, op) = kernel(k.completed(3000, &ctx));
        assert_eq!(k.op, KernelOp::Probe);
        let (_, buf, len, offset, _) = read(op);
        assert_eq!((len, offset), (6000, 3100));
        // SAFETY: inside the slot.
        assert_eq!(buf, unsafe { b.in_slot(slot, 100).add(3000) });
        b.end(k);
    }

    #[test]
    fn a_whole_device_read_goes_to_the_gpu_from_its_slot() {
        let mut b = bench("to-gpu");
        let (k, _, slot) = b.device_read(ReadMode::Auto, 100, 5000);
        let ctx = b.ctx(ReadMode::Auto, resident);
        let (g, copy) = gpu(k.completed(5000, &ctx));
        assert_eq!((g.dir, g.device), (CopyDir::ToDevice, 0));
        let src = b.in_slot(slot, 100).cast_const();
        assert_eq!(
            copy,
            GpuCopy::Htod(HtodCopy {
                dst: DEV,
                src,
                len: 5000
            })
        );
        assert_eq!(g.io.stage, Stage::Gpu);
        b.end_copy(g);
    }

    #[test]
    fn a_device_read_at_the_end_of_the_file_finishes_with_nothing_to_copy() {
        let mut b = bench("eof");
        let (k, _, _) = b.device_read(ReadMode::Auto, 0, 4096);
        let f = done(k.completed(0, &b.ctx(ReadMode::Auto, resident)));
        assert!(f.slot.is_some(), "the slot comes back");
        assert_eq!(b.settle(f), Ok(0));
    }

    #[test]
    fn an_o_direct_read_that_ends_inside_a_block_is_the_end_of_the_file() {
        let mut b = bench("partial-block");
        let (k, op, _) = b.device_read(ReadMode::Direct, 0, 8192);
        assert_eq!(read(op).0, b.direct_fd);
        let (g, copy) = gpu(k.completed(5000, &b.ctx(ReadMode::Direct, resident)));
        assert!(matches!(copy, GpuCopy::Htod(HtodCopy { len: 5000, .. })));
        b.end_copy(g);
    }

    #[test]
    fn a_short_aligned_o_direct_read_asks_for_the_rest() {
        let mut b = bench("direct-short");
        let (k, _, _) = b.device_read(ReadMode::Direct, 0, 8192);
        let (k, op) = kernel(k.completed(4096, &b.ctx(ReadMode::Direct, resident)));
        assert_eq!(k.op, KernelOp::Direct);
        assert_eq!(read(op).3, 4096);
        b.end(k);
    }

    #[test]
    fn einval_on_o_direct_falls_back_to_the_page_cache() {
        let mut b = bench("einval");
        let (k, _, _) = b.device_read(ReadMode::Direct, 0, 8192);
        let ctx = b.ctx(ReadMode::Direct, resident);
        let (k, op) = kernel(k.completed(-libc::EINVAL, &ctx));
        assert_eq!(k.op, KernelOp::Buffered);
        assert_eq!(read(op).0, b.file.buffered_fd);
        b.end(k);
    }

    #[test]
    fn transient_errors_retry_the_same_step_a_bounded_number_of_times() {
        let mut b = bench("retry");
        let (mut k, _, _) = b.device_read(ReadMode::Auto, 0, 4096);
        for _ in 0..MAX_RETRIES {
            let ctx = b.ctx(ReadMode::Auto, resident);
            let (again, op) = kernel(k.completed(-libc::EINTR, &ctx));
            assert_eq!(read(op).3, 0);
            k = again;
        }
        let f = done(k.completed(-libc::EINTR, &b.ctx(ReadMode::Auto, resident)));
        assert_eq!(b.settle(f), Err(Error::Os(libc::EINTR)));
        let retries = count(&b.stats.retries);
        assert_eq!(retries, MAX_RETRIES as u64 + 1);
    }

    #[test]
    fn a_hard_error_fails_the_chunk_and_gives_back_its_slot() {
        let mut b = bench("eio");
        let (k, _, _) = b.device_read(ReadMode::Auto, 0, 4096);
        let f = done(k.completed(-libc::EIO, &b.ctx(ReadMode::Auto, resident)));
        assert!(f.slot.is_some());
        assert_eq!(b.settle(f), Err(Error::Os(libc::EIO)));
    }

    #[test]
    fn a_host_read_through_a_slot_is_copied_into_the_caller_buffer() {
        let mut b = bench("copy-out");
        let mut caller = vec![0u8; 5000];
        let mem = Memory::Host(caller.as_mut_ptr() as usize);
        let chunk = b.chunk(Direction::Read, mem, 100, 5000);
        let w = wait(ChunkIo::start(chunk, &b.ctx(ReadMode::Auto, absent)));
        let slot = b.slot(5000);
        let index = slot.index();
        let (k, op) = kernel(w.granted(slot, &b.ctx(ReadMode::Auto, absent)));
        let (fd, buf, len, offset, _) = read(op);
        assert_eq!(
            (fd, buf, len, offset),
            (b.direct_fd, b.slab.slot(index), 8192, 0)
        );
        // What the kernel would have read: bytes 0..8192 of the file.
        let pattern: Vec<u8> = (0..8192).map(|i| (i % 251) as u8).collect();
        // SAFETY: the slot holds at least 8192 bytes and nothing else uses it.
        unsafe { std::ptr::copy_nonoverlapping(pattern.as_ptr(), buf, 8192) };
        let f = done(k.completed(8192, &b.ctx(ReadMode::Auto, absent)));
        assert_eq!(b.settle(f), Ok(5000));
        assert!(caller == pattern[100..5100], "the caller got other bytes");
    }

    #[test]
    fn a_device_write_first_copies_the_device_into_its_slot() {
        let mut b = bench("dev-write");
        let mem = device(1);
        let chunk = b.chunk(Direction::Write, mem, 100, 5000);
        let w = wait(ChunkIo::start(chunk, &b.ctx(ReadMode::Auto, resident)));
        let slot = b.slot(5000);
        let index = slot.index();
        let (g, copy) = gpu(w.granted(slot, &b.ctx(ReadMode::Auto, resident)));
        assert_eq!((g.dir, g.device), (CopyDir::FromDevice, 1));
        let dst = b.in_slot(index, 100);
        assert_eq!(
            copy,
            GpuCopy::Dtoh {
                dst,
                src: DEV,
                len: 5000
            }
        );
        b.end_copy(g);
    }

    /// A device write of `len` bytes at `off` whose copy into its slot ended.
    fn copied_write(b: &mut Bench, off: u64, len: usize, durable: bool) -> (Next, usize) {
        let mem = device(0);
        let mut chunk = b.chunk(Direction::Write, mem, off, len);
        chunk.durable = durable;
        let w = wait(ChunkIo::start(chunk, &b.ctx(ReadMode::Auto, resident)));
        let slot = b.slot(len);
        let index = slot.index();
        let (g, _) = gpu(w.granted(slot, &b.ctx(ReadMode::Auto, resident)));
        (g.copied(&b.ctx(ReadMode::Auto, resident)), index)
    }

    #[test]
    fn a_finished_device_to_host_copy_starts_the_write_from_the_slot() {
        let mut b = bench("write-start");
        let (next, slot) = copied_write(&mut b, 100, 5000, false);
        let (k, op) = kernel(next);
        assert_eq!(k.op, KernelOp::Write { direct: false });
        let src = b.in_slot(slot, 100).cast_const();
        assert_eq!(write(op), (b.file.buffered_fd, src, 5000, 100));
        b.end(k);
    }

    #[test]
    fn an_aligned_write_on_an_o_direct_descriptor_goes_by_o_direct() {
        let mut b = bench_opened("write-direct", true);
        let (next, _) = copied_write(&mut b, 8192, 8192, false);
        let (k, op) = kernel(next);
        assert_eq!(k.op, KernelOp::Write { direct: true });
        assert_eq!(write(op).0, b.direct_fd);
        let f = done(k.completed(8192, &b.ctx(ReadMode::Auto, resident)));
        assert!(!f.writeback, "O_DIRECT bytes are not in the page cache");
        assert_eq!(b.settle(f), Ok(8192));
    }

    #[test]
    fn a_durable_write_on_a_buffered_descriptor_stays_in_the_page_cache() {
        let mut b = bench("write-durable");
        let (next, _) = copied_write(&mut b, 8192, 8192, true);
        let (k, op) = kernel(next);
        assert_eq!(k.op, KernelOp::Write { direct: false });
        assert_eq!(write(op).0, b.file.buffered_fd);
        b.end(k);
    }

    #[test]
    fn a_finished_durable_page_cache_write_starts_its_writeback() {
        let mut b = bench("writeback");
        let (next, _) = copied_write(&mut b, 8192, 8192, true);
        let (k, _) = kernel(next);
        let f = done(k.completed(8192, &b.ctx(ReadMode::Auto, resident)));
        assert!(f.writeback);
        assert_eq!(b.settle(f), Ok(8192));
        // A write the caller does not wait on leaves writeback to the kernel.
        let (next, _) = copied_write(&mut b, 8192, 8192, false);
        let (k, _) = kernel(next);
        let f = done(k.completed(8192, &b.ctx(ReadMode::Auto, resident)));
        assert!(!f.writeback);
        assert_eq!(b.settle(f), Ok(8192));
    }

    #[test]
    fn a_failed_write_keeps_what_it_wrote() {
        let mut b = bench("write-failed");
        let (next, _) = copied_write(&mut b, 0, 8192, false);
        let (k, _) = kernel(next);
        let (k, _) = kernel(k.completed(4096, &b.ctx(ReadMode::Auto, resident)));
        let f = done(k.completed(-libc::ENOSPC, &b.ctx(ReadMode::Auto, resident)));
        assert_eq!(f.io.done(), 4096, "the bytes written before the failure");
        assert_eq!(b.settle(f), Err(Error::Os(libc::ENOSPC)));
    }

    #[test]
    fn a_short_write_writes_the_rest() {
        let mut b = bench("write-short");
        let (next, slot) = copied_write(&mut b, 100, 5000, false);
        let (k, _) = kernel(next);
        let (k, op) = kernel(k.completed(2000, &b.ctx(ReadMode::Auto, resident)));
        // SAFETY: inside the slot.
        let src = unsafe { b.in_slot(slot, 100).add(2000) }.cast_const();
        assert_eq!(write(op), (b.file.buffered_fd, src, 3000, 2100));
        let f = done(k.completed(3000, &b.ctx(ReadMode::Auto, resident)));
        assert_eq!(b.settle(f), Ok(5000));
    }

    #[test]
    fn a_write_that_moves_nothing_is_retried() {
        let mut b = bench("write-zero");
        let (next, _) = copied_write(&mut b, 0, 4096, false);
        let (k, _) = kernel(next);
        let (k, op) = kernel(k.completed(0, &b.ctx(ReadMode::Auto, resident)));
        assert_eq!(write(op).2, 4096);
        assert_eq!(count(&b.stats.retries), 1);
        b.end(k);
    }

    #[test]
    fn a_finished_host_to_device_copy_finishes_the_chunk() {
        let mut b = bench("copied");
        let (k, _, _) = b.device_read(ReadMode::Auto, 0, 4096);
        let ctx = b.ctx(ReadMode::Auto, resident);
        let (g, _) = gpu(k.completed(4096, &ctx));
        let f = done(g.copied(&ctx));
        assert!(f.slot.is_some());
        assert_eq!(b.settle(f), Ok(4096));
    }

    #[test]
    fn a_failed_copy_fails_the_chunk_and_gives_back_its_slot() {
        let mut b = bench("copy-failed");
        let (k, _, _) = b.device_read(ReadMode::Auto, 0, 4096);
        let (g, _) = gpu(k.completed(4096, &b.ctx(ReadMode::Auto, resident)));
        let e = GpuError::Driver {
            call: "test",
            code: 700,
        };
        let f = g.failed(e.clone());
        assert!(f.slot.is_some());
        assert_eq!(b.settle(f), Err(Error::Gpu(e)));
    }

    #[test]
    fn an_op_the_ring_refuses_fails_the_chunk_and_gives_back_its_slot() {
        let mut b = bench("refused");
        let (k, _, _) = b.device_read(ReadMode::Auto, 0, 4096);
        let f = k.refused(libc::EAGAIN);
        assert!(f.slot.is_some());
        assert_eq!(b.settle(f), Err(Error::Os(libc::EAGAIN)));
    }

    #[test]
    fn only_page_cache_reads_count_against_the_first_read_alone() {
        let b = bench("cached-count");
        let host = Memory::Host(0x10_0000);
        let probe = ChunkIo::start(
            b.chunk(Direction::Read, host, 0, 4096),
            &b.ctx(ReadMode::Auto, resident),
        );
        let direct = ChunkIo::start(
            b.chunk(Direction::Read, host, 0, 4096),
            &b.ctx(ReadMode::Auto, absent),
        );
        let write = ChunkIo::start(
            b.chunk(Direction::Write, host, 0, 4096),
            &b.ctx(ReadMode::Auto, absent),
        );
        assert!(probe.is_cached_read());
        assert!(!direct.is_cached_read());
        assert!(!write.is_cached_read());
    }
}
