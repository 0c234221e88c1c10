//! A data loader in Rust over the safe API: every file of a directory is one
//! sample; each step reads one batch of samples at once (`api::read_batch`)
//! into reused 4 KiB-aligned host buffers, and the program prints samples/s
//! and GB/s per pass. Nothing is trained: the loop measures the reads.
//!
//!     cargo run --release --example loader -- DIR [--batch N] [--passes P]
//!     cargo run --release --example loader -- DIR --make COUNT KIB   # write samples first
//!
//! The engine takes its settings from the HIPFILE_* variables; the first pass
//! reads what the page cache does not hold, later passes what it does.

use hipfile_engine::api::{read_batch, ReadOp};
use hipfile_engine::{Config, Engine, FileHandle, HostBuffer, OpenMode};
use std::path::PathBuf;
use std::time::Instant;

fn usage() -> ! {
    eprintln!("usage: loader DIR [--batch N] [--passes P] [--make COUNT KIB]");
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| usage()));
    let (mut batch, mut passes, mut make) = (64usize, 3usize, None);
    while let Some(a) = args.next() {
        let mut num = || -> usize {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage())
        };
        match a.as_str() {
            "--batch" => batch = num().max(1),
            "--passes" => passes = num().max(1),
            "--make" => make = Some((num(), num())),
            _ => usage(),
        }
    }
    if let Some((count, kib)) = make {
        std::fs::create_dir_all(&dir).expect("create the sample directory");
        for i in 0..count {
            let bytes: Vec<u8> = (0..kib * 1024).map(|j| (i * 31 + j) as u8).collect();
            std::fs::write(dir.join(format!("sample-{i:06}.bin")), bytes).expect("write a sample");
        }
        println!("wrote {count} samples of {kib} KiB to {}", dir.display());
    }
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read the sample directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    if paths.is_empty() {
        eprintln!("{}: no files", dir.display());
        std::process::exit(1);
    }
    let engine = Engine::new(Config::from_env()).expect("start the engine");
    let files: Vec<(FileHandle, usize)> = paths
        .iter()
        .map(|p| {
            let f = engine.open(p, OpenMode::Read).expect("open a sample");
            let len = f.size().expect("stat a sample") as usize;
            (f, len)
        })
        .collect();
    let largest = files.iter().map(|(_, l)| *l).max().unwrap_or(0);
    let mut bufs: Vec<HostBuffer> = (0..batch).map(|_| HostBuffer::new(largest)).collect();
    println!(
        "{} samples (largest {} KiB), batches of {batch}, {} workers",
        files.len(),
        largest >> 10,
        engine.config().io_threads
    );
    for pass in 1..=passes {
        let t0 = Instant::now();
        let mut bytes = 0u64;
        for group in files.chunks(batch) {
            let ops = group
                .iter()
                .zip(bufs.iter_mut())
                .map(|((f, len), b)| ReadOp::new(f, 0, &mut b[..*len]));
            for (r, (_, len)) in read_batch(ops).into_iter().zip(group) {
                let n = r.expect("read a sample");
                assert_eq!(n, *len, "short read of a sample");
                bytes += n as u64;
            }
        }
        let s = t0.elapsed().as_secs_f64();
        println!(
            "pass {pass}: {:.0} samples/s, {:.2} GB/s ({} samples in {:.3} s)",
            files.len() as f64 / s,
            bytes as f64 / s / 1e9,
            files.len(),
            s
        );
    }
}
