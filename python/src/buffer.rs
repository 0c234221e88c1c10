//! Python objects as memory regions: `__cuda_array_interface__`, the buffer
//! protocol and DLPack, checked (dtype, contiguity, writability) and kept
//! alive for as long as a transfer uses them.

use hipfile_engine::api::{IoBuf, IoBufMut, Region};
use hipfile_engine::gpu::{MemKind, Stream};
use hipfile_engine::Engine;
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Arc;

/// `Py_buffer`, as CPython has laid it out since 3.3 (it joined the limited
/// API unchanged in 3.11; this wheel also serves 3.10, whose limited
/// API lacks the declaration but whose interpreters export the same calls).
#[repr(C)]
pub(crate) struct RawBuffer {
    buf: *mut c_void,
    obj: *mut pyo3::ffi::PyObject,
    len: isize,
    itemsize: isize,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut isize,
    strides: *mut isize,
    suboffsets: *mut isize,
    internal: *mut c_void,
}

const PYBUF_FORMAT: c_int = 0x0004;
const PYBUF_STRIDES: c_int = 0x0010 | 0x0008;

extern "C" {
    fn PyObject_GetBuffer(
        obj: *mut pyo3::ffi::PyObject,
        view: *mut RawBuffer,
        flags: c_int,
    ) -> c_int;
    fn PyBuffer_Release(view: *mut RawBuffer);
    fn PyObject_CheckBuffer(obj: *mut pyo3::ffi::PyObject) -> c_int;
    fn PyBuffer_IsContiguous(view: *const RawBuffer, order: c_char) -> c_int;
}

/// DLPack's `DLTensor` and `DLManagedTensor` (dlpack.h, the unversioned ABI
/// every producer still exports from `__dlpack__()`).
#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device_type: i32,
    device_id: i32,
    ndim: i32,
    dtype_code: u8,
    dtype_bits: u8,
    dtype_lanes: u16,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

const DL_CPU: i32 = 1;
const DL_CUDA: i32 = 2;
const DL_CUDA_HOST: i32 = 3;
const DL_ROCM: i32 = 10;
const DL_ROCM_HOST: i32 = 11;
const DL_CUDA_MANAGED: i32 = 13;
const DL_OPAQUE_HANDLE: u8 = 3;

/// What keeps an object's memory in place while a transfer uses it.
pub(crate) enum Keep {
    /// A buffer-protocol export (the exporter may not move or resize the
    /// memory while it is held; released with the GIL held). It is filled
    /// in place inside the `Arc` and never moves: an exporter may point the
    /// view's `shape` at its own `len` (CPython's `PyBuffer_FillInfo`
    /// does).
    View(RawBuffer),
    /// The objects that own the memory (the array, a DLPack capsule).
    Objects { _held: Vec<Py<PyAny>> },
}

// SAFETY: the view's pointers are only used to release it, which happens
// with the GIL held (see Drop); `Py<PyAny>` is Send.
unsafe impl Send for Keep {}
// SAFETY: nothing reads the view's fields through a shared reference.
unsafe impl Sync for Keep {}

impl Drop for Keep {
    fn drop(&mut self) {
        if let Keep::View(view) = self {
            Python::attach(|_| {
                // SAFETY: the view was filled by PyObject_GetBuffer and is released once,
                // with the GIL held (a view the export failed to fill is still all
                // zeros, and releasing it does nothing).
                unsafe { PyBuffer_Release(view) };
            });
        }
    }
}

/// An object's whole memory, described and held. Parts of it share the hold.
pub(crate) struct Target {
    /// Start of the memory and whether it is device memory (with its device).
    region: Region,
    keep: Arc<Keep>,
}

/// A part of an object's memory handed to the engine.
pub(crate) struct PyRegion {
    region: Region,
    _keep: Arc<Keep>,
}

impl PyRegion {
    pub(crate) fn len(&self) -> usize {
        self.region.len()
    }

    pub(crate) fn region(&self) -> Region {
        self.region
    }
}

// SAFETY: the region lies inside the memory `_keep` holds in place (checked
// in `Target::part`), which stays valid while the PyRegion exists, wherever
// it is moved; the transfer functions check writability before making one
// for a destination.
unsafe impl IoBuf for PyRegion {
    fn io_region(&self) -> Region {
        self.region
    }
}

// SAFETY: as above; destinations are refused when read-only or of object dtype.
unsafe impl IoBufMut for PyRegion {
    fn io_region_mut(&mut self) -> Region {
        self.region
    }
}

impl Target {
    /// `[buf_offset, buf_offset + size)` of the memory (`size` defaults to the rest).
    pub(crate) fn part(&self, size: Option<i64>, buf_offset: i64) -> PyResult<PyRegion> {
        let total = self.region.len() as i64;
        if buf_offset < 0 || buf_offset > total {
            return Err(PyValueError::new_err(format!(
                "buf_offset {buf_offset} is outside the buffer (0..={total} bytes)"
            )));
        }
        let size = size.unwrap_or(total - buf_offset);
        if size < 0 || size > total - buf_offset {
            return Err(PyValueError::new_err(format!(
                "size {size} at buf_offset {buf_offset} does not fit in the buffer of {total} bytes"
            )));
        }
        let region = match self.region.memory() {
            hipfile_engine::Memory::Host(p) => {
                Region::host((p + buf_offset as usize) as *const u8, size as usize)
            }
            hipfile_engine::Memory::Device { ptr, device } => {
                Region::device(ptr + buf_offset as u64, size as usize, device)
            }
        };
        Ok(PyRegion {
            region,
            _keep: self.keep.clone(),
        })
    }
}

/// C-order contiguity from a shape and strides in units of `unit` bytes
/// per stride step (dimensions of length 1 may have any stride).
fn c_contiguous(shape: &[i64], strides: &[i64], itemsize: i64, unit: i64) -> bool {
    let mut expect = itemsize;
    for (&n, &s) in shape.iter().zip(strides).rev() {
        if n == 0 {
            return true;
        }
        if n != 1 && s * unit != expect {
            return false;
        }
        expect *= n;
    }
    true
}

fn readonly_error(obj: &Bound<'_, PyAny>) -> PyErr {
    PyValueError::new_err(format!(
        "the destination {} is read-only; pass a writable array",
        type_name(obj)
    ))
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into())
}

fn non_contiguous_error(obj: &Bound<'_, PyAny>) -> PyErr {
    PyValueError::new_err(format!(
        "the {} is not C-contiguous; pass a contiguous array (e.g. .contiguous() or \
         numpy.ascontiguousarray)",
        type_name(obj)
    ))
}

/// Describe `obj`'s memory. `writable`: it is a read's destination.
/// `sync_stream`: honour a `__cuda_array_interface__` stream by waiting for
/// it (CAI v3 asks a consumer to); a stream-ordered read passes false.
pub(crate) fn describe(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    writable: bool,
    engine: &Engine,
    sync_stream: bool,
) -> PyResult<Target> {
    // An exporter of the buffer protocol (NumPy, bytearray, memoryview,
    // mmap) is host memory: the protocol hands out CPU-addressable bytes. It
    // is asked first because asking for a missing
    // `__cuda_array_interface__` builds and formats an AttributeError, a
    // third of what a 4 KiB read from Python spent on top of `os.preadv`.
    // An object that also has the interface (a mapped host array) names the
    // same bytes through both.
    // SAFETY: `obj` is a live object; the GIL is held.
    if unsafe { PyObject_CheckBuffer(obj.as_ptr()) } != 0 {
        if let Some(t) = from_buffer(py, obj, writable)? {
            return Ok(t);
        }
    }
    if let Some(t) = from_torch(py, obj, writable, engine)? {
        return Ok(t);
    }
    if let Ok(cai) = obj.getattr("__cuda_array_interface__") {
        return from_cai(py, obj, &cai, writable, engine, sync_stream);
    }
    if obj.hasattr("__dlpack__")? {
        return from_dlpack(obj, engine);
    }
    Err(PyTypeError::new_err(format!(
        "a {} exposes neither __cuda_array_interface__, the buffer protocol nor DLPack",
        type_name(obj)
    )))
}

/// `torch.Tensor`, `torch.nn.Parameter` and `torch.strided`, once the
/// application has imported torch (this module never imports it).
struct Torch {
    tensor: Py<PyAny>,
    parameter: Py<PyAny>,
    strided: Py<PyAny>,
}

static TORCH: PyOnceLock<Torch> = PyOnceLock::new();

fn torch_types(py: Python<'_>) -> Option<&'static Torch> {
    if let Some(t) = TORCH.get(py) {
        return Some(t);
    }
    // SAFETY: the GIL is held; PyImport_GetModule looks in sys.modules only
    // and returns a new reference or NULL (not imported, or an error).
    let m = unsafe { pyo3::ffi::PyImport_GetModule(intern!(py, "torch").as_ptr()) };
    if m.is_null() {
        // SAFETY: the GIL is held.
        if unsafe { !pyo3::ffi::PyErr_Occurred().is_null() } {
            drop(PyErr::take(py));
        }
        return None;
    }
    // SAFETY: a new, non-NULL reference.
    let m = unsafe { Bound::from_owned_ptr(py, m) };
    let tensor = m.getattr("Tensor").ok()?;
    let parameter = m.getattr("nn").ok()?.getattr("Parameter").ok()?;
    let strided = m.getattr("strided").ok()?;
    Some(TORCH.get_or_init(py, || Torch {
        tensor: tensor.unbind(),
        parameter: parameter.unbind(),
        strided: strided.unbind(),
    }))
}

/// A plain CUDA `torch.Tensor` or `nn.Parameter` (exactly those types,
/// contiguous, strided) by its C-level accessors. PyTorch builds `__cuda_array_interface__` in
/// Python on every access (a dict, a tuple of the shape, a dtype table
/// lookup): 2–4 µs with the GIL held on an H100 machine's CPU, which a
/// loader's threads take turns on. Every other tensor (another subclass,
/// whose data_ptr may not be its memory; a view with strides; one on the
/// CPU) returns `None` and goes through the interface, with PyTorch's own
/// checks and messages.
///
/// A read into a tensor that requires grad is refused here with the remedy:
/// bytes written behind autograd's back would corrupt the graph, and the
/// interface and DLPack refuse such a tensor with errors of their own whose
/// type differs between PyTorch releases. A write from one only reads it
/// (a checkpoint of a model's parameters).
fn from_torch(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    writable: bool,
    engine: &Engine,
) -> PyResult<Option<Target>> {
    let Some(torch) = torch_types(py) else {
        return Ok(None);
    };
    let ty = obj.get_type();
    let known = ty.is(torch.tensor.bind(py)) || ty.is(torch.parameter.bind(py));
    if !known || !obj.getattr(intern!(py, "is_cuda"))?.is_truthy()? {
        return Ok(None);
    }
    if writable && obj.getattr(intern!(py, "requires_grad"))?.is_truthy()? {
        return Err(PyValueError::new_err(
            "cannot read into a tensor that requires grad: read into t.detach() \
             (the same memory) or a tensor made under torch.no_grad()",
        ));
    }
    let plain = obj
        .getattr(intern!(py, "layout"))?
        .is(torch.strided.bind(py))
        && obj
            .call_method0(intern!(py, "is_contiguous"))?
            .is_truthy()?;
    if !plain {
        return Ok(None);
    }
    let ptr: u64 = obj.call_method0(intern!(py, "data_ptr"))?.extract()?;
    let len: usize = obj.getattr(intern!(py, "nbytes"))?.extract()?;
    Ok(Some(Target {
        region: device_region(engine, ptr, len)?,
        keep: Arc::new(Keep::Objects {
            _held: vec![obj.clone().unbind()],
        }),
    }))
}

fn device_region(engine: &Engine, ptr: u64, len: usize) -> PyResult<Region> {
    if len == 0 {
        return Ok(Region::host(std::ptr::null(), 0));
    }
    let gpu = engine.gpu();
    if !gpu.has_devices() {
        return Err(crate::errors::no_gpu(engine));
    }
    let info = gpu
        .pointer_info(ptr)
        .map_err(|e| crate::errors::to_pyerr(&e.into(), "classifying the array's pointer"))?;
    Ok(match info.kind {
        MemKind::Device { device } => Region::device(ptr, len, device),
        _ => Region::host(ptr as *const u8, len),
    })
}

fn from_cai(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    cai: &Bound<'_, PyAny>,
    writable: bool,
    engine: &Engine,
    sync_stream: bool,
) -> PyResult<Target> {
    let cai = cai
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err("__cuda_array_interface__ is not a dict"))?;
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        cai.get_item(k)?
            .ok_or_else(|| PyTypeError::new_err(format!("__cuda_array_interface__ lacks '{k}'")))
    };
    let (ptr, readonly): (u64, bool) = get("data")?.extract()?;
    let shape: Vec<i64> = get("shape")?.extract()?;
    let typestr: String = get("typestr")?.extract()?;
    let kind = typestr.chars().nth(1).unwrap_or('?');
    let itemsize: i64 = typestr.get(2..).and_then(|s| s.parse().ok()).unwrap_or(0);
    if kind == 'O' || itemsize <= 0 {
        return Err(PyTypeError::new_err(format!(
            "dtype {typestr:?} cannot hold raw file bytes; use a numeric dtype"
        )));
    }
    if writable && readonly {
        return Err(readonly_error(obj));
    }
    if let Some(strides) = cai.get_item("strides")? {
        if !strides.is_none() {
            let strides: Vec<i64> = strides.extract()?;
            if !c_contiguous(&shape, &strides, itemsize, 1) {
                return Err(non_contiguous_error(obj));
            }
        }
    }
    let len = shape.iter().product::<i64>() * itemsize;
    if sync_stream {
        if let Some(s) = cai.get_item("stream")? {
            if !s.is_none() {
                let s: usize = s.extract()?;
                let gpu = engine.gpu().clone();
                py.detach(|| gpu.stream_synchronize(Stream(s)))
                    .map_err(|e| {
                        crate::errors::to_pyerr(&e.into(), "waiting for the array's stream")
                    })?;
            }
        }
    }
    Ok(Target {
        region: device_region(engine, ptr, len as usize)?,
        keep: Arc::new(Keep::Objects {
            _held: vec![obj.clone().unbind()],
        }),
    })
}

/// The buffer protocol; `None` when `obj` does not export it.
fn from_buffer(py: Python<'_>, obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Option<Target>> {
    // One allocation holds the hold and the view, filled where it stays.
    // SAFETY: an all-zero Py_buffer is the documented "empty" state.
    let mut keep = Arc::new(Keep::View(unsafe { std::mem::zeroed() }));
    let Some(Keep::View(view)) = Arc::get_mut(&mut keep) else {
        unreachable!("a fresh Arc has one owner")
    };
    // SAFETY: `obj` is a live object and `view` a writable Py_buffer; the GIL is held.
    let rc = unsafe { PyObject_GetBuffer(obj.as_ptr(), view, PYBUF_STRIDES | PYBUF_FORMAT) };
    if rc != 0 {
        let err = PyErr::fetch(py);
        if err.is_instance_of::<PyTypeError>(py) {
            return Ok(None);
        }
        return Err(err);
    }
    let Keep::View(v) = &*keep else {
        unreachable!("made as a view above")
    };
    if !v.format.is_null() {
        // SAFETY: a non-NULL format is a NUL-terminated string owned by the export.
        let fmt = unsafe { CStr::from_ptr(v.format) };
        if fmt.to_bytes().contains(&b'O') {
            return Err(PyTypeError::new_err(format!(
                "the buffer holds Python objects (format {:?}); use a numeric dtype",
                fmt.to_string_lossy()
            )));
        }
    }
    if writable && v.readonly != 0 {
        return Err(readonly_error(obj));
    }
    // SAFETY: `v` is a filled view.
    if unsafe { PyBuffer_IsContiguous(v, b'C' as c_char) } != 1 {
        return Err(non_contiguous_error(obj));
    }
    let region = Region::host(v.buf as *const u8, v.len.max(0) as usize);
    Ok(Some(Target { region, keep }))
}

fn from_dlpack(obj: &Bound<'_, PyAny>, engine: &Engine) -> PyResult<Target> {
    let (dev_type, dev_id): (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
    let capsule = obj.call_method0("__dlpack__")?;
    // SAFETY: the GIL is held; a capsule of another name gives NULL and an exception.
    let p = unsafe { pyo3::ffi::PyCapsule_GetPointer(capsule.as_ptr(), c"dltensor".as_ptr()) };
    if p.is_null() {
        return Err(PyErr::take(obj.py()).unwrap_or_else(|| {
            PyBufferError::new_err("__dlpack__() did not return a 'dltensor' capsule")
        }));
    }
    // SAFETY: a "dltensor" capsule holds a DLManagedTensor that lives until
    // the capsule is destroyed (we keep it) and is not renamed "used_dltensor".
    let t = unsafe { &(*(p as *const DlManagedTensor)).dl_tensor };
    if t.dtype_code == DL_OPAQUE_HANDLE || t.dtype_bits % 8 != 0 {
        return Err(PyTypeError::new_err(format!(
            "DLPack dtype (code {}, {} bits) cannot hold raw file bytes",
            t.dtype_code, t.dtype_bits
        )));
    }
    let itemsize = (t.dtype_bits as i64 / 8) * t.dtype_lanes.max(1) as i64;
    let ndim = t.ndim.max(0) as usize;
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        // SAFETY: DLPack: `shape` has `ndim` entries.
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    if !t.strides.is_null() && ndim > 0 {
        // SAFETY: DLPack: non-NULL `strides` has `ndim` entries, in elements.
        let strides = unsafe { std::slice::from_raw_parts(t.strides, ndim) };
        if !c_contiguous(shape, strides, itemsize, itemsize) {
            return Err(non_contiguous_error(obj));
        }
    }
    let len = (shape.iter().product::<i64>() * itemsize).max(0) as usize;
    let ptr = t.data as u64 + t.byte_offset;
    let region = match dev_type {
        DL_CPU | DL_CUDA_HOST | DL_ROCM_HOST | DL_CUDA_MANAGED => {
            Region::host(ptr as *const u8, len)
        }
        DL_CUDA | DL_ROCM => {
            let r = device_region(engine, ptr, len)?;
            if r.is_device()
                && r.memory()
                    != (hipfile_engine::Memory::Device {
                        ptr,
                        device: dev_id,
                    })
            {
                return Err(PyValueError::new_err(format!(
                    "DLPack says device {dev_id}, the GPU runtime disagrees"
                )));
            }
            r
        }
        other => {
            return Err(PyTypeError::new_err(format!(
                "DLPack device type {other} is not host, CUDA or ROCm memory"
            )))
        }
    };
    Ok(Target {
        region,
        keep: Arc::new(Keep::Objects {
            _held: vec![obj.clone().unbind(), capsule.unbind()],
        }),
    })
}

/// A stream handle from an int, a `torch.cuda.Stream` (`cuda_stream`) or a
/// CuPy stream (`ptr`).
pub(crate) fn stream_handle(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    if let Ok(v) = obj.extract::<usize>() {
        return Ok(v);
    }
    for attr in ["cuda_stream", "ptr", "handle"] {
        if let Ok(v) = obj.getattr(attr) {
            if let Ok(v) = v.extract::<usize>() {
                return Ok(v);
            }
        }
    }
    Err(PyTypeError::new_err(format!(
        "a {} is not a stream: pass an int handle, a torch.cuda.Stream or a CuPy stream",
        type_name(obj)
    )))
}
