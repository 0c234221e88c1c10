#!/usr/bin/env python3
"""hipfile-bench against fio 3.33 and the tools written for fio's output.

Runs fio and hipfile-bench (ioengine posix and raw, host memory) on the same
job files and checks that

  * every key fio writes in its JSON (json and json+) is in ours, with the
    same JSON type, recursively (the deliberate differences are listed in
    DIFFERENCES below, each with its reason);
  * fio-plot (PyPI) and fio's fio_jsonplus_clat2csv read our reports;
  * the terse layout has fio's fields, the normal layout fio's lines, the
    per-I/O logs fio's names and columns;
  * fio's numjobs rule holds: each clone does `size` bytes;
  * scripts/plot-bench draws its charts.

Needs: fio 3.33 on PATH, fio_jsonplus_clat2csv (Debian's fio package ships
it), python packages fio-plot and six, and the release build of
hipfile-bench: scripts/test-fio-compat.sh sets all that up and runs this. Files go under
HIPFILE_TEST_DIR (a disk-backed directory: O_DIRECT).

    bash scripts/test-fio-compat.sh
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "target", "release", "hipfile-bench")
PLOT_BENCH = os.path.join(ROOT, "scripts", "plot-bench")

# Keys of ours that fio does not have, or fio's that we leave out, and why.
DIFFERENCES = {
    # Our extras: engine, memory kind, GB/s, page-cache state, verification.
    "hipfile": "ours: what ran and the case measured, in GB/s (not in fio)",
}

# Objects whose keys are data (option names, percentiles, histogram
# buckets), not layout: their values' types are compared, not their names.
DATA_OBJECTS = ("job options", "global options", "percentile", "bins")

JOB_FILE = """\
[global]
filename={path}
size=4m
bs=64k
iodepth={iodepth}
numjobs=1
rw=randread
direct={direct}

[reader]

[mixed]
stonewall
rw=randrw
rwmixread=70
fsync=8
lat_percentiles=1
slat_percentiles=1
"""


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        )
    return r


def layout(value, path="", out=None):
    """Every key path of a JSON value with the JSON type found there."""
    if out is None:
        out = {}
    if isinstance(value, dict):
        data = path.rsplit("/", 1)[-1] in DATA_OBJECTS
        for k, v in value.items():
            key = f"{path}/{'<key>' if data else k}"
            out.setdefault(key, set()).add(jtype(v))
            layout(v, key, out)
    elif isinstance(value, list):
        for v in value:
            layout(v, path + "[]", out)
    return out


JSON_TYPES = ((bool, "bool"), (int, "int"), (float, "float"), (str, "string"), (list, "array"), (dict, "object"))


def jtype(v):
    # bool before int: Python's True is an int too.
    return next((name for t, name in JSON_TYPES if isinstance(v, t)), "null")


def allowed(path):
    return any(f"/{k}" in path for k in DIFFERENCES)


class Compat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for tool in ("fio",):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is not installed (.ci/run installs it: apt-get install fio)")
        v = run(["fio", "--version"]).stdout.strip()
        if not v.startswith("fio-3.33"):
            raise RuntimeError(f"the comparison is made against fio 3.33, found {v}")
        if not os.access(BENCH, os.X_OK):
            raise RuntimeError(f"{BENCH} is missing: cargo build --release -p hipfile-bench")
        base = os.environ.get("HIPFILE_TEST_DIR") or os.path.join(ROOT, "target", "test-files")
        os.makedirs(base, exist_ok=True)
        cls.dir = tempfile.mkdtemp(prefix="fio-compat-", dir=base)
        cls.data = os.path.join(cls.dir, "data.bin")
        # One data file both tools read: hipfile-bench lays it out.
        run([BENCH, "--name=layout", f"--filename={cls.data}", "--size=4m", "--ioengine=posix",
             "--output-format=terse", "--eta=never"])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def job_file(self, name, direct=0, iodepth=1):
        """The shared job file. Synchronous engines take iodepth=1 (fio
        quietly runs a deeper queue at 1; hipfile-bench refuses it)."""
        p = os.path.join(self.dir, name)
        with open(p, "w") as f:
            f.write(JOB_FILE.format(path=self.data, direct=direct, iodepth=iodepth))
        return p

    def fio(self, *args):
        return run(["fio", *args], cwd=self.dir).stdout

    def ours(self, *args):
        return run([BENCH, "--eta=never", *args], cwd=self.dir).stdout

    def compare_layouts(self, fio_json, our_json, what):
        theirs = layout(json.loads(fio_json))
        ours = layout(json.loads(our_json))
        problems = []
        for path, types in sorted(theirs.items()):
            if allowed(path):
                continue
            if path not in ours:
                problems.append(f"missing {path} ({'/'.join(sorted(types))})")
            elif not types <= ours[path]:
                problems.append(f"type of {path}: fio {sorted(types)}, ours {sorted(ours[path])}")
        for path in sorted(ours):
            if path not in theirs and not allowed(path):
                problems.append(f"extra {path} (fio has no such key)")
        self.assertEqual(problems, [], f"{what}:\n" + "\n".join(problems))

    def test_json_keys_and_types_match_fio_with_posix(self):
        jf = self.job_file("posix.fio")
        for fmt in ("json", "json+"):
            self.compare_layouts(
                self.fio(jf, f"--output-format={fmt}"),
                self.ours("--ioengine=posix", "--mem=host", jf, f"--output-format={fmt}"),
                f"posix, {fmt}",
            )

    def test_json_keys_and_types_match_fio_with_raw(self):
        jf = self.job_file("raw.fio", direct=1, iodepth=4)
        for fmt in ("json", "json+"):
            self.compare_layouts(
                self.fio(jf, "--ioengine=io_uring", f"--output-format={fmt}"),
                self.ours("--ioengine=raw", jf, f"--output-format={fmt}"),
                f"raw, {fmt}",
            )

    def test_terse_lines_have_fios_fields(self):
        jf = self.job_file("terse.fio")
        for ver in ("3", "4", "5"):
            theirs = self.fio(jf, "--output-format=terse", f"--terse-version={ver}").strip().splitlines()
            ours = self.ours("--ioengine=posix", jf, "--output-format=terse",
                             f"--terse-version={ver}").strip().splitlines()
            self.assertEqual(len(ours), len(theirs))
            for a, b in zip(theirs, ours):
                fa, fb = a.split(";"), b.split(";")
                self.assertEqual(len(fb), len(fa), f"terse v{ver} field count")
                self.assertEqual(fb[0], ver)
                # Same kind of field in each position: number, percent, percentile.
                kinds = lambda f: ["pct" if x.endswith("%") else ("p=" if "%=" in x else "n") for x in f[5:]]
                self.assertEqual(kinds(fb), kinds(fa), f"terse v{ver} field kinds")

    def test_normal_output_has_fios_lines(self):
        jf = self.job_file("normal.fio")
        labels = lambda text: {
            line.split(":")[0].split("(")[0].rstrip()
            for line in text.splitlines()
            if ":" in line and line.startswith(" ")
        }
        theirs = labels(self.fio(jf, "--output-format=normal"))
        ours = labels(self.ours("--ioengine=posix", jf, "--output-format=normal"))
        # "slat" shows for engines with a submission step: psync has none.
        missing = sorted(theirs - ours - {"    slat"})
        self.assertEqual(missing, [], "normal-output lines fio prints and we do not")
        out = self.ours("--ioengine=posix", jf, "--output-format=normal")
        self.assertIn("Run status group 0 (all jobs):", out)
        self.assertIn("Run status group 1 (all jobs):", out)

    def test_combined_formats_come_in_fios_order(self):
        jf = self.job_file("combined.fio")
        out = self.ours("--ioengine=posix", jf, "--output-format=normal,json,terse")
        first_terse = out.index(";hipfile-bench-")
        first_json = out.index('{\n  "fio version"')
        first_normal = out.index("(groupid=0")
        self.assertLess(first_terse, first_json)
        self.assertLess(first_json, first_normal)
        dec = json.JSONDecoder()
        report, _ = dec.raw_decode(out, first_json)
        self.assertEqual(len(report["jobs"]), 2)

    def test_output_file_gets_the_report_and_stdout_nothing(self):
        jf = self.job_file("out.fio")
        path = os.path.join(self.dir, "report.json")
        r = run([BENCH, "--eta=never", "--ioengine=posix", jf, "--output-format=json", f"--output={path}"],
                cwd=self.dir)
        self.assertEqual(r.stdout, "")
        with open(path) as f:
            self.assertEqual(len(json.load(f)["jobs"]), 2)

    def test_numjobs_gives_every_clone_the_whole_size_as_fio_does(self):
        args = [f"--filename={self.data}", "--size=1m", "--bs=64k", "--numjobs=3", "--group_reporting",
                "--output-format=json"]
        theirs = json.loads(self.fio("--name=n", *args))["jobs"][0]["read"]["io_bytes"]
        ours = json.loads(self.ours("--name=n", "--ioengine=posix", *args))["jobs"][0]["read"]["io_bytes"]
        self.assertEqual(theirs, 3 << 20)
        self.assertEqual(ours, theirs)

    def test_fio_jsonplus_clat2csv_reads_our_json_plus(self):
        tool = shutil.which("fio_jsonplus_clat2csv")
        self.assertIsNotNone(tool, "fio_jsonplus_clat2csv is not installed (Debian's fio package has it)")
        jf = self.job_file("clat.fio")
        src = os.path.join(self.dir, "plus.json")
        with open(src, "w") as f:
            f.write(self.ours("--ioengine=posix", jf, "--output-format=json+"))
        dest = os.path.join(self.dir, "clat.csv")
        run([sys.executable, tool, src, dest])
        run([sys.executable, tool, src, dest, "--validate"])
        for job in (0, 1):
            with open(os.path.join(self.dir, f"clat_job{job}.csv")) as f:
                rows = [r for r in f.read().splitlines() if r.strip()]
            self.assertGreater(len(rows), 2, "the CSV holds latency rows, not only its header")

    def test_fio_plot_reads_our_json(self):
        d = os.path.join(self.dir, "fioplot")
        os.makedirs(d, exist_ok=True)
        for depth in (1, 4):
            with open(os.path.join(d, f"qd{depth}.json"), "w") as f:
                f.write(self.ours(
                    "--name=plot", f"--filename={self.data}", "--size=2m", "--bs=64k", "--rw=randread",
                    f"--iodepth={depth}", "--numjobs=1", "--ioengine=raw", "--output-format=json"))
        png = os.path.join(self.dir, "fioplot.png")
        run([sys.executable, "-m", "fio_plot", "-i", d, "-T", "compat", "-l", "-r", "randread",
             "-d", "1", "4", "-n", "1", "-o", png])
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_log_files_have_fios_names_and_columns(self):
        for avg in ("0", "20"):
            for tool, cmd in (("fio", ["fio"]), ("ours", [BENCH, "--eta=never", "--ioengine=posix"])):
                d = os.path.join(self.dir, f"logs-{tool}-{avg}")
                os.makedirs(d, exist_ok=True)
                run(cmd + ["--name=l", f"--filename={self.data}", "--size=4m", "--bs=64k", "--rw=randread",
                           "--write_bw_log=run", "--write_lat_log=run", "--write_iops_log=run",
                           f"--log_avg_msec={avg}", "--log_offset=1", "--output-format=terse"], cwd=d)
            names = lambda t: sorted(os.path.basename(p) for p in glob.glob(os.path.join(self.dir, f"logs-{t}-{avg}", "*.log")))
            self.assertEqual(names("ours"), names("fio"), f"log files, log_avg_msec={avg}")
            for name in names("ours"):
                def rows(tool):
                    with open(os.path.join(self.dir, f"logs-{tool}-{avg}", name)) as f:
                        return [r.split(", ") for r in f.read().splitlines()]
                ours, theirs = rows("ours"), rows("fio")
                # A log fio leaves empty (slat of a synchronous engine, a
                # window longer than the run) may be empty here too.
                if theirs:
                    self.assertTrue(ours, f"{name}: fio wrote rows, we wrote none")
                self.assertTrue(all(len(r) == 6 for r in ours + theirs), f"{name}: 6 columns with log_offset=1")
                self.assertTrue(all(r[2] in ("0", "1") for r in ours))
                if avg == "0" and not name.startswith("run_slat"):
                    self.assertEqual(len(ours), 64, f"{name}: one row per I/O")
                    self.assertEqual(len(theirs), 64, f"{name}: fio's rows per I/O")

    def test_plot_bench_draws_both_charts(self):
        d = os.path.join(self.dir, "plots")
        os.makedirs(d, exist_ok=True)
        reports = []
        for bs in ("16k", "64k", "256k"):
            p = os.path.join(d, f"bs-{bs}.json")
            with open(p, "w") as f:
                f.write(self.ours("--name=bw", f"--filename={self.data}", "--size=2m", f"--bs={bs}",
                                  "--ioengine=posix", "--output-format=json"))
            reports.append(p)
        # fio's own reports are read too.
        p = os.path.join(d, "fio.json")
        with open(p, "w") as f:
            f.write(self.fio("--name=bw", f"--filename={self.data}", "--size=2m", "--bs=64k",
                             "--output-format=json"))
        reports.append(p)
        run([sys.executable, PLOT_BENCH, "-o", d, *reports])
        for png in ("bw-vs-bs.png", "latency-percentiles.png"):
            with open(os.path.join(d, png), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", png)


if __name__ == "__main__":
    unittest.main()
