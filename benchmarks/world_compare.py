"""HMC's collectives beside torch.distributed's gloo, in one run, on the same ranks and sizes:
hmc_world_bench (C++), benchmarks/python/world_bench.py --impl hmc (Python) and --impl gloo.

    /usr/bin/python3 benchmarks/world_compare.py --ranks 4,8 --sizes 1K:16M --json out.json \
        --plot docs/benchmarks-world.png --markdown out.md

Prints, per test, rank count and size, each implementation's time per operation and the speed-up
over gloo (gloo's time / HMC's: above 1 is faster), then checks the targets: all_gather and
all_to_all at least 3x gloo from 64 KiB up, and a barrier no slower than gloo's.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE / "python"))
from bench_units import human, parse_sizes  # noqa: E402

PYTHON = "/usr/bin/python3"
TARGET_SPEEDUP = 3.0
TARGET_FROM = 64 << 10


def run(cmd, env):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, env=env)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="4,8")
    p.add_argument("--sizes", default="1K:16M")
    p.add_argument("--tests", default="barrier,all_gather,all_to_all")
    p.add_argument("--tls", default="shm")
    p.add_argument("--iter-scale", type=float, default=0.5)
    p.add_argument("--repeat", type=int, default=1, help="runs per implementation; the best time of each is kept")
    p.add_argument("--build", default=str(HERE.parent / "build"))
    p.add_argument("--skip", default="", help="comma list of implementations to leave out (hmc-cpp, hmc-python, gloo)")
    p.add_argument("--json", default="world-compare.json")
    p.add_argument("--plot", help="write a PNG plot here")
    p.add_argument("--markdown", help="write the table as Markdown here")
    args = p.parse_args()
    sizes = ",".join(str(s) for s in parse_sizes(args.sizes))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([f"{args.build}/python", os.environ.get("PYTHONPATH", "")]),
               HMC_AUTH_KEY=os.environ.get("HMC_AUTH_KEY", "world-compare-auth-key"))
    skip = set(filter(None, args.skip.split(",")))
    results = []
    tmp = pathlib.Path(args.json).with_suffix(".part.json")
    # Implementations take turns within each repetition, so load from elsewhere hits them alike.
    for _ in range(args.repeat):
        for ranks in [int(r) for r in args.ranks.split(",")]:
            common = ["--ranks", str(ranks), "--sizes", sizes, "--tests", args.tests, "--iter-scale", str(args.iter_scale)]
            if "hmc-cpp" not in skip:
                run([f"{args.build}/benchmarks/hmc_world_bench", *common, "--tls", args.tls, "--json", str(tmp)], env)
                results += json.loads(tmp.read_text())
            for impl in ("hmc", "gloo"):
                if ("hmc-python" if impl == "hmc" else "gloo") in skip:
                    continue
                run([PYTHON, str(HERE / "python/world_bench.py"), "--impl", impl, *common, "--tls", args.tls,
                     "--json", str(tmp), "--quiet"], env)
                for r in json.loads(tmp.read_text()):
                    r["impl"] = "hmc-python" if impl == "hmc" else "gloo"
                    results.append(r)
    tmp.unlink(missing_ok=True)
    best = {}
    for r in results:
        key = (r["impl"], r["test"], r["ranks"], r["size"])
        if key not in best or r["time_us"] < best[key]["time_us"]:
            best[key] = r
    results = list(best.values())
    pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    table, misses = report(results)
    print(table)
    print("\n".join(misses) if misses else "targets met")
    if args.markdown:
        pathlib.Path(args.markdown).write_text(table + "\n\n" + ("\n".join(f"* {m}" for m in misses) or "targets met") + "\n")
    if args.plot:
        plot(results, args.plot)


def report(results):
    by = {(r["impl"], r["test"], r["ranks"], r["size"]): r["time_us"] for r in results}
    impls = [i for i in ("hmc-cpp", "hmc-python", "gloo") if any(k[0] == i for k in by)]
    keys = sorted({k[1:] for k in by}, key=lambda k: (k[0] != "barrier", k[0], k[1], k[2]))
    head = "| test | ranks | size | " + " | ".join(f"{i} (us)" for i in impls) + " | C++ vs gloo | Python vs gloo |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    misses = []
    for test, ranks, size in keys:
        t = {i: by.get((i, test, ranks, size)) for i in impls}
        g = t.get("gloo")

        def ratio(i):
            return g / t[i] if g and t.get(i) else None

        cells = [f"{t[i]:.1f}" if t[i] else "-" for i in impls]
        rc, rp = ratio("hmc-cpp"), ratio("hmc-python")
        fmt = lambda r: f"{r:.2f}x" if r else "-"  # noqa: E731
        lines.append(f"| {test} | {ranks} | {human(size) if size else '-'} | " + " | ".join(cells) +
                     f" | {fmt(rc)} | {fmt(rp)} |")
        for name, r in (("C++", rc), ("Python", rp)):
            if r is None:
                continue
            if test == "barrier" and r < 1.0:
                misses.append(f"miss: {name} barrier at {ranks} ranks takes {1 / r:.2f}x gloo's time")
            if test != "barrier" and size >= TARGET_FROM and r < TARGET_SPEEDUP:
                misses.append(f"miss: {name} {test} at {ranks} ranks, {human(size)}: {r:.2f}x gloo (target {TARGET_SPEEDUP}x)")
    return "\n".join(lines), misses


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tests = [t for t in ("all_gather", "all_to_all") if any(r["test"] == t for r in results)]
    ranks = sorted({r["ranks"] for r in results})
    fig, axes = plt.subplots(len(tests), len(ranks), figsize=(5 * len(ranks), 3.6 * len(tests)), squeeze=False)
    for i, test in enumerate(tests):
        for j, n in enumerate(ranks):
            ax = axes[i][j]
            for impl, style in (("hmc-cpp", "o-"), ("hmc-python", "s--"), ("gloo", "^-")):
                pts = sorted((r["size"], r["bw_mbps"]) for r in results
                             if r["impl"] == impl and r["test"] == test and r["ranks"] == n)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=impl, markersize=4)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{test}, {n} ranks")
            ax.set_xlabel("bytes per rank")
            ax.set_ylabel("MB/s per rank (size / time)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
