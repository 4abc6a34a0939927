"""python -m hmc bench, run as users run it: a real loopback run over shm with tiny sizes, its table
and its JSON; benchmarks/python/hmc_bench.py on the same code; --help; bad flags; a server that
cannot start."""
import json
import os
import subprocess
import sys

HMC_BENCH_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "python",
                            "hmc_bench.py")
COLUMNS = ("test", "size", "iters", "GB/s", "msg/s", "p50 us", "p99 us", "p99.9 us", "max us", "CPU s/GB")
LATENCY = ("put_lat", "get_lat", "tag_lat", "notify_lat")


def hmc(*args):
    return subprocess.run([sys.executable, "-m", "hmc", *args], capture_output=True, text=True, timeout=300)


def table(stdout):
    """The rows under the table's header, as lists of columns."""
    lines = stdout.splitlines()
    heads = [i for i, line in enumerate(lines) if line.split()[:2] == ["test", "size"]]
    assert len(heads) == 1, stdout
    for column in COLUMNS:
        assert column in lines[heads[0]], lines[heads[0]]
    return [line.split() for line in lines[heads[0] + 1:] if line.strip()]


def check_result(r, iters, depth):
    """One JSON row: positive figures, ordered percentiles, and bytes / time / rate that agree."""
    lanes = 1 if r["test"] in LATENCY else depth
    assert r["depth"] == lanes and r["iters"] == iters // lanes * lanes, r
    for key in ("seconds", "bw_mbps", "msg_rate", "lat_p50_us", "lat_p99_us", "lat_p999_us", "lat_max_us",
                "cpu_s_per_gb"):
        assert r[key] > 0, (key, r)
    assert r["lat_p50_us"] <= r["lat_p99_us"] <= r["lat_p999_us"] <= r["lat_max_us"], r
    moved = r["size"] * r["iters"] * (2 if r["test"] == "put_lat" else 1)
    assert abs(r["bw_mbps"] * 1e6 * r["seconds"] - moved) <= 1e-6 * moved, r
    assert abs(r["msg_rate"] * r["seconds"] - r["iters"]) <= 1e-6 * r["iters"], r


def test_a_run_prints_a_table_and_writes_json_that_agree(tmp_path):
    out = tmp_path / "bench.json"
    run = hmc("bench", "--tls", "shm", "--sizes", "8,64K", "--iters", "200", "--warmup", "4", "--depth", "4",
              "--json", str(out))
    assert run.returncode == 0, run.stderr
    assert "[1/8] put_bw 8 ..." in run.stderr  # the progress line
    rows = table(run.stdout)
    data = json.loads(out.read_text())
    assert data["meta"]["impl"] == "hmc-python" and data["meta"]["tls"] == "shm" and data["meta"]["depth"] == 4
    results = data["results"]
    assert [(r["test"], r["size"]) for r in results] == [(t, s) for t in ("put_bw", "get_bw", "put_lat", "get_lat")
                                                        for s in (8, 65536)]
    for r, row in zip(results, rows, strict=True):
        check_result(r, 200, 4)
        assert row[:3] == [r["test"], "64K" if r["size"] == 65536 else "8", str(r["iters"])], (row, r)
        assert float(row[7]) == round(r["lat_p999_us"], 2), (row, r)


def test_the_default_run_covers_bandwidth_and_latency_sizes(tmp_path):
    out = tmp_path / "bench.json"
    run = hmc("bench", "--tls", "shm", "--iters", "32", "--warmup", "2", "--quiet", "--json", str(out))
    assert run.returncode == 0, run.stderr
    assert run.stdout == "" and run.stderr == ""  # --quiet
    results = json.loads(out.read_text())["results"]
    bandwidth, latency = [65536, 1 << 20, 16 << 20], [8, 4096]
    assert [(r["test"], r["size"]) for r in results] == [
        (t, s) for t, sizes in (("put_bw", bandwidth), ("get_bw", bandwidth), ("put_lat", latency),
                                ("get_lat", latency)) for s in sizes]
    for r in results:
        check_result(r, 32, 16)


def test_hmc_bench_py_runs_the_same_code_with_its_flags(tmp_path):
    out, csv = tmp_path / "py.json", tmp_path / "py.csv"
    run = subprocess.run([sys.executable, HMC_BENCH_PY, "--tls", "shm", "--api", "blocking", "--test",
                          "put_bw,notify_lat", "--sizes", "64", "--iters", "50", "--json", str(out), "--csv", str(csv)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("hmc_bench.py: ") and len(table(run.stdout)) == 2
    data = json.loads(out.read_text())
    assert data["meta"]["api"] == "blocking" and data["meta"]["depth"] == 1
    for r in data["results"]:
        check_result(r, 50, 1)
    header = csv.read_text().splitlines()[0].split(",")
    assert header[:4] == ["impl", "api", "tls", "mode"] and "lat_p999_us" in header


def test_help_reads_and_bad_flags_are_usage_errors():
    top = hmc("--help")
    assert top.returncode == 0 and "bench" in top.stdout and "doctor" in top.stdout and "version" in top.stdout
    sub = hmc("bench", "--help")
    assert sub.returncode == 0 and sub.stdout.startswith("usage: python -m hmc bench")
    for flag in ("--tls", "--sizes", "--test", "--iters", "--json", "p99.9"):
        assert flag in sub.stdout, flag
    for bad in (["bench", "--frobnicate"], ["bench", "--test", "put_nope"], ["bench", "--sizes", "0"],
                ["bench", "--iters", "many"], ["--frobnicate"]):
        run = hmc(*bad)
        assert run.returncode == 2 and "usage: python -m hmc" in run.stderr, (bad, run.stderr)


def test_a_server_that_cannot_start_is_an_error_not_a_hang():
    run = hmc("bench", "--tls", "no_such_transport", "--sizes", "8", "--iters", "10")
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert "python -m hmc bench: " in run.stderr and "server process" in run.stderr, run.stderr
