//! NVIDIA's libcufile, found at an absolute path and loaded apart from every
//! other cuFile library in the process.
//!
//! Three libraries can define the same `cuFile*` names in one process:
//! NVIDIA's libcufile, hipfile-rs's own cuFile front (`libcufile.so.0` from the
//! `cufile/` crate, which a user puts on `LD_LIBRARY_PATH` to run cuFile
//! programs on the engine) and libhipfile, which calls NVIDIA's through this
//! module. The clashes, and how each is avoided:
//!
//! - **Which file.** The loader here opens a path, never the name
//!   `libcufile.so.0`, which `LD_LIBRARY_PATH` may resolve to hipfile-rs's own
//!   front. A path names a file, and glibc maps a file that is not already
//!   mapped (by device and inode) as a new object even when an object with
//!   the same SONAME is loaded. A library that exports [`FRONT_MARKER`] is
//!   hipfile-rs's front and is refused ([`LoadError::OwnFront`]).
//! - **Who sees its symbols.** `RTLD_LOCAL` keeps NVIDIA's `cuFile*` out of the
//!   global scope, so a program (or KvikIO) that resolves `cuFileRead` by name
//!   still gets whichever library it loaded itself.
//! - **What its own calls resolve to.** libcufile 1.15 calls some of its own
//!   exported functions through its PLT: `cuFileDriverClose` jumps to
//!   `cuFileDriverClose_v2@plt`, and `cuFileHandleRegister`,
//!   `cuFileStreamDeregister` and `cuFileGetBARSizeInKB` are called the same
//!   way. A PLT slot is resolved through the global scope first, where
//!   hipfile-rs's front, linked by the program, defines those names: without
//!   `RTLD_DEEPBIND`, NVIDIA's `cuFileDriverClose` would close *our* driver
//!   (`gds/tests/loader.rs` shows it). `RTLD_DEEPBIND` puts the library's own
//!   definitions (and its dependencies') ahead of the global scope for its
//!   references. Its C++ runtime is the process's (one `libstdc++.so.6` per
//!   process, matched by SONAME), and it reaches the CUDA driver through the
//!   process's `libcuda.so.1`, so device pointers and contexts are shared.
//!   One consequence: its calls to `malloc` bind to libc's even where the
//!   program interposes another allocator, which is sound because libcufile
//!   frees only memory it allocated itself.
//! - **What remains.** glibc also matches an already-loaded object by SONAME
//!   when a later `dlopen("libcufile.so.0")` asks by name. Once libhipfile has
//!   loaded NVIDIA's library (only where GDS works, or when
//!   `HIPFILE_BACKEND=cufile` asks for it), a later request for
//!   `libcufile.so.0` by name in that process gets NVIDIA's, not the front:
//!   on such a machine that is the library that should serve anyway.
//!
//! Sanitizer runtimes (ASan, TSan, MSan) abort a process that uses
//! `RTLD_DEEPBIND`; under one, loading is refused ([`LoadError::Sanitizer`]).

use crate::abi::*;
use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use std::path::{Path, PathBuf};

/// Exported by hipfile-rs's cuFile front (`libcufile.so.0` of `cufile/`), and
/// by no NVIDIA library: a loader finding it knows the file is not NVIDIA's.
pub const FRONT_MARKER: &str = "hipfile_cufile_front";

/// Why a libcufile could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// `dlopen` failed (the loader's message).
    Open(String),
    /// The file is hipfile-rs's own cuFile front, not NVIDIA's library.
    OwnFront,
    /// A function every libcufile since 1.7 exports is missing.
    Missing(&'static str),
    /// A sanitizer runtime is loaded, which aborts on `RTLD_DEEPBIND`.
    Sanitizer(&'static str),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Open(why) => write!(f, "dlopen failed: {why}"),
            LoadError::OwnFront => write!(
                f,
                "it is hipfile-rs's own cuFile front (exports {FRONT_MARKER}), not NVIDIA's libcufile"
            ),
            LoadError::Missing(sym) => write!(f, "it does not export {sym}"),
            LoadError::Sanitizer(rt) => write!(
                f,
                "the process runs under a sanitizer ({rt}), which aborts on RTLD_DEEPBIND"
            ),
        }
    }
}

/// The functions of a loaded NVIDIA libcufile. The library is never unloaded
/// (libcufile is built `NODELETE` anyway), so the pointers stay valid.
pub struct CuFile {
    pub path: PathBuf,
    pub handle_register: HandleRegisterFn,
    pub handle_deregister: HandleDeregisterFn,
    pub buf_register: BufRegisterFn,
    pub buf_deregister: BufDeregisterFn,
    pub read: ReadFn,
    pub write: WriteFn,
    pub driver_open: VoidFn,
    /// `cuFileDriverClose_v2` (what the header's `cuFileDriverClose` macro names).
    pub driver_close: VoidFn,
    pub use_count: UseCountFn,
    pub driver_get_properties: GetPropertiesFn,
    pub driver_set_poll_mode: SetPollModeFn,
    pub driver_set_max_direct_io_size: SetSizeFn,
    pub driver_set_max_cache_size: SetSizeFn,
    pub driver_set_max_pinned_mem_size: SetSizeFn,
    pub batch_io_set_up: BatchSetUpFn,
    pub batch_io_submit: BatchSubmitFn,
    pub batch_io_get_status: BatchGetStatusFn,
    pub batch_io_cancel: BatchCancelFn,
    pub batch_io_destroy: BatchDestroyFn,
    pub read_async: AsyncFn,
    pub write_async: AsyncFn,
    pub stream_register: StreamRegisterFn,
    pub stream_deregister: StreamDeregisterFn,
    /// The parameter API arrived in libcufile 1.14; older libraries lack it.
    pub get_version: Option<GetVersionFn>,
    pub get_parameter_size_t: Option<GetParamSizeTFn>,
    pub get_parameter_bool: Option<GetParamBoolFn>,
    pub get_parameter_string: Option<GetParamStringFn>,
    pub set_parameter_size_t: Option<SetParamSizeTFn>,
    pub set_parameter_bool: Option<SetParamBoolFn>,
    pub set_parameter_string: Option<SetParamStringFn>,
}

/// The `dlopen` flags for NVIDIA's library (the module docs say why each).
pub fn load_flags() -> i32 {
    RTLD_NOW | RTLD_LOCAL | libc::RTLD_DEEPBIND
}

/// The sanitizer runtime loaded in this process, if any.
fn sanitizer() -> Option<&'static str> {
    let this = Library::this();
    for (sym, name) in [
        (&b"__asan_init\0"[..], "AddressSanitizer"),
        (b"__tsan_init\0", "ThreadSanitizer"),
        (b"__msan_init\0", "MemorySanitizer"),
    ] {
        // SAFETY: only the symbol's presence is tested; its value is never used.
        if unsafe { this.get::<*const u8>(sym) }.is_ok() {
            return Some(name);
        }
    }
    None
}

impl CuFile {
    /// Loads the libcufile at `path` (absolute) with [`load_flags`] and resolves
    /// its functions.
    pub fn open(path: &Path) -> Result<CuFile, LoadError> {
        if let Some(rt) = sanitizer() {
            return Err(LoadError::Sanitizer(rt));
        }
        // SAFETY: loading runs the library's initialisers. libcufile's are C++
        // static constructors that touch only its own state; the flags keep
        // its symbols out of the global scope (module docs).
        let lib = unsafe { Library::open(Some(path), load_flags()) }
            .map_err(|e| LoadError::Open(e.to_string()))?;
        // SAFETY: presence test of a data symbol; never dereferenced.
        if unsafe { lib.get::<*const u8>(format!("{FRONT_MARKER}\0").as_bytes()) }.is_ok() {
            return Err(LoadError::OwnFront);
        }
        macro_rules! req {
            ($name:literal) => {
                // SAFETY: the symbol is one of cufile.h's functions and the type
                // is its prototype there (abi.rs); the library is never unloaded.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|_| LoadError::Missing($name))?
            };
        }
        macro_rules! opt {
            ($name:literal) => {
                // SAFETY: as for `req!`.
                unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .ok()
                    .map(|s| *s)
            };
        }
        let cu = CuFile {
            path: path.to_path_buf(),
            handle_register: req!("cuFileHandleRegister"),
            handle_deregister: req!("cuFileHandleDeregister"),
            buf_register: req!("cuFileBufRegister"),
            buf_deregister: req!("cuFileBufDeregister"),
            read: req!("cuFileRead"),
            write: req!("cuFileWrite"),
            driver_open: req!("cuFileDriverOpen"),
            driver_close: opt!("cuFileDriverClose_v2")
                .map_or_else(|| Ok(req!("cuFileDriverClose")), Ok)?,
            use_count: req!("cuFileUseCount"),
            driver_get_properties: req!("cuFileDriverGetProperties"),
            driver_set_poll_mode: req!("cuFileDriverSetPollMode"),
            driver_set_max_direct_io_size: req!("cuFileDriverSetMaxDirectIOSize"),
            driver_set_max_cache_size: req!("cuFileDriverSetMaxCacheSize"),
            driver_set_max_pinned_mem_size: req!("cuFileDriverSetMaxPinnedMemSize"),
            batch_io_set_up: req!("cuFileBatchIOSetUp"),
            batch_io_submit: req!("cuFileBatchIOSubmit"),
            batch_io_get_status: req!("cuFileBatchIOGetStatus"),
            batch_io_cancel: req!("cuFileBatchIOCancel"),
            batch_io_destroy: req!("cuFileBatchIODestroy"),
            read_async: req!("cuFileReadAsync"),
            write_async: req!("cuFileWriteAsync"),
            stream_register: req!("cuFileStreamRegister"),
            stream_deregister: req!("cuFileStreamDeregister"),
            get_version: opt!("cuFileGetVersion"),
            get_parameter_size_t: opt!("cuFileGetParameterSizeT"),
            get_parameter_bool: opt!("cuFileGetParameterBool"),
            get_parameter_string: opt!("cuFileGetParameterString"),
            set_parameter_size_t: opt!("cuFileSetParameterSizeT"),
            set_parameter_bool: opt!("cuFileSetParameterBool"),
            set_parameter_string: opt!("cuFileSetParameterString"),
        };
        // Never unloaded: the function pointers above must stay valid, and
        // libcufile's own threads outlive any point where unloading would be safe.
        std::mem::forget(lib);
        Ok(cu)
    }
}

/// Where NVIDIA installs libcufile: the CUDA toolkit (`$CUDA_HOME`, then
/// `/usr/local/cuda`) and the distribution's library directories. With
/// `HIPFILE_CUFILE_LIB` set, that path alone.
pub fn candidates(var: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    if let Some(p) = var("HIPFILE_CUFILE_LIB").filter(|p| !p.is_empty()) {
        return vec![PathBuf::from(p)];
    }
    let arch = if cfg!(target_arch = "aarch64") {
        "sbsa-linux"
    } else {
        "x86_64-linux"
    };
    let triple = if cfg!(target_arch = "aarch64") {
        "aarch64-linux-gnu"
    } else {
        "x86_64-linux-gnu"
    };
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| var(v).filter(|p| !p.is_empty()).map(PathBuf::from))
        .collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    let mut out = Vec::new();
    for r in roots {
        out.push(r.join("lib64/libcufile.so.0"));
        out.push(r.join(format!("targets/{arch}/lib/libcufile.so.0")));
    }
    out.push(PathBuf::from(format!("/usr/lib/{triple}/libcufile.so.0")));
    out.push(PathBuf::from("/usr/lib64/libcufile.so.0"));
    out
}

/// The first of `candidates` that exists.
pub fn find(var: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    candidates(var).into_iter().find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn explicit_library_path_is_the_only_candidate() {
        let c = candidates(&env(&[("HIPFILE_CUFILE_LIB", "/opt/x/libcufile.so.0")]));
        assert_eq!(c, vec![PathBuf::from("/opt/x/libcufile.so.0")]);
    }

    #[test]
    fn cuda_home_comes_before_the_default_toolkit() {
        let c = candidates(&env(&[("CUDA_HOME", "/opt/cuda-13")]));
        assert_eq!(c[0], PathBuf::from("/opt/cuda-13/lib64/libcufile.so.0"));
        let default = c
            .iter()
            .position(|p| p.starts_with("/usr/local/cuda"))
            .unwrap();
        assert!(default >= 2, "{c:?}");
    }

    #[test]
    fn a_missing_file_is_not_found() {
        let f = find(&env(&[(
            "HIPFILE_CUFILE_LIB",
            "/nonexistent/libcufile.so.0",
        )]));
        assert_eq!(f, None);
    }

    #[test]
    fn a_file_that_is_not_a_library_fails_to_load_with_the_loaders_reason() {
        let dir = std::env::temp_dir().join(format!("hipfile-gds-notlib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("libcufile.so.0");
        std::fs::write(&p, b"not an ELF file").unwrap();
        let r = CuFile::open(&p);
        std::fs::remove_dir_all(&dir).unwrap();
        match r {
            Err(LoadError::Open(why)) => assert!(why.contains("libcufile.so.0"), "{why}"),
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("a text file loaded as a library"),
        }
    }
}
