//! The safe Rust API: what a Rust data loader embeds.
//!
//! An [`Engine`](crate::Engine) opens files ([`Engine::open`](crate::Engine::open),
//! [`Engine::open_fd`](crate::Engine::open_fd)) as [`FileHandle`]s, which read
//! into and write from memory that the type system vouches for:
//!
//! - host memory: `&mut [u8]`, `Vec<u8>`, `Box<[u8]>` and the 4 KiB-aligned
//!   [`HostBuffer`] (aligned reads go O_DIRECT straight into it);
//! - device memory: a [`DeviceSlice`], made with the `unsafe`
//!   [`DeviceSlice::from_raw`] from a pointer the caller allocated with its
//!   GPU runtime, and checked against the runtime's allocation table before
//!   each transfer;
//! - anything else that implements the `unsafe` traits [`IoBuf`] and [`IoBufMut`].
//!
//! Synchronous calls borrow the buffer for the call. Asynchronous calls
//! ([`FileHandle::read_async`], [`read_batch_async`]) take the buffer by value
//! and hand it back through an [`IoFuture`], a std `Future` that needs no
//! runtime and can also be waited for by blocking; dropping the future never
//! frees memory the engine still writes into. [`read_batch`] reads many
//! `(file, offset, destination)` entries at once, as a loader's batch.
//!
//! An engine belongs to the process that started it: in a child after
//! `fork()` its calls fail with `DriverNotInitialized` (5001) and the child
//! starts its own engine (see [`crate::fork`]).
//!
//! The raw entry points ([`Engine::read`](crate::Engine::read),
//! [`Engine::submit`](crate::Engine::submit), ...) take addresses and are `unsafe`.

mod batch;
mod buf;
mod future;
mod handle;

pub use batch::{read_batch, read_batch_async, ReadOp};
pub use buf::{DeviceSlice, HostBuffer, IoBuf, IoBufMut, Region, HOST_BUFFER_ALIGN};
pub use future::IoFuture;
pub use handle::{FileHandle, OpenMode};
