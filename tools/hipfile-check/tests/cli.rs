//! hipfile-check end to end: its JSON names every probe, and its verdict on
//! io_uring matches what this machine does.

use serde_json::Value;
use std::process::Command;

const CHECK: &str = env!("CARGO_BIN_EXE_hipfile-check");

fn test_dir() -> String {
    std::env::var("HIPFILE_TEST_DIR").unwrap_or_else(|_| std::env::temp_dir().display().to_string())
}

fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(CHECK)
        .args(args)
        .env("HIPFILE_GPU_RUNTIME", "none")
        .env("HIPFILE_IO_THREADS", "2")
        .env_remove("HIPFILE_CONFIG")
        .env_remove("CUFILE_ENV_PATH_JSON")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn json_output_covers_every_probe() {
    let dir = test_dir();
    let (code, out) = run(&["--json", "--no-start", "--path", &dir]);
    let j: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    for key in [
        "cuda",
        "hip",
        "io_uring",
        "memlock",
        "o_direct",
        "gds",
        "kfd",
        "library_path",
        "can_run",
    ] {
        assert!(j.get(key).is_some(), "no {key} in {j}");
    }
    let probed = &j["o_direct"][0];
    assert_eq!(probed["path"], dir.as_str());
    assert!(probed["o_direct"]["detail"].is_string());
    assert!(j["memlock"]["bounce_bytes"].as_u64().unwrap() > 0);
    // The verdict on io_uring is the machine's: set up a ring here to compare.
    let here = io_uring::IoUring::new(4).is_ok();
    assert_eq!(j["io_uring"]["ok"], here);
    assert_eq!(code, Some(if here { 0 } else { 1 }));
}

#[test]
fn text_output_starts_an_engine_and_names_the_path() {
    let (code, out) = run(&["--path", &test_dir()]);
    for want in [
        "GPU runtimes",
        "io_uring",
        "memlock",
        "O_DIRECT per file system",
        "GDS",
        "KFD",
        "Path the library takes here",
        "GPU runtime: none",
    ] {
        assert!(out.contains(want), "no {want:?} in:\n{out}");
    }
    if io_uring::IoUring::new(4).is_ok() {
        assert!(out.contains("engine: started with 2 workers"), "{out}");
        assert_eq!(code, Some(0));
    }
}
