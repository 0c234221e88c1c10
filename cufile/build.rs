//! Links libcufile.so with the SONAME NVIDIA's library has (programs record
//! `libcufile.so.0` as NEEDED) and with `libcufile.map`, to which the hipFile
//! names of `ffi/libhipfile.map` are added as local: this library contains
//! hipfile-ffi's code, and rustc would export its #[no_mangle] functions; an
//! exact local name overrides rustc's own export list, a wildcard does not.

use std::path::Path;

fn main() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(here.join("libcufile.map")).expect("cufile/libcufile.map");
    let hip =
        std::fs::read_to_string(here.join("../ffi/libhipfile.map")).expect("ffi/libhipfile.map");
    let hidden: String = hip
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("hipFile") && l.ends_with(';'))
        .map(|l| format!("    {l}\n"))
        .collect();
    assert!(!hidden.is_empty(), "no hipFile names in ffi/libhipfile.map");
    let script = map.replacen("  local:\n", &format!("  local:\n{hidden}"), 1);
    assert_ne!(script, map, "cufile/libcufile.map has no `  local:` line");
    let out = Path::new(&std::env::var("OUT_DIR").unwrap()).join("libcufile.version");
    std::fs::write(&out, script).unwrap();
    println!("cargo:rustc-link-arg-cdylib=-Wl,-soname,libcufile.so.0");
    println!(
        "cargo:rustc-link-arg-cdylib=-Wl,--version-script={}",
        out.display()
    );
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=libcufile.map");
    println!("cargo:rerun-if-changed=../ffi/libhipfile.map");
}
