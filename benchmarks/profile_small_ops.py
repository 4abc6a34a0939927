"""The missed targets, profiled: for every target row that misses, our operation beside its anchor, per
operation, in counts that machine load does not change much:

* system calls by name (`strace -f -c`, both processes),
* context switches and CPU time (`perf stat -e task-clock,context-switches,cpu-migrations`, software
  events: this VM has no hardware counters),
* where the CPU goes (`perf record -e cpu-clock -c PERIOD`, self time per symbol, both processes).

Every figure is the difference between a short and a long run of the same program divided by the extra
operations, so start-up, connection set-up and warm-up fall out. strace slows every system call: its
runs count calls, they do not time them. The measured processes run at `nice -n -10` (builds run at 10).

    /usr/bin/python3 benchmarks/profile_small_ops.py                 # every row, shm and tcp
    /usr/bin/python3 benchmarks/profile_small_ops.py --list          # the rows and their keys
    /usr/bin/python3 benchmarks/profile_small_ops.py --rows shm-rate,tcp-py-block --symbols 8
    /usr/bin/python3 benchmarks/profile_small_ops.py --no-symbols --scale 0.5 --json /tmp/p.json

Time: all rows ~9 min at load 15; `--rows shm --scale 0.25 --no-symbols` 1 min 44 s (its system call
and switch counts hold; its CPU per op is noisy at that length). Not a test: it asserts nothing and
prints figures. Without strace or perf (or without permission to use
perf) it prints why and exits 0.
"""
import argparse
import collections
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from profile_ops import parse_perf_stat, parse_strace_c

ROOT = Path(__file__).resolve().parents[1]
PY = "/usr/bin/python3"
PERIOD_NS = 200_000  # one cpu-clock sample per 200 us of CPU: sampling faster slows spinning programs here
TIMEOUT_S = 180


class Case:
    """One program that repeats one operation: how to run it for n operations, and how many operations
    (warm-up included) that run really makes, so the difference of two runs counts exactly. spins: both
    processes busy-poll (the raw UCX programs), so their CPU per op is two cores times the wall time per
    op, which machine load stretches: read their system calls and symbol shares, not their CPU."""

    def __init__(self, label, argv, n, env=None, ops=None, spins=False):
        self.label, self.argv, self.n, self.env, self.spins = label, argv, n, env or {}, spins
        self.ops = ops or (lambda k: k)


def hmc_cpp(o, tls, flags):
    bench = [str(o.hmc_bench), "--tls", tls, "--net-devices", "lo", "--quiet", "--warmup", "50"]
    mode = [] if "--mode" in flags else ["--mode", o.mode]
    return lambda k: bench + mode + flags + ["--iters", str(k)]


def hmc_py(o, tls, flags):
    py = [PY, str(ROOT / "benchmarks/python/hmc_bench.py"), "--tls", tls, "--quiet", "--warmup", "50"]
    mode = [] if "--mode" in flags else ["--mode", o.mode]
    return lambda k: py + mode + flags + ["--iters", str(k)]


def raw(o, tls, test, size, depth):
    def ops(k):  # ucx_raw_bench: k / depth measured rounds after max(rounds / 10, 2) unmeasured ones
        rounds = max(k // depth, 1)
        return (rounds + max(rounds // 10, 2)) * depth
    argv = lambda k: [str(o.raw_bench), "--tls", tls, "--tests", test, "--sizes", str(size), "--depth", str(depth),
                      "--iters", str(k)]
    return argv, ops


def perftest(o, tls, test, size, depth):
    """ucx_perftest's server and client under one shell, so strace -f and perf follow both."""
    def argv(k):
        port = random.randint(20000, 40000)
        args = f"-t {test} -s {size} -n {k} -w 1000 -O {depth} -p {port}"
        bin_ = o.ucx_perftest
        return ["sh", "-c", f"{bin_} {args} >/dev/null 2>&1 & sleep 0.5; "
                f"for i in 1 2 3 4 5 6 7 8; do {bin_} 127.0.0.1 {args} >/dev/null 2>&1 && break; sleep 0.3; done; wait"]
    return argv


def cases(o, tls):
    lat = (2000, 10000) if tls == "shm" else (400, 2000)
    rtt = (1000, 5000) if tls == "shm" else (300, 1500)
    env = {"UCX_NET_DEVICES": "lo"}
    fast = (50_000, 250_000) if tls == "shm" else lat  # ~1 us per op on shm: more ops to rise above set-up noise
    mid = (20_000, 100_000) if tls == "shm" else lat
    c = {
        "cpp-coro8": Case("C++ coroutine put 8 B, 1 in flight",
                          hmc_cpp(o, tls, ["--test", "put_bw", "--depth", "1", "--sizes", "8"]), fast),
        "cpp-block8": Case("C++ blocking put 8 B (default progress thread)",
                           hmc_cpp(o, tls, ["--test", "put_sync", "--sizes", "8"]), mid),
        "cpp-block8-shared": Case("C++ blocking put 8 B, progress shared",
                                  hmc_cpp(o, tls, ["--test", "put_sync", "--sizes", "8", "--progress-thread",
                                                   "shared"]), fast),
        "cpp-block64": Case("C++ blocking put 64 B (default progress thread)",
                            hmc_cpp(o, tls, ["--test", "put_sync", "--sizes", "64"]), mid),
        "cpp-notify8": Case("C++ put + notify round trip 8 B",
                            hmc_cpp(o, tls, ["--test", "notify_lat", "--sizes", "8"]), rtt),
        "py-block64": Case("Python blocking put_remote 64 B (default)",
                           hmc_py(o, tls, ["--api", "blocking", "--test", "put_bw", "--sizes", "64"]), mid),
        "py-aio8": Case("Python asyncio await put 8 B",
                        hmc_py(o, tls, ["--test", "put_bw", "--depth", "1", "--sizes", "8"]), mid),
        "py-aio-notify8": Case("Python asyncio put + notify RT 8 B",
                               hmc_py(o, tls, ["--test", "notify_lat", "--sizes", "8"]), rtt),
    }
    argv, ops = raw(o, tls, "put", 64, 1)
    c["raw-put64"] = Case("raw UCX put + ep flush 64 B", argv, lat, env, ops, True)
    argv, ops = raw(o, tls, "notify", 8, 1)
    c["raw-notify8"] = Case("raw UCX put + flush + AM ping-pong 8 B", argv,
                            (20000, 100000) if tls == "shm" else rtt, env, ops, True)
    if tls == "shm":
        rate, anchor_rate = (100_000, 500_000), (1_000_000, 5_000_000)
        c["cpp-rate8"] = Case("C++ put 8 B, depth 64", hmc_cpp(o, tls, ["--test", "put_bw", "--depth", "64", "--sizes",
                                                                         "8"]), rate)
        c["perftest-rate8"] = Case("ucp_put_bw 8 B -O 64", perftest(o, tls, "ucp_put_bw", 8, 64), anchor_rate,
                                   {"UCX_TLS": tls, "UCX_NET_DEVICES": "lo"}, spins=True)
        argv, ops = raw(o, tls, "putbw", 8, 64)
        c["raw-rate8"] = Case("raw UCX putbw 8 B, windows of 64 + flush", argv, anchor_rate, env, ops, True)
        c["py-aio1M"] = Case("Python asyncio put 1 MiB, depth 16", hmc_py(o, tls, ["--test", "put_bw", "--depth", "16",
                                                                                  "--sizes", "1048576"]), (1000, 5000))
        c["cpp-1M"] = Case("C++ coroutine put 1 MiB, depth 16", hmc_cpp(o, tls, ["--test", "put_bw", "--depth", "16",
                                                                                 "--sizes", "1048576"]),
                           (1000, 5000))
    bw = (5000, 25000) if tls == "shm" else (500, 2500)
    c["cpp-bw64K"] = Case("C++ put 64 KiB, depth 16", hmc_cpp(o, tls, ["--test", "put_bw", "--depth", "16", "--sizes",
                                                                        "65536"]), bw)
    argv, ops = raw(o, tls, "putbw", 65536, 16)
    bw_anchor = (20000, 100000) if tls == "shm" else bw
    c["raw-bw64K"] = Case("raw UCX putbw 64 KiB, windows of 16 + flush", argv, bw_anchor, env, ops, True)
    c["perftest-bw64K"] = Case("ucp_put_bw 64 KiB -O 16", perftest(o, tls, "ucp_put_bw", 65536, 16), bw_anchor,
                               {"UCX_TLS": tls, "UCX_NET_DEVICES": "lo"}, spins=True)
    return c


# (key, transport, the target that misses, ours, anchors)
ROWS = [
    ("shm-py-block", "shm", "Python blocking 64 B put / C++ blocking put (<= 1.5)", "py-block64", ["cpp-block64"]),
    ("shm-aio-put", "shm", "Python asyncio 8 B await put / C++ coroutine (<= 2)", "py-aio8", ["cpp-coro8"]),
    ("shm-aio-rtt", "shm", "Python asyncio put + notify RT / C++ (<= 1.5)", "py-aio-notify8", ["cpp-notify8"]),
    ("shm-cpp-block", "shm", "C++ blocking 8 B put / on-loop coroutine (<= 1.5)", "cpp-block8",
     ["cpp-coro8", "cpp-block8-shared"]),
    ("shm-rate", "shm", "C++ 8 B put rate at depth 64 / ucp_put_bw (>= 0.2)", "cpp-rate8",
     ["perftest-rate8", "raw-rate8"]),
    ("shm-bw64K", "shm", "C++ put bandwidth 64 KiB / raw put windows + flush (>= 0.9)", "cpp-bw64K",
     ["raw-bw64K", "perftest-bw64K"]),
    ("shm-rtt-raw", "shm", "C++ put + notify RT / raw put + flush + AM ping-pong (<= 2)", "cpp-notify8",
     ["raw-notify8"]),
    ("shm-aio-1M", "shm", "(earlier) Python asyncio 1 MiB put bandwidth / C++ (>= 0.8)", "py-aio1M", ["cpp-1M"]),
    ("tcp-py-block", "tcp", "Python blocking 64 B put_remote / raw put + flush (<= 1.3)", "py-block64",
     ["raw-put64"]),
    ("tcp-aio-put", "tcp", "Python asyncio 8 B await put / C++ coroutine (<= 2)", "py-aio8", ["cpp-coro8"]),
    ("tcp-aio-rtt", "tcp", "Python asyncio put + notify RT / C++ (<= 1.5)", "py-aio-notify8", ["cpp-notify8"]),
    ("tcp-cpp-block", "tcp", "C++ blocking 8 B put / on-loop coroutine (<= 1.5)", "cpp-block8",
     ["cpp-coro8", "cpp-block8-shared"]),
    ("tcp-bw64K", "tcp", "C++ put bandwidth 64 KiB / ucp_put_bw (>= 0.9)", "cpp-bw64K", ["perftest-bw64K", "raw-bw64K"]),
]


# ----------------------------------------------------------------------------------------- running
def run(cmd, env):
    return subprocess.run(["nice", "-n", "-10"] + cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def strace_counts(cmd, env, tmp):
    out = os.path.join(tmp, "strace.txt")
    proc = run(["strace", "-f", "-c", "-o", out] + cmd, env)
    if proc.returncode != 0:
        return None, f"strace: exit {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}"
    return parse_strace_c(out), None


def perf_stat(cmd, env, tmp):
    out = os.path.join(tmp, "stat.csv")
    proc = run(["perf", "stat", "-x,", "-o", out, "-e", "task-clock,context-switches,cpu-migrations"] + cmd, env)
    if proc.returncode != 0:
        return None, f"perf stat: exit {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}"
    return parse_perf_stat(out), None


def least_stat(cmd, env, tmp, repeat):
    """perf stat `repeat` times; per counter the least (what other load added least to)."""
    best = None
    for _ in range(repeat):
        vals, err = perf_stat(cmd, env, tmp)
        if err:
            return None, err
        best = vals if best is None else {k: min(v, vals.get(k, v)) for k, v in best.items()}
    return best, None


def perf_symbols(cmd, env, tmp):
    """Samples per (dso, symbol), one per PERIOD_NS of CPU time, self time only. Only their shares are used:
    sampling costs CPU itself (a VM exit per sample), so perf stat's task-clock gives the total."""
    data = os.path.join(tmp, "perf.data")
    proc = run(["perf", "record", "-q", "-e", "cpu-clock", "-c", str(PERIOD_NS), "-o", data, "--"] + cmd, env)
    if proc.returncode != 0:
        return None, f"perf record: exit {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}"
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,symbol", "--stdio", "-n",
                          "-q", "--percent-limit", "0"], capture_output=True, text=True, timeout=TIMEOUT_S)
    samples = collections.Counter()
    for line in rep.stdout.splitlines():
        # "  12.34%  1234  libfoo.so  [.] symbol name"
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+(\S+)\s+\[(.)\]\s+(.*\S)", line)
        if m:
            dso = os.path.basename(m.group(2))
            sym = re.sub(r"(\s+-)+$", "", m.group(4))  # the empty IPC columns
            samples[(dso, sym)] += int(m.group(1))
    return samples, None


def component(dso):
    """Who a shared object belongs to, for the CPU split."""
    if dso.startswith("[kernel") or dso == "[vdso]":
        return "kernel"
    for prefix, name in (("libucp", "ucx"), ("libuct", "ucx"), ("libucs", "ucx"), ("libuc", "ucx"),
                         ("ucx_perftest", "anchor program"), ("ucx_raw_bench", "anchor program"),
                         ("hmc_bench", "hmc (C++, static in hmc_bench)"), ("_hmc", "hmc (C++, Python module)"),
                         ("libhmc", "hmc (C++)"), ("python", "Python"), ("libpython", "Python"), ("libc.so", "libc"),
                         ("libstdc++", "libstdc++"), ("ld-linux", "dynamic loader")):
        if dso.startswith(prefix):
            return name
    return "other"


def profile_case(case, o, tmp):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "build/python"), **case.env)
    n1, n2 = (max(int(x * o.scale), 10) for x in case.n)
    extra = case.ops(n2) - case.ops(n1)
    r = {"label": case.label, "n": [n1, n2], "extra_ops": extra, "spins": case.spins}
    s1, e = strace_counts(case.argv(n1), env, tmp)
    s2, e = (s1, e) if e else strace_counts(case.argv(n2), env, tmp)
    p1, f = least_stat(case.argv(n1), env, tmp, o.repeat)
    p2, f = (p1, f) if f else least_stat(case.argv(n2), env, tmp, o.repeat)
    if e or f:
        return {"label": case.label, "error": e or f}
    per = {k: (s2[k] - s1[k]) / extra for k in set(s1) | set(s2)}
    r["syscalls_per_op"] = sum(per.values())
    r["top_syscalls"] = {k: round(v, 3) for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:5] if v >= 0.01}
    r["context_switches_per_op"] = (p2.get("context-switches", 0) - p1.get("context-switches", 0)) / extra
    r["migrations_per_op"] = (p2.get("cpu-migrations", 0) - p1.get("cpu-migrations", 0)) / extra
    r["cpu_us_per_op"] = (p2.get("task-clock", 0) - p1.get("task-clock", 0)) * 1e3 / extra  # task-clock is in ms
    if o.symbols:
        y1, g = perf_symbols(case.argv(n1), env, tmp)
        y2, g = (y1, g) if g else perf_symbols(case.argv(n2), env, tmp)
        if g:
            r["symbols_error"] = g
        else:
            diff = {k: y2[k] - y1[k] for k in set(y1) | set(y2)}
            total = sum(diff.values())
            r["sampled_extra"] = total
            if total > 0:
                groups = collections.Counter()
                for (dso, _), v in diff.items():
                    groups[component(dso)] += v
                r["cpu_by_component"] = {k: round(v / total * r["cpu_us_per_op"], 4)
                                         for k, v in groups.most_common() if v > 0}
            if total > 0:  # each symbol's share of the extra samples, times the CPU per op perf stat counted
                r["top_symbols"] = [[dso, sym, round(v / total * r["cpu_us_per_op"], 4)] for (dso, sym), v in
                                    sorted(diff.items(), key=lambda kv: -kv[1])[:o.symbols]]
    return r


# ----------------------------------------------------------------------------------------- output
def fmt(v):
    return f"{v:.3f}" if abs(v) < 1 else f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"


def render(rows, results, mode):
    lines = [f"Per operation, both processes, difference of two run lengths (nice -n -10; HMC in {mode} mode).",
             "sys/op: strace -f -c; cs/op, CPU us/op: perf stat (task-clock, context-switches); "
             "symbols: perf record cpu-clock, each symbol's share of the extra samples x CPU us/op.",
             "* both processes busy-poll: CPU per op = 2 cores x wall time per op, which load stretches.", ""]
    for key, tls, target, ours, anchors in rows:
        lines.append(f"== {key} [{tls}] {target}")
        lines.append(f"   {'side':<48} {'sys/op':>7} {'cs/op':>7} {'CPU us/op':>9}  top system calls per op")
        for role, ck in [("ours", ours)] + [("anchor", a) for a in anchors]:
            r = results[(tls, ck)]
            name = f"{role}: {r['label']}"
            if "cpu_us_per_op" not in r:
                lines.append(f"   {name:<48} {r.get('unavailable') or r.get('error', '?')}")
                continue
            top = ", ".join(f"{k} {fmt(v)}" for k, v in r["top_syscalls"].items())
            cpu = fmt(r["cpu_us_per_op"]) + ("*" if r["spins"] else " ")
            lines.append(f"   {name:<48} {fmt(r['syscalls_per_op']):>7} {fmt(r['context_switches_per_op']):>7} "
                         f"{cpu:>10} {top}")
            mine = results[(tls, ours)]
            if role == "anchor" and "cpu_us_per_op" in mine:
                gap = [mine[k] - r[k] for k in ("syscalls_per_op", "context_switches_per_op", "cpu_us_per_op")]
                lines.append(f"   {'  gap, ours - this anchor':<48} {fmt(gap[0]):>7} {fmt(gap[1]):>7} "
                             f"{fmt(gap[2]) + ('*' if r['spins'] else ' '):>10}")
            if r.get("cpu_by_component"):
                split = ", ".join(f"{k} {fmt(v)}" for k, v in r["cpu_by_component"].items())
                lines.append(f"      CPU by component, us/op: {split}")
            if r.get("top_symbols"):
                syms = "; ".join(f"{sym[:38]} ({dso[:18]}) {fmt(v)}" for dso, sym, v in r["top_symbols"])
                lines.append(f"      CPU by symbol, us/op ({r['sampled_extra']} samples): {syms}")
            elif r.get("symbols_error"):
                lines.append(f"      symbols: {r['symbols_error']}")
        lines.append("")
    return "\n".join(lines)


def missing_tools(symbols):
    for tool in ("strace", "perf"):
        if not shutil.which(tool):
            return f"{tool} is missing (apt-get install strace linux-perf)"
    probe = subprocess.run(["perf", "stat", "-x,", "-e", "task-clock,context-switches", "true"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        return f"perf stat cannot count here (kernel.perf_event_paranoid?): {probe.stderr.strip()[-200:]}"
    if symbols:
        probe = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", "/dev/null", "true"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            return f"perf record cannot sample here (run with --no-symbols?): {probe.stderr.strip()[-200:]}"
    probe = subprocess.run(["strace", "-f", "-c", "-o", "/dev/null", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"strace cannot trace here (ptrace not permitted?): {probe.stderr.strip()[-200:]}"
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="all", help="comma-separated row keys or transports (shm, tcp); --list")
    p.add_argument("--list", action="store_true", help="print the rows and exit")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every run length")
    p.add_argument("--mode", default="adaptive", choices=("adaptive", "event", "poll"),
                   help="HMC's progress mode (adaptive: the default the targets use; event: counts that load "
                   "does not change, adaptive stops spinning on a loaded machine)")
    p.add_argument("--repeat", type=int, default=1, help="perf stat runs per length; the least counts are kept")
    p.add_argument("--symbols", type=int, default=5, help="top symbols per side (0: no perf record)")
    p.add_argument("--no-symbols", dest="symbols", action="store_const", const=0)
    p.add_argument("--hmc-bench", default=str(ROOT / "build/benchmarks/hmc_bench"))
    p.add_argument("--raw-bench", default=str(ROOT / "build/benchmarks/ucx_raw_bench"))
    p.add_argument("--ucx-perftest", default=shutil.which("ucx_perftest") or "ucx_perftest")
    p.add_argument("--json", default="")
    p.add_argument("--quiet", action="store_true")
    o = p.parse_args(argv)
    if o.list:
        for key, tls, target, ours, anchors in ROWS:
            print(f"{key:<14} {target}: {ours} vs {', '.join(anchors)}")
        return 0
    want = set(o.rows.split(","))
    rows = [r for r in ROWS if "all" in want or r[0] in want or r[1] in want]
    if not rows:
        p.error(f"--rows: none of {o.rows}; --list shows them")
    why = missing_tools(o.symbols)
    if why:
        print(f"profile_small_ops.py: skipped: {why}")
        return 0
    for path in (o.hmc_bench, o.raw_bench):
        if not os.access(path, os.X_OK):
            print(f"profile_small_ops.py: skipped: {path} is not built (bash scripts/build.sh build)")
            return 0
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key, tls, target, ours, anchors in rows:
            all_cases = cases(o, tls)
            for ck in [ours] + anchors:
                if (tls, ck) in results:
                    continue
                if ck.startswith("perftest") and not shutil.which(o.ucx_perftest):
                    results[(tls, ck)] = {"label": ck, "unavailable": "ucx_perftest is missing (ucx-utils)"}
                    continue
                if not o.quiet:
                    print(f"profiling {tls} {ck}", file=sys.stderr, flush=True)
                try:
                    results[(tls, ck)] = profile_case(all_cases[ck], o, tmp)
                except subprocess.TimeoutExpired as e:
                    results[(tls, ck)] = {"label": all_cases[ck].label, "error": f"timed out: {e.cmd[:6]}"}
    print(render(rows, results, o.mode))
    if o.json:
        Path(o.json).parent.mkdir(parents=True, exist_ok=True)
        with open(o.json, "w") as f:
            fields = ("key", "tls", "target", "ours", "anchors")
            json.dump({"mode": o.mode, "rows": [dict(zip(fields, r)) for r in rows],
                       "cases": {f"{t}/{k}": v for (t, k), v in results.items()}}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
