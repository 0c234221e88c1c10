//! Engine errors as Python exceptions.

use hipfile_engine::error::{Error, OpError};
use hipfile_engine::gpu::GpuError;
use hipfile_engine::Engine;
use pyo3::prelude::*;

pyo3::create_exception!(
    hipfile,
    HipFileError,
    pyo3::exceptions::PyOSError,
    "A hipFile operation failed.\n\n\
     Attributes: ``code`` (the hipFileOpError_t value, e.g. 5022 for an invalid \
     value; None for a system error), ``errno`` (the system error number, or None), \
     ``gpu_error`` (the GPU runtime's error code, or None) and ``strerror`` (the \
     message). A subclass of OSError."
);

/// The exception for `e` during `what`.
pub(crate) fn to_pyerr(e: &Error, what: &str) -> PyErr {
    let (code, errno, gpu, text) = match e {
        Error::Op(op) => (
            Some(op.code()),
            None,
            None,
            hipfile::op_error_string(op.code())
                .to_string_lossy()
                .into_owned(),
        ),
        Error::Os(n) => (
            None,
            Some(*n),
            None,
            std::io::Error::from_raw_os_error(*n).to_string(),
        ),
        Error::Gpu(g) => {
            let code = match g {
                GpuError::Driver { .. } => OpError::HipDriverError,
                GpuError::InvalidValue(_) => OpError::InvalidValue,
                GpuError::NotPresent(_) => OpError::DeviceNotFound,
            };
            let drv = match g {
                GpuError::Driver { code, .. } => Some(*code),
                _ => None,
            };
            (Some(code.code()), None, drv, g.to_string())
        }
    };
    let msg = match code {
        Some(c) => format!("{what}: {text} (hipFile error {c})"),
        None => format!("{what}: {text}"),
    };
    Python::attach(|py| {
        let err = HipFileError::new_err(msg.clone());
        let v = err.value(py);
        let _ = v.setattr("code", code);
        let _ = v.setattr("errno", errno);
        let _ = v.setattr("gpu_error", gpu);
        let _ = v.setattr("strerror", msg);
        err
    })
}

/// The exception for a C API code (`hipFileError_t.err`, and its GPU code).
pub(crate) fn from_code(code: i32, gpu: Option<i32>, what: &str) -> PyErr {
    let text = hipfile::op_error_string(code)
        .to_string_lossy()
        .into_owned();
    let msg = format!("{what}: {text} (hipFile error {code})");
    Python::attach(|py| {
        let err = HipFileError::new_err(msg.clone());
        let v = err.value(py);
        let _ = v.setattr("code", code);
        let _ = v.setattr("errno", None::<i32>);
        let _ = v.setattr("gpu_error", gpu);
        let _ = v.setattr("strerror", msg);
        err
    })
}

/// Device memory was given but no GPU runtime works in this process.
pub(crate) fn no_gpu(engine: &Engine) -> PyErr {
    let e = hipfile_engine::fork::missing_gpu_error(engine.gpu().as_ref());
    let what = if hipfile_engine::fork::generation() > 0 {
        "device memory in a process forked from one that used hipfile or the GPU; \
         use the 'spawn' or 'forkserver' start method for device I/O in worker processes"
    } else {
        "device memory given but no GPU runtime is usable"
    };
    to_pyerr(&Error::Gpu(e), what)
}
