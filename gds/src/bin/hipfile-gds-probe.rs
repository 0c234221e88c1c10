//! `hipfile-gds-probe --lib PATH --file PATH`: asks NVIDIA's libcufile at PATH
//! whether GDS works for a new file at the second PATH, and prints one result
//! line (`hipfile_gds::probe::Outcome::to_line`). libhipfile runs it in a
//! child process with a time limit before passing any call to libcufile; it
//! is also useful by hand, to see what libhipfile would decide.

use hipfile_gds::probe::{self, Outcome};
use std::path::PathBuf;

fn main() {
    let mut lib = None;
    let mut file = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--lib") => lib = args.next().map(PathBuf::from),
            Some("--file") => file = args.next().map(PathBuf::from),
            Some("-h" | "--help") => {
                println!(
                    "usage: hipfile-gds-probe --lib /path/to/libcufile.so.0 --file /dir/on/target/fs/probe\n\
                     Opens NVIDIA's cuFile driver with compatibility mode off, checks for nvidia-fs or\n\
                     PCI P2PDMA, and registers a new O_DIRECT file (created and removed). Prints one\n\
                     line starting with {}.",
                    probe::LINE_PREFIX
                );
                return;
            }
            _ => {
                eprintln!("hipfile-gds-probe: unknown argument {a:?} (see --help)");
                std::process::exit(2);
            }
        }
    }
    let (Some(lib), Some(file)) = (lib, file) else {
        eprintln!("hipfile-gds-probe: --lib and --file are required (see --help)");
        std::process::exit(2);
    };
    let outcome = probe::run(&lib, &file);
    println!("{}", outcome.to_line());
    eprintln!("hipfile-gds-probe: {}", outcome.describe());
    std::process::exit(if matches!(outcome, Outcome::Works { .. }) {
        0
    } else {
        1
    });
}
