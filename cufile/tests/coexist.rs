//! hipfile-rs's libcufile.so.0, NVIDIA's libcufile 1.15 (the PyPI wheel,
//! scripts/fetch-cufile-sdk.sh) and libhipfile in one process, loaded the way
//! a program and libhipfile's passthrough load them (hipfile_gds::library says
//! how each clash is avoided). Each scenario runs in a child process of this
//! test binary: a loaded libcufile never unloads (it is built NODELETE), so
//! one process can show only one loading order.

#[path = "../../tests/support/native.rs"]
mod native;

use native::{deps, nvidia_libcufile};
use std::ffi::{c_char, c_int, c_long, c_void, CStr, CString};
use std::path::Path;
use std::process::Command;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CuErr {
    err: i32,
    cu_err: i32,
}

fn dlopen(path: &Path, flags: c_int) -> *mut c_void {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; the libraries' initialisers are theirs.
    let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
    if h.is_null() {
        // SAFETY: dlerror returns the loader's message for the failed call.
        let e = unsafe { CStr::from_ptr(libc::dlerror()) };
        panic!("dlopen {}: {}", path.display(), e.to_string_lossy());
    }
    h
}

fn sym(h: *mut c_void, name: &str) -> *mut c_void {
    let c = CString::new(name).unwrap();
    // SAFETY: a live handle and a NUL-terminated name.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    assert!(!p.is_null(), "{name} not found");
    p
}

/// The file an address lies in.
fn file_of(p: *const c_void) -> String {
    // SAFETY: all-zero is a valid Dl_info; dladdr fills it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a live out-parameter.
    assert_ne!(unsafe { libc::dladdr(p, &mut info) }, 0);
    // SAFETY: dladdr gave a NUL-terminated name owned by the loader.
    unsafe { CStr::from_ptr(info.dli_fname as *const c_char) }
        .to_string_lossy()
        .into_owned()
}

type VoidFn = unsafe extern "C" fn() -> CuErr;
type CountFn = unsafe extern "C" fn() -> c_long;

/// Our libcufile, loaded globally as a program linked against it has it.
struct Ours {
    open: VoidFn,
    count: CountFn,
}

fn load_ours() -> Ours {
    let h = dlopen(
        &deps().join("libcufile.so"),
        libc::RTLD_NOW | libc::RTLD_GLOBAL,
    );
    // SAFETY: cufile.h's prototypes for these names.
    unsafe {
        Ours {
            open: std::mem::transmute::<*mut c_void, VoidFn>(sym(h, "cuFileDriverOpen")),
            count: std::mem::transmute::<*mut c_void, CountFn>(sym(h, "cuFileUseCount")),
        }
    }
}

/// NVIDIA's `cuFileDriverClose`, the export that jumps to
/// `cuFileDriverClose_v2` through libcufile's PLT.
fn nvidia_old_close(lib: &Path) -> VoidFn {
    let h = dlopen(lib, libc::RTLD_NOW | libc::RTLD_NOLOAD);
    // SAFETY: cufile.h's prototype.
    unsafe { std::mem::transmute::<*mut c_void, VoidFn>(sym(h, "cuFileDriverClose")) }
}

/// Runs `scenario` in a child of this test binary and returns its output.
fn in_child(scenario: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_scenario",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HIPFILE_COEXIST_SCENARIO", scenario)
        // NVIDIA's libcufile logs to ./cufile.log unless told otherwise.
        .env(
            "CUFILE_LOGFILE_PATH",
            deps().join(format!("cufile-{scenario}.log")),
        )
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "scenario {scenario} failed:\n{text}");
    text
}

/// The body of each scenario, run only in a child (see `in_child`).
#[test]
#[ignore = "a scenario body: the tests below run it in a child process"]
fn child_scenario() {
    let scenario = std::env::var("HIPFILE_COEXIST_SCENARIO").expect("run by in_child");
    let lib = nvidia_libcufile();
    let ours = load_ours();
    // SAFETY: cufile.h functions without arguments.
    assert_eq!(unsafe { (ours.open)() }, CuErr { err: 0, cu_err: 0 });
    // SAFETY: as above.
    assert_eq!(unsafe { (ours.count)() }, 1);
    match scenario.as_str() {
        "passthrough-loader" => {
            // libhipfile's loader: absolute path, RTLD_LOCAL | RTLD_DEEPBIND.
            let cu = hipfile_gds::CuFile::open(&lib).expect("NVIDIA's libcufile loads");
            let theirs = file_of(cu.driver_open as *const c_void);
            assert!(theirs.contains("cufile-sdk"), "{theirs}");
            assert_ne!(theirs, file_of(ours.open as *const c_void));
            // NVIDIA's close reaches its own _v2: its driver is not open (5001),
            // and ours stays open.
            // SAFETY: no arguments.
            let e = unsafe { nvidia_old_close(&lib)() };
            assert_eq!(e.err, 5001, "{e:?}");
            // SAFETY: as above.
            let count = unsafe { (ours.count)() };
            assert_eq!(count, 1, "NVIDIA's close closed our driver");
            // libhipfile as a third library, with its own state.
            let hip = dlopen(
                &deps().join("libhipfile.so"),
                libc::RTLD_NOW | libc::RTLD_GLOBAL,
            );
            // SAFETY: hipfile.h's prototype.
            let hip_count: unsafe extern "C" fn() -> i64 =
                unsafe { std::mem::transmute(sym(hip, "hipFileUseCount")) };
            // SAFETY: no arguments.
            assert_eq!(unsafe { hip_count() }, 0);
            // SAFETY: as above.
            assert_eq!(unsafe { (ours.count)() }, 1);
            println!("SCENARIO-OK");
        }
        "without-deepbind" => {
            // The same library loaded RTLD_LOCAL only: its PLT call to
            // cuFileDriverClose_v2 binds to ours, in the global scope.
            let _h = dlopen(&lib, libc::RTLD_NOW | libc::RTLD_LOCAL);
            // SAFETY: no arguments.
            let e = unsafe { nvidia_old_close(&lib)() };
            // SAFETY: as above.
            let after = unsafe { (ours.count)() };
            println!("SCENARIO-RESULT close={} our_count={after}", e.err);
        }
        s => panic!("unknown scenario {s}"),
    }
}

#[test]
fn nvidias_library_calls_itself_when_loaded_by_libhipfiles_loader() {
    let out = in_child("passthrough-loader");
    assert!(out.contains("SCENARIO-OK"), "{out}");
}

/// Why the loader uses RTLD_DEEPBIND: without it, NVIDIA's
/// `cuFileDriverClose` closes hipfile-rs's driver.
#[test]
fn without_deepbind_nvidias_library_calls_into_ours() {
    let out = in_child("without-deepbind");
    assert!(out.contains("SCENARIO-RESULT close=0 our_count=0"), "{out}");
}
