//! Many reads at once: every entry is in the engine's queue before the first
//! finishes, as `hipFileBatchIOSubmit` puts them there (whole chunks, no
//! spreading of one entry over the workers: the entries themselves keep every
//! worker busy).

use super::buf::{IoBufMut, Region};
use super::future::{pair, Completer, IoFuture};
use super::handle::FileHandle;
use crate::error::Result;
use crate::pipeline::Direction;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

/// One read of a batch: `buf.len()` bytes of `file` from `offset` into `buf`.
pub struct ReadOp<'a> {
    file: &'a FileHandle,
    offset: u64,
    region: Region,
    /// The destination stays exclusively borrowed while the op exists.
    _buf: PhantomData<&'a mut [u8]>,
}

impl<'a> ReadOp<'a> {
    pub fn new<B: IoBufMut + ?Sized>(file: &'a FileHandle, offset: u64, buf: &'a mut B) -> Self {
        ReadOp {
            file,
            offset,
            region: buf.io_region_mut(),
            _buf: PhantomData,
        }
    }
}

/// What a finished batch hands back: every result, and what owned the memory.
type BatchOutput<K> = (Vec<Result<usize>>, K);

struct Countdown<K> {
    results: Vec<Option<Result<usize>>>,
    remaining: usize,
    done: Option<(Completer<BatchOutput<K>>, K)>,
}

/// Start one read per `(file, offset, region)`; the future is ready with
/// every result, in the order given, and `keep` (what owns the regions).
///
/// # Safety
/// Every region must stay valid until the future is ready (`keep` may own them).
unsafe fn start_all<K: Send + 'static>(
    ops: Vec<(FileHandle, u64, Region)>,
    keep: K,
) -> IoFuture<(Vec<Result<usize>>, K)> {
    let (fut, completer) = pair();
    if ops.is_empty() {
        completer.complete((Vec::new(), keep));
        return fut;
    }
    let state = Arc::new(Mutex::new(Countdown {
        results: (0..ops.len()).map(|_| None).collect(),
        remaining: ops.len(),
        done: Some((completer, keep)),
    }));
    for (i, (file, offset, region)) in ops.into_iter().enumerate() {
        let state = state.clone();
        let record = move |r: Result<usize>| {
            let finished = {
                let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
                s.results[i] = Some(r);
                s.remaining -= 1;
                if s.remaining == 0 {
                    let results = s.results.iter_mut().map(|r| r.take().unwrap_or(Ok(0)));
                    let results: Vec<Result<usize>> = results.collect();
                    s.done.take().map(|(c, keep)| (c, results, keep))
                } else {
                    None
                }
            };
            if let Some((c, results, keep)) = finished {
                c.complete((results, keep));
            }
        };
        if region.is_empty() {
            record(Ok(0));
            continue;
        }
        // SAFETY: the caller keeps every region valid until the future is
        // ready, which is after the last entry has finished.
        unsafe { file.start(Direction::Read, region, offset, record) };
    }
    fut
}

/// Read every op at once; returns when all have finished, one result per op
/// in the order given (bytes read, fewer at end of file, or the error).
///
/// ```
/// use hipfile_engine::{api, Config, Engine, HostBuffer, OpenMode, ReadOp};
/// # let dir = std::env::temp_dir();
/// # let paths: Vec<_> = (0..3).map(|i| dir.join(format!("hipfile-doc-batch-{}-{i}", std::process::id()))).collect();
/// # for (i, p) in paths.iter().enumerate() { std::fs::write(p, vec![i as u8; 4096]).unwrap(); }
/// let engine = Engine::new(Config { io_threads: 2, ..Config::default() }).unwrap();
/// let files: Vec<_> = paths.iter().map(|p| engine.open(p, OpenMode::Read).unwrap()).collect();
/// let mut bufs: Vec<HostBuffer> = (0..3).map(|_| HostBuffer::new(4096)).collect();
/// let ops = files.iter().zip(bufs.iter_mut()).map(|(f, b)| ReadOp::new(f, 0, b));
/// let results = api::read_batch(ops);
/// assert!(results.iter().all(|r| *r == Ok(4096)));
/// assert!(bufs[2].iter().all(|&b| b == 2));
/// # for p in &paths { std::fs::remove_file(p).unwrap(); }
/// ```
pub fn read_batch<'a>(ops: impl IntoIterator<Item = ReadOp<'a>>) -> Vec<Result<usize>> {
    let ops: Vec<(FileHandle, u64, Region)> = ops
        .into_iter()
        .map(|op| (op.file.clone(), op.offset, op.region))
        .collect();
    // SAFETY: each region is borrowed for 'a by its ReadOp, which outlives
    // this call, and the call returns only after every entry has finished.
    let (results, ()) = unsafe { start_all(ops, ()) }.wait();
    results
}

/// Start one read per `(file, offset, buffer)`; the future hands back every
/// result, in the order given, and the buffers.
pub fn read_batch_async<B: IoBufMut + Send + 'static>(
    ops: Vec<(FileHandle, u64, B)>,
) -> IoFuture<(Vec<Result<usize>>, Vec<B>)> {
    let mut bufs = Vec::with_capacity(ops.len());
    let mut starts = Vec::with_capacity(ops.len());
    for (file, offset, mut buf) in ops {
        starts.push((file, offset, buf.io_region_mut()));
        bufs.push(buf);
    }
    // SAFETY: the buffers own their regions (moving them into `bufs` does not
    // move the bytes) and are kept by the future until every read is done.
    unsafe { start_all(starts, bufs) }
}
