//! hipfile-bench as a user runs it: job files, every output format, logs,
//! fio's size rule, many files, the cache state it reports. Files go under
//! HIPFILE_TEST_DIR (a disk-backed directory: invalidate and O_DIRECT work
//! there). The GPU paths run over the engine's GPU test double.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BENCH: &str = env!("CARGO_BIN_EXE_hipfile-bench");

fn test_dir(tag: &str) -> PathBuf {
    let base = std::env::var_os("HIPFILE_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    let d = base.join(format!("bench-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn bench(dir: &Path, args: &[&str]) -> Output {
    Command::new(BENCH)
        .current_dir(dir)
        .arg("--eta=never")
        .args(args)
        .output()
        .expect("running hipfile-bench")
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let o = bench(dir, args);
    assert!(
        o.status.success(),
        "hipfile-bench {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn json(dir: &Path, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--output-format=json");
    serde_json::from_str(&ok(dir, &a)).expect("one JSON report on stdout")
}

fn gpu_double(dir: &Path, args: &[&str]) -> Output {
    Command::new(BENCH)
        .current_dir(dir)
        .env("HIPFILE_BENCH_TEST_GPU", "1")
        .arg("--eta=never")
        .args(args)
        .output()
        .unwrap()
}

const JOB: &str = "\
[global]
filename=data.bin
size=1m
bs=64k
ioengine=posix
mem=host
numjobs=2

[seq]
rw=read

[rand]
stonewall
rw=randread
";

#[test]
fn numjobs_gives_every_clone_the_whole_size() {
    let d = test_dir("numjobs");
    let r = json(
        &d,
        &[
            "--name=n",
            "--filename=f",
            "--size=1m",
            "--bs=64k",
            "--numjobs=3",
            "--ioengine=posix",
            "--group_reporting",
        ],
    );
    assert_eq!(r["jobs"][0]["read"]["io_bytes"], 3 << 20);
    assert_eq!(r["jobs"].as_array().unwrap().len(), 1);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_job_file_runs_as_its_showcmd_line_does() {
    let d = test_dir("showcmd");
    std::fs::write(d.join("j.fio"), JOB).unwrap();
    let line = ok(&d, &["--showcmd", "j.fio"]);
    let args: Vec<&str> = line.split_whitespace().skip(1).collect();
    let from_file = json(&d, &["j.fio"]);
    let from_line = json(&d, &args);
    let summary = |r: &Value| -> Vec<(String, u64, u64)> {
        r["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| {
                (
                    j["jobname"].as_str().unwrap().to_string(),
                    j["groupid"].as_u64().unwrap(),
                    j["read"]["io_bytes"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(summary(&from_file), summary(&from_line), "{line}");
    assert_eq!(summary(&from_file).len(), 4);
    assert_eq!(summary(&from_file)[3].1, 1, "the stonewall starts group 1");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn parse_only_checks_a_job_file_without_running_it() {
    let d = test_dir("parseonly");
    std::fs::write(d.join("j.fio"), JOB).unwrap();
    assert_eq!(ok(&d, &["--parse-only", "j.fio"]), "");
    assert!(!d.join("data.bin").exists());
    std::fs::write(d.join("bad.fio"), "[x]\nbs=12q\n").unwrap();
    let o = bench(&d, &["--parse-only", "bad.fio"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad.fio:2"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn readonly_refuses_a_job_that_writes() {
    let d = test_dir("readonly");
    let o = bench(
        &d,
        &[
            "--readonly",
            "--name=w",
            "--filename=f",
            "--size=1m",
            "--rw=randrw",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--readonly"));
    assert!(!d.join("f").exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn json_plus_bins_count_every_io() {
    let d = test_dir("jsonplus");
    let out = ok(
        &d,
        &[
            "--name=p",
            "--filename=f",
            "--size=1m",
            "--bs=16k",
            "--ioengine=posix",
            "--lat_percentiles=1",
            "--output-format=json+",
        ],
    );
    let r: Value = serde_json::from_str(&out).unwrap();
    let read = &r["jobs"][0]["read"];
    for kind in ["clat_ns", "lat_ns"] {
        let bins = read[kind]["bins"].as_object().expect("bins in json+");
        let n: u64 = bins.values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(n, read["total_ios"].as_u64().unwrap(), "{kind}");
        assert!(bins.keys().all(|k| k.parse::<u64>().is_ok()));
    }
    assert!(read["slat_ns"].get("bins").is_none());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn terse_has_one_line_per_job_with_fios_field_count() {
    let d = test_dir("terse");
    let out = ok(
        &d,
        &[
            "--name=t",
            "--filename=f",
            "--size=1m",
            "--ioengine=posix",
            "--output-format=terse",
            "--description=a b",
        ],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1);
    let fields: Vec<&str> = lines[0].split(';').collect();
    // 5 + 2 x 41 + 5 + 7 + 10 + 12, then 9 per disk, then the description.
    assert_eq!((fields.len() - 122) % 9, 0, "{}", lines[0]);
    assert_eq!(fields[0], "3");
    assert_eq!(fields[2], "t");
    assert_eq!(fields[5], "1024", "KiB read");
    assert_eq!(*fields.last().unwrap(), "a b");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn status_interval_prints_the_report_while_the_job_runs() {
    let d = test_dir("status");
    let out = ok(
        &d,
        &[
            "--name=s",
            "--filename=f",
            "--size=1m",
            "--bs=4k",
            "--ioengine=posix",
            "--time_based",
            "--runtime=2",
            "--invalidate=0",
            "--status-interval=200ms",
            "--output-format=json",
        ],
    );
    let mut reports = 0;
    let mut it = serde_json::Deserializer::from_str(&out).into_iter::<Value>();
    for r in it.by_ref() {
        let r = r.expect("each report is JSON");
        assert!(r["jobs"][0]["read"]["io_bytes"].is_u64());
        reports += 1;
    }
    assert!(
        reports >= 3,
        "{reports} reports: the interval ones and the final one"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn eta_always_shows_fios_status_line_on_stderr() {
    let d = test_dir("eta");
    let o = Command::new(BENCH)
        .current_dir(&d)
        .args([
            "--eta=always",
            "--name=e",
            "--filename=f",
            "--size=1m",
            "--ioengine=posix",
            "--time_based",
            "--runtime=1500ms",
            "--invalidate=0",
            "--output-format=terse",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("Jobs: 1 (f=1): [R(1)]"), "{err}");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("Jobs:"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_depth_a_synchronous_engine_cannot_keep_is_an_error() {
    let d = test_dir("depth");
    for engine in ["hipfile-sync", "psync", "posix", "libcufile"] {
        let o = bench(
            &d,
            &[
                "--name=d",
                "--filename=f",
                "--size=1m",
                "--iodepth=16",
                &format!("--ioengine={engine}"),
            ],
        );
        assert_eq!(o.status.code(), Some(2), "{engine}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("iodepth=16 cannot be kept"), "{engine}: {err}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn fio_engine_names_run_our_engines() {
    let d = test_dir("engines");
    // `raw` measures io_uring itself: where the suite runs with io_uring
    // refused (scripts/test.sh), it can only fail, and says so.
    let uring = std::env::var("HIPFILE_TEST_EXPECT_BACKEND").as_deref() != Ok("posix");
    for (name, ours, depth) in [
        ("psync", "posix", "1"),
        ("pvsync2", "posix", "1"),
        ("io_uring", "raw", "8"),
        ("libaio", "raw", "8"),
    ] {
        if ours == "raw" && !uring {
            continue;
        }
        let r = json(
            &d,
            &[
                "--name=e",
                "--filename=f",
                "--size=1m",
                &format!("--ioengine={name}"),
                &format!("--iodepth={depth}"),
            ],
        );
        let h = &r["jobs"][0]["hipfile"];
        assert_eq!(h["ioengine"], ours, "{name}");
        assert_eq!(h["ioengine_as"], name);
        assert_eq!(h["mem"], "host");
        assert_eq!(h["direct"], false, "fio's default for {name} is buffered");
        assert_eq!(r["jobs"][0]["read"]["io_bytes"], 1 << 20);
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn many_files_are_laid_out_and_read() {
    let d = test_dir("many");
    let r = json(
        &d,
        &[
            "--name=m",
            "--directory=set",
            "--nrfiles=64",
            "--filesize=16k",
            "--bs=16k",
            "--ioengine=posix",
            "--file_service_type=random",
            "--verify=1",
        ],
    );
    assert_eq!(r["jobs"][0]["read"]["io_bytes"], 64 << 14);
    assert_eq!(r["jobs"][0]["read"]["total_ios"], 64);
    assert_eq!(r["jobs"][0]["hipfile"]["files"], 64);
    assert_eq!(std::fs::read_dir(d.join("set")).unwrap().count(), 64);
    assert!(d.join("set/m.0.63").exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn open_per_io_and_unregistered_buffers_run_through_the_library() {
    let d = test_dir("loader");
    let o = gpu_double(
        &d,
        &[
            "--name=l",
            "--directory=set",
            "--nrfiles=32",
            "--filesize=64k",
            "--bs=64k",
            "--numjobs=2",
            "--ioengine=hipfile-sync",
            "--mem=device",
            "--open_per_io=1",
            "--buf_register=0",
            "--file_service_type=sequential",
            "--verify=1",
            "--group_reporting",
            "--output-format=json",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let j = &r["jobs"][0];
    assert_eq!(j["read"]["io_bytes"], 2 * 32 * (64 << 10));
    assert_eq!(j["hipfile"]["open_per_io"], true);
    assert_eq!(j["hipfile"]["buf_registered"], false);
    assert_eq!(j["hipfile"]["files"], 64);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn hipfile_batch_keeps_a_depth_beyond_one_batch_in_flight() {
    let d = test_dir("batch");
    let o = gpu_double(
        &d,
        &[
            "--name=b",
            "--filename=f",
            "--size=16m",
            "--bs=16k",
            "--rw=randread",
            "--ioengine=hipfile-batch",
            "--iodepth=300",
            "--verify=1",
            "--output-format=json",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let j = &r["jobs"][0];
    assert_eq!(j["read"]["total_ios"], 1024);
    assert!(j["iodepth_level"][">=64"].as_f64().unwrap() > 0.0);
    assert_eq!(j["latency_depth"], 300);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_report_states_the_page_cache_state_it_measured() {
    let d = test_dir("cache");
    let base = [
        "--name=c",
        "--filename=f",
        "--size=2m",
        "--ioengine=posix",
        "--verify=1",
    ];
    let run = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        let r = json(&d, &a);
        (
            r["hipfile"]["cache"].as_str().unwrap().to_string(),
            r["hipfile"]["cache_resident_pct"].as_f64(),
        )
    };
    assert_eq!(run(&["--pre_read=1"]).0, "hot");
    // A read-only run with verify leaves the cache as it found it.
    assert_eq!(run(&["--invalidate=0"]).0, "hot");
    let (cold, pct) = run(&["--invalidate=1"]);
    // tmpfs keeps its pages whatever is asked (then "hot" is the truth).
    if pct.is_some_and(|p| p < 5.0) {
        assert_eq!(cold, "cold");
    }
    let text = ok(&d, &[&base[..], &["--pre_read=1"]].concat());
    assert!(text.contains("page cache hot (100% cached)"), "{text}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn verified_writes_are_read_back_and_unlink_removes_the_files() {
    let d = test_dir("writes");
    let o = bench(
        &d,
        &[
            "--name=w",
            "--directory=out",
            "--nrfiles=4",
            "--filesize=256k",
            "--bs=64k",
            "--rw=randwrite",
            "--ioengine=posix",
            "--verify=1",
            "--fsync=4",
            "--end_fsync=1",
            "--unlink=1",
            "--output-format=json",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let j = &r["jobs"][0];
    assert_eq!(j["write"]["io_bytes"], 1 << 20);
    assert!(j["sync"]["total_ios"].as_u64().unwrap() >= 4);
    assert!(String::from_utf8_lossy(&o.stderr).contains("1024KiB written and read back"));
    assert_eq!(std::fs::read_dir(d.join("out")).unwrap().count(), 0);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn logs_are_numbered_per_job_or_shared() {
    let d = test_dir("logs");
    let args = [
        "--name=l",
        "--filename=f",
        "--size=256k",
        "--bs=64k",
        "--ioengine=posix",
        "--numjobs=2",
        "--write_lat_log=run",
        "--output-format=terse",
    ];
    ok(&d, &args);
    for n in [1, 2] {
        for kind in ["lat", "clat", "slat"] {
            assert!(d.join(format!("run_{kind}.{n}.log")).exists(), "{kind}.{n}");
        }
        let rows = std::fs::read_to_string(d.join(format!("run_clat.{n}.log"))).unwrap();
        assert_eq!(rows.lines().count(), 4);
        assert!(rows.lines().all(|l| l.split(", ").count() == 5));
    }
    ok(&d, &[&args[..], &["--per_job_logs=0"]].concat());
    let rows = std::fs::read_to_string(d.join("run_clat.log")).unwrap();
    assert_eq!(rows.lines().count(), 8, "both jobs' rows in one file");
    // A second run replaces the logs rather than adding to them.
    ok(&d, &[&args[..], &["--per_job_logs=0"]].concat());
    let rows = std::fs::read_to_string(d.join("run_clat.log")).unwrap();
    assert_eq!(rows.lines().count(), 8);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn output_goes_to_the_file_and_notes_to_stderr() {
    let d = test_dir("output");
    let o = bench(
        &d,
        &[
            "--name=o",
            "--filename=f",
            "--size=1m",
            "--ioengine=posix",
            "--output=report.txt",
            "--output-format=normal,terse",
        ],
    );
    assert!(o.status.success());
    assert!(o.stdout.is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("note: laid out 1 file(s)"), "{err}");
    let text = std::fs::read_to_string(d.join("report.txt")).unwrap();
    let terse = text.find(";hipfile-bench-0.2.0;o;").unwrap();
    let normal = text.find("o: (groupid=0, jobs=1)").unwrap();
    assert!(terse < normal, "terse comes before normal, as in fio");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn every_job_file_in_bench_jobs_parses() {
    let d = test_dir("jobfiles");
    let jobs = Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs");
    let mut n = 0;
    for e in std::fs::read_dir(&jobs).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "fio") {
            continue;
        }
        n += 1;
        let o = gpu_double(
            &d,
            &[
                "--parse-only",
                &format!("--directory={}", d.display()),
                p.to_str().unwrap(),
            ],
        );
        assert!(
            o.status.success(),
            "{}: {}",
            p.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert!(n >= 7, "{n} job files");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_report_names_the_librarys_storage_backend_and_why() {
    let d = test_dir("backend");
    let o = Command::new(BENCH)
        .current_dir(&d)
        .env("HIPFILE_IO_BACKEND", "posix")
        .args([
            "--eta=never",
            "--name=b",
            "--filename=f",
            "--size=1m",
            "--ioengine=hipfile-sync",
            "--mem=host",
            "--output-format=json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "note: storage backend: posix (pread/pwrite on the I/O threads), as \
             HIPFILE_IO_BACKEND=posix asks"
        ),
        "{err}"
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["jobs"][0]["hipfile"]["storage_backend"], "posix");
    // An engine that does not go through the library has none.
    let r = json(
        &d,
        &["--name=p", "--filename=f", "--size=1m", "--ioengine=psync"],
    );
    assert!(r["jobs"][0]["hipfile"].get("storage_backend").is_none());
    std::fs::remove_dir_all(&d).unwrap();
}
