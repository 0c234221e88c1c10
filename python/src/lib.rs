//! `hipfile._hipfile`: the native half of the `hipfile` Python package, over
//! the engine's safe API (`hipfile_engine::api`). The Python half
//! (`hipfile/__init__.py`) documents the public names.
//!
//! One engine per process: the driver's (`registry::driver()`), opened on the
//! first I/O and kept until `shutdown()`. A child after `fork()` gets its own
//! (see `hipfile_engine::fork`); files opened before the fork reopen their
//! descriptor on it at their next use. The GIL is released for every wait.

mod buffer;
mod errors;

use buffer::{describe, stream_handle, PyRegion, Target};
use errors::{to_pyerr, HipFileError};
use hipfile_engine::api::{read_batch as engine_read_batch, ReadOp};
use hipfile_engine::config::{Env, RETIRED_SETTINGS};
use hipfile_engine::error::{Error, Result as EngineResult};
use hipfile_engine::fork::{self, PerProcess};
use hipfile_engine::gpu::Stream;
use hipfile_engine::registry::driver;
use hipfile_engine::{Config, Engine, FileHandle, IoFuture, OpenMode};
use pyo3::exceptions::{PyEOFError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use std::collections::hash_map::{Entry, HashMap};
use std::os::fd::{FromRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------
// The engine and its settings

/// The engine this process's Python code uses, once opened.
static HELD: PerProcess<Mutex<Option<Engine>>> = PerProcess::new();

fn engine() -> PyResult<Engine> {
    let held = HELD.get_or_init(|| Mutex::new(None));
    let mut g = lock(held);
    if let Some(e) = g.as_ref() {
        return Ok(e.clone());
    }
    let d = driver();
    d.open().map_err(|e| to_pyerr(&e, "starting the engine"))?;
    let e = d
        .engine()
        .ok_or_else(|| PyRuntimeError::new_err("the engine did not start"))?;
    *g = Some(e.clone());
    Ok(e)
}

/// Settings by keyword, named as the HIPFILE_* variables without the prefix.
const KNOBS: &[&str] = &[
    "io_threads",
    "chunk_kb",
    "queue_depth",
    "inline_kb",
    "copy_spin_us",
    "read_mode",
    "io_backend",
    "stream_stages",
    "gpu_runtime",
    "register_buffers",
    "pin_buffers",
    "huge_pages",
    "bind_io_threads",
    "write_sync",
    "allow_compat_mode",
    "force_compat_mode",
    "unsupported_file_systems",
    "stats_level",
];

/// Keyword settings over the process environment.
/// Keyword settings over another source (the process environment and the
/// configuration file, as the C library reads them).
struct KwEnv<'a, E: Env + ?Sized> {
    kv: Vec<(String, String)>,
    under: &'a E,
}

impl<E: Env + ?Sized> Env for KwEnv<'_, E> {
    fn get(&self, name: &str) -> Option<String> {
        self.kv
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| self.under.get(name))
    }
}

/// Settings for this process's engine, by the names of the HIPFILE_*
/// variables without the prefix, lower case (``io_threads=4``,
/// ``read_mode="direct"``, ``log_level="info"``, ...). Keywords override the
/// environment, which overrides the configuration file (``HIPFILE_CONFIG``
/// or ``CUFILE_ENV_PATH_JSON``); what none sets keeps its default. Call it before the first
/// I/O of the process (in a DataLoader worker: in ``worker_init_fn``); after
/// that it raises RuntimeError. Returns the settings that will be used.
#[pyfunction]
#[pyo3(signature = (**settings))]
fn configure(settings: Option<&Bound<'_, PyDict>>) -> PyResult<Py<PyDict>> {
    let mut kv = Vec::new();
    if let Some(s) = settings {
        for (k, v) in s.iter() {
            let k: String = k.extract()?;
            let value = if let Ok(b) = v.extract::<bool>() {
                if v.is_instance_of::<pyo3::types::PyBool>() {
                    b.to_string()
                } else {
                    v.str()?.to_string()
                }
            } else {
                v.str()?.to_string()
            };
            if k == "log_level" {
                let level = hipfile_engine::log::parse_level(&value).ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "log_level {value:?} is not error, warn, info or debug"
                    ))
                })?;
                hipfile_engine::log::set_max_level(level);
                continue;
            }
            let var = format!("HIPFILE_{}", k.to_ascii_uppercase());
            // A retired setting is ignored with the engine's warning, as its
            // variable is.
            if !KNOBS.contains(&k.as_str()) && !RETIRED_SETTINGS.contains(&var.as_str()) {
                return Err(PyTypeError::new_err(format!(
                    "unknown setting {k:?}; known: log_level, {}",
                    KNOBS.join(", ")
                )));
            }
            kv.push((var, value));
        }
    }
    let cfg = hipfile_engine::config_file::with_process_env(|env| {
        Config::from_env_with(&KwEnv { kv, under: env })
    });
    if let Err(e) = driver().set_config(cfg.clone()) {
        let _ = e;
        return Err(PyRuntimeError::new_err(
            "configure() must come before the first I/O of this process (the engine has \
             read its settings); in a DataLoader worker call it from worker_init_fn",
        ));
    }
    Python::attach(|py| config_dict(py, &cfg))
}

/// One variable over another environment.
struct Over<'a, E: Env + ?Sized> {
    name: &'static str,
    value: String,
    env: &'a E,
}

impl<E: Env + ?Sized> Env for Over<'_, E> {
    fn get(&self, name: &str) -> Option<String> {
        if name == self.name {
            return Some(self.value.clone());
        }
        self.env.get(name)
    }
}

/// Cap this process's I/O threads at ``n`` unless they were set explicitly
/// (``HIPFILE_IO_THREADS``, ``execution.max_io_threads`` in the config file,
/// or an earlier ``configure()`` call in this process, whose settings are
/// kept as given). For a process that shares the machine with others of its
/// kind, such as a DataLoader worker: the engine starts workers as work
/// needs them, up to this cap, and each holds its own page-locked bounce
/// memory. Call it before the first I/O of the process. Returns the
/// ``io_threads`` the engine will use, or None when it left the settings
/// alone (set explicitly, or the engine already read them).
#[pyfunction]
fn limit_io_threads(n: usize) -> PyResult<Option<usize>> {
    if n == 0 {
        return Err(PyValueError::new_err(
            "limit_io_threads: n must be at least 1",
        ));
    }
    let held = HELD.get_or_init(|| Mutex::new(None));
    if lock(held).is_some() {
        return Ok(None);
    }
    let cap = n.min(Config::default().io_threads);
    let cfg = hipfile_engine::config_file::with_process_env(|env| {
        if env.get("HIPFILE_IO_THREADS").is_some() {
            return None;
        }
        Some(Config::from_env_with(&Over {
            name: "HIPFILE_IO_THREADS",
            value: cap.to_string(),
            env,
        }))
    });
    let Some(cfg) = cfg else {
        return Ok(None);
    };
    let threads = cfg.io_threads;
    Ok(driver().set_config(cfg).ok().map(|()| threads))
}

/// What this process's engine holds now: ``workers`` (I/O threads
/// running; they start as work needs them, up to ``io_threads``),
/// ``bounce_bytes`` (their bounce memory) and ``locked_bounce_bytes`` (the
/// part page-locked by the GPU runtime or registered with io_uring). All 0
/// before the engine has started; does not start it.
#[pyfunction]
fn usage(py: Python<'_>) -> PyResult<Py<PyDict>> {
    let held = HELD.get_or_init(|| Mutex::new(None));
    let snap = lock(held).as_ref().map(|e| e.stats()).unwrap_or_default();
    let d = PyDict::new(py);
    d.set_item("workers", snap.workers)?;
    d.set_item("bounce_bytes", snap.bounce_bytes)?;
    d.set_item("locked_bounce_bytes", snap.locked_bounce_bytes)?;
    Ok(d.unbind())
}

fn config_dict(py: Python<'_>, c: &Config) -> PyResult<Py<PyDict>> {
    let d = PyDict::new(py);
    d.set_item("io_threads", c.io_threads)?;
    d.set_item("cold_io_threads", c.cold_io_threads)?;
    d.set_item("chunk_kb", c.chunk_bytes >> 10)?;
    d.set_item("queue_depth", c.slots_per_worker)?;
    d.set_item("inline_kb", c.inline_max_bytes >> 10)?;
    d.set_item("copy_spin_us", c.copy_spin.as_micros() as u64)?;
    d.set_item("read_mode", format!("{:?}", c.read_mode).to_lowercase())?;
    d.set_item("stream_stages", c.stream_stages)?;
    d.set_item("gpu_runtime", format!("{:?}", c.gpu_runtime).to_lowercase())?;
    d.set_item("write_sync", c.write_sync)?;
    d.set_item("pinned_bounce_bytes", c.bounce_bytes())?;
    Ok(d.unbind())
}

/// The settings of the running engine (starting it if needed), as a dict.
#[pyfunction]
fn settings(py: Python<'_>) -> PyResult<Py<PyDict>> {
    let e = engine()?;
    config_dict(py, e.config())
}

/// Release this process's engine (its threads and pinned memory) once every
/// file opened through it is closed. The next I/O starts a new one.
#[pyfunction]
fn shutdown() -> PyResult<()> {
    let held = HELD.get_or_init(|| Mutex::new(None));
    if lock(held).take().is_some() {
        driver()
            .close()
            .map_err(|e| to_pyerr(&e, "closing the engine"))?;
    }
    Ok(())
}

/// True when device memory can be used in this process (a GPU runtime
/// started; in a child forked after the GPU runtime was initialised it
/// cannot).
#[pyfunction]
fn gpu_available() -> PyResult<bool> {
    Ok(engine()?.gpu().has_devices())
}

/// The GPU runtime in use: "cuda", "hip", or "none" (host memory only).
#[pyfunction]
fn runtime() -> PyResult<&'static str> {
    Ok(engine()?.gpu().name())
}

// ---------------------------------------------------------------------------
// Files

struct FileState {
    handle: Option<FileHandle>,
    generation: u64,
    /// The C API handle for stream-ordered reads (registered on first use).
    c_handle: Option<usize>,
}

/// An open file (from ``hipfile.open``). Methods read into and write from
/// any object exposing ``__cuda_array_interface__``, the buffer protocol or
/// DLPack: device arrays (PyTorch CUDA tensors, CuPy, JAX) and host arrays
/// (NumPy, PyTorch CPU tensors, bytearray). Offsets and sizes are in bytes.
#[pyclass(module = "hipfile", name = "File", frozen)]
struct File {
    state: Mutex<FileState>,
    path: String,
    mode: String,
}

impl File {
    /// The handle, reopened on this process's engine after a fork.
    fn handle(&self) -> PyResult<FileHandle> {
        let mut st = lock(&self.state);
        let Some(h) = st.handle.as_ref() else {
            return Err(PyValueError::new_err("I/O operation on closed file"));
        };
        if st.generation == fork::generation() {
            return Ok(h.clone());
        }
        // A child after fork: the descriptor was inherited and still names the
        // file; the parent's engine has no workers here.
        // SAFETY: dup of a descriptor the handle keeps open.
        let fd = unsafe { libc::dup(h.raw_fd()) };
        if fd < 0 {
            return Err(to_pyerr(&Error::last_os(), "reopening the file after fork"));
        }
        // SAFETY: `fd` was just made by dup and is owned by nobody else.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let fresh = engine()?
            .open_fd(owned)
            .map_err(|e| to_pyerr(&e, "reopening the file after fork"))?;
        // The parent's handle belongs to the parent's engine: leaked, never
        // dropped here (crate docs of hipfile_engine::fork).
        if let Some(old) = st.handle.replace(fresh.clone()) {
            std::mem::forget(old);
        }
        st.generation = fork::generation();
        st.c_handle = None;
        Ok(fresh)
    }
}

fn check_offset(file_offset: i64) -> PyResult<u64> {
    if file_offset < 0 {
        return Err(PyValueError::new_err(format!(
            "file_offset {file_offset} is negative"
        )));
    }
    Ok(file_offset as u64)
}

/// A read's byte count, or EOFError when a non-empty read found no byte.
fn read_count(r: EngineResult<usize>, want: usize, offset: u64, what: &str) -> PyResult<usize> {
    match r {
        Ok(0) if want > 0 => Err(PyEOFError::new_err(format!(
            "{what}: file offset {offset} is at or past the end of the file"
        ))),
        Ok(n) => Ok(n),
        Err(e) => Err(to_pyerr(&e, what)),
    }
}

impl File {
    /// The handle, the file offset and the part of `buf` one transfer uses.
    fn prepare(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        destination: bool,
        size: Option<i64>,
        file_offset: i64,
        buf_offset: i64,
    ) -> PyResult<(FileHandle, u64, PyRegion)> {
        let h = self.handle()?;
        let off = check_offset(file_offset)?;
        let r = describe(py, buf, destination, h.engine(), true)?.part(size, buf_offset)?;
        Ok((h, off, r))
    }
}

#[pymethods]
impl File {
    /// Read ``size`` bytes (default: the rest of ``buf`` after
    /// ``buf_offset``) from ``file_offset`` into ``buf``; returns the bytes
    /// read, fewer at the end of the file. A read that starts at or past the
    /// end raises EOFError. Blocks without holding the GIL.
    #[pyo3(signature = (buf, size=None, file_offset=0, buf_offset=0))]
    fn read(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<i64>,
        file_offset: i64,
        buf_offset: i64,
    ) -> PyResult<usize> {
        let (h, off, mut r) = self.prepare(py, buf, true, size, file_offset, buf_offset)?;
        let want = r.len();
        let res = py.detach(|| h.read(&mut r, off));
        drop(r);
        read_count(res, want, off, "read")
    }

    /// Write ``size`` bytes of ``buf`` (default: all after ``buf_offset``)
    /// at ``file_offset``; returns the bytes written. Durable before it
    /// returns (unless ``write_sync=False``). Blocks without holding the GIL.
    #[pyo3(signature = (buf, size=None, file_offset=0, buf_offset=0))]
    fn write(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<i64>,
        file_offset: i64,
        buf_offset: i64,
    ) -> PyResult<usize> {
        let (h, off, r) = self.prepare(py, buf, false, size, file_offset, buf_offset)?;
        let res = py.detach(|| h.write(&r, off));
        drop(r);
        res.map_err(|e| to_pyerr(&e, "write"))
    }

    /// Start a read as ``read`` does and return a ``Future`` at once; its
    /// ``result()`` is the byte count. ``buf`` is kept alive until the read
    /// has finished.
    #[pyo3(signature = (buf, size=None, file_offset=0, buf_offset=0))]
    fn pread(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<i64>,
        file_offset: i64,
        buf_offset: i64,
    ) -> PyResult<Future> {
        let (h, off, r) = self.prepare(py, buf, true, size, file_offset, buf_offset)?;
        let want = r.len();
        Ok(Future::new(h.read_async(r, off), want, off, "pread", true))
    }

    /// Start a write and return a ``Future`` at once (``result()`` is the
    /// byte count). Not made durable: call ``os.fsync(f.fileno())`` after.
    #[pyo3(signature = (buf, size=None, file_offset=0, buf_offset=0))]
    fn pwrite(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<i64>,
        file_offset: i64,
        buf_offset: i64,
    ) -> PyResult<Future> {
        let (h, off, r) = self.prepare(py, buf, false, size, file_offset, buf_offset)?;
        let want = r.len();
        Ok(Future::new(
            h.write_async(r, off),
            want,
            off,
            "pwrite",
            false,
        ))
    }

    /// Enqueue a read on a GPU stream (a ``torch.cuda.Stream``, a CuPy
    /// stream or an int handle): it runs when the stream reaches it, and work
    /// queued on the stream after it sees the bytes. Returns a
    /// ``StreamRead`` whose ``bytes_read`` is valid once the stream has
    /// passed it (``StreamRead.synchronize()`` waits for that). Without a GPU
    /// runtime the read happens before the call returns.
    #[pyo3(signature = (buf, stream, size=None, file_offset=0, buf_offset=0))]
    fn read_async(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        stream: &Bound<'_, PyAny>,
        size: Option<i64>,
        file_offset: i64,
        buf_offset: i64,
    ) -> PyResult<StreamRead> {
        let h = self.handle()?;
        let off = check_offset(file_offset)?;
        let stream = stream_handle(stream)?;
        let r = describe(py, buf, true, h.engine(), false)?.part(size, buf_offset)?;
        let c_handle = {
            let mut st = lock(&self.state);
            match st.c_handle {
                Some(c) => c,
                None => {
                    let c = driver()
                        .register_handle(h.raw_fd())
                        .map_err(|e| to_pyerr(&e, "read_async"))?;
                    st.c_handle = Some(c);
                    c
                }
            }
        };
        StreamRead::submit(h.engine().clone(), c_handle, r, off, stream)
    }

    /// Close the file. Transfers still running keep the descriptor open
    /// until they finish. Closing twice is allowed.
    fn close(&self) {
        let mut st = lock(&self.state);
        if let Some(c) = st.c_handle.take() {
            driver().deregister_handle(c);
        }
        if let Some(h) = st.handle.take() {
            if st.generation != fork::generation() {
                std::mem::forget(h);
            }
        }
    }

    /// True once ``close()`` was called.
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.state).handle.is_none()
    }

    /// The file's descriptor (owned by this object).
    fn fileno(&self) -> PyResult<i32> {
        Ok(self.handle()?.raw_fd())
    }

    /// The file's size in bytes.
    fn size(&self) -> PyResult<u64> {
        self.handle()?.size().map_err(|e| to_pyerr(&e, "size"))
    }

    #[getter]
    fn name(&self) -> &str {
        &self.path
    }

    #[getter]
    fn mode(&self) -> &str {
        &self.mode
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { "closed" } else { "open" };
        format!(
            "<hipfile.File {:?} mode={:?} {state}>",
            self.path, self.mode
        )
    }
}

/// Open ``path`` (str, bytes or os.PathLike), read ``size`` bytes (default:
/// the rest of ``buf`` after ``buf_offset``) from ``file_offset`` into
/// ``buf``, and close the file; returns the bytes read, fewer at the end of
/// the file (EOFError when the read starts at or past it). The same as
/// ``with open(path) as f: f.read(buf, ...)``, but the open, the read and the
/// close run in one stretch without the GIL: a thread that reads each
/// sample from its own file gives the GIL away once per file instead of
/// twice, and with many such threads those hand-offs are what they queue on.
#[pyfunction]
#[pyo3(signature = (path, buf, size=None, file_offset=0, buf_offset=0))]
fn read_file(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    buf: &Bound<'_, PyAny>,
    size: Option<i64>,
    file_offset: i64,
    buf_offset: i64,
) -> PyResult<usize> {
    let p: std::path::PathBuf = if let Ok(s) = path.cast::<PyString>() {
        s.extract()?
    } else {
        let os = py.import("os")?;
        os.call_method1("fsdecode", (path,))?.extract()?
    };
    let off = check_offset(file_offset)?;
    let e = engine()?;
    let mut r = describe(py, buf, true, &e, true)?.part(size, buf_offset)?;
    let want = r.len();
    let res = py.detach(|| match e.open(&p, OpenMode::Read) {
        Ok(h) => Ok(h.read(&mut r, off)),
        Err(err) => Err(err),
    });
    drop(r);
    match res {
        Ok(read) => read_count(
            read,
            want,
            off,
            &format!("read {:?}", p.display().to_string()),
        ),
        Err(err) => Err(to_pyerr(
            &err,
            &format!("open {:?}", p.display().to_string()),
        )),
    }
}

/// Open ``path`` (str, bytes or os.PathLike) or an open descriptor (int,
/// duplicated, so the caller keeps its own) for GPU-direct I/O. ``mode``:
/// "r" (read), "r+" (read and write), "w" (create or truncate, write),
/// "w+" (create or truncate, read and write). A context manager.
#[pyfunction]
#[pyo3(signature = (path, mode="r"))]
fn open(py: Python<'_>, path: &Bound<'_, PyAny>, mode: &str) -> PyResult<File> {
    let m = OpenMode::parse(mode).ok_or_else(|| {
        PyValueError::new_err(format!(
            "mode {mode:?} is not \"r\", \"r+\", \"w\" or \"w+\""
        ))
    })?;
    let e = engine()?;
    let (handle, name) = if let Ok(s) = path.cast::<PyString>() {
        // A str, the common case, without a round trip through os.fsdecode
        // (or the TypeError a failed int conversion builds first): PyO3
        // encodes it with the file system encoding, as os.fsencode does.
        let p: std::path::PathBuf = s.extract()?;
        let name = p.display().to_string();
        (py.detach(|| e.open(&p, m)), name)
    } else if let Ok(fd) = path.extract::<i32>() {
        // SAFETY: dup only reads the descriptor number.
        let d = unsafe { libc::dup(fd) };
        if d < 0 {
            return Err(to_pyerr(&Error::last_os(), "open"));
        }
        // SAFETY: `d` is a fresh descriptor owned by nobody else.
        let owned = unsafe { OwnedFd::from_raw_fd(d) };
        (e.open_fd(owned), format!("<fd {fd}>"))
    } else {
        let os = py.import("os")?;
        let p: std::path::PathBuf = os.call_method1("fsdecode", (path,))?.extract()?;
        let name = p.display().to_string();
        (py.detach(|| e.open(&p, m)), name)
    };
    let handle = handle.map_err(|err| to_pyerr(&err, &format!("open {name:?}")))?;
    Ok(File {
        state: Mutex::new(FileState {
            handle: Some(handle),
            generation: fork::generation(),
            c_handle: None,
        }),
        path: name,
        mode: mode.to_string(),
    })
}

// ---------------------------------------------------------------------------
// Futures

type Pending = IoFuture<(EngineResult<usize>, PyRegion)>;

enum FutState {
    Pending(Pending),
    /// A thread is waiting for it in `result()` (the IoFuture is with it).
    Waiting,
    Done(EngineResult<usize>),
}

/// The result of ``File.pread`` / ``File.pwrite``: ``result()`` blocks
/// (without the GIL) and returns the byte count or raises; ``done()`` asks;
/// ``await fut`` works in asyncio; ``add_done_callback(fn)`` calls ``fn(fut)``.
#[pyclass(module = "hipfile", name = "Future", frozen)]
struct Future {
    state: Mutex<FutState>,
    callbacks: Mutex<Vec<Py<PyAny>>>,
    want: usize,
    offset: u64,
    what: &'static str,
    is_read: bool,
}

impl Future {
    fn new(f: Pending, want: usize, offset: u64, what: &'static str, is_read: bool) -> Future {
        Future {
            state: Mutex::new(FutState::Pending(f)),
            callbacks: Mutex::new(Vec::new()),
            want,
            offset,
            what,
            is_read,
        }
    }

    fn outcome(&self, r: &EngineResult<usize>) -> PyResult<usize> {
        if self.is_read {
            read_count(r.clone(), self.want, self.offset, self.what)
        } else {
            r.clone().map_err(|e| to_pyerr(&e, self.what))
        }
    }

    /// Move a finished transfer's outcome into the state (the region is
    /// dropped here, with the GIL held). True when this call finished it.
    fn settle(&self, st: &mut FutState) -> bool {
        if let FutState::Pending(f) = st {
            if let Some((r, region)) = f.try_take() {
                drop(region);
                *st = FutState::Done(r);
                return true;
            }
        }
        false
    }

    fn fire(slf: &Bound<'_, Self>) {
        let cbs: Vec<Py<PyAny>> = std::mem::take(&mut *lock(&slf.get().callbacks));
        for cb in cbs {
            if let Err(e) = cb.call1(slf.py(), (slf,)) {
                e.print(slf.py());
            }
        }
    }
}

/// Runs the callbacks of finished futures with the GIL held, off the
/// engine's worker threads (they never wait for the GIL).
struct Notifier(std::sync::mpsc::Sender<Py<Future>>);

static NOTIFIER: PerProcess<Notifier> = PerProcess::new();

fn notifier() -> &'static Notifier {
    NOTIFIER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Py<Future>>();
        let spawned = std::thread::Builder::new()
            .name("hipfile-py-notify".into())
            .spawn(move || {
                for fut in rx {
                    Python::attach(|py| {
                        let b = fut.bind(py);
                        let finished = {
                            let mut st = lock(&b.get().state);
                            b.get().settle(&mut st);
                            matches!(*st, FutState::Done(_))
                        };
                        if finished {
                            Future::fire(b);
                        }
                    });
                }
            });
        if spawned.is_err() {
            hipfile_engine::log_warn!(
                "cannot start the callback thread: done callbacks will not run"
            );
        }
        Notifier(tx)
    })
}

struct WakeNotifier(Mutex<Option<Py<Future>>>);

impl Wake for WakeNotifier {
    fn wake(self: Arc<Self>) {
        if let Some(f) = lock(&self.0).take() {
            let _ = notifier().0.send(f);
        }
    }
}

#[pymethods]
impl Future {
    /// Wait (without the GIL) and return the byte count, or raise the
    /// transfer's error (EOFError for a read that starts past the end).
    /// ``timeout`` in seconds: TimeoutError when it passes first.
    #[pyo3(signature = (timeout=None))]
    fn result(slf: &Bound<'_, Self>, timeout: Option<f64>) -> PyResult<usize> {
        let py = slf.py();
        let me = slf.get();
        loop {
            let taken = {
                let mut st = lock(&me.state);
                me.settle(&mut st);
                match std::mem::replace(&mut *st, FutState::Waiting) {
                    FutState::Done(r) => {
                        *st = FutState::Done(r.clone());
                        drop(st);
                        Future::fire(slf);
                        return me.outcome(&r);
                    }
                    FutState::Pending(f) => Some(f),
                    FutState::Waiting => None,
                }
            };
            let Some(f) = taken else {
                // Another thread waits for it: poll until it has finished.
                py.detach(|| std::thread::sleep(Duration::from_millis(1)));
                continue;
            };
            let finished = match timeout {
                None => {
                    py.detach(|| f.wait_done());
                    true
                }
                Some(t) => py.detach(|| f.wait_done_timeout(Duration::from_secs_f64(t.max(0.0)))),
            };
            *lock(&me.state) = FutState::Pending(f);
            if !finished {
                return Err(pyo3::exceptions::PyTimeoutError::new_err(format!(
                    "{} not finished after {} s",
                    me.what,
                    timeout.unwrap_or(0.0)
                )));
            }
        }
    }

    /// True once the transfer has finished.
    fn done(&self) -> bool {
        match &*lock(&self.state) {
            FutState::Pending(f) => f.is_done(),
            FutState::Waiting => false,
            FutState::Done(_) => true,
        }
    }

    /// Call ``fn(future)`` once the transfer has finished (at once if it
    /// has), with the GIL held, on a helper thread or this one.
    fn add_done_callback(slf: &Bound<'_, Self>, callback: Py<PyAny>) -> PyResult<()> {
        let me = slf.get();
        lock(&me.callbacks).push(callback);
        let now = {
            let mut st = lock(&me.state);
            me.settle(&mut st);
            match &mut *st {
                FutState::Done(_) => true,
                FutState::Waiting => false,
                FutState::Pending(f) => {
                    let waker = Waker::from(Arc::new(WakeNotifier(Mutex::new(Some(
                        slf.clone().unbind(),
                    )))));
                    let mut cx = Context::from_waker(&waker);
                    match Pin::new(&mut *f).poll(&mut cx) {
                        Poll::Ready((r, region)) => {
                            drop(region);
                            *st = FutState::Done(r);
                            true
                        }
                        Poll::Pending => false,
                    }
                }
            }
        };
        if now {
            Future::fire(slf);
        }
        Ok(())
    }

    fn __await__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let aio = slf.py().import("hipfile._aio")?;
        Ok(aio.call_method1("awaitable", (slf,))?.unbind())
    }

    fn __repr__(&self) -> String {
        let state = if self.done() { "done" } else { "pending" };
        format!("<hipfile.Future {} {state}>", self.what)
    }
}

impl Drop for Future {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        if let FutState::Pending(f) = std::mem::replace(st, FutState::Done(Ok(0))) {
            // The engine still writes into (or reads from) the object's
            // memory: wait, then release it with the GIL held.
            Python::attach(|py| {
                let out = py.detach(|| f.wait());
                drop(out);
            });
        }
    }
}

use std::future::Future as _;

// ---------------------------------------------------------------------------
// Batches

/// Read many ``(file, file_offset, size, dest)`` or ``(file, file_offset,
/// size, dest, dest_offset)`` items at once over the batch path (every item
/// in flight together: a loader's whole batch); ``size`` may be None for the
/// rest of ``dest``. Every item is checked before any starts; a ``dest``
/// object shared by several items (one array at many ``dest_offset``s) is
/// asked for its memory, and its stream waited for, once. Returns the byte
/// counts in order; raises the first item's error (EOFError for an item that
/// starts past the end of its file). Blocks without the GIL.
#[pyfunction]
fn read_batch(py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    let mut ops: Vec<(FileHandle, u64, PyRegion)> = Vec::new();
    // Destinations by object identity: a loader's batch is one array at many
    // offsets, and describing it asks its interface (a Python-level property
    // for PyTorch), waits for its stream and classifies its pointer with the
    // GPU runtime. Once per object per call is enough: each Target holds its
    // object, so an address cannot be reused while the map lives.
    let mut dests: HashMap<usize, Target> = HashMap::new();
    for (i, item) in items.try_iter()?.enumerate() {
        let item = item?;
        let t = item.cast::<PyTuple>().map_err(|_| {
            PyTypeError::new_err(format!(
                "item {i}: expected a tuple (file, file_offset, size, dest[, dest_offset])"
            ))
        })?;
        if t.len() != 4 && t.len() != 5 {
            return Err(PyTypeError::new_err(format!(
                "item {i}: expected 4 or 5 fields, got {}",
                t.len()
            )));
        }
        let f = t.get_item(0)?;
        let f = f.cast::<File>().map_err(|_| {
            PyTypeError::new_err(format!("item {i}: the first field is not a hipfile.File"))
        })?;
        let h = f.get().handle()?;
        let off = check_offset(t.get_item(1)?.extract()?)?;
        let size: Option<i64> = t.get_item(2)?.extract()?;
        let dest_off: i64 = if t.len() == 5 {
            t.get_item(4)?.extract()?
        } else {
            0
        };
        let dest = t.get_item(3)?;
        let r = match dests.entry(dest.as_ptr() as usize) {
            Entry::Occupied(d) => d.into_mut().part(size, dest_off),
            Entry::Vacant(v) => describe(py, &dest, true, h.engine(), true)
                .and_then(|d| v.insert(d).part(size, dest_off)),
        }
        .map_err(|e| {
            let msg = format!("item {i}: {}", e.value(py));
            let ty = e.get_type(py);
            PyErr::from_type(ty, msg)
        })?;
        ops.push((h, off, r));
    }
    drop(dests);
    let results = py.detach(|| {
        let reads = ops.iter_mut().map(|(h, off, r)| ReadOp::new(&*h, *off, r));
        engine_read_batch(reads)
    });
    let mut counts = Vec::with_capacity(results.len());
    for (i, (r, (_, off, region))) in results.into_iter().zip(&ops).enumerate() {
        counts.push(match r {
            Ok(n) if n > 0 || region.len() == 0 => n,
            r => read_count(r, region.len(), *off, &format!("read_batch item {i}"))?,
        });
    }
    drop(ops);
    Ok(counts)
}

// ---------------------------------------------------------------------------
// Stream-ordered reads (the C API's hipFileReadAsync)

/// Parameters the stream op reads and writes when the stream reaches it.
#[repr(C)]
struct StreamParams {
    size: usize,
    file_offset: i64,
    buf_offset: i64,
    bytes: isize,
}

/// A read enqueued on a GPU stream by ``File.read_async``.
#[pyclass(module = "hipfile", name = "StreamRead", frozen)]
struct StreamRead {
    params: Mutex<Box<StreamParams>>,
    region: Mutex<Option<PyRegion>>,
    engine: Engine,
    stream: usize,
}

impl StreamRead {
    fn submit(
        engine: Engine,
        c_handle: usize,
        region: PyRegion,
        off: u64,
        stream: usize,
    ) -> PyResult<StreamRead> {
        let mut params = Box::new(StreamParams {
            size: region.len(),
            file_offset: off as i64,
            buf_offset: 0,
            bytes: 0,
        });
        let base = match region.region().memory() {
            hipfile_engine::Memory::Host(p) => p as u64,
            hipfile_engine::Memory::Device { ptr, .. } => ptr,
        };
        let p = &mut *params;
        // SAFETY: the handle is registered; `base` covers `size` bytes held by
        // `region`; the parameter block and the region live in the returned
        // object, whose Drop waits for the stream to pass the op.
        let e = unsafe {
            hipfile::hipFileReadAsync(
                c_handle as *mut std::ffi::c_void,
                base as *mut std::ffi::c_void,
                &mut p.size,
                &mut p.file_offset,
                &mut p.buf_offset,
                &mut p.bytes,
                stream as *mut std::ffi::c_void,
            )
        };
        if e.err != 0 {
            let gpu = (e.err == 5011).then_some(e.hip_drv_err);
            return Err(errors::from_code(e.err, gpu, "read_async"));
        }
        Ok(StreamRead {
            params: Mutex::new(params),
            region: Mutex::new(Some(region)),
            engine,
            stream,
        })
    }

    fn wait_stream(&self, py: Python<'_>) -> PyResult<()> {
        let gpu = self.engine.gpu().clone();
        if gpu.has_devices() {
            let s = Stream(self.stream);
            py.detach(|| gpu.stream_synchronize(s))
                .map_err(|e| to_pyerr(&e.into(), "waiting for the stream"))?;
        }
        Ok(())
    }
}

#[pymethods]
impl StreamRead {
    /// The bytes the read returned: valid once the stream has passed it (0
    /// before); a negative value is the C API's error convention.
    #[getter]
    fn bytes_read(&self) -> isize {
        let p = lock(&self.params);
        // SAFETY: the word may be written by the library's stream thread; a
        // volatile read of an aligned isize sees either value.
        unsafe { std::ptr::read_volatile(&p.bytes) }
    }

    /// Wait for the stream (without the GIL) and return the bytes read, or
    /// raise the read's error.
    fn synchronize(&self, py: Python<'_>) -> PyResult<usize> {
        self.wait_stream(py)?;
        lock(&self.region).take();
        let n = self.bytes_read();
        if n >= 0 {
            return Ok(n as usize);
        }
        // −1: a system error (errno is not carried by the stream op); else
        // −hipFileOpError or −GPU runtime code.
        if n == -1 {
            return Err(to_pyerr(&Error::Os(libc::EIO), "read_async"));
        }
        Err(errors::from_code((-n) as i32, None, "read_async"))
    }
}

impl Drop for StreamRead {
    fn drop(&mut self) {
        if self.region.get_mut().map(|r| r.is_some()).unwrap_or(true) {
            // The stream may not have reached the op yet: its parameters and
            // destination must stay until it has.
            Python::attach(|py| {
                if let Err(e) = self.wait_stream(py) {
                    e.print(py);
                }
            });
        }
    }
}

// ---------------------------------------------------------------------------

#[pymodule]
fn _hipfile(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("HipFileError", m.py().get_type::<HipFileError>())?;
    m.add("VERSION", hipfile_engine::VERSION)?;
    m.add_class::<File>()?;
    m.add_class::<Future>()?;
    m.add_class::<StreamRead>()?;
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(read_file, m)?)?;
    m.add_function(wrap_pyfunction!(read_batch, m)?)?;
    m.add_function(wrap_pyfunction!(configure, m)?)?;
    m.add_function(wrap_pyfunction!(settings, m)?)?;
    m.add_function(wrap_pyfunction!(limit_io_threads, m)?)?;
    m.add_function(wrap_pyfunction!(usage, m)?)?;
    m.add_function(wrap_pyfunction!(shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_available, m)?)?;
    m.add_function(wrap_pyfunction!(runtime, m)?)?;
    m.add_function(wrap_pyfunction!(fork_generation, m)?)?;
    Ok(())
}

/// How many fork()s separate this process from the one that first used
/// hipfile (0 there). Diagnostics.
#[pyfunction]
fn fork_generation() -> u64 {
    fork::generation()
}
