//! Shared by the CUDA experiments in this directory (not an example itself).
// Each example uses only some of these.
#![allow(dead_code)]

use cudarc::driver::sys;

/// Exit with a message when a driver call failed.
pub fn check(what: &str, r: sys::CUresult) {
    if r != sys::CUresult::CUDA_SUCCESS {
        eprintln!("{what} failed: {r:?}");
        std::process::exit(1);
    }
}

/// Load libcuda, initialise it and make device 0's primary context current
/// on this thread; exit when there is no libcuda.
pub fn primary_context() -> sys::CUcontext {
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: plain driver calls with out-pointers to live locals.
    unsafe {
        if !sys::is_culib_present() {
            eprintln!("no libcuda");
            std::process::exit(1);
        }
        check("cuInit", sys::cuInit(0));
        check(
            "cuDevicePrimaryCtxRetain",
            sys::cuDevicePrimaryCtxRetain(&mut ctx, 0),
        );
        check("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx));
    }
    ctx
}

/// `key=value` from a command-line argument; exit when it is not one.
pub fn key_value(a: &str) -> (&str, &str) {
    a.split_once('=').unwrap_or_else(|| {
        eprintln!("argument {a:?} is not key=value");
        std::process::exit(2)
    })
}

/// The value of `key` as a number; exit when it is not one.
pub fn number(key: &str, v: &str) -> usize {
    v.parse::<usize>().unwrap_or_else(|_| {
        eprintln!("{key}={v:?} is not a number");
        std::process::exit(2)
    })
}
