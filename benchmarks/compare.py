"""HMC next to raw UCX: for each transport, the same sizes and depth through ucx_perftest, hmc_bench
(C++) and benchmarks/python/hmc_bench.py (asyncio), then one table with the ratios, the issue's
targets, an idle-CPU check, JSON results and a plot (docs/benchmarks.md explains every number).

    /usr/bin/python3 benchmarks/compare.py [--quick] [--tls shm,tcp] [--mode event] [--sizes 8,64K,1M]
                                           [--depth 16] [--msg-depth 64] [--iter-scale 1.0] [--repeat 2]
                                           [--out DIR] [--plot PNG] [--no-ucx] [--no-python]

`bash scripts/bench` builds what is needed and runs this. Output: benchmarks/results/<tls>-<mode>.json
(one combined file per transport and mode), the raw hmc JSONs under benchmarks/results/raw/,
benchmarks/results/summary.md (the tables, Markdown) and docs/benchmarks.png. A --quick run names
its files <tls>-<mode>-quick.json and benchmarks/results/benchmarks-quick.png instead.
"""
import argparse
import datetime
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))
from bench_units import human, parse_sizes  # noqa: E402 - after the path

ROOT = Path(__file__).resolve().parents[1]
FULL_SIZES = "8,64,512,4K,64K,256K,1M,4M,16M"
QUICK_SIZES = "8,64K,1M"
QUICK_SCALE = 0.25
TESTS = ("put_bw", "get_bw", "put_lat", "get_lat")
LATENCY_TESTS = ("put_lat", "get_lat", "put_sync", "tag_lat", "notify_lat")
API_SIZES = (8, 64, 512, 4 << 10, 64 << 10, 256 << 10, 1 << 20)  # the latency-per-API figure (of --sizes)
IMPLS = ("ucx", "hmc-cpp", "hmc-python")
MIB_TO_MB = 1.048576  # ucx_perftest prints MB/s as MiB/s; HMC's MB/s are 10^6 bytes/s

# Thresholds not written inline in targets() (the others are there, next to what they compare).
IDLE_TARGET = 1.0         # % of a core, idle connected sessions, event mode (under)
PY_TARGET = 0.80          # Python asyncio 1 MiB put bandwidth vs C++ (the "(earlier)" row)


# --------------------------------------------------------------------------------------- helpers
def iterations(test, size, scale):
    """Operations per measurement: 256 MiB moved (bandwidth) or 16 MiB (latency), clamped to
    32..20000 (bandwidth) or 50..2000 (latency), times --iter-scale. Fewer than hmc_bench's own
    defaults, so that a full run of both transports fits in about 5 minutes on 2 cores."""
    if test == "raw_lat":  # ucx_raw_bench per-op tests: a p50 settles in a few hundred round trips
        return min(iterations("put_lat", size, scale), 500)
    latency = test in LATENCY_TESTS
    n = ((16 << 20) if latency else (256 << 20)) // size
    n = max(50, min(n, 2_000)) if latency else max(32, min(n, 20_000))
    return max(int(n * scale), 20 if latency else 32)


def warmup(test, iters, depth):
    """Warm-up operations per lane (hmc) / in all (ucx_perftest): a tenth of the measured ones."""
    lanes = 1 if test in LATENCY_TESTS else depth
    return max(iters // lanes // 10, 4)


def by_iterations(test, sizes, scale):
    """Sizes grouped by their iteration count: one hmc_bench run per group."""
    groups = {}
    for s in sizes:
        groups.setdefault(iterations(test, s, scale), []).append(s)
    return groups.items()


class Progress:
    def __init__(self, quiet=False):
        self.quiet = quiet
        self.t0 = time.monotonic()

    def __call__(self, text):
        if not self.quiet:
            sys.stderr.write(f"\r[{time.monotonic() - self.t0:6.1f}s] {text:<70}")
            sys.stderr.flush()

    def done(self, text=""):
        if not self.quiet:
            sys.stderr.write("\r" + " " * 80 + "\r" + (text + "\n" if text else ""))
            sys.stderr.flush()


def fail(what, proc_or_text):
    text = proc_or_text if isinstance(proc_or_text, str) else (proc_or_text.stderr or "") + (proc_or_text.stdout or "")
    tail = "\n    ".join(text.strip().splitlines()[-6:])
    sys.stderr.write(f"\ncompare.py: {what} failed\n    {tail}\n")


def fmt(v, unit):
    if v is None:
        return "n/a"
    if unit == "us":
        return f"{v:.2f}" if v < 100 else f"{v:.1f}"
    if unit == "msg/s":
        return f"{v:,.0f}"
    return f"{v:.1f}" if v < 1000 else f"{v:,.0f}"


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def fmt_ratio(r):
    return "n/a" if r is None else f"{r:.2f}"


# ---------------------------------------------------------------------------------- ucx_perftest
class Ucx:
    def __init__(self, binary):
        self.binary = binary
        self.port = random.randint(20000, 40000)

    def run(self, test, size, iters, depth, tls, timeout=300):
        """One ucx_perftest pair (server in the background, client to 127.0.0.1); the Final: line."""
        warm = max(iters // 10, 10)
        env = dict(os.environ, UCX_TLS=tls, UCX_NET_DEVICES="lo")
        for _attempt in range(4):
            self.port = self.port + 1 if self.port < 60000 else 20000
            args = ["-t", test, "-s", str(size), "-n", str(iters), "-w", str(warm), "-O", str(depth), "-p",
                    str(self.port)]
            server = subprocess.Popen([self.binary] + args, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            try:
                out = None
                for _ in range(20):  # the server needs a moment to listen
                    time.sleep(0.15)
                    if server.poll() is not None:
                        break
                    try:
                        proc = subprocess.run([self.binary, "127.0.0.1"] + args, env=env, capture_output=True,
                                              text=True, timeout=timeout)
                    except subprocess.TimeoutExpired:
                        server.kill()
                        fail(f"ucx_perftest -t {test} -s {size} (UCX_TLS={tls})", f"client timed out after {timeout} s")
                        return None
                    final = [ln for ln in proc.stdout.splitlines() if ln.startswith("Final:")]
                    if final:
                        return parse_final(final[-1])
                    out = proc.stderr + proc.stdout
                    if "connect" not in out.lower() and "refused" not in out.lower():
                        break  # not a "server not listening yet" failure
            finally:
                if server.poll() is None:
                    try:
                        server.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        server.kill()
                        server.wait()
        fail(f"ucx_perftest -t {test} -s {size} (UCX_TLS={tls})", out or "no Final: line")
        return None


def parse_final(line):
    f = line.split()[1:]
    it, typ, avg, overall, bw_avg, bw_overall, rate_avg, rate_overall = (float(x) for x in f[:8])
    return {"iters": int(it), "typical_lat_us": typ, "avg_lat_us": avg, "overall_lat_us": overall,
            "bw_mbps": bw_overall * MIB_TO_MB, "msg_rate": rate_overall}


def best(test, rows):
    """The best of repeated measurements: highest bandwidth, or lowest p50 latency."""
    rows = [r for r in rows if r]
    if not rows:
        return None
    if test.endswith("_lat"):
        return min(rows, key=lambda r: r["lat_p50_us"])
    return max(rows, key=lambda r: r["bw_mbps"])


def ucx_rows(ucx, tls, sizes, depth, scale, repeat, progress):
    """Rows in hmc_bench's terms: put_bw <- ucp_put_bw -O depth, get_bw <- ucp_get -O depth,
    put_lat <- ucp_put_lat (one-way; lat_p50_us is the round trip = 2 x typical),
    get_lat <- ucp_get -O 1 (sequential gets)."""
    plan = {"put_bw": ("ucp_put_bw", depth), "get_bw": ("ucp_get", depth), "put_lat": ("ucp_put_lat", 1),
            "get_lat": ("ucp_get", 1)}
    rows = []
    for test in TESTS:
        ucx_test, d = plan[test]
        for size in sizes:
            runs = []
            for i in range(repeat):
                progress(f"{tls}: ucx_perftest {ucx_test} -O {d} {human(size)}" +
                         (f" ({i + 1}/{repeat})" if repeat > 1 else ""))
                r = ucx.run(ucx_test, size, iterations(test, size, scale), d, tls)
                if r is None:
                    continue
                row = {"test": test, "ucx_test": ucx_test, "size": size, "depth": d, **r}
                if test == "put_lat":
                    row["oneway_p50_us"] = r["typical_lat_us"]
                    row["lat_p50_us"] = 2 * r["typical_lat_us"]
                    row["rtt_avg_us"] = 2 * r["avg_lat_us"]
                else:
                    row["lat_p50_us"] = r["typical_lat_us"]
                runs.append(row)
            if runs:
                rows.append(best(test, runs))
    return rows


# --------------------------------------------------------------------------------------------- hmc
def steady_state(r):
    """A row's best case, the same statistic for HMC and raw UCX: the larger of the overall and the
    median-op figures (a preempted window is this machine's noise, not either side's cost)."""
    if "bw_mbps" in r:
        r["bw_overall_mbps"] = r["bw_mbps"]
        r["bw_mbps"] = max(r["bw_mbps"], r.get("bw_p50_mbps") or 0)
    if "msg_rate" in r:
        r["msg_rate"] = max(r["msg_rate"], r.get("msg_rate_p50") or 0)
    return r


def run_hmc(cmd_prefix, env, tests, sizes, scale, depth, repeat, progress, label, tls, count_as=None):
    """Runs an hmc benchmark (C++ or Python: same flags) once per test and iteration group (and
    --repeat times: the best row of each size is kept) and merges the JSONs; returns (meta, results).
    count_as: the test whose iteration counts to use (depth-1 put_bw runs count as put_lat)."""
    meta, results = None, []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        for test in tests:
            for iters, group in by_iterations(count_as or test, sizes, scale):
                runs = {s: [] for s in group}
                for i in range(repeat):
                    progress(f"{tls}: {label} {test} {','.join(human(s) for s in group)}" +
                             (f" ({i + 1}/{repeat})" if repeat > 1 else ""))
                    cmd = cmd_prefix + ["--test", test, "--sizes", ",".join(map(str, group)), "--iters", str(iters),
                                        "--warmup", str(warmup(count_as or test, iters, depth)), "--json", out,
                                        "--quiet"]
                    try:
                        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
                    except subprocess.TimeoutExpired:
                        fail(" ".join(cmd), "timed out after 600 s")
                        continue
                    if proc.returncode != 0 or not os.path.exists(out):
                        fail(" ".join(cmd), proc)
                        continue
                    with open(out) as f:
                        data = json.load(f)
                    os.unlink(out)
                    if meta is None:
                        meta = data["meta"]
                    for r in data["results"]:
                        runs.setdefault(r["size"], []).append(steady_state(r))
                results += [b for b in (best(test, runs[s]) for s in group) if b]
    return meta, results


# ------------------------------------------------------------------------- ucx_raw_bench (like for like)
def run_raw(o, tls, tests, sizes, depth, progress, count_as):
    """ucx_raw_bench (benchmarks/raw/): raw UCX with HMC's completion semantics; rows in hmc's schema
    (test put/get/notify per operation, putbw/getbw in windows of `depth`), best of --repeat."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "raw.json")
        for iters, group in by_iterations(count_as, sizes, o.iter_scale):
            runs = {}
            for i in range(o.repeat):
                progress(f"{tls}: ucx_raw_bench {','.join(tests)} {','.join(human(s) for s in group)}" +
                         (f" ({i + 1}/{o.repeat})" if o.repeat > 1 else ""))
                cmd = [str(o.raw_bench), "--tls", tls, "--tests", ",".join(tests), "--sizes",
                       ",".join(map(str, group)), "--iters", str(iters), "--depth", str(depth), "--json", out]
                env = dict(os.environ, UCX_NET_DEVICES="lo")
                try:
                    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
                except subprocess.TimeoutExpired:
                    fail(" ".join(cmd), "timed out after 300 s")
                    continue
                if proc.returncode != 0 or not os.path.exists(out):
                    fail(" ".join(cmd), proc)
                    continue
                with open(out) as f:
                    for r in json.load(f)["results"]:
                        runs.setdefault((r["test"], r["size"]), []).append(r)
                os.unlink(out)
            for (test, _size), rs in runs.items():
                for r in rs:
                    steady_state(r)
                rows.append(best("put_lat" if test in ("put", "get", "notify") else "put_bw", rs))
    return rows


def run_hmcref(o, tls_list, progress):
    """benchmarks/python/hmcref_bench.py: ours and the HMC reference interleaved (its JSON), or a skip."""
    if o.no_hmcref or o.no_python:
        return {"meta": {"hmcref_skipped": "--no-hmcref" if o.no_hmcref else "--no-python"}}
    tls = [t for t in tls_list if t in ("shm", "tcp")][:1 if o.quick else 2]
    sizes = [s for s in o.api_sizes if s >= 64]
    out = o.out / f"hmcref{'-quick' if o.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [o.python, str(ROOT / "benchmarks/python/hmcref_bench.py"), "--tls", ",".join(tls), "--sizes",
           ",".join(map(str, sizes)), "--rounds", "1" if o.quick else "2", "--scale", str(o.iter_scale),
           "--ours", o.pythonpath, "--json", str(out), "--quiet"] + (["--hmcref", o.hmcref] if o.hmcref else [])
    progress(f"{','.join(tls)}: ours and the HMC reference, interleaved (hmcref_bench.py; a first build takes minutes)")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        fail(" ".join(cmd), "timed out")
        return {"meta": {"hmcref_skipped": "hmcref_bench.py timed out"}}
    skipped = [ln for ln in proc.stdout.splitlines() if ln.startswith("HMC reference: skipped")]
    if skipped:
        progress.done(skipped[0])
    if proc.returncode != 0 or not out.exists():
        fail(" ".join(cmd), proc)
        return {"meta": {"hmcref_skipped": "hmcref_bench.py failed"}}
    with open(out) as f:
        return json.load(f)


def write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def idle_check(o, tls, env):
    cmd = [o.python, str(ROOT / "benchmarks/python/idle_cpu.py"), "--tls", tls, "--mode", "event", "--seconds",
           str(o.idle_seconds)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        fail(" ".join(cmd), proc)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------- one transport
def index(rows):
    return {(r["test"], r["size"]): r for r in rows}


RAW_OF = {"put_bw": "putbw", "get_bw": "getbw", "get_lat": "get"}  # hmc test -> ucx_raw_bench's like for like


def compare_rows(tls, sizes, ucx, cpp, py, raw):
    u, c, p = index(ucx), index(cpp), index(py)
    rw = {(r["test"], r["size"]): r for r in raw or []}
    rows = []
    for test in TESTS:
        bw = test.endswith("_bw")
        key, unit = ("bw_mbps", "MB/s") if bw else ("lat_p50_us", "us")
        for size in sizes:
            vals = [(d.get((test, size)) or {}).get(key) for d in (u, c, p)]
            if all(v is None for v in vals):
                continue
            # bandwidth: hmc/ucx (higher is better); latency: hmc/ucx (lower is better)
            raw_v = (rw.get((RAW_OF.get(test), size)) or {}).get(key)
            rows.append({"tls": tls, "test": test, "size": size, "metric": key, "unit": unit, "ucx": vals[0],
                         "raw": raw_v, "cpp_vs_raw": ratio(vals[1], raw_v),
                         "hmc_cpp": vals[1], "hmc_python": vals[2], "cpp_vs_ucx": ratio(vals[1], vals[0]),
                         "python_vs_ucx": ratio(vals[2], vals[0]), "python_vs_cpp": ratio(vals[2], vals[1]),
                         "hmc_cpp_p99_us": None if bw else (c.get((test, size)) or {}).get("lat_p99_us"),
                         "hmc_python_p99_us": None if bw else (p.get((test, size)) or {}).get("lat_p99_us")})
    return rows


def api_p50(res, key, test, size, table="api"):
    rows = ((res.get(table) or {}).get(key) or {}).get("rows") or []
    return next((r["lat_p50_us"] for r in rows if r["test"] == test and r["size"] == size), None)


def api_why(res, key, test, table="api"):
    entry = (res.get(table) or {}).get(key)
    if entry is None:
        return "not run"
    return "not measured"


def raw_row(res, test, size):
    return next((r for r in res.get("raw") or [] if r["test"] == test and r["size"] == size), None)


def targets(tls, mode, res):
    """The targets, each as a ratio with its threshold (at most / at least) and PASS/MISS."""
    u, c, p = index(res["ucx"]), index(res["hmc-cpp"]), index(res["hmc-python"])
    out = []

    def add(name, num, den, at_most, threshold, detail, why=None):
        r = ratio(num, den)
        met = None if r is None else (r <= threshold if at_most else r >= threshold)
        out.append({"tls": tls, "target": name, "measured": r, "threshold": f"{'<=' if at_most else '>='} {threshold}",
                    "met": met, "detail": detail if r is not None else (why or detail)})

    us = lambda v: "n/a" if v is None else f"{fmt(v, 'us')} us"

    # Python blocking 64 B put_remote
    ref = {r["size"]: r for r in ((res.get("hmcref") or {}).get("hmcref") or [])}
    ours = {r["size"]: r for r in ((res.get("hmcref") or {}).get("hmc") or [])}
    if tls == "shm":
        h, f = (ours.get(64) or {}).get("lat_mean_us"), (ref.get(64) or {}).get("lat_mean_us")
        add("Python blocking 64 B put_remote / HMC reference (time per op, same run)", h, f, True, 0.5,
            f"ours {us(h)} (p50 {us((ours.get(64) or {}).get('lat_p50_us'))}), reference {us(f)} "
            f"(p50 {us((ref.get(64) or {}).get('lat_p50_us'))}); ours completes at the peer, the reference locally",
            res.get("hmcref_skipped") or "not measured")
    else:
        pb, rp = api_p50(res, "py-block", "put_bw", 64), (raw_row(res, "put", 64) or {}).get("lat_p50_us")
        add("Python blocking 64 B put_remote / raw put + flush", pb, rp, True, 1.3,
            f"Python p50 {us(pb)}, raw UCX put + ep flush p50 {us(rp)}")
    pb, cb = api_p50(res, "py-block", "put_bw", 64), api_p50(res, "cpp-block", "put_sync", 64)
    add("Python blocking 64 B put / C++ blocking put", pb, cb, True, 1.5, f"Python p50 {us(pb)}, C++ p50 {us(cb)}")
    # asyncio
    pa, cc = api_p50(res, "py-aio", "put_bw", 8), api_p50(res, "cpp-coro", "put_bw", 8)
    add("Python asyncio 8 B await put (1 in flight) / C++ coroutine", pa, cc, True, 2.0,
        f"asyncio p50 {us(pa)}, C++ coroutine p50 {us(cc)}")
    pn, cn = api_p50(res, "py-aio", "notify_lat", 8, "rtt"), api_p50(res, "cpp", "notify_lat", 8, "rtt")
    pt, ct = api_p50(res, "py-aio", "tag_lat", 8, "rtt"), api_p50(res, "cpp", "tag_lat", 8, "rtt")
    add("Python asyncio 8 B put + notify round trip / C++", pn, cn, True, 1.5,
        f"asyncio p50 {us(pn)}, C++ p50 {us(cn)}; put + ctrl_send: asyncio {us(pt)}, C++ {us(ct)}",
        f"{api_why(res, 'py-aio', 'notify_lat', 'rtt')}; put + ctrl_send instead: asyncio {us(pt)}, C++ {us(ct)} "
        f"(ratio {fmt_ratio(ratio(pt, ct))})")
    # C++ blocking
    cb8 = api_p50(res, "cpp-block", "put_sync", 8)
    add("C++ blocking 8 B put (user thread) / on-loop coroutine", cb8, cc, True, 1.5,
        f"blocking p50 {us(cb8)}, coroutine p50 {us(cc)}; blocking with caller-thread progress "
        f"{us(api_p50(res, 'cpp-block-caller', 'put_sync', 8))}")
    # message rate at depth 64
    d64c, d64u, d64r = res.get("hmc-cpp-msg"), res.get("ucx-msg"), res.get("raw-msg")
    rate = lambda d: (d or {}).get("msg_rate")
    add(f"C++ 8 B put rate at depth {res['meta']['msg_depth']} / ucp_put_bw", rate(d64c), rate(d64u), False, 0.2,
        f"hmc {fmt(rate(d64c), 'msg/s')}/s, ucp_put_bw {fmt(rate(d64u), 'msg/s')}/s, raw put windows + flush "
        f"{fmt(rate(d64r), 'msg/s')}/s (hmc / that {fmt_ratio(ratio(rate(d64c), rate(d64r)))})")
    # bandwidth 64-256 KiB, against both baselines
    for base, name in (("ucx", "ucp_put_bw"), ("raw", "raw put windows + flush")):
        rs = []
        for size in (64 << 10, 256 << 10):
            hb = (c.get(("put_bw", size)) or {}).get("bw_mbps")
            bb = ((u.get(("put_bw", size)) or {}) if base == "ucx" else (raw_row(res, "putbw", size) or {})).get(
                "bw_mbps")
            if ratio(hb, bb) is not None:
                rs.append((size, ratio(hb, bb)))
        worst = min(rs, key=lambda x: x[1]) if rs else None
        add(f"C++ put bandwidth 64-256 KiB (depth {res['meta']['depth']}) / {name}, lowest", worst and worst[1], 1.0,
            False, 0.9, ", ".join(f"{human(sz)} {r:.2f}" for sz, r in rs))
    # put + notify round trip
    pp = api_p50(res, "cpp-poll", "notify_lat", 8, "rtt")
    ptp = api_p50(res, "cpp-poll", "tag_lat", 8, "rtt")
    add(f"C++ 8 B put + notify round trip, {mode} / poll mode", cn, pp, True, 1.5,
        f"{mode} p50 {us(cn)}, poll p50 {us(pp)}; put + ctrl_send: {mode} {us(ct)}, poll {us(ptp)}",
        f"{api_why(res, 'cpp', 'notify_lat', 'rtt')}; put + ctrl_send instead: {mode} {us(ct)}, poll {us(ptp)} "
        f"(ratio {fmt_ratio(ratio(ct, ptp))})")
    rn = (raw_row(res, "notify", 8) or {}).get("lat_p50_us")
    add("C++ 8 B put + notify round trip / raw put + flush + AM ping-pong", cn, rn, True, 2.0,
        f"hmc {mode} p50 {us(cn)}, raw p50 {us(rn)}; put + ctrl_send {us(ct)} ({fmt_ratio(ratio(ct, rn))})",
        f"{api_why(res, 'cpp', 'notify_lat', 'rtt')}; put + ctrl_send instead: {us(ct)} against raw {us(rn)} "
        f"(ratio {fmt_ratio(ratio(ct, rn))})")
    idle = res.get("idle") or {}
    v = idle.get("core_percent")
    out.append({"tls": tls, "target": "idle connected sessions (2, event mode), % of a core", "measured": v,
                "threshold": f"< {IDLE_TARGET}", "met": None if v is None else v < IDLE_TARGET,
                "detail": f"{idle.get('cpu_seconds', 'n/a')} s CPU in {idle.get('seconds', 'n/a')} s" if idle
                else "not measured"})
    # no regression at >= 1 MiB: against the baseline run (--save-baseline) where there is one
    base = index((res.get("baseline") or {}).get("hmc-cpp") or [])
    for test in ("put_bw", "get_bw"):
        sizes = sorted(sz for t, sz in c if t == test and sz >= 1 << 20)
        if base:
            rs = [(sz, ratio(c[(test, sz)]["bw_mbps"], (base.get((test, sz)) or {}).get("bw_mbps"))) for sz in sizes]
            what = "this run / baseline run"
        else:
            rs = [(sz, ratio(c[(test, sz)]["bw_mbps"], (u.get((test, sz)) or {}).get("bw_mbps"))) for sz in sizes]
            what = "hmc / ucx_perftest (no baseline)"
        rs = [(sz, r) for sz, r in rs if r is not None]
        worst = min(rs, key=lambda x: x[1]) if rs else None
        add(f"no regression >= 1 MiB: C++ {test[:3]} bandwidth, {what}, lowest", worst and worst[1], 1.0, False, 0.9,
            ", ".join(f"{human(sz)} {r:.2f}" for sz, r in rs))
    pb1, cb1 = (p.get(("put_bw", 1 << 20)) or {}).get("bw_mbps"), (c.get(("put_bw", 1 << 20)) or {}).get("bw_mbps")
    add("(earlier) Python asyncio 1 MiB put bandwidth / C++", pb1, cb1, False, PY_TARGET,
        f"Python {fmt(pb1, 'MB/s')} MB/s, C++ {fmt(cb1, 'MB/s')} MB/s")
    return out


def poll_sizes(sizes):
    """put_lat in poll mode (the round-trip target) at 8 B, 64 KiB and 1 MiB where measured: two
    busy-polling processes on few cores make it the slowest test when the machine is not idle."""
    chosen = [s for s in sizes if s in (8, 64 << 10, 1 << 20)]
    return chosen or [min(sizes)]


# Latency per API (one operation in flight) and round trips: (key, label, C++ or Python, extra flags, full run only).
API_RUNS = (
    ("cpp-coro", "C++ coroutine (on the loop)", "cpp", ["--depth", "1"], ["put_bw"], False),
    ("cpp-block", "C++ blocking (user thread)", "cpp", [], ["put_sync"], False),
    ("cpp-block-caller", "C++ blocking, caller-thread progress", "cpp", ["--progress-thread", "caller"], ["put_sync"],
     True),
    ("cpp-block-shared", "C++ blocking, shared progress", "cpp", ["--progress-thread", "shared"], ["put_sync"], True),
    ("py-block", "Python blocking", "py", ["--api", "blocking"], ["put_bw"], False),
    ("py-aio", "Python asyncio", "py", ["--depth", "1"], ["put_bw"], False),
    ("py-block-own", "Python blocking, own progress thread", "py",
     ["--api", "blocking", "--progress-thread", "own"], ["put_bw"], True),
    ("py-block-caller", "Python blocking, in-thread progress", "py",
     ["--api", "blocking", "--progress-thread", "caller"], ["put_bw"], True),
    ("py-aio-own", "Python asyncio, own progress thread", "py", ["--depth", "1", "--progress-thread", "own"],
     ["put_bw"], True),
    ("py-aio-caller", "Python asyncio, in-thread progress", "py", ["--depth", "1", "--progress-thread", "caller"],
     ["put_bw"], True),
)
RTT_RUNS = (
    ("cpp", "C++ coroutine, default mode", "cpp", [], False),
    ("cpp-poll", "C++ coroutine, poll mode", "cpp", ["--mode", "poll"], False),
    ("py-aio", "Python asyncio", "py", [], False),
    ("py-block", "Python blocking", "py", ["--api", "blocking"], False),
    ("py-aio-caller", "Python asyncio, in-thread progress", "py", ["--progress-thread", "caller"], True),
    ("py-block-caller", "Python blocking, in-thread progress", "py", ["--api", "blocking", "--progress-thread",
                                                                       "caller"], True),
)
RTT_SIZES = (8,)


def api_runs(o, tls, env, bench, progress):
    """({key: {label, rows, meta}} latency per API, {key: ...} put + tag / notify round trips)."""
    py = [o.python, str(ROOT / "benchmarks/python/hmc_bench.py"), "--tls", tls]
    api, rtt = {}, {}

    def one(table, key, label, lang, flags, tests, sizes):
        if lang == "py" and o.no_python:
            return
        mode = [] if "--mode" in flags else ["--mode", o.mode]
        cmd = (bench if lang == "cpp" else py) + mode + flags
        meta, rows = run_hmc(cmd, env, tests, sizes, o.iter_scale, 1, o.repeat, progress, key, tls, "put_lat")
        table[key] = {"label": label, "rows": rows, "meta": meta}

    for key, label, lang, flags, tests, full_only in API_RUNS:
        if not (full_only and o.quick):
            one(api, key, label, lang, flags, tests, o.api_sizes)
    for key, label, lang, flags, full_only in RTT_RUNS:
        if not (full_only and o.quick):
            one(rtt, key, label, lang, flags, ["tag_lat", "notify_lat"], list(RTT_SIZES))
    return api, rtt


def run_transport(o, tls, ucx, progress, env):
    res = {"meta": {"tls": tls, "mode": o.mode, "depth": o.depth, "msg_depth": o.msg_depth, "sizes": o.sizes,
                    "api_sizes": o.api_sizes,
                    "iter_scale": o.iter_scale, "repeat": o.repeat, "quick": o.quick,
                    "iterations": {t: {s: iterations(t, s, o.iter_scale) for s in o.sizes} for t in TESTS}}}
    # raw UCX: the four tests, then 8-byte puts at --msg-depth
    res["ucx"] = ucx_rows(ucx, tls, o.sizes, o.depth, o.iter_scale, o.repeat, progress) if not o.no_ucx else []
    if not o.no_ucx:
        runs = []
        for i in range(o.repeat):
            progress(f"{tls}: ucx_perftest ucp_put_bw -O {o.msg_depth} 8")
            r = ucx.run("ucp_put_bw", 8, iterations("put_bw", 8, o.iter_scale), o.msg_depth, tls)
            runs.append(r and {"test": "put_bw", "ucx_test": "ucp_put_bw", "size": 8, "depth": o.msg_depth, **r})
        res["ucx-msg"] = best("put_bw", runs)
    # hmc C++: the main run, 8-byte puts at --msg-depth, put_lat in poll mode
    bench = [str(o.hmc_bench), "--tls", tls, "--net-devices", "lo"]
    meta, res["hmc-cpp"] = run_hmc(bench + ["--mode", o.mode, "--depth", str(o.depth)], env, TESTS, o.sizes,
                                   o.iter_scale, o.depth, o.repeat, progress, "hmc_bench", tls)
    raw = {"hmc-cpp": {"meta": meta, "results": res["hmc-cpp"]}}
    mmeta, msg = run_hmc(bench + ["--mode", o.mode, "--depth", str(o.msg_depth)], env, ["put_bw"], [8], o.iter_scale,
                         o.msg_depth, o.repeat, progress, f"hmc_bench depth {o.msg_depth}", tls)
    res["hmc-cpp-msg"] = msg[0] if msg else None
    raw["hmc-cpp-msg"] = {"meta": mmeta, "results": msg}
    pmeta, res["hmc-cpp-poll"] = run_hmc(bench + ["--mode", "poll", "--depth", str(o.depth)], env, ["put_lat"],
                                         poll_sizes(o.sizes), o.iter_scale, o.depth, o.repeat, progress,
                                         "hmc_bench poll", tls)
    raw["hmc-cpp-poll"] = {"meta": pmeta, "results": res["hmc-cpp-poll"]}
    # hmc Python (asyncio)
    res["hmc-python"] = []
    if not o.no_python:
        py = [o.python, str(ROOT / "benchmarks/python/hmc_bench.py"), "--tls", tls, "--mode", o.mode, "--depth",
              str(o.depth)]
        pymeta, res["hmc-python"] = run_hmc(py, env, TESTS, o.sizes, o.iter_scale, o.depth, o.repeat, progress,
                                            "hmc_bench.py", tls)
        raw["hmc-python"] = {"meta": pymeta, "results": res["hmc-python"]}
    # raw UCX doing what HMC's operations promise (ucx_raw_bench), beside ucx_perftest
    res["raw"], res["raw-msg"] = [], None
    if not o.no_raw:
        res["raw"] = run_raw(o, tls, ["put", "get", "notify"], o.api_sizes, 1, progress, "raw_lat")
        res["raw"] += run_raw(o, tls, ["putbw", "getbw"], o.sizes, o.depth, progress, "put_bw")
        msg = run_raw(o, tls, ["putbw"], [8], o.msg_depth, progress, "put_bw")
        res["raw-msg"] = msg[0] if msg else None
    # one operation in flight, per API; put + tag / put-with-notify round trips
    res["api"], res["rtt"] = api_runs(o, tls, env, bench, progress)
    # an idle, connected pair of sessions in event mode
    progress(f"{tls}: idle check ({o.idle_seconds:g} s)")
    res["idle"] = idle_check(o, tls, env)
    res["comparison"] = compare_rows(tls, o.sizes, res["ucx"], res["hmc-cpp"], res["hmc-python"], res["raw"])
    suffix = "-quick" if o.quick else ""
    for name, data in raw.items():
        write_json(o.out / "raw" / f"{tls}-{o.mode}{suffix}-{name}.json", data)
    return res


# ------------------------------------------------------------------------------------------ output
TARGET_HEAD = ["transport", "target", "threshold", "measured", "met", "detail"]


def target_rows(all_res):
    """One row per target of every run, in TARGET_HEAD's columns."""
    rows = []
    for res in all_res:
        for t in res["targets"]:
            met = "n/a" if t["met"] is None else ("PASS" if t["met"] else "MISS")
            m = t["measured"]
            rows.append([t["tls"], t["target"], t["threshold"], "n/a" if m is None else f"{m:.3g}", met, t["detail"]])
    return rows


def tables(all_res):
    """(text, markdown) of the comparison and the targets."""
    head = ["transport", "test", "size", "unit", "ucx_perftest", "raw like-for-like", "hmc C++", "hmc Python",
            "C++/perftest", "C++/raw", "Py/perftest", "Py/C++"]
    rows = []
    for res in all_res:
        for r in res["comparison"]:
            label = {"put_lat": "put_lat RTT p50", "get_lat": "get_lat p50"}.get(r["test"], r["test"])
            rows.append([r["tls"], label, human(r["size"]), r["unit"], fmt(r["ucx"], r["unit"]),
                         fmt(r.get("raw"), r["unit"]), fmt(r["hmc_cpp"], r["unit"]), fmt(r["hmc_python"], r["unit"]),
                         fmt_ratio(r["cpp_vs_ucx"]), fmt_ratio(r.get("cpp_vs_raw")), fmt_ratio(r["python_vs_ucx"]),
                         fmt_ratio(r["python_vs_cpp"])])
    thead = TARGET_HEAD
    trows = target_rows(all_res)

    def text(h, rs, right_from):
        w = [max(len(str(x)) for x in col) for col in zip(h, *rs)] if rs else [len(x) for x in h]
        line = lambda r: "  ".join(str(x).rjust(w[i]) if i >= right_from else str(x).ljust(w[i])
                                   for i, x in enumerate(r)).rstrip()
        return "\n".join([line(h), line(["-" * x for x in w])] + [line(r) for r in rs])

    def md(h, rs, right_from, right_to=None):
        al = ["---:" if right_from <= i < (right_to or len(h)) else "---" for i in range(len(h))]
        return "\n".join("| " + " | ".join(map(str, r)) + " |" for r in [h, al] + rs)

    ahead, arows, anotes = api_table(all_res)
    anotes = "".join(f"\n  {n}" for n in anotes)
    rhead, rrows = rtt_table(all_res)
    trows_text = [r[:5] for r in trows]
    details = "\n".join(f"  {r[0]}: {r[1]}: {r[5]}" for r in trows)
    txt = (text(head, rows, 2) + "\n\nOne operation in flight, p50 us, per API\n" + text(ahead, arows, 2) + anotes +
           "\n\nRound trips, 8 B, p50 us\n" + text(rhead, rrows, 2) + "\n\nTargets\n" +
           text(thead[:5], trows_text, 3) + "\n" + details)
    mdt = (md(thead, trows, 3, 5) + "\n\n" + md(ahead, arows, 1) + anotes.replace("\n  ", "\n\n* ") + "\n\n" +
           md(rhead, rrows, 2) + "\n\n" +
           md(head, rows, 2))
    return txt, mdt


def api_columns(all_res):
    """(key, label) of the per-API latency columns that have a row in some transport."""
    cols = [("raw", "raw put+flush")]
    for key, label, *_ in API_RUNS:
        if any((res.get("api") or {}).get(key) for res in all_res):
            cols.append((key, label))
    return cols + [("ref-hmc", "ours, ref. script (mean)"), ("ref", "HMC reference (mean)")]


def api_value(res, key, size):
    if key == "raw":
        return (raw_row(res, "put", size) or {}).get("lat_p50_us")
    if key in ("ref", "ref-hmc"):
        rows = (res.get("hmcref") or {}).get("hmcref" if key == "ref" else "hmc") or []
        return next((r["lat_mean_us"] for r in rows if r["size"] == size), None)
    rows = ((res.get("api") or {}).get(key) or {}).get("rows") or []
    return next((r["lat_p50_us"] for r in rows if r["size"] == size), None)


def api_table(all_res):
    cols = api_columns(all_res)
    head = ["transport", "size"] + [label for _, label in cols]
    rows = []
    for res in all_res:
        for size in res["meta"]["api_sizes"]:
            vals = [api_value(res, k, size) for k, _ in cols]
            rows.append([res["meta"]["tls"], human(size)] + [fmt(v, "us") for v in vals])
    notes = []
    if any(res.get("hmcref_skipped") for res in all_res):
        why = next(r["hmcref_skipped"] for r in all_res if r.get("hmcref_skipped"))
        notes.append(f"HMC reference: skipped ({why})")
    return head, rows, notes


def rtt_table(all_res):
    head = ["transport", "API", "put + ctrl_send", "put + notify", "raw put+flush+AM ping-pong"]
    rows = []
    for res in all_res:
        tls = res["meta"]["tls"]
        rn = (raw_row(res, "notify", 8) or {}).get("lat_p50_us")
        for key, entry in (res.get("rtt") or {}).items():
            tag = api_p50(res, key, "tag_lat", 8, "rtt")
            notify = api_p50(res, key, "notify_lat", 8, "rtt")
            rows.append([tls, entry["label"], fmt(tag, "us") if tag is not None else "n/a",
                         fmt(notify, "us") if notify is not None else "n/a", fmt(rn, "us")])
    return head, rows


def plot(all_res, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("compare.py: matplotlib is missing (apt-get install python3-matplotlib): no plot\n")
        return False
    fig, (bw_ax, lat_ax) = plt.subplots(1, 2, figsize=(14, 5.5))
    colors = {"ucx": "black", "hmc-cpp": "tab:blue", "hmc-python": "tab:orange", "hmc-cpp-poll": "tab:green"}
    names = {"ucx": "raw UCX", "hmc-cpp": "hmc C++", "hmc-python": "hmc Python", "hmc-cpp-poll": "hmc C++ poll"}
    styles = ["-", "--", ":", "-."]
    for i, res in enumerate(all_res):
        tls, ls = res["meta"]["tls"], styles[i % len(styles)]
        for impl in IMPLS:
            rows = res.get(impl) or []
            for test, marker in (("put_bw", "o"), ("get_bw", "^")):
                pts = sorted((r["size"], r["bw_mbps"]) for r in rows if r["test"] == test)
                if pts:
                    bw_ax.plot(*zip(*pts), ls=ls, marker=marker, color=colors[impl], ms=4,
                               label=f"{names[impl]} {test[:3]} ({tls})")
        for impl in IMPLS + ("hmc-cpp-poll",):
            rows = res.get(impl) or []
            pts = sorted((r["size"], r["lat_p50_us"]) for r in rows if r["test"] == "put_lat")
            if pts:
                lat_ax.plot(*zip(*pts), ls=ls, marker="o", color=colors[impl], ms=4, label=f"{names[impl]} ({tls})")
    mode = all_res[0]["meta"]["mode"] if all_res else ""
    bw_ax.set(xscale="log", yscale="log", xlabel="message size (bytes)", ylabel="bandwidth (MB/s, 10^6 B/s)",
              title=f"put / get bandwidth, depth {all_res[0]['meta']['depth'] if all_res else ''}, {mode} mode")
    lat_ax.set(xscale="log", yscale="log", xlabel="message size (bytes)", ylabel="round trip p50 (us)",
               title="put round trip: UCX put ping-pong (2 x one-way) vs hmc put + tag")
    sizes = sorted({s for res in all_res for s in res["meta"]["sizes"]})
    for ax in (bw_ax, lat_ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [human(s) for s in sizes])
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.suptitle(f"HMC vs raw UCX on {platform.node() or 'this machine'} ({os.cpu_count()} cores, loopback)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return True


def plot_latency(all_res, path):
    """Latency vs size per API, one panel per transport."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cols = api_columns(all_res)
    style = {"raw": ("black", "-", "s"), "cpp-coro": ("tab:blue", "-", "o"), "cpp-block": ("tab:blue", "--", "v"),
             "cpp-block-caller": ("tab:cyan", "--", "v"), "cpp-block-shared": ("tab:purple", "--", "v"),
             "py-block": ("tab:orange", "--", "v"),
             "py-aio": ("tab:orange", "-", "o"), "py-block-own": ("tab:brown", "--", "v"),
             "py-aio-own": ("tab:brown", "-", "o"), "py-block-caller": ("tab:red", "--", "v"),
             "py-aio-caller": ("tab:red", "-", "o"), "ref": ("tab:green", ":", "D"), "ref-hmc": ("tab:olive", ":", "^")}
    fig, axes = plt.subplots(1, len(all_res), figsize=(7.5 * len(all_res), 5.5), squeeze=False)
    for ax, res in zip(axes[0], all_res):
        for key, label in cols:
            pts = [(sz, api_value(res, key, sz)) for sz in res["meta"]["api_sizes"]]
            pts = [(sz, v) for sz, v in pts if v is not None]
            if pts:
                color, ls, marker = style.get(key, ("gray", "-", "."))
                ax.plot(*zip(*pts), color=color, ls=ls, marker=marker, ms=4, label=label)
        sizes = res["meta"]["api_sizes"]
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes, [human(sz) for sz in sizes])
        ax.set(xlabel="put size (bytes)", ylabel="time per put, p50 (us); reference: mean",
               title=f"{res['meta']['tls']}: one blocking/awaited put at a time, {res['meta']['mode']} mode")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Put latency per API vs raw UCX (put + ep flush) and the HMC reference, "
                 f"{os.cpu_count()} cores, loopback")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return True


# -------------------------------------------------------------------------------------------- main
def options(argv=None):
    p = argparse.ArgumentParser(description="HMC (C++ and Python) next to raw UCX (ucx_perftest)")
    p.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}, {QUICK_SCALE} x the iterations")
    p.add_argument("--tls", default="shm,tcp", help="UCX transports, one comparison each (default shm,tcp)")
    p.add_argument("--mode", choices=("adaptive", "event", "poll"), default="adaptive", help="HMC progress mode")
    p.add_argument("--sizes", type=parse_sizes, default=None, help=f"default {FULL_SIZES}")
    p.add_argument("--depth", type=int, default=16, help="operations in flight in the bandwidth tests")
    p.add_argument("--msg-depth", type=int, default=64, help="depth of the 8-byte message-rate row")
    p.add_argument("--iter-scale", type=float, default=None, help="times hmc_bench's default iterations")
    p.add_argument("--repeat", type=int, default=None,
                   help="measure each point N times and keep the best (default 2; --quick: 1)")
    p.add_argument("--idle-seconds", type=float, default=None, help="default 5 (--quick: 2)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    p.add_argument("--plot", type=Path, default=None, help="PNG (default docs/benchmarks.png; quick: in --out)")
    p.add_argument("--hmc-bench", type=Path, default=ROOT / "build/benchmarks/hmc_bench")
    p.add_argument("--python", default="/usr/bin/python3", help="interpreter for the Python benchmark")
    p.add_argument("--pythonpath", default=str(ROOT / "build/python"))
    p.add_argument("--ucx-perftest", default=shutil.which("ucx_perftest") or "ucx_perftest")
    p.add_argument("--raw-bench", type=Path, default=ROOT / "build/benchmarks/ucx_raw_bench")
    p.add_argument("--hmcref", default="", help="PYTHONPATH of the HMC reference (default: hmcref_bench.py builds it)")
    p.add_argument("--baseline", type=Path, default=ROOT / "benchmarks/results/baseline",
                   help="a results folder of an earlier run (<tls>-<mode>.json): the >= 1 MiB no-regression rows")
    p.add_argument("--save-baseline", action="store_true", help="also write this run's JSON into --baseline")
    p.add_argument("--no-python", action="store_true")
    p.add_argument("--no-ucx", action="store_true", help="no ucx_perftest")
    p.add_argument("--no-raw", action="store_true", help="no ucx_raw_bench")
    p.add_argument("--no-hmcref", action="store_true", help="no side by side with the HMC reference")
    p.add_argument("--profile", choices=("on", "off"), default=None,
                   help="system calls / context switches / CPU per small op (profile_ops.py, shm); default: "
                        "on, off with --quick")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--render-only", action="store_true",
                   help="measure nothing: tables, summary and plots again from the JSON under --out")
    o = p.parse_args(argv)
    o.sizes = o.sizes or parse_sizes(QUICK_SIZES if o.quick else FULL_SIZES)
    if min(o.sizes) < 1 or o.depth < 1 or o.msg_depth < 1 or (o.repeat is not None and o.repeat < 1):
        p.error("--sizes, --depth, --msg-depth and --repeat must be > 0")
    o.iter_scale = o.iter_scale or (QUICK_SCALE if o.quick else 1.0)
    o.repeat = o.repeat or (1 if o.quick else 2)
    o.idle_seconds = o.idle_seconds or (2.0 if o.quick else 5.0)
    o.profile = (o.profile or ("off" if o.quick else "on")) == "on"
    o.plot = o.plot or (o.out / "benchmarks-quick.png" if o.quick else ROOT / "docs/benchmarks.png")
    # 8 and 64 B always: the targets are at those sizes
    o.api_sizes = sorted({s for s in o.sizes if s in API_SIZES} | {8, 64})
    if not o.no_raw and not o.raw_bench.exists():
        p.error(f"{o.raw_bench} is missing: build it (bash scripts/bench does), or pass --no-raw")
    if o.render_only:
        return o
    if not o.hmc_bench.exists():
        p.error(f"{o.hmc_bench} is missing: build it (bash scripts/bench does)")
    if not o.no_ucx and not shutil.which(o.ucx_perftest):
        p.error("ucx_perftest is missing (Debian package ucx-utils); or pass --no-ucx")
    return o


def machine():
    info = {"host": platform.node(), "kernel": platform.release(), "cores": os.cpu_count()}
    try:
        info["cpu"] = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        v = subprocess.run(["ucx_info", "-v"], capture_output=True, text=True, timeout=10).stdout
        info["ucx"] = re.search(r"Version (\S+)", v).group(1)
    except (OSError, AttributeError, subprocess.SubprocessError):
        pass
    return info


def render(o, all_res, started, load0, prof=""):
    """Prints the tables and writes summary.md and the plots."""
    txt, mdt = tables(all_res)
    if prof:
        txt += "\n\n" + prof
        mdt += "\n\n```\n" + prof + "\n```"
    print(txt)
    meta = all_res[0]["meta"] if all_res else {}
    head = (f"{'Quick run' if o.quick else 'Run'} of {meta.get('date', '?')}, {os.cpu_count()} cores, UCX "
            f"{meta.get('machine', {}).get('ucx', '?')}, mode {o.mode}, depth {o.depth}, sizes "
            f"{','.join(human(s) for s in o.sizes)}, iteration scale {o.iter_scale:g}, best of {o.repeat}, "
            f"{time.monotonic() - started:.0f} s, load average {load0:.2f} before / "
            f"{all_res[-1]['meta'].get('load_after', os.getloadavg()[0]) if all_res else 0:.2f} after\n\n")
    summary = o.out / ("summary-quick.md" if o.quick else "summary.md")
    summary.write_text(head + mdt + "\n")
    drew = plot(all_res, o.plot)
    lat_png = o.plot.with_name(o.plot.stem + "-latency" + o.plot.suffix)
    drew_lat = plot_latency(all_res, lat_png)
    print(f"\nresults: {o.out}/<tls>-{o.mode}{'-quick' if o.quick else ''}.json, raw/, {summary.name}"
          + (f"; plots: {o.plot}" if drew else "") + (f", {lat_png}" if drew_lat else "") +
          f"; {time.monotonic() - started:.0f} s")


def load_baseline(o, res):
    """res["baseline"] from --baseline, unless that file is this run's own (--save-baseline wrote it)."""
    base = o.baseline / f"{res['meta']['tls']}-{o.mode}.json"
    if base.exists():
        with open(base) as f:
            data = json.load(f)
        if data.get("meta", {}).get("date") != res["meta"].get("date"):
            res["baseline"] = {"hmc-cpp": data.get("hmc-cpp"), "path": str(base), "date": data["meta"].get("date")}


def render_only(o):
    all_res = []
    for tls in [t for t in o.tls.split(",") if t]:
        path = o.out / f"{tls}-{o.mode}{'-quick' if o.quick else ''}.json"
        with open(path) as f:
            res = json.load(f)
        load_baseline(o, res)
        res["targets"] = targets(tls, o.mode, res)
        all_res.append(res)
    prof = ""
    pjson = o.out / f"profile-shm{'-quick' if o.quick else ''}.json"
    if pjson.exists():
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from profile_ops import render as render_profile
        with open(pjson) as f:
            prof = render_profile(json.load(f))
    m = all_res[0]["meta"] if all_res else {}
    render(o, all_res, time.monotonic() - m.get("seconds", 0), m.get("load_before", 0), prof)
    return 0


def main(argv=None):
    o = options(argv)
    if o.render_only:
        return render_only(o)
    env = dict(os.environ)
    env["PYTHONPATH"] = o.pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    progress = Progress(o.quiet)
    load0 = os.getloadavg()[0]
    if load0 > 0.7 and not o.quiet:
        sys.stderr.write(f"compare.py: load average {load0:.2f}: something else is running, numbers will be noisy\n")
    ucx = Ucx(o.ucx_perftest)
    started = time.monotonic()
    all_res = []
    tls_list = [t for t in o.tls.split(",") if t]
    ref = run_hmcref(o, tls_list, progress)
    for tls in tls_list:
        res = run_transport(o, tls, ucx, progress, env)
        res["hmcref"] = (ref.get("results") or {}).get(tls)
        res["hmcref_skipped"] = (ref.get("meta") or {}).get("hmcref_skipped")
        base = o.baseline / f"{tls}-{o.mode}.json"
        if not o.save_baseline:
            load_baseline(o, res)
        res["targets"] = targets(tls, o.mode, res)
        res["meta"].update(machine=machine(), date=datetime.datetime.now().isoformat(timespec="seconds"),
                           load_before=round(load0, 2), load_after=round(os.getloadavg()[0], 2))
        write_json(o.out / f"{tls}-{o.mode}{'-quick' if o.quick else ''}.json", res)
        if o.save_baseline:
            write_json(base, {"meta": res["meta"], "hmc-cpp": res["hmc-cpp"]})
        all_res.append(res)
    prof = ""
    if o.profile:
        progress("shm: costs per small operation (profile_ops.py: strace -c, perf stat)")
        cmd = [o.python, str(ROOT / "benchmarks/profile_ops.py"), "--tls", "shm", "--quiet", "--hmc-bench",
               str(o.hmc_bench), "--json", str(o.out / f"profile-shm{'-quick' if o.quick else ''}.json")]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            prof = proc.stdout.strip() if proc.returncode == 0 else ""
            if proc.returncode != 0:
                fail(" ".join(cmd), proc)
        except subprocess.TimeoutExpired:
            fail(" ".join(cmd), "timed out")
    progress.done()
    for res in all_res:  # the whole run's duration, for --render-only
        res["meta"]["seconds"] = round(time.monotonic() - started)
        write_json(o.out / f"{res['meta']['tls']}-{o.mode}{'-quick' if o.quick else ''}.json", res)
    render(o, all_res, started, load0, prof)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
