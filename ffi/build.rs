fn main() {
    // Same SONAME as upstream hipFile (SOVERSION = major version 0), so programs
    // linked against either load the other.
    println!("cargo:rustc-link-arg=-Wl,-soname,libhipfile.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
