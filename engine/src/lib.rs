//! hipfile-engine: GPU-direct file I/O over io_uring.
//!
//! This crate holds all the logic of hipfile-rs; the `ffi` crate wraps it in
//! the hipFile C ABI. A Rust program embeds it through the safe API of
//! [`api`]: open files with [`Engine::open`], read into slices, owned
//! [`HostBuffer`]s or [`DeviceSlice`]s, wait for [`IoFuture`]s, read many
//! ranges at once with [`api::read_batch`]. [`Engine::read`] and the other
//! raw entry points take addresses and are `unsafe`. `ARCHITECTURE.md` at the
//! repository root walks through the modules in the order data meets them.
//!
//! # Ownership and threading rules
//! - An [`Engine`] owns one worker thread per configured I/O thread. Each worker
//!   owns one io_uring, a slab of bounce buffers (registered with that ring and
//!   pinned with the GPU runtime) and, lazily, one GPU stream per device. Only
//!   the worker touches its ring (`ring.rs`). Where io_uring is refused, the
//!   ring is the POSIX backend instead, with the same interface and results
//!   (`storage`).
//! - A request is split into chunks aligned to the file's DIO alignment
//!   (`request.rs`), which go in order into one queue (`queue.rs`); a worker takes the front chunk
//!   when it can start it and holds no more than its fair share. Chunks
//!   bound for storage (O_DIRECT reads, durable or O_DIRECT writes) go only
//!   to the first `cold_io_threads` workers; page-cache reads to all. Every worker pipelines its chunks, so
//!   the storage read of one chunk overlaps the GPU copy of the one before.
//! - A bounce slot belongs to the kernel from the SQE push to its CQE, then to
//!   the GPU until an event recorded after its copy has completed; only then
//!   is it reused (`worker/chunk.rs` expresses this in types). One event per stream covers all the copies a worker queued
//!   in one pass (a stream runs them in order).
//! - Synchronous host reads up to `inline_max_bytes` (and small host writes
//!   and device transfers) run on the caller's thread, without a worker.
//! - [`File`] and buffer descriptions are reference counted; I/O holds a
//!   reference, so deregistering while I/O is in flight is detectable.
//! - Stream-ordered I/O ([`streamops`]) shares no thread with the workers: the
//!   caller's thread enqueues the whole op on its stream, and the stream
//!   service's threads only read and write files and store to pinned words,
//!   so no GPU call is needed to release a parked stream.
//! - Dropping the engine stops the workers after their in-flight work drains.

pub mod api;
pub mod batch;
pub mod bounce;
pub mod config;
pub mod config_file;
mod errno;
pub mod error;
pub mod fast;
pub mod file;
pub mod fork;
pub mod gpu;
pub mod host_bounce;
mod inline;
pub mod log;
mod pagemap;
pub mod pipeline;
mod queue;
pub mod registry;
mod request;
pub mod ring;
#[cfg(test)]
mod scratch;
pub mod stats;
pub mod storage;
pub mod streamops;
pub mod worker;

pub use api::{DeviceSlice, FileHandle, HostBuffer, IoBuf, IoBufMut, IoFuture, OpenMode, ReadOp};
pub use config::Config;
pub use error::{Error, OpError, Result};
pub use file::File;
pub use gpu::{Gpu, MemKind, PtrInfo};
pub use pipeline::{Completion, Direction, Engine, IoRequest, Memory};

/// Linux's MAX_RW_COUNT with 4 KiB pages: `INT_MAX & ~(4096 - 1)`; one call
/// never moves more (the kernel would clamp it too).
pub const MAX_RW_COUNT: usize = 0x7fff_f000;

/// Version reported by `hipFileGetVersion` (the header's macros).
pub const VERSION: (u32, u32, u32) = (0, 2, 0);
