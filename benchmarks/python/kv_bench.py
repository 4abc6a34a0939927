"""KV-cache transfers shaped like real models: put_blocks of a paged cache's blocks (K and V of every
layer, one region each, scattered block tables on both sides) between two processes, beside the
contiguous ceiling (one put_remote of the same bytes between the same session buffers) and raw UCX
posting the same segments (ucx_raw_bench scatter --segments) and their bytes as one put (contig).
docs/benchmarks.md, "KV-cache transfers".

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/python/kv_bench.py \
        [--models llama3-8b,llama3-70b,blocks-16k,blocks-4k] [--contexts 1024,4096,16384] \
        [--tls shm|tcp] [--requests 20] [--warmup 2] [--repeat 1] [--max-buffer 3G] [--progress-thread own|caller] \
        [--raw-bench build/benchmarks/ucx_raw_bench | --no-raw] [--json FILE] [--quiet]

Models: 16-token blocks, bf16, one block of one layer's K (or V) = 16 x KV heads x head dim x 2
bytes (llama3-8b: 32 layers, llama3-70b: 80 layers; both 8 KV heads of 128: 32 KiB). A point
(model, context) has 2 x layers regions of `pool` = ceil(1.25 x blocks) blocks each; the block
table of each side is a random sample of the pool (fixed seed, different on the two sides), so the
request's blocks are scattered at both ends. blocks-16k (15000 x 16 KiB) and blocks-4k (60000 x
4 KiB) are one region each, with the same 1.25x pool. A point whose session buffer would exceed
--max-buffer per side is skipped with a line saying so.

Per point the loopback role starts the server side as a subprocess of this script (`--role server`,
an AsyncSession with the same layout, printing "READY <ctrl_port>"); the client (an AsyncSession,
progress_thread='own' by default) exchanges layouts and then, per request (--warmup unmeasured,
then --requests measured): turns the request's block tables (Python lists, as a serving engine
hands them over) into NumPy id arrays, calls put_blocks(notify=request number), and awaits it. The
server receives each notify; after the first it checks three blocks' bytes (patterns the client
wrote before). Then the same number of put_remote calls of the same total bytes, and, once both
sessions are closed, ucx_raw_bench on the exact segments put_blocks makes (a temporary file).

Columns: p50/p99 of a request's wall time (ids built, call, completion), GB/s and millions of
layer-blocks (segments) per second at the p50, the client process's CPU seconds per GB moved
(measured requests), launch = the time until put_blocks returns its awaitable (ids + the call's own
argument handling, segment building and submission; with --progress-thread caller the call also
drives progress, and over shm moves the blocks itself: launch is then about the whole request),
contiguous = put_remote p50, raw scatter / raw contig = ucx_raw_bench p50, and the ratios
contiguous / hmc and raw scatter / hmc (1.0: as fast). --repeat N measures each point N times, HMC
and raw UCX in turn, and keeps the best (see best_of).
"""
import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import hmc
from bench_units import parse_size

SERVER_RANK = 100
CLIENT_RANK = 1
TOKENS_PER_BLOCK = 16
POOL_FACTOR = 1.25
SEED = 42
# name -> (layers, KV heads, head dim, bytes per element); a model's point count is per context.
MODELS = {"llama3-8b": (32, 8, 128, 2), "llama3-70b": (80, 8, 128, 2)}
# name -> (block bytes, blocks): one region, no context.
SYNTHETIC = {"blocks-16k": (16 << 10, 15000), "blocks-4k": (4 << 10, 60000)}
RAW_DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "benchmarks",
                           "ucx_raw_bench")


# ------------------------------------------------------------------------------------------ options
def names(text):
    out = [t for t in text.split(",") if t]
    for t in out:
        if t not in MODELS and t not in SYNTHETIC:
            raise argparse.ArgumentTypeError(f"unknown model '{t}' (have {', '.join([*MODELS, *SYNTHETIC])})")
    return out


def contexts(text):
    try:
        out = [int(t) for t in text.split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--contexts '{text}': token counts, comma-separated") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError("--contexts: token counts > 0")
    return out


def size_arg(text):
    return parse_size(text)


def options(argv=None):
    p = argparse.ArgumentParser(description="KV-cache put_blocks beside the contiguous ceiling and raw UCX")
    p.add_argument("--role", choices=("loopback", "server"), default="loopback",
                   help="server: one point's server side (loopback starts it)")
    p.add_argument("--models", type=names, default=names("llama3-8b,llama3-70b,blocks-16k,blocks-4k"))
    p.add_argument("--contexts", type=contexts, default=contexts("1024,4096,16384"), help="tokens per request")
    p.add_argument("--tls", default="shm", help="UCX_TLS of both sides and of ucx_raw_bench (shm, tcp)")
    p.add_argument("--mode", choices=("adaptive", "event", "poll"), default="adaptive")
    p.add_argument("--progress-thread", choices=("own", "caller"), default="own",
                   help="the client AsyncSession's progress_thread (own: launch excludes any transfer work)")
    p.add_argument("--net-devices", default="lo")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--requests", type=int, default=20, help="measured requests per point")
    p.add_argument("--warmup", type=int, default=2, help="unmeasured requests first")
    p.add_argument("--repeat", type=int, default=1, help="measure each point this many times, keep the best")
    p.add_argument("--max-buffer", type=size_arg, default=parse_size("3G"), help="skip points past this per side")
    p.add_argument("--raw-bench", default=RAW_DEFAULT, help="ucx_raw_bench to run on the same segments")
    p.add_argument("--no-raw", action="store_true", help="skip the raw UCX columns")
    p.add_argument("--json", default="")
    p.add_argument("--quiet", action="store_true")
    # server role: its point
    p.add_argument("--regions", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--block-bytes", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--pool", type=int, default=0, help=argparse.SUPPRESS)
    o = p.parse_args(argv)
    if o.requests < 1 or o.warmup < 1 or o.repeat < 1:
        p.error("--requests, --warmup and --repeat must be > 0 (the first warm-up request carries the byte check)")
    return o


# ------------------------------------------------------------------------------------------- points
def points(o):
    """Each point: name, context (None: synthetic), regions, block bytes, blocks per request, pool."""
    out = []
    for name in o.models:
        if name in SYNTHETIC:
            block, blocks = SYNTHETIC[name]
            out.append(dict(model=name, context=None, regions=1, block_bytes=block, blocks=blocks,
                            pool=math.ceil(POOL_FACTOR * blocks)))
            continue
        layers, heads, dim, elem = MODELS[name]
        for ctx in o.contexts:
            blocks = math.ceil(ctx / TOKENS_PER_BLOCK)
            out.append(dict(model=name, context=ctx, regions=2 * layers,
                            block_bytes=TOKENS_PER_BLOCK * heads * dim * elem, blocks=blocks,
                            pool=math.ceil(POOL_FACTOR * blocks)))
    for pt in out:
        pt["segments"] = pt["regions"] * pt["blocks"]
        pt["bytes"] = pt["segments"] * pt["block_bytes"]
        pt["buffer"] = pt["regions"] * pt["pool"] * pt["block_bytes"]
    return out


def layout_of(regions, block, pool):
    """K and V of every layer, one after the other: region r holds `pool` blocks at r * pool * block."""
    return hmc.KvLayout([(r * pool * block, block, pool) for r in range(regions)])


def tables(pt):
    """The request's block tables (Python lists, as an engine's scheduler holds them): `blocks` ids of
    the pool on each side, different samples, the same in every run."""
    rng = np.random.default_rng(SEED)
    src = rng.choice(pt["pool"], pt["blocks"], replace=False)
    dst = rng.choice(pt["pool"], pt["blocks"], replace=False)
    return src.tolist(), dst.tolist()


def segments_of(pt, src, dst):
    """What put_blocks makes of them: for region r, for i: (off_r + src[i]*stride, roff_r + dst[i]*stride,
    block_bytes), region by region, as an (N, 3) little-endian uint64 array."""
    block, pool = pt["block_bytes"], pt["pool"]
    base = (np.arange(pt["regions"], dtype=np.uint64) * np.uint64(pool * block))[:, None]
    seg = np.empty((pt["regions"], len(src), 3), dtype="<u8")
    seg[:, :, 0] = base + np.asarray(src, dtype=np.uint64)[None, :] * np.uint64(block)
    seg[:, :, 1] = base + np.asarray(dst, dtype=np.uint64)[None, :] * np.uint64(block)
    seg[:, :, 2] = block
    return seg.reshape(-1, 3)


def joinable(seg):
    """Neighbouring segments that continue one another on both sides (a batch may send them as one)."""
    end_l, end_r = seg[:-1, 0] + seg[:-1, 2], seg[:-1, 1] + seg[:-1, 2]
    return int(np.count_nonzero((end_l == seg[1:, 0]) & (end_r == seg[1:, 1])))


def pattern(n, block):
    return bytes([(n * 37 + k * 11 + 1) % 251 + 1 for k in range(8)]) * (block // 8)


def session_kwargs(o, buffer):
    return dict(buffer_size=buffer, progress_mode=o.mode, ucx_tls=o.tls or None, ucx_net_devices=o.net_devices,
                timeout=120.0)


def percentile(sorted_values, p):
    return sorted_values[int(p * (len(sorted_values) - 1))]


# ------------------------------------------------------------------------------------------- server
async def run_server(o):
    layout = layout_of(o.regions, o.block_bytes, o.pool)
    async with hmc.AsyncSession(**session_kwargs(o, o.regions * o.pool * o.block_bytes)) as s:
        await s.init_server(o.host, 0, 0, 0, SERVER_RANK)
        print("READY", s.ctrl_port, flush=True)
        await s.wait_peer(CLIENT_RANK, timeout=120)
        if await s.exchange_layout(CLIENT_RANK, layout, timeout=120) != layout:
            raise RuntimeError("the client's layout differs from the server's")
        spec = json.loads(await s.ctrl_recv(CLIENT_RANK, timeout=120))
        cpu0 = time.process_time()
        bad = []
        for n in range(spec["requests"]):
            got = await s.ctrl_recv(CLIENT_RANK, timeout=300)
            if got != n:
                bad.append(f"notify {got!r} where {n} was due")
            if n == 0:  # the spot check: blocks the client patterned, where the block tables put them
                for remote_off, k in spec["check"]:
                    if s.buf.get_bytes(remote_off, o.block_bytes) != pattern(k, o.block_bytes):
                        bad.append(f"block at {remote_off} does not hold pattern {k}")
        await s.ctrl_recv(CLIENT_RANK, timeout=600)  # the client is done (contiguous puts included)
        await s.ctrl_send(CLIENT_RANK, json.dumps({"cpu_seconds": time.process_time() - cpu0, "bad": bad}).encode())


def spawn_server(o, pt):
    args = [sys.executable, os.path.abspath(__file__), "--role", "server", "--host", o.host, "--tls", o.tls,
            "--mode", o.mode, "--net-devices", o.net_devices, "--regions", str(pt["regions"]),
            "--block-bytes", str(pt["block_bytes"]), "--pool", str(pt["pool"])]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().split()
    if len(line) != 2 or line[0] != "READY":
        proc.kill()
        proc.wait()
        raise RuntimeError("the server process did not start")
    return proc, int(line[1])


# ------------------------------------------------------------------------------------------- client
async def measure(o, pt, port):
    block, regions, pool = pt["block_bytes"], pt["regions"], pt["pool"]
    layout = layout_of(regions, block, pool)
    src, dst = tables(pt)
    kw = session_kwargs(o, pt["buffer"])
    async with hmc.AsyncSession(**kw, progress_thread=o.progress_thread) as c:
        await c.connect(SERVER_RANK, CLIENT_RANK, o.host, 0, port)
        transports = c.transports(SERVER_RANK)
        theirs = await c.exchange_layout(SERVER_RANK, layout, timeout=120)
        # Three blocks to check at the server after the first request: first, middle, last.
        check = []
        for k, (r, i) in enumerate(((0, 0), (regions // 2, len(src) // 2), (regions - 1, len(src) - 1))):
            c.buf.put(pattern(k, block), r * pool * block + src[i] * block)
            check.append((r * pool * block + dst[i] * block, k))
        total = o.warmup + o.requests
        await c.ctrl_send(SERVER_RANK, json.dumps({"requests": total, "check": check}).encode())
        clock = time.perf_counter
        wall, launch, ids = [], [], []
        cpu = 0.0
        for n in range(total):
            if n == o.warmup:
                cpu0 = time.process_time()
            t0 = clock()
            s_ids = np.asarray(src, dtype=np.int64)
            d_ids = np.asarray(dst, dtype=np.int64)
            t1 = clock()
            pending = c.put_blocks(SERVER_RANK, layout, s_ids, d_ids, remote_layout=theirs, notify=n)
            t2 = clock()
            await pending
            t3 = clock()
            if n >= o.warmup:
                wall.append(t3 - t0)
                launch.append(t2 - t0)
                ids.append(t1 - t0)
        cpu = time.process_time() - cpu0
        contig = []
        for n in range(total):
            t0 = clock()
            await c.put_remote(SERVER_RANK, None, 0, 0, pt["bytes"])
            if n >= o.warmup:
                contig.append(clock() - t0)
        await c.ctrl_send(SERVER_RANK, 0)
        server = json.loads(await c.ctrl_recv(SERVER_RANK, timeout=120))
    wall.sort(), launch.sort(), ids.sort(), contig.sort()
    moved = pt["bytes"] * o.requests
    p50 = percentile(wall, 0.5)
    return {"hmc_p50_ms": p50 * 1e3, "hmc_p99_ms": percentile(wall, 0.99) * 1e3,
            "hmc_mean_ms": sum(wall) / len(wall) * 1e3, "gbps": pt["bytes"] / p50 / 1e9,
            "mblocks_per_s": pt["segments"] / p50 / 1e6, "cpu_s_per_gb": cpu / (moved / 1e9),
            "server_cpu_s_per_gb": server["cpu_seconds"] / (moved / 1e9),
            "launch_p50_us": percentile(launch, 0.5) * 1e6, "ids_p50_us": percentile(ids, 0.5) * 1e6,
            "contig_p50_ms": percentile(contig, 0.5) * 1e3, "check": "ok" if not server["bad"] else server["bad"],
            "transports": transports}


def hmc_point(o, pt):
    proc, port = spawn_server(o, pt)
    try:
        row = asyncio.run(measure(o, pt, port))
        proc.wait(timeout=120)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"the server process exited with {proc.returncode}")
    return row


def raw_point(o, pt, seg):
    """ucx_raw_bench scatter and contig on the exact segments; (scatter ms, contig ms) p50, or why not."""
    if o.no_raw:
        return {"raw": "off (--no-raw)"}
    if not os.access(o.raw_bench, os.X_OK):
        return {"raw": f"not run: {o.raw_bench} is not built (ninja ucx_raw_bench)"}
    with tempfile.TemporaryDirectory(prefix="kv_bench.") as tmp:
        seg_file, out = os.path.join(tmp, "segments.bin"), os.path.join(tmp, "raw.json")
        seg.tofile(seg_file)
        cmd = [o.raw_bench, "--tls", o.tls, "--tests", "scatter,contig", "--segments", seg_file,
               "--sizes", str(pt["block_bytes"]), "--iters", str(max(o.requests, 10)), "--json", out]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if run.returncode != 0 or not os.path.exists(out):
            return {"raw": f"failed ({run.returncode}): {run.stderr.strip()[-300:]}"}
        with open(out) as f:
            rows = {r["test"]: r for r in json.load(f)["results"]}
    if rows["scatter"]["depth"] != len(seg):
        return {"raw": f"failed: ucx_raw_bench posted {rows['scatter']['depth']} puts per batch, not {len(seg)}"}
    return {"raw": "ok", "raw_scatter_p50_ms": rows["scatter"]["lat_p50_us"] / 1e3,
            "raw_contig_p50_ms": rows["contig"]["lat_p50_us"] / 1e3,
            "raw_scatter_mean_ms": rows["scatter"]["lat_mean_us"] / 1e3,
            "raw_contig_mean_ms": rows["contig"]["lat_mean_us"] / 1e3}


def best_of(o, pt, label):
    """--repeat rounds of HMC then raw UCX (interleaved, so a slow spell of the machine hits both); the
    round with the lowest put_blocks p50 gives the HMC columns, and each other p50 is its lowest."""
    seg = segments_of(pt, *tables(pt))
    best, raw = None, {}
    for i in range(o.repeat):
        again = f" ({i + 1}/{o.repeat})" if o.repeat > 1 else ""
        if not o.quiet:
            sys.stderr.write(f"{label}: {pt['segments']} x {pt['block_bytes']} B, hmc{again} ...\n")
        r = hmc_point(o, pt)
        if r["check"] != "ok":
            raise RuntimeError(f"{label}: the server found wrong bytes: {r['check']}")
        if best is not None:
            r["contig_p50_ms"] = min(r["contig_p50_ms"], best["contig_p50_ms"])
            if r["hmc_p50_ms"] >= best["hmc_p50_ms"]:
                r = {**best, "contig_p50_ms": r["contig_p50_ms"]}
        best = r
        if not o.quiet:
            sys.stderr.write(f"{label}: raw UCX{again} ...\n")
        w = raw_point(o, pt, seg)
        if "raw_scatter_p50_ms" not in raw:
            raw = w
        elif "raw_scatter_p50_ms" in w:
            raw.update({key: min(raw[key], w[key]) for key in w if key.endswith("_ms")})
    if "raw_scatter_p50_ms" not in raw and not o.quiet:
        sys.stderr.write(f"{label}: raw UCX {raw['raw']}\n")
    return {**best, **raw, "joinable_segments": joinable(seg), "repeat": o.repeat}


# -------------------------------------------------------------------------------------------- table
COLUMNS = ("model", "ctx tok", "segments", "MiB", "p50 ms", "p99 ms", "GB/s", "M blk/s", "CPU s/GB", "launch us",
           "ids us", "contig ms", "raw sc ms", "raw ct ms", "contig/hmc", "raw sc/hmc")


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def line(r):
    return [r["model"], "-" if r["context"] is None else str(r["context"]), str(r["segments"]),
            fmt(r["bytes"] / (1 << 20), ".0f"), fmt(r["hmc_p50_ms"], ".2f"), fmt(r["hmc_p99_ms"], ".2f"),
            fmt(r["gbps"], ".2f"), fmt(r["mblocks_per_s"], ".3f"), fmt(r["cpu_s_per_gb"], ".3f"),
            fmt(r["launch_p50_us"], ".0f"), fmt(r["ids_p50_us"], ".0f"), fmt(r["contig_p50_ms"], ".2f"),
            fmt(r.get("raw_scatter_p50_ms"), ".2f"), fmt(r.get("raw_contig_p50_ms"), ".2f"),
            fmt(r["contig_over_hmc"], ".2f"), fmt(r.get("raw_scatter_over_hmc"), ".2f")]


def print_table(rows, out=sys.stdout):
    body = [line(r) for r in rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) if body else len(c) for i, c in enumerate(COLUMNS)]
    print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(COLUMNS, widths))), file=out)
    for b in body:
        print("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(b, widths))), file=out)


def main(argv=None):
    o = options(argv)
    if o.role == "server":
        asyncio.run(run_server(o))
        return 0
    todo = points(o)
    rows, skipped = [], []
    load_before, start = os.getloadavg(), time.monotonic()
    for k, pt in enumerate(todo, 1):
        where = f"{pt['model']}" + ("" if pt["context"] is None else f" {pt['context']} tokens")
        if pt["buffer"] > o.max_buffer:
            why = (f"skipped {where}: a {pt['buffer'] / (1 << 30):.2f} GiB session buffer per side exceeds "
                   f"--max-buffer {o.max_buffer / (1 << 30):.2f} GiB")
            print(why, flush=True)
            skipped.append({**pt, "skipped": why})
            continue
        row = {**pt, **best_of(o, pt, f"[{k}/{len(todo)}] {where}")}
        row["contig_over_hmc"] = row["contig_p50_ms"] / row["hmc_p50_ms"]
        if "raw_scatter_p50_ms" in row:
            row["raw_scatter_over_hmc"] = row["raw_scatter_p50_ms"] / row["hmc_p50_ms"]
        rows.append(row)
    print(f"kv_bench.py: tls {o.tls}, {o.mode} progress, client progress thread {o.progress_thread}, "
          f"{o.requests} requests after {o.warmup} warm-up, best of {o.repeat}, two processes, {os.cpu_count()} cores, "
          f"load average {load_before[0]:.2f} before / {os.getloadavg()[0]:.2f} after, Python {sys.version.split()[0]}")
    print_table(rows)
    if o.json:
        meta = {"impl": "hmc-python", "bench": "kv_bench", "tls": o.tls, "mode": o.mode,
                "progress_thread": o.progress_thread, "requests": o.requests, "warmup": o.warmup, "repeat": o.repeat,
                "tokens_per_block": TOKENS_PER_BLOCK, "pool_factor": POOL_FACTOR, "seed": SEED,
                "max_buffer": o.max_buffer, "cores": os.cpu_count(), "seconds": time.monotonic() - start,
                "load_average_before": load_before, "load_average_after": os.getloadavg(),
                "skipped": skipped}
        with open(o.json, "w") as f:
            json.dump({"meta": meta, "results": rows}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except (hmc.HMCError, RuntimeError) as e:
        print(f"kv_bench.py: {e}", file=sys.stderr)
        sys.exit(1)
