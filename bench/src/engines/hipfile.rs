//! The libhipfile engines: `hipfile-sync` (hipFileRead/Write), `hipfile-async`
//! (hipFileReadAsync/WriteAsync on a stream) and `hipfile-batch` (the batch
//! API). They call the `hipfile` crate's C entry points directly, exactly as a
//! C program would, so what they measure is what an application gets.

use super::{Dir, Done, Engine, EventFifo, Op};
use hipfile::types::{HandleUnion, HipFileDescr, HipFileError, HipFileIoEvents, HipFileIoParams};
use hipfile_engine::gpu::{Gpu, Stream};
use std::ffi::{c_void, CStr};
use std::sync::Arc;

/// `hipFileError_t` → message; success → Ok.
pub fn check(call: &str, e: HipFileError) -> Result<(), String> {
    if e.err == 0 {
        return Ok(());
    }
    let msg = op_error_string(e.err);
    if e.hip_drv_err != 0 {
        Err(format!(
            "{call}: {msg} ({}), GPU runtime error {}",
            e.err, e.hip_drv_err
        ))
    } else {
        Err(format!("{call}: {msg} ({})", e.err))
    }
}

fn op_error_string(code: i32) -> String {
    let p = hipfile::hipFileGetOpErrorString(code);
    if p.is_null() {
        return format!("error {code}");
    }
    // SAFETY: the library returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A `ssize_t` result of the hipFile API (spec §5.2) → bytes or a message:
/// −1 is a system error (in errno for the sync calls; the stream API gives
/// none), −5xxx a hipFileOpError, other negatives a GPU runtime error code.
fn ssize_result(call: &str, r: isize, errno: Option<i32>) -> Result<usize, String> {
    if r >= 0 {
        return Ok(r as usize);
    }
    if r == -1 {
        return Err(match errno {
            Some(e) => format!(
                "{call}: system error: {}",
                std::io::Error::from_raw_os_error(e)
            ),
            None => format!("{call}: I/O error (system error)"),
        });
    }
    let code = (-r) as i32;
    if code >= 5000 {
        Err(format!("{call}: {} ({code})", op_error_string(code)))
    } else {
        Err(format!("{call}: GPU runtime error {code}"))
    }
}

/// A batch entry's `ret` (spec: bytes, −errno for system errors, −hipFileOpError otherwise).
fn batch_result(status: u32, ret: usize) -> Result<usize, String> {
    let r = ret as isize;
    match status {
        hipfile::batch_status::COMPLETE if r >= 0 => Ok(ret),
        hipfile::batch_status::COMPLETE | hipfile::batch_status::FAILED => {
            let code = r.unsigned_abs() as i32;
            if r >= 0 {
                Err("batch entry failed".to_string())
            } else if code >= 5000 {
                Err(format!("batch entry: {} ({code})", op_error_string(code)))
            } else {
                Err(format!(
                    "batch entry: {}",
                    std::io::Error::from_raw_os_error(code)
                ))
            }
        }
        s => Err(format!("batch entry ended with status {s:#x}")),
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// hipFileDriverOpen.
pub fn driver_open() -> Result<(), String> {
    check("hipFileDriverOpen", hipfile::hipFileDriverOpen())
}

/// hipFileDriverClose.
pub fn driver_close() -> Result<(), String> {
    // Which path served the bytes (page-cache probe hits vs O_DIRECT, ...).
    if let Some(e) = hipfile_engine::registry::driver().engine() {
        let s = e.stats();
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        eprintln!(
            "note: engine paths: cache-hit {:.0} MiB, O_DIRECT read {:.0} MiB, buffered read {:.0} MiB, \
             inline {:.0} MiB, O_DIRECT write {:.0} MiB, buffered write {:.0} MiB, probe misses {}, \
             GPU copies {} (completion events {}, batched submissions {}), retries {}",
            mib(s.cache_hit_bytes),
            mib(s.direct_read_bytes),
            mib(s.buffered_read_bytes),
            mib(s.inline_bytes),
            mib(s.direct_write_bytes),
            mib(s.buffered_write_bytes),
            s.cache_misses,
            s.gpu_copies,
            s.gpu_events,
            s.gpu_copy_batches,
            s.retries
        );
        if let Some(st) = s.stage_summary() {
            eprintln!("note: chunk stages: {st}");
        }
    }
    check("hipFileDriverClose", hipfile::hipFileDriverClose())
}

/// hipFileHandleRegister for an OpaqueFD descriptor; the handle as an integer.
pub fn handle_register(fd: i32) -> Result<usize, String> {
    let mut descr = HipFileDescr {
        kind: 1, // hipFileHandleTypeOpaqueFD
        handle: HandleUnion { fd },
        fs_ops: std::ptr::null(),
    };
    let mut fh: *mut c_void = std::ptr::null_mut();
    // SAFETY: both pointers name live locals of the right types.
    check("hipFileHandleRegister", unsafe {
        hipfile::hipFileHandleRegister(&mut fh, &mut descr)
    })?;
    Ok(fh as usize)
}

pub fn handle_deregister(fh: usize) {
    hipfile::hipFileHandleDeregister(fh as *mut c_void);
}

pub fn buf_register(base: u64, len: usize) -> Result<(), String> {
    check(
        "hipFileBufRegister",
        hipfile::hipFileBufRegister(base as *const c_void, len, 0),
    )
}

pub fn buf_deregister(base: u64) -> Result<(), String> {
    check(
        "hipFileBufDeregister",
        hipfile::hipFileBufDeregister(base as *const c_void),
    )
}

/// `hipfile-sync`: one hipFileRead/hipFileWrite of `bs` per I/O; synchronous,
/// so one I/O in flight per job (fio's libcufile engine is FIO_SYNCIO too).
pub struct SyncEngine {
    base: u64,
    slot_bytes: usize,
    pending: Option<(usize, Op)>,
}

impl SyncEngine {
    pub fn new(base: u64, slot_bytes: usize) -> SyncEngine {
        SyncEngine {
            base,
            slot_bytes,
            pending: None,
        }
    }
}

impl Engine for SyncEngine {
    fn submit(&mut self, slot: usize, op: Op) -> Result<(), String> {
        if self.pending.is_some() {
            return Err("hipfile-sync: a second I/O submitted before the first was reaped".into());
        }
        self.pending = Some((slot, op));
        Ok(())
    }

    fn reap(&mut self, _min: usize, out: &mut Vec<Done>) -> Result<(), String> {
        let Some((slot, op)) = self.pending.take() else {
            return Ok(());
        };
        let fh = op.fh as *mut c_void;
        let buf = self.base as *mut c_void;
        let boff = (slot * self.slot_bytes) as i64;
        let (r, call) = match op.dir {
            Dir::Read => (
                hipfile::hipFileRead(fh, buf, op.len, op.offset as i64, boff),
                "hipFileRead",
            ),
            Dir::Write => (
                hipfile::hipFileWrite(fh, buf, op.len, op.offset as i64, boff),
                "hipFileWrite",
            ),
        };
        let e = errno();
        out.push(Done {
            slot,
            result: ssize_result(call, r, Some(e)),
        });
        Ok(())
    }
}

/// Parameters of one stream op. They must stay put until the op has run on
/// the stream (the library reads them then, and writes `bytes` at the end).
#[repr(C)]
struct AsyncParams {
    size: usize,
    file_offset: i64,
    buf_offset: i64,
    bytes: isize,
}

/// `hipfile-async`: hipFileReadAsync/WriteAsync on one stream per job, with
/// up to `iodepth` ops enqueued; an event after each op tells when it is done.
/// Ops on one stream run in stream order: iodepth hides the submission cost,
/// parallelism comes from more jobs (streams). Without a GPU runtime the
/// library runs the calls synchronously (cuFile's rule for no streams).
pub struct AsyncEngine {
    base: u64,
    slot_bytes: usize,
    gpu: Arc<dyn Gpu>,
    /// Raw storage for the params (never moved while ops are in flight).
    params: *mut AsyncParams,
    nslots: usize,
    stream: Option<Stream>,
    fifo: Option<EventFifo>,
    lens: Vec<usize>,
    ready: Vec<Done>,
    registered: bool,
}

impl AsyncEngine {
    pub fn new(
        base: u64,
        slot_bytes: usize,
        slots: usize,
        gpu: &Arc<dyn Gpu>,
        device: i32,
        aligned: bool,
    ) -> Result<AsyncEngine, String> {
        let v: Vec<AsyncParams> = (0..slots)
            .map(|_| AsyncParams {
                size: 0,
                file_offset: 0,
                buf_offset: 0,
                bytes: 0,
            })
            .collect();
        let params = Box::into_raw(v.into_boxed_slice()) as *mut AsyncParams;
        let mut e = AsyncEngine {
            base,
            slot_bytes,
            gpu: gpu.clone(),
            params,
            nslots: slots,
            stream: None,
            fifo: None,
            lens: vec![0; slots],
            ready: Vec::new(),
            registered: false,
        };
        if gpu.has_devices() {
            let s = gpu
                .stream_create(device)
                .map_err(|err| format!("stream_create on GPU {device}: {err}"))?;
            e.stream = Some(s);
            e.fifo = Some(EventFifo::new(gpu, slots)?);
            // Our parameters are fixed at submission: tell the library, which
            // then need not read them at execution time. Page-aligned inputs
            // only when they are (bs and offset multiples of 4 KiB).
            let mut flags =
                hipfile::FIXED_BUF_OFFSET | hipfile::FIXED_FILE_OFFSET | hipfile::FIXED_FILE_SIZE;
            if aligned {
                flags |= hipfile::PAGE_ALIGNED_INPUTS;
            }
            check(
                "hipFileStreamRegister",
                hipfile::hipFileStreamRegister(s.0 as *mut c_void, flags),
            )?;
            e.registered = true;
        }
        Ok(e)
    }

    fn param(&self, slot: usize) -> *mut AsyncParams {
        assert!(slot < self.nslots);
        // SAFETY: slot < nslots, inside the boxed slice.
        unsafe { self.params.add(slot) }
    }
}

impl Engine for AsyncEngine {
    fn submit(&mut self, slot: usize, op: Op) -> Result<(), String> {
        let p = self.param(slot);
        // SAFETY: the slot is free, so the library no longer uses its params.
        unsafe {
            p.write(AsyncParams {
                size: op.len,
                file_offset: op.offset as i64,
                buf_offset: (slot * self.slot_bytes) as i64,
                bytes: 0,
            });
        }
        let stream = self
            .stream
            .map_or(std::ptr::null_mut(), |s| s.0 as *mut c_void);
        let fh = op.fh as *mut c_void;
        let buf = self.base as *mut c_void;
        // SAFETY: every pointer names this slot's params, which outlive the op
        // (they are freed only after the stream has been synchronised).
        let e = unsafe {
            let size_p = std::ptr::addr_of_mut!((*p).size);
            let foff_p = std::ptr::addr_of_mut!((*p).file_offset);
            let boff_p = std::ptr::addr_of_mut!((*p).buf_offset);
            let bytes_p = std::ptr::addr_of_mut!((*p).bytes);
            match op.dir {
                Dir::Read => {
                    hipfile::hipFileReadAsync(fh, buf, size_p, foff_p, boff_p, bytes_p, stream)
                }
                Dir::Write => {
                    hipfile::hipFileWriteAsync(fh, buf, size_p, foff_p, boff_p, bytes_p, stream)
                }
            }
        };
        let call = match op.dir {
            Dir::Read => "hipFileReadAsync",
            Dir::Write => "hipFileWriteAsync",
        };
        check(call, e)?;
        self.lens[slot] = op.len;
        match (&mut self.fifo, self.stream) {
            (Some(f), Some(s)) => f.record(slot, s),
            _ => {
                // No streams: the call has already run.
                // SAFETY: the op has finished; nothing else writes the params.
                let bytes = unsafe { std::ptr::addr_of!((*p).bytes).read_volatile() };
                self.ready.push(Done {
                    slot,
                    result: ssize_result(call, bytes, None),
                });
                Ok(())
            }
        }
    }

    fn reap(&mut self, min: usize, out: &mut Vec<Done>) -> Result<(), String> {
        if !self.ready.is_empty() {
            out.append(&mut self.ready);
            return Ok(());
        }
        let params = self.params;
        let nslots = self.nslots;
        if let Some(f) = &mut self.fifo {
            f.reap(min, out, |slot| {
                assert!(slot < nslots);
                // SAFETY: the slot's event completed, so the library has stored
                // its result (the stream passes the op only after that store).
                let bytes =
                    unsafe { std::ptr::addr_of!((*params.add(slot)).bytes).read_volatile() };
                ssize_result("async I/O", bytes, None)
            })?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), String> {
        if let Some(s) = self.stream {
            self.gpu
                .stream_synchronize(s)
                .map_err(|e| format!("stream_synchronize: {e}"))?;
        }
        Ok(())
    }
}

impl Drop for AsyncEngine {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            // Nothing may still use the params once the stream is idle.
            let _ = self.gpu.stream_synchronize(s);
            if self.registered {
                let _ = hipfile::hipFileStreamDeregister(s.0 as *mut c_void);
            }
            self.fifo = None;
            self.gpu.stream_destroy(s);
        }
        // SAFETY: made by Box::into_raw from a boxed slice of nslots; no op uses it now.
        drop(unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.params, self.nslots))
        });
    }
}

/// Stream operations libhipfile keeps in flight per process (its word pool).
pub const MAX_STREAM_OPS: u64 = 2048;

/// Most entries one batch may hold (the library's default
/// `properties.io_batchsize`, as cuFile's).
pub const MAX_BATCH_ENTRIES: usize = 128;

/// One batch handle and the entries it has in flight.
struct Batch {
    handle: *mut c_void,
    pending: Vec<HipFileIoParams>,
    in_flight: usize,
}

/// `hipfile-batch`: `iodepth` entries in flight, in batches of at most 128
/// (a deeper queue is several batches: iodepth=512 is 4 batches x 128).
/// Slot `s` belongs to batch `s / 128`. Submissions gathered while the job
/// fills free slots go in one hipFileBatchIOSubmit per batch, and
/// hipFileBatchIOGetStatus reaps them.
pub struct BatchEngine {
    base: u64,
    slot_bytes: usize,
    batches: Vec<Batch>,
    events: Vec<HipFileIoEvents>,
    /// The batch to wait on next when nothing has completed (turns go round).
    wait_turn: usize,
}

impl BatchEngine {
    pub fn new(base: u64, slot_bytes: usize, slots: usize) -> Result<BatchEngine, String> {
        let mut e = BatchEngine {
            base,
            slot_bytes,
            batches: Vec::new(),
            events: vec![
                HipFileIoEvents {
                    cookie: std::ptr::null_mut(),
                    status: 0,
                    ret: 0,
                };
                slots.min(MAX_BATCH_ENTRIES)
            ],
            wait_turn: 0,
        };
        let mut left = slots;
        while left > 0 {
            let n = left.min(MAX_BATCH_ENTRIES);
            let mut handle: *mut c_void = std::ptr::null_mut();
            // SAFETY: handle is a live local for the library to fill in.
            check("hipFileBatchIOSetUp", unsafe {
                hipfile::hipFileBatchIOSetUp(&mut handle, n as u32)
            })?;
            e.batches.push(Batch {
                handle,
                pending: Vec::with_capacity(n),
                in_flight: 0,
            });
            left -= n;
        }
        Ok(e)
    }

    /// Collect what batch `b` has finished; wait for at least `min` of them.
    fn reap_batch(&mut self, b: usize, min: usize, out: &mut Vec<Done>) -> Result<usize, String> {
        let batch = &mut self.batches[b];
        if batch.in_flight == 0 {
            return Ok(0);
        }
        let mut nr = batch.in_flight.min(self.events.len()) as u32;
        let min_nr = (min as u32).min(nr);
        // A zero timeout returns at once with what has finished; a NULL
        // timeout waits for min_nr without limit.
        let mut zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let timeout: *mut libc::timespec = if min_nr == 0 {
            &mut zero
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: events holds at least `nr` entries; timeout is NULL or a live local.
        check("hipFileBatchIOGetStatus", unsafe {
            hipfile::hipFileBatchIOGetStatus(
                batch.handle,
                min_nr,
                &mut nr,
                self.events.as_mut_ptr(),
                timeout.cast(),
            )
        })?;
        for ev in &self.events[..nr as usize] {
            out.push(Done {
                slot: ev.cookie as usize,
                result: batch_result(ev.status, ev.ret),
            });
        }
        batch.in_flight -= nr as usize;
        Ok(nr as usize)
    }
}

impl Engine for BatchEngine {
    fn submit(&mut self, slot: usize, op: Op) -> Result<(), String> {
        let b = slot / MAX_BATCH_ENTRIES;
        self.batches[b].pending.push(HipFileIoParams {
            mode: 1, // hipFileBatch
            dev_ptr_base: self.base as *mut c_void,
            file_offset: op.offset as i64,
            dev_ptr_offset: (slot * self.slot_bytes) as i64,
            size: op.len,
            fh: op.fh as *mut c_void,
            opcode: match op.dir {
                Dir::Read => 0,
                Dir::Write => 1,
            },
            cookie: slot as *mut c_void,
        });
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        for batch in &mut self.batches {
            if batch.pending.is_empty() {
                continue;
            }
            let n = batch.pending.len();
            // SAFETY: `n` entries at pending's pointer; the library copies them.
            check("hipFileBatchIOSubmit", unsafe {
                hipfile::hipFileBatchIOSubmit(batch.handle, n as u32, batch.pending.as_mut_ptr(), 0)
            })?;
            batch.in_flight += n;
            batch.pending.clear();
        }
        Ok(())
    }

    fn reap(&mut self, min: usize, out: &mut Vec<Done>) -> Result<(), String> {
        self.flush()?;
        let in_flight: usize = self.batches.iter().map(|b| b.in_flight).sum();
        let want = min.min(in_flight);
        if self.batches.len() == 1 {
            self.reap_batch(0, want, out)?;
            return Ok(());
        }
        // Several batches: take what any has finished; while that is not
        // enough, wait on the batches in turn.
        let mut got = 0;
        for b in 0..self.batches.len() {
            got += self.reap_batch(b, 0, out)?;
        }
        while got < want {
            let nb = self.batches.len();
            let b = (0..nb)
                .map(|k| (self.wait_turn + k) % nb)
                .find(|&b| self.batches[b].in_flight > 0)
                .ok_or("hipfile-batch: waiting with nothing in flight")?;
            self.wait_turn = (b + 1) % nb;
            got += self.reap_batch(b, 1, out)?;
        }
        Ok(())
    }
}

impl Drop for BatchEngine {
    fn drop(&mut self) {
        // Destroy waits for entries still running (their buffers are in use).
        for b in &self.batches {
            hipfile::hipFileBatchIODestroy(b.handle);
        }
    }
}
