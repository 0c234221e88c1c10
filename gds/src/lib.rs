//! hipfile-gds: libhipfile's route to NVIDIA's GPUDirect Storage.
//!
//! On NVIDIA machines where GDS truly works (nvidia-fs or PCI P2PDMA gives
//! cuFile a direct path from storage to GPU memory), libhipfile passes its
//! calls to NVIDIA's libcufile; everywhere else its own engine serves. This
//! crate holds everything about that libcufile that must not live in the C
//! ABI crate:
//!
//! - [`library`]: finding NVIDIA's library and loading it so that it, the
//!   cuFile front of this workspace (`cufile/`, also named `libcufile.so.0`)
//!   and libhipfile coexist in one process (the module docs list each name
//!   clash and how it is avoided);
//! - [`probe`]: the question "does GDS work here?", asked in a child process
//!   (`hipfile-gds-probe`, this crate's binary), because libcufile's driver
//!   open can hang or crash where it does not;
//! - [`child`]: running that child with a time limit;
//! - [`select`]: the decision (`HIPFILE_BACKEND`), made once per process.
//!
//! It has no `#[no_mangle]` items, so linking it exports nothing.

pub mod abi;
pub mod child;
pub mod library;
pub mod probe;
pub mod select;

pub use library::CuFile;
pub use select::{select, Backend, Choice, Decision};
