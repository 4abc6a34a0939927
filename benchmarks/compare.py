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
IMPLS = ("ucx", "hmc-cpp", "hmc-python")
MIB_TO_MB = 1.048576  # ucx_perftest prints MB/s as MiB/s; HMC's MB/s are 10^6 bytes/s

# The targets.
BW_TARGET = 0.90          # put/get bandwidth at >= 64 KiB vs raw UCX
BW_TARGET_FROM = 64 << 10
MSG_TARGET = 0.50         # 8-byte put message rate at depth --msg-depth vs raw UCX
RTT_TARGET = 2.0          # poll-mode put + tag round trip vs raw UCX put round trip (at most)
IDLE_TARGET = 1.0         # % of a core, idle connected sessions, event mode (under)
PY_TARGET = 0.80          # Python asyncio 1 MiB put bandwidth vs C++


# --------------------------------------------------------------------------------------- helpers
def iterations(test, size, scale):
    """Operations per measurement: 256 MiB moved (bandwidth) or 16 MiB (latency), clamped to
    32..20000 (bandwidth) or 50..2000 (latency), times --iter-scale. Fewer than hmc_bench's own
    defaults, so that a full run of both transports fits in about 5 minutes on 2 cores."""
    latency = test in ("put_lat", "get_lat")
    n = ((16 << 20) if latency else (256 << 20)) // size
    n = max(50, min(n, 2_000)) if latency else max(32, min(n, 20_000))
    return max(int(n * scale), 20 if latency else 32)


def warmup(test, iters, depth):
    """Warm-up operations per lane (hmc) / in all (ucx_perftest): a tenth of the measured ones."""
    lanes = 1 if test in ("put_lat", "get_lat") else depth
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
def run_hmc(cmd_prefix, env, tests, sizes, scale, depth, repeat, progress, label, tls):
    """Runs an hmc benchmark (C++ or Python: same flags) once per test and iteration group (and
    --repeat times: the best row of each size is kept) and merges the JSONs; returns (meta, results)."""
    meta, results = None, []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        for test in tests:
            for iters, group in by_iterations(test, sizes, scale):
                runs = {s: [] for s in group}
                for i in range(repeat):
                    progress(f"{tls}: {label} {test} {','.join(human(s) for s in group)}" +
                             (f" ({i + 1}/{repeat})" if repeat > 1 else ""))
                    cmd = cmd_prefix + ["--test", test, "--sizes", ",".join(map(str, group)), "--iters", str(iters),
                                        "--warmup", str(warmup(test, iters, depth)), "--json", out, "--quiet"]
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
                    meta = meta or data["meta"]
                    for r in data["results"]:
                        runs.setdefault(r["size"], []).append(r)
                results += [b for b in (best(test, runs[s]) for s in group) if b]
    return meta, results


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


def compare_rows(tls, sizes, ucx, cpp, py):
    u, c, p = index(ucx), index(cpp), index(py)
    rows = []
    for test in TESTS:
        bw = test.endswith("_bw")
        key, unit = ("bw_mbps", "MB/s") if bw else ("lat_p50_us", "us")
        for size in sizes:
            vals = [(d.get((test, size)) or {}).get(key) for d in (u, c, p)]
            if all(v is None for v in vals):
                continue
            # bandwidth: hmc/ucx (higher is better); latency: hmc/ucx (lower is better)
            rows.append({"tls": tls, "test": test, "size": size, "metric": key, "unit": unit, "ucx": vals[0],
                         "hmc_cpp": vals[1], "hmc_python": vals[2], "cpp_vs_ucx": ratio(vals[1], vals[0]),
                         "python_vs_ucx": ratio(vals[2], vals[0]), "python_vs_cpp": ratio(vals[2], vals[1]),
                         "hmc_cpp_p99_us": None if bw else (c.get((test, size)) or {}).get("lat_p99_us"),
                         "hmc_python_p99_us": None if bw else (p.get((test, size)) or {}).get("lat_p99_us")})
    return rows


def targets(tls, mode, res):
    u, c, p = index(res["ucx"]), index(res["hmc-cpp"]), index(res["hmc-python"])
    out = []

    def add(name, measured, threshold, ok, detail):
        out.append({"tls": tls, "target": name, "measured": measured, "threshold": threshold, "met": ok,
                    "detail": detail})

    for test in ("put_bw", "get_bw"):
        rs = [(s, ratio(c.get((test, s), {}).get("bw_mbps"), u.get((test, s), {}).get("bw_mbps")))
              for (t, s) in sorted(u) if t == test and s >= BW_TARGET_FROM]
        rs = [(s, r) for s, r in rs if r is not None]
        if rs:
            worst = min(rs, key=lambda x: x[1])
            add(f"{test[:3]} bandwidth >= 64 KiB, hmc C++ / UCX (lowest)", worst[1], f">= {BW_TARGET}",
                worst[1] >= BW_TARGET, f"lowest at {human(worst[0])}; " +
                ", ".join(f"{human(s)} {r:.2f}" for s, r in rs))
        else:
            add(f"{test[:3]} bandwidth >= 64 KiB, hmc C++ / UCX (lowest)", None, f">= {BW_TARGET}", None,
                "not measured")

    d64c, d64u = res.get("hmc-cpp-msg"), res.get("ucx-msg")
    r = ratio((d64c or {}).get("msg_rate"), (d64u or {}).get("msg_rate"))
    add(f"8 B put message rate at depth {res['meta']['msg_depth']}, hmc C++ / UCX", r, f">= {MSG_TARGET}",
        None if r is None else r >= MSG_TARGET,
        f"hmc {fmt((d64c or {}).get('msg_rate'), 'msg/s')} msg/s, "
        f"ucx {fmt((d64u or {}).get('msg_rate'), 'msg/s')} msg/s")

    poll = index(res.get("hmc-cpp-poll", []))
    size = 8 if (("put_lat", 8) in u) else min((s for t, s in u if t == "put_lat"), default=None)
    ur = (u.get(("put_lat", size)) or {}).get("lat_p50_us")
    pr = poll.get(("put_lat", size)) or {}
    er = c.get(("put_lat", size)) or {}
    r = ratio(pr.get("lat_p50_us"), ur)
    add(f"put + tag round trip ({human(size or 0)} B), poll mode p50 / UCX put RTT (at most)", r, f"<= {RTT_TARGET}",
        None if r is None else r <= RTT_TARGET,
        f"UCX RTT {fmt(ur, 'us')} us (2 x one-way p50); hmc poll p50 {fmt(pr.get('lat_p50_us'), 'us')} / "
        f"p99 {fmt(pr.get('lat_p99_us'), 'us')} us; hmc {mode} p50 {fmt(er.get('lat_p50_us'), 'us')} / "
        f"p99 {fmt(er.get('lat_p99_us'), 'us')} us")

    idle = res.get("idle") or {}
    v = idle.get("core_percent")
    add("idle connected sessions (2, event mode), % of a core", v, f"< {IDLE_TARGET}",
        None if v is None else v < IDLE_TARGET,
        f"{idle.get('cpu_seconds', 'n/a')} s CPU in {idle.get('seconds', 'n/a')} s" if idle else "not measured")

    pb, cb = (p.get(("put_bw", 1 << 20)) or {}).get("bw_mbps"), (c.get(("put_bw", 1 << 20)) or {}).get("bw_mbps")
    r = ratio(pb, cb)
    add("Python asyncio 1 MiB put bandwidth / C++", r, f">= {PY_TARGET}", None if r is None else r >= PY_TARGET,
        f"Python {fmt(pb, 'MB/s')} MB/s, C++ {fmt(cb, 'MB/s')} MB/s")
    return out


def poll_sizes(sizes):
    """put_lat in poll mode (the round-trip target) at 8 B, 64 KiB and 1 MiB where measured: two
    busy-polling processes on few cores make it the slowest test when the machine is not idle."""
    chosen = [s for s in sizes if s in (8, 64 << 10, 1 << 20)]
    return chosen or [min(sizes)]


def run_transport(o, tls, ucx, progress, env):
    res = {"meta": {"tls": tls, "mode": o.mode, "depth": o.depth, "msg_depth": o.msg_depth, "sizes": o.sizes,
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
    # an idle, connected pair of sessions in event mode
    progress(f"{tls}: idle check ({o.idle_seconds:g} s)")
    res["idle"] = idle_check(o, tls, env)
    res["comparison"] = compare_rows(tls, o.sizes, res["ucx"], res["hmc-cpp"], res["hmc-python"])
    res["targets"] = targets(tls, o.mode, res)
    suffix = "-quick" if o.quick else ""
    for name, data in raw.items():
        write_json(o.out / "raw" / f"{tls}-{o.mode}{suffix}-{name}.json", data)
    return res


# ------------------------------------------------------------------------------------------ output
def tables(all_res):
    """(text, markdown) of the comparison and the targets."""
    head = ["transport", "test", "size", "unit", "raw UCX", "hmc C++", "hmc Python", "C++/UCX", "Py/UCX", "Py/C++"]
    rows = []
    for res in all_res:
        for r in res["comparison"]:
            label = {"put_lat": "put_lat RTT p50", "get_lat": "get_lat p50"}.get(r["test"], r["test"])
            rows.append([r["tls"], label, human(r["size"]), r["unit"], fmt(r["ucx"], r["unit"]),
                         fmt(r["hmc_cpp"], r["unit"]), fmt(r["hmc_python"], r["unit"]), fmt_ratio(r["cpp_vs_ucx"]),
                         fmt_ratio(r["python_vs_ucx"]), fmt_ratio(r["python_vs_cpp"])])
    thead = ["transport", "target", "threshold", "measured", "met", "detail"]
    trows = []
    for res in all_res:
        for t in res["targets"]:
            met = "n/a" if t["met"] is None else ("yes" if t["met"] else "NO")
            m = t["measured"]
            trows.append([t["tls"], t["target"], t["threshold"], "n/a" if m is None else f"{m:.3g}", met, t["detail"]])

    def text(h, rs, right_from):
        w = [max(len(str(x)) for x in col) for col in zip(h, *rs)] if rs else [len(x) for x in h]
        line = lambda r: "  ".join(str(x).rjust(w[i]) if i >= right_from else str(x).ljust(w[i])
                                   for i, x in enumerate(r)).rstrip()
        return "\n".join([line(h), line(["-" * x for x in w])] + [line(r) for r in rs])

    def md(h, rs, right_from, right_to=None):
        al = ["---:" if right_from <= i < (right_to or len(h)) else "---" for i in range(len(h))]
        return "\n".join("| " + " | ".join(map(str, r)) + " |" for r in [h, al] + rs)

    trows_text = [r[:5] for r in trows]
    details = "\n".join(f"  {r[0]}: {r[1]}: {r[5]}" for r in trows)
    txt = text(head, rows, 2) + "\n\nTargets\n" + text(thead[:5], trows_text, 3) + "\n" + details
    mdt = md(head, rows, 2) + "\n\n" + md(thead, trows, 3, 5)
    return txt, mdt


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


# -------------------------------------------------------------------------------------------- main
def options(argv=None):
    p = argparse.ArgumentParser(description="HMC (C++ and Python) next to raw UCX (ucx_perftest)")
    p.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}, {QUICK_SCALE} x the iterations")
    p.add_argument("--tls", default="shm,tcp", help="UCX transports, one comparison each (default shm,tcp)")
    p.add_argument("--mode", choices=("adaptive", "event", "poll", "hybrid"), default="adaptive", help="HMC progress mode")
    p.add_argument("--sizes", type=parse_sizes, default=None, help=f"default {FULL_SIZES}")
    p.add_argument("--depth", type=int, default=16, help="operations in flight in the bandwidth tests")
    p.add_argument("--msg-depth", type=int, default=64, help="depth of the 8-byte message-rate row")
    p.add_argument("--iter-scale", type=float, default=None, help="times hmc_bench's default iterations")
    p.add_argument("--repeat", type=int, default=None,
                   help="measure each point N times and keep the best (default 2; --quick: 1)")
    p.add_argument("--idle-seconds", type=float, default=5.0)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    p.add_argument("--plot", type=Path, default=None, help="PNG (default docs/benchmarks.png; quick: in --out)")
    p.add_argument("--hmc-bench", type=Path, default=ROOT / "build/benchmarks/hmc_bench")
    p.add_argument("--python", default="/usr/bin/python3", help="interpreter for the Python benchmark")
    p.add_argument("--pythonpath", default=str(ROOT / "build/python"))
    p.add_argument("--ucx-perftest", default=shutil.which("ucx_perftest") or "ucx_perftest")
    p.add_argument("--no-python", action="store_true")
    p.add_argument("--no-ucx", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    o = p.parse_args(argv)
    o.sizes = o.sizes or parse_sizes(QUICK_SIZES if o.quick else FULL_SIZES)
    if min(o.sizes) < 1 or o.depth < 1 or o.msg_depth < 1 or (o.repeat is not None and o.repeat < 1):
        p.error("--sizes, --depth, --msg-depth and --repeat must be > 0")
    o.iter_scale = o.iter_scale or (QUICK_SCALE if o.quick else 1.0)
    o.repeat = o.repeat or (1 if o.quick else 2)
    o.plot = o.plot or (o.out / "benchmarks-quick.png" if o.quick else ROOT / "docs/benchmarks.png")
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


def main(argv=None):
    o = options(argv)
    env = dict(os.environ)
    env["PYTHONPATH"] = o.pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    progress = Progress(o.quiet)
    load0 = os.getloadavg()[0]
    if load0 > 0.7 and not o.quiet:
        sys.stderr.write(f"compare.py: load average {load0:.2f}: something else is running, numbers will be noisy\n")
    ucx = Ucx(o.ucx_perftest)
    started = time.monotonic()
    all_res = []
    for tls in [t for t in o.tls.split(",") if t]:
        res = run_transport(o, tls, ucx, progress, env)
        res["meta"].update(machine=machine(), date=datetime.datetime.now().isoformat(timespec="seconds"),
                           load_before=round(load0, 2), load_after=round(os.getloadavg()[0], 2))
        write_json(o.out / f"{tls}-{o.mode}{'-quick' if o.quick else ''}.json", res)
        all_res.append(res)
    progress.done()
    txt, mdt = tables(all_res)
    print(txt)
    head = (f"{'Quick run' if o.quick else 'Run'} of {datetime.datetime.now():%Y-%m-%d %H:%M}, "
            f"{os.cpu_count()} cores, UCX {machine().get('ucx', '?')}, mode {o.mode}, depth {o.depth}, "
            f"sizes {','.join(human(s) for s in o.sizes)}, iteration scale {o.iter_scale:g}, best of {o.repeat}, "
            f"{time.monotonic() - started:.0f} s, load average {load0:.2f} before / {os.getloadavg()[0]:.2f} after\n\n")
    summary = o.out / ("summary-quick.md" if o.quick else "summary.md")
    summary.write_text(head + mdt + "\n")
    drew = plot(all_res, o.plot)
    print(f"\nresults: {o.out}/<tls>-{o.mode}{'-quick' if o.quick else ''}.json, raw/, {summary.name}"
          + (f"; plot: {o.plot}" if drew else "") + f"; {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
