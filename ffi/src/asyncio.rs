//! Stream-ordered I/O (spec §5.6): `hipFileReadAsync`/`WriteAsync` and stream
//! registration: argument checks, submit-time validation and pointer
//! handling. The design (what is enqueued on the stream, and why releasing a
//! parked stream never needs a GPU call) is in `hipfile_engine::streamops`.

use crate::passthrough::{self, passthrough};
use crate::types::HipFileError;
use crate::{guard, inval, prepare};
use hipfile_engine::error::Error;
use hipfile_engine::gpu::{MemKind, Stream};
use hipfile_engine::pipeline::Direction;
use hipfile_engine::registry::{driver, BufferUse, StreamReg};
use hipfile_engine::streamops::{self, CallerPtrs, StreamRequest};
use std::ffi::{c_uint, c_void};

pub use hipfile_engine::streamops::{
    FIXED_BUF_OFFSET, FIXED_FILE_OFFSET, FIXED_FILE_SIZE, FLAGS_MASK, PAGE_ALIGNED_INPUTS,
};

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
    let sreq = StreamRequest {
        stream: Stream(stream as usize),
        file: req.file,
        dir,
        buf: buf.mem,
        buf_len: buf.len,
        flags: reg.flags,
        size: req.size,
        file_offset: foff,
        buf_offset: boff,
        ptrs: CallerPtrs {
            size_p: size_p as usize,
            file_offset_p: file_offset_p as usize,
            buffer_offset_p: buffer_offset_p as usize,
            bytes_p: bytes_p as usize,
        },
        hold: BufferUse::new(buf.reg),
    };
    streamops::submit(&engine, sreq)
}

/// The body of `hipFileReadAsync` and `hipFileWriteAsync`: libcufile's answer
/// when it serves, else the op submitted here.
///
/// # Safety
///
/// As for those entry points.
#[allow(clippy::too_many_arguments)]
unsafe fn entry_async(
    name: &'static str,
    dir: Direction,
    fh: *mut c_void,
    buffer_base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut i64,
    buffer_offset_p: *mut i64,
    bytes_p: *mut isize,
    stream: *mut c_void,
) -> HipFileError {
    let write = matches!(dir, Direction::Write);
    passthrough!(name, |cu| {
        passthrough::io_async(
            cu,
            write,
            fh,
            buffer_base,
            size_p,
            file_offset_p,
            buffer_offset_p,
            bytes_p,
            stream,
        )
    });
    guard(name, || {
        // SAFETY: arguments are the caller's, checked inside.
        unsafe {
            submit_async(
                dir,
                fh,
                buffer_base,
                size_p,
                file_offset_p,
                buffer_offset_p,
                bytes_p,
                stream,
            )
        }
    })
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
    // SAFETY: the caller's arguments, under this function's contract.
    unsafe {
        entry_async(
            "hipFileReadAsync",
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
    // SAFETY: the caller's arguments, under this function's contract.
    unsafe {
        entry_async(
            "hipFileWriteAsync",
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
        let d = driver();
        if d.write().streams.remove(&(stream as usize)).is_none() {
            return Err(inval());
        }
        if let Some(engine) = d.engine() {
            streamops::forget_stream(&engine, Stream(stream as usize));
        }
        Ok(())
    })
}
