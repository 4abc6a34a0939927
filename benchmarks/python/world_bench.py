"""Collectives of a world of processes on this host: HMC (hmc.World) or torch.distributed's gloo,
the same ranks, sizes and timing for both.

    python3 world_bench.py --impl hmc  --ranks 8 --sizes 1K:16M --json out.json
    python3 world_bench.py --impl gloo --ranks 8 --sizes 1K:16M --json out.json

Tests: barrier (latency), all_gather (each rank contributes SIZE bytes), all_to_all (each rank
sends SIZE bytes in total, SIZE / ranks to each rank, like all_to_all_single). One measurement:
a barrier, ITERS operations back to back on every rank, each rank's mean time per operation; the
slowest rank's mean is reported (a collective is done when its last rank is). Data are uint8
tensors (gloo) or NumPy arrays (hmc); inputs and outputs are allocated once per size for both
(hmc through out=); results are not checked here (the tests do that).
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_units import human, parse_sizes  # noqa: E402

TESTS = ("barrier", "all_gather", "all_to_all")


def iters_for(test, size, scale):
    if test == "barrier":
        n = 2000
    else:
        n = max(5, min(1000, (256 << 20) // max(size, 1) // 4))
    return max(3, int(n * scale))


class Hmc:
    def __init__(self, url, rank, ranks, tls, buffer_size):
        import hmc

        self.w = hmc.init_world(url, ranks, rank, ucx_tls=tls, ucx_net_devices="lo", buffer_size=buffer_size,
                                timeout=120)
        self.rank, self.ranks = self.w.rank, self.w.size
        self.outs = {}

    def array(self, n):
        import numpy

        return numpy.full(n, self.rank, dtype=numpy.uint8)

    def barrier(self):
        self.w.barrier()

    def all_gather(self, x):
        # Outputs allocated once per size, as for gloo below (out=: the caller's array is reused).
        import numpy

        out = self.outs.setdefault(("ag", len(x)), numpy.empty((self.ranks, len(x)), dtype=x.dtype))
        self.w.all_gather(x, out=out)

    def all_to_all(self, x):
        import numpy

        parts = self.parts(x)
        out = self.outs.setdefault(("a2a", len(x)), numpy.empty((self.ranks, len(parts[0])), dtype=x.dtype))
        self.w.all_to_all(parts, out=out)

    def parts(self, x):
        k = len(x) // self.ranks
        return [x[i * k:(i + 1) * k] for i in range(self.ranks)]

    def gather_floats(self, v):
        import numpy

        return [float(a[0]) for a in self.w.all_gather(numpy.array([v]))]

    def close(self):
        self.w.close()


class Gloo:
    def __init__(self, url, rank, ranks, tls, buffer_size):
        import datetime

        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        dist.init_process_group("gloo", init_method=url, rank=rank, world_size=ranks,
                                timeout=datetime.timedelta(seconds=120))
        self.rank, self.ranks = rank, ranks
        self.outs = {}

    def array(self, n):
        return self.torch.full((n,), self.rank, dtype=self.torch.uint8)

    def barrier(self):
        self.dist.barrier()

    def all_gather(self, x):
        out = self.outs.setdefault(("ag", len(x)), [self.torch.empty_like(x) for _ in range(self.ranks)])
        self.dist.all_gather(out, x)

    def all_to_all(self, x):
        out = self.outs.setdefault(("a2a", len(x)), self.torch.empty_like(x))
        self.dist.all_to_all_single(out, x)

    def gather_floats(self, v):
        t = self.torch.tensor([v], dtype=self.torch.float64)
        out = [self.torch.empty_like(t) for _ in range(self.ranks)]
        self.dist.all_gather(out, t)
        return [float(o[0]) for o in out]

    def close(self):
        self.dist.destroy_process_group()


def rank_main(args):
    impl = {"hmc": Hmc, "gloo": Gloo}[args.impl](args.url, args.rank, args.ranks, args.tls, args.buffer)
    results = []
    for test in args.tests:
        sizes = [0] if test == "barrier" else args.sizes
        for size in sizes:
            n = max(size - size % args.ranks, args.ranks) if test == "all_to_all" else size
            x = impl.array(n) if test != "barrier" else None
            op = getattr(impl, test)
            call = (lambda: op()) if test == "barrier" else (lambda: op(x))
            iters = iters_for(test, size, args.iter_scale)
            for _ in range(max(2, iters // 10)):  # warm-up: connections, first-touch of buffers
                call()
            impl.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                call()
            mean = (time.perf_counter() - t0) / iters
            slowest = max(impl.gather_floats(mean))
            if impl.rank == 0:
                results.append({"impl": args.impl, "test": test, "ranks": args.ranks, "size": size, "iters": iters,
                                "time_us": slowest * 1e6,
                                "bw_mbps": (size / slowest / 1e6) if size else 0.0})
                if not args.quiet:
                    print(f"{args.impl:5} {test:10} ranks={args.ranks} size={human(size):>5} "
                          f"{slowest * 1e6:12.1f} us", file=sys.stderr, flush=True)
    impl.barrier()
    impl.close()
    if impl.rank == 0:
        print(json.dumps(results), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args):
    """Starts the ranks as processes of this script; returns rank 0's results."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    common = ["--impl", args.impl, "--ranks", str(args.ranks), "--url", url, "--tls", args.tls,
              "--buffer", str(args.buffer), "--iter-scale", str(args.iter_scale), "--tests", ",".join(args.tests),
              "--sizes", ",".join(str(s) for s in args.sizes)] + (["--quiet"] if args.quiet else [])
    env = dict(os.environ, HMC_AUTH_KEY=os.environ.get("HMC_AUTH_KEY", "world-bench-auth-key"), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", str(r)] + common,
                              stdout=subprocess.PIPE, text=True, env=env) for r in range(args.ranks)]
    out0, _ = procs[0].communicate(timeout=args.limit)
    for p in procs[1:]:
        p.communicate(timeout=60)
    if any(p.returncode != 0 for p in procs):
        raise SystemExit(f"{args.impl}: a rank failed ({[p.returncode for p in procs]})")
    return json.loads(out0.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", choices=["hmc", "gloo"], required=True)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--sizes", type=parse_sizes, default=parse_sizes("1K:16M"))
    p.add_argument("--tests", type=lambda t: t.split(","), default=list(TESTS))
    p.add_argument("--tls", default="shm", help="hmc: UCX transports (shm or tcp)")
    p.add_argument("--buffer", type=int, default=256 << 20, help="hmc: session buffer bytes")
    p.add_argument("--iter-scale", type=float, default=1.0)
    p.add_argument("--limit", type=int, default=1800, help="seconds before the run is abandoned")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank is not None:
        return rank_main(args)
    results = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return None


if __name__ == "__main__":
    main()
