//! `libcufile.so.0` from hipfile-rs: the cuFile C API of NVIDIA's `cufile.h`
//! 1.15, with cuFile's layouts, enums and codes, served by the hipfile-rs
//! engine. A program built for cuFile (KvikIO with `KVIKIO_COMPAT_MODE=OFF`,
//! PyTorch's `torch.cuda.gds`, NVIDIA's samples) runs on it unmodified by
//! putting this library's directory first on `LD_LIBRARY_PATH`; it needs no
//! nvidia-fs, no udev and no kernel module. `docs/cufile.md` is the user's
//! guide.
//!
//! Structure: each `cuFile*` function is a thin layer over the hipFile entry
//! point of the same meaning in `hipfile-ffi` (called as Rust functions; this
//! library contains their code, and `libcufile.map` keeps their names out of
//! its exports), which shares the engine, the error map and the panic
//! boundary (`hipfile::boundary`, inside which every entry point here runs).
//! The layer adds what cuFile has and hipFile lacks (version, parameter
//! ranges, POSIX pool slabs, statistics, BAR size) and applies cuFile's
//! semantics where the two APIs differ:
//!
//! - `cuFileReadAsync`/`WriteAsync` on the NULL stream are synchronous, after
//!   the work already queued on that stream;
//! - a stream operation's bad file offset, buffer offset or size is accepted
//!   and reported in `*bytes_p` (−5022, −5030, −5016), not as a return code;
//! - stream (de)registration synchronises the stream, and deregistering a
//!   stream that was never registered succeeds;
//! - `cuFileBatchIOSetUp` before the driver is open fails with 5030, and
//!   `cuFileBatchIOCancel(NULL)` succeeds;
//! - driver properties use cuFile's layout (`unsigned` sizes; values above
//!   `UINT_MAX` give 5002) and report no nvidia-fs (version 0.0);
//! - parameters are range-checked against `cuFileGetParameterMinMaxValue`.
//!
//! The engine always serves this library: unlike libhipfile it never passes
//! calls to NVIDIA's libcufile (where GDS works, use NVIDIA's library itself,
//! or libhipfile). How this library, NVIDIA's and libhipfile coexist in one
//! process is in `hipfile_gds::library`.

#![allow(non_snake_case)]

mod bar;
mod batch;
mod driver;
mod io;
mod params;
pub mod stats;
pub mod types;

use hipfile::types::HipFileError;
use hipfile_engine::log_warn;
use std::sync::Once;
use types::CUfileError;

pub use batch::*;
pub use driver::*;
pub use io::*;
pub use params::*;

/// Exported under `hipfile_gds::library::FRONT_MARKER`: a loader that finds
/// this symbol knows the library is hipfile-rs's front, not NVIDIA's libcufile.
#[no_mangle]
pub static hipfile_cufile_front: [u8; 16] = *b"hipfile-rs 0.2\0\0";

/// The cufile.h version implemented: `cuFileGetVersion` reports 1000 · major
/// + 10 · minor of it.
pub const CUFILE_VERSION: i32 = 1150;

/// The statistics of this process (`stats.rs`).
pub(crate) static STATS: std::sync::LazyLock<stats::Stats> =
    std::sync::LazyLock::new(stats::Stats::default);

/// First thing in every entry point: the engine serves this library.
fn front() {
    static ONCE: Once = Once::new();
    ONCE.call_once(hipfile::passthrough::engine_only);
}

impl hipfile::Unavailable for CUfileError {
    fn unavailable() -> Self {
        CUfileError::op(hipfile_engine::OpError::InternalError.code())
    }
}

/// The boundary of an entry point returning `CUfileError_t`.
pub(crate) fn guard(name: &str, f: impl FnOnce() -> Result<(), CUfileError>) -> CUfileError {
    front();
    hipfile::boundary(name, || match f() {
        Ok(()) => CUfileError::SUCCESS,
        Err(e) => e,
    })
}

/// The boundary of any other entry point.
pub(crate) fn boundary<T: hipfile::Unavailable>(name: &str, f: impl FnOnce() -> T) -> T {
    front();
    hipfile::boundary(name, f)
}

/// A hipFile entry point's status as this layer's result.
pub(crate) fn check(e: HipFileError) -> Result<(), CUfileError> {
    if e.err == 0 {
        Ok(())
    } else {
        Err(e.into())
    }
}

/// An engine error as `CUfileError_t`, through the one error map
/// (`hipfile_engine::error::Error::status`).
pub(crate) fn engine_error(name: &str, e: &hipfile_engine::Error) -> CUfileError {
    if let hipfile_engine::Error::Os(_) = e {
        log_warn!("{name}: {e}; reported as CU_FILE_INTERNAL_ERROR (5030)");
    }
    let (op, drv) = e.status();
    CUfileError {
        err: op.code(),
        cu_err: drv,
    }
}

/// `code` as an error, with a log line saying why.
pub(crate) fn refuse(code: hipfile_engine::OpError, why: std::fmt::Arguments<'_>) -> CUfileError {
    log_warn!("{why} ({code:?}, {})", code.code());
    CUfileError::op(code.code())
}

pub(crate) fn use_count() -> i64 {
    hipfile_engine::registry::driver().use_count()
}
