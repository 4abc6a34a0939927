"""Costs per small operation, for the targets that miss: system calls (strace -f -c) and context
switches and CPU time (perf stat, software events) of both processes of a benchmark, per operation.

    /usr/bin/python3 benchmarks/profile_ops.py [--tls shm] [--n 100,1100] [--json FILE]

Each case runs twice, with N1 and N2 measured operations (same warm-up); the difference divided by
N2 - N1 is the cost of one operation, without start-up and connection set-up. strace slows every
system call, so its runs say how many calls there are, not how long they take; perf stat's
task-clock is CPU time of both processes (a busy-polling side counts its spinning).
"""
import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = "/usr/bin/python3"


def cases(o):
    bench = [str(o.hmc_bench), "--tls", o.tls, "--net-devices", "lo", "--quiet", "--warmup", "50"]
    py = [PY, str(ROOT / "benchmarks/python/hmc_bench.py"), "--tls", o.tls, "--quiet", "--warmup", "50"]
    return [
        ("C++ blocking put 8 B (user thread)", bench + ["--test", "put_sync", "--sizes", "8"]),
        ("C++ coroutine put 8 B", bench + ["--test", "put_bw", "--depth", "1", "--sizes", "8"]),
        ("C++ put + ctrl_send round trip 8 B", bench + ["--test", "tag_lat", "--sizes", "8"]),
        ("C++ put + notify round trip 8 B", bench + ["--test", "notify_lat", "--sizes", "8"]),
        ("Python blocking put_remote 64 B", py + ["--api", "blocking", "--test", "put_bw", "--sizes", "64"]),
        ("Python asyncio put 8 B", py + ["--test", "put_bw", "--depth", "1", "--sizes", "8"]),
        ("Python asyncio put + notify round trip 8 B", py + ["--test", "notify_lat", "--sizes", "8"]),
    ]


def run(cmd, env, timeout=300):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def parse_strace_c(path):
    """System calls by name from an `strace -c -o path` summary."""
    counts = collections.Counter()
    for line in open(path):
        f = line.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(f) >= 5 and re.fullmatch(r"[\d.]+", f[0]) and f[-1] != "total":
            counts[f[-1]] += int(f[3])
    return counts


def parse_perf_stat(path):
    """Counter values by event name from a `perf stat -x, -o path` file."""
    vals = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) > 3 and re.fullmatch(r"[\d.]+", f[0]):
            vals[f[2]] = float(f[0])
    return vals


def strace_counts(cmd, env, n, tmp):
    out = os.path.join(tmp, "strace.txt")
    proc = run(["strace", "-f", "-c", "-o", out] + cmd + ["--iters", str(n)], env)
    if proc.returncode != 0:
        return None, proc.stderr[-300:]
    return parse_strace_c(out), None


def perf_counts(cmd, env, n, tmp):
    out = os.path.join(tmp, "perf.csv")
    proc = run(["perf", "stat", "-x,", "-o", out, "-e", "task-clock,context-switches,cpu-migrations,page-faults"] +
               cmd + ["--iters", str(n)], env)
    if proc.returncode != 0:
        return None, proc.stderr[-300:]
    return parse_perf_stat(out), None


def profile(o):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "build/python"))
    n1, n2 = o.n
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, cmd in cases(o):
            if not o.quiet:
                print(f"profiling: {name}", file=sys.stderr)
            s1, e1 = strace_counts(cmd, env, n1, tmp)
            s2, e2 = strace_counts(cmd, env, n2, tmp)
            p1, f1 = perf_counts(cmd, env, n1, tmp)
            p2, f2 = perf_counts(cmd, env, n2, tmp)
            if None in (s1, s2, p1, p2):
                rows.append({"case": name, "error": e1 or e2 or f1 or f2})
                continue
            per = {k: (s2[k] - s1[k]) / (n2 - n1) for k in set(s1) | set(s2)}
            per = {k: v for k, v in per.items() if v >= 0.05}
            rows.append({
                "case": name, "syscalls_per_op": sum(per.values()),
                "top_syscalls": dict(sorted(per.items(), key=lambda kv: -kv[1])[:5]),
                "context_switches_per_op": (p2.get("context-switches", 0) - p1.get("context-switches", 0)) / (n2 - n1),
                "cpu_us_per_op": (p2.get("task-clock", 0) - p1.get("task-clock", 0)) * 1e3 / (n2 - n1),
            })
    return rows


def render(data):
    """The table, from profile()'s JSON."""
    n = data["n"]
    lines = [f"Per operation, both processes, {data['tls']}, mode adaptive (runs of {n[0]} and {n[1]} operations, "
             "the difference):",
             f"{'case':<45} {'syscalls':>8} {'ctx sw':>7} {'CPU us':>7}  top system calls per op"]
    for r in data["rows"]:
        if "syscalls_per_op" not in r:
            lines.append(f"{r['case']:<45} {r.get('error', '?')}")
            continue
        top = ", ".join(f"{k} {v:.1f}" for k, v in r["top_syscalls"].items())
        lines.append(f"{r['case']:<45} {r['syscalls_per_op']:>8.1f} {r['context_switches_per_op']:>7.1f} "
                     f"{r['cpu_us_per_op']:>7.1f}  {top}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tls", default="shm")
    p.add_argument("--n", default="100,1100", help="N1,N2 measured operations of the two runs")
    p.add_argument("--hmc-bench", default=str(ROOT / "build/benchmarks/hmc_bench"))
    p.add_argument("--json", default="")
    p.add_argument("--quiet", action="store_true")
    o = p.parse_args(argv)
    o.n = [int(x) for x in o.n.split(",")]
    if len(o.n) != 2 or o.n[1] <= o.n[0]:
        p.error("--n N1,N2 with N2 > N1")
    for tool in ("strace", "perf"):
        if not shutil.which(tool):
            print(f"profile_ops.py: {tool} is missing (apt-get install strace linux-perf): no profile")
            return 0
    rows = profile(o)
    print(render({"tls": o.tls, "n": o.n, "rows": rows}))
    if o.json:
        Path(o.json).parent.mkdir(parents=True, exist_ok=True)
        with open(o.json, "w") as f:
            json.dump({"tls": o.tls, "n": o.n, "rows": rows}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
