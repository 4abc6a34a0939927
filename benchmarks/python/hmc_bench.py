"""hmc_bench for Python: hmc_bench's put_bw, get_bw, put_lat, get_lat, tag_lat and notify_lat through
hmc.AsyncSession (asyncio) or, with --api blocking, the blocking hmc.Session from this thread, so
that the Python layer's overhead is a number next to the C++ one (docs/benchmarks.md).

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/python/hmc_bench.py \
        [--api asyncio|blocking] [--progress-thread default|own|shared|caller] \
        [--tls shm] [--mode event] [--sizes 8,64K,1M | 8:16M] [--depth 16] [--iters N] [--warmup N] \
        [--test put_bw,get_bw,put_lat,get_lat,tag_lat,notify_lat] [--json FILE] [--csv FILE] [--quiet]

tag_lat: put, then a control tag, wait for the peer's tag (no data back). notify_lat: the same with
put_remote(..., notify=tag). --progress-thread passes progress_thread= to the client's session;
"default" passes nothing. The blocking API runs one operation at a time (its put_bw is at depth 1).

`--role loopback` (default) starts the server side as a subprocess of this script (`--role server`,
which prints "READY <ctrl_port>") and runs the client; `--role server` / `--role client --port P`
run the two sides separately (two hosts: add --host). The protocol is hmc_bench's: before each test
the client sends the test (JSON bytes), the server answers a tag when ready; for put_lat the
server echoes each round (receives a tag, puts `size` bytes back to the client, sends the tag back);
after the test the client sends a tag and the server replies with the CPU time it used.

Output: the same table as hmc_bench on stdout, a progress line on stderr, and with --json the same
schema as hmc_bench's with "impl": "hmc-python".
"""
import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

import hmc
from bench_units import human, parse_sizes

TESTS = ("put_bw", "get_bw", "put_lat", "get_lat", "tag_lat", "notify_lat")
ECHO_TESTS = ("put_lat", "tag_lat", "notify_lat")  # the server answers each round with a tag
SERVER_RANK = 100
DONE = "done"


# ------------------------------------------------------------------------------------------ options
def parse_tests(text):
    tests = [t for t in text.split(",") if t]
    for t in tests:
        if t not in TESTS:
            raise argparse.ArgumentTypeError(f"unknown test '{t}' (Python has {', '.join(TESTS)})")
    return tests


def options(argv=None):
    p = argparse.ArgumentParser(description="hmc_bench through hmc.AsyncSession (asyncio)")
    p.add_argument("--role", choices=("loopback", "server", "client"), default="loopback")
    p.add_argument("--api", choices=("asyncio", "blocking"), default="asyncio", help="the client's API")
    p.add_argument("--progress-thread", choices=("default", "own", "shared", "caller"), default="default",
                   help="the client session's progress_thread")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="server control port (server: 0 = any free port)")
    p.add_argument("--test", type=parse_tests, default=list(TESTS))
    p.add_argument("--sizes", type=parse_sizes, default=parse_sizes("8,64,512,4K,64K,256K,1M,4M,16M"))
    p.add_argument("--depth", type=int, default=16, help="operations in flight in the bandwidth tests")
    p.add_argument("--mode", choices=("adaptive", "event", "poll"), default="adaptive")
    p.add_argument("--tls", default="", help="UCX_TLS for both sides (empty: UCX's default)")
    p.add_argument("--net-devices", default="lo")
    p.add_argument("--iters", type=int, default=0, help="0: chosen per size like hmc_bench")
    p.add_argument("--warmup", type=int, default=0, help="0: a tenth of the iterations")
    p.add_argument("--rank", type=int, default=1, help="client rank")
    p.add_argument("--buffer", type=int, default=0, help="session buffer bytes (default: max(biggest size, 1 MiB))")
    p.add_argument("--json", default="")
    p.add_argument("--csv", default="")
    p.add_argument("--quiet", action="store_true")
    o = p.parse_args(argv)
    if o.depth < 1 or not o.sizes or min(o.sizes) < 1:
        p.error("--depth and --sizes must be > 0")
    return o


def buffer_for(o):
    return o.buffer or max(max(o.sizes), 1 << 20)


def session(o, client=False):
    kw = dict(buffer_size=buffer_for(o), progress_mode=o.mode, ucx_tls=o.tls or None, ucx_net_devices=o.net_devices,
              timeout=60.0)
    if client and o.progress_thread != "default":
        kw["progress_thread"] = o.progress_thread
    return (hmc.Session if client and o.api == "blocking" else hmc.AsyncSession)(**kw)


def iterations(o, test, size):
    """hmc_bench's choice: 512 MiB (bandwidth) or 64 MiB (latency) per measurement, clamped."""
    if o.iters > 0:
        return o.iters
    latency = test in ("get_lat",) + ECHO_TESTS
    n = ((64 << 20) if latency else (512 << 20)) // size
    return max(100, min(n, 10_000)) if latency else max(64, min(n, 100_000))


# ------------------------------------------------------------------------------------------- server
async def run_server(o):
    async with session(o) as s:
        await s.init_server(o.host, o.port, 0, o.port, SERVER_RANK)
        print("READY", s.ctrl_port, flush=True)
        await s.wait_peer(o.rank, timeout=120)
        client = o.rank
        while True:
            spec = json.loads(await s.ctrl_recv(client, timeout=600))
            if spec["test"] == DONE:
                return
            cpu0 = time.process_time()
            await s.ctrl_send(client, 1)  # ready: the client starts its clock now
            if spec["test"] in ECHO_TESTS:
                size = spec["size"]
                for _ in range(spec["iters"]):
                    tag = await s.ctrl_recv(client, timeout=60)
                    if spec["test"] == "put_lat":
                        await s.put_remote(client, None, 0, 0, size)
                    await s.ctrl_send(client, tag)
            await s.ctrl_recv(client, timeout=600)  # the client finished
            await s.ctrl_send(client, json.dumps({"cpu_seconds": time.process_time() - cpu0}).encode())


# ------------------------------------------------------------------------------------------- client
async def lane(s, peer, test, size, n, lat):
    clock = time.perf_counter
    if test == "put_bw":
        for _ in range(n):
            t0 = clock()
            await s.put_remote(peer, None, 0, 0, size)
            lat.append(clock() - t0)
    elif test in ("get_bw", "get_lat"):
        for _ in range(n):
            t0 = clock()
            await s.get_remote(peer, None, 0, 0, size)
            lat.append(clock() - t0)
    elif test == "tag_lat":
        for i in range(n):
            t0 = clock()
            await s.put_remote(peer, None, 0, 0, size)
            await s.ctrl_send(peer, i)
            await s.ctrl_recv(peer, timeout=60)
            lat.append(clock() - t0)
    elif test == "notify_lat":
        for i in range(n):
            t0 = clock()
            await s.put_remote(peer, None, 0, 0, size, notify=i)
            await s.ctrl_recv(peer, timeout=60)
            lat.append(clock() - t0)
    else:  # put_lat: put, tag, and wait for the peer's tag (its put back has landed by then)
        for i in range(n):
            t0 = clock()
            await s.put_remote(peer, None, 0, 0, size)
            await s.ctrl_send(peer, i)
            await s.ctrl_recv(peer, timeout=60)
            lat.append(clock() - t0)


def percentile(sorted_values, p):
    if not sorted_values:
        return 0.0
    return sorted_values[int(p * (len(sorted_values) - 1))]


def sync_lane(s, peer, test, size, n, lat):
    """lane() for the blocking API, from this thread."""
    clock = time.perf_counter
    if test in ("put_bw", "get_bw", "get_lat"):  # one call per round: only the call is timed, as in C++
        op = s.put_remote if test == "put_bw" else s.get_remote
        for _ in range(n):
            t0 = clock()
            op(peer, None, 0, 0, size)
            lat.append(clock() - t0)
        return
    for i in range(n):
        t0 = clock()
        if test in ("put_lat", "tag_lat"):
            s.put_remote(peer, None, 0, 0, size)
        else:
            s.put_remote(peer, None, 0, 0, size, notify=i)
        if test in ("put_lat", "tag_lat"):
            s.ctrl_send(peer, i)
        if test in ECHO_TESTS:
            s.ctrl_recv(peer, timeout=60)
        lat.append(clock() - t0)


def result(o, test, size, lanes, lat, iters, secs, cpu):
    all_lat = sorted(x for v in lat for x in v)
    moved = size * iters * (2 if test == "put_lat" else 1)
    return {"test": test, "size": size, "depth": lanes, "iters": iters, "seconds": secs,
            "bw_mbps": moved / secs / 1e6, "msg_rate": iters / secs,
            "lat_p50_us": percentile(all_lat, 0.50) * 1e6, "lat_p99_us": percentile(all_lat, 0.99) * 1e6,
            "lat_max_us": (all_lat[-1] if all_lat else 0.0) * 1e6, "cpu_s_per_gb": cpu / (moved / 1e9)}


def sync_measure(s, peer, o, test, size):
    n = iterations(o, test, size)
    warm = o.warmup if o.warmup > 0 else max(n // 10, 4)
    s.ctrl_send(peer, json.dumps({"test": test, "size": size, "iters": n + warm, "depth": 1}).encode())
    s.ctrl_recv(peer, timeout=60)
    lat = [[]]
    sync_lane(s, peer, test, size, warm, lat[0])
    lat[0].clear()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    sync_lane(s, peer, test, size, n, lat[0])
    secs = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    s.ctrl_send(peer, 0)
    cpu += json.loads(s.ctrl_recv(peer, timeout=60))["cpu_seconds"]
    return result(o, test, size, 1, lat, n, secs, cpu)


async def measure(s, peer, o, test, size):
    latency = test in ("get_lat",) + ECHO_TESTS
    lanes = 1 if latency else o.depth
    n = iterations(o, test, size)
    per_lane = max(n // lanes, 1)
    warm = o.warmup if o.warmup > 0 else max(per_lane // 10, 4)
    spec = {"test": test, "size": size, "iters": per_lane + warm, "depth": o.depth}
    await s.ctrl_send(peer, json.dumps(spec).encode())
    await s.ctrl_recv(peer, timeout=60)
    lat = [[] for _ in range(lanes)]
    await asyncio.gather(*(lane(s, peer, test, size, warm, lat[i]) for i in range(lanes)))
    for v in lat:
        v.clear()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.gather(*(lane(s, peer, test, size, per_lane, lat[i]) for i in range(lanes)))
    secs = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    await s.ctrl_send(peer, 0)
    cpu += json.loads(await s.ctrl_recv(peer, timeout=60))["cpu_seconds"]
    return result(o, test, size, lanes, lat, per_lane * lanes, secs, cpu)


def write_outputs(o, results):
    tls = o.tls or "default"
    fields = ("test", "size", "depth", "iters", "seconds", "bw_mbps", "msg_rate", "lat_p50_us", "lat_p99_us",
              "lat_max_us", "cpu_s_per_gb")
    if o.json:
        with open(o.json, "w") as f:
            json.dump({"meta": {"impl": "hmc-python", "api": o.api, "progress_thread": o.progress_thread, "tls": tls,
                                "mode": o.mode, "depth": o.depth if o.api == "asyncio" else 1, "peers": 1},
                       "results": results}, f, indent=1)
            f.write("\n")
    if o.csv:
        with open(o.csv, "w") as f:
            f.write("impl,api,tls,mode," + ",".join(fields) + "\n")
            for r in results:
                f.write(f"hmc-python,{o.api},{tls},{o.mode}," + ",".join(str(r[k]) for k in fields) + "\n")


def header(o, s, peer):
    if not o.quiet:
        print(f"hmc_bench.py: {o.mode} progress, progress thread {o.progress_thread}, UCX {s.transports(peer)}, "
              f"depth {o.depth if o.api == 'asyncio' else 1}, 1 peer(s), {o.api}, Python {sys.version.split()[0]}")
        print(f"{'test':<10} {'size':>8} {'iters':>8} {'MB/s':>12} {'msg/s':>12} {'p50 us':>10} {'p99 us':>10} "
              f"{'max us':>10} {'CPU s/GB':>10}", flush=True)


def points(o):
    """(done, total, test, size) for each measurement, with the progress line."""
    total, done = len(o.test) * len(o.sizes), 0
    for test in o.test:
        for size in o.sizes:
            done += 1
            if not o.quiet:
                sys.stderr.write(f"\r[{done}/{total}] {test} {human(size)} ...      ")
                sys.stderr.flush()
            yield test, size


def show(o, r):
    if not o.quiet:
        sys.stderr.write("\r" + " " * 60 + "\r")
        print(f"{r['test']:<10} {human(r['size']):>8} {r['iters']:>8} {r['bw_mbps']:>12.1f} "
              f"{r['msg_rate']:>12.0f} {r['lat_p50_us']:>10.2f} {r['lat_p99_us']:>10.2f} "
              f"{r['lat_max_us']:>10.2f} {r['cpu_s_per_gb']:>10.3f}", flush=True)
    return r


async def run_client(o, port):
    async with session(o, client=True) as s:
        # A server started with --port P serves data port P; loopback starts it with --port 0.
        await s.connect(SERVER_RANK, o.rank, o.host, port if o.role == "client" else 0, port)
        header(o, s, SERVER_RANK)
        results = [show(o, await measure(s, SERVER_RANK, o, test, size)) for test, size in points(o)]
        await s.ctrl_send(SERVER_RANK, json.dumps({"test": DONE}).encode())
        return results


def run_client_sync(o, port):
    with session(o, client=True) as s:
        s.connect(SERVER_RANK, o.rank, o.host, port if o.role == "client" else 0, port)
        header(o, s, SERVER_RANK)
        results = [show(o, sync_measure(s, SERVER_RANK, o, test, size)) for test, size in points(o)]
        s.ctrl_send(SERVER_RANK, json.dumps({"test": DONE}).encode())
        return results


def client(o, port):
    return run_client_sync(o, port) if o.api == "blocking" else asyncio.run(run_client(o, port))


def spawn_server(o):
    args = [sys.executable, os.path.abspath(__file__), "--role", "server", "--host", o.host, "--port", "0",
            "--mode", o.mode, "--net-devices", o.net_devices, "--rank", str(o.rank), "--buffer", str(buffer_for(o))]
    if o.tls:
        args += ["--tls", o.tls]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().split()
    if len(line) != 2 or line[0] != "READY":
        proc.kill()
        proc.wait()
        raise RuntimeError("the server process did not start")
    return proc, int(line[1])


def main(argv=None):
    o = options(argv)
    if o.role == "server":
        asyncio.run(run_server(o))
        return 0
    if o.role == "client":
        write_outputs(o, client(o, o.port))
        return 0
    proc, port = spawn_server(o)
    try:
        results = client(o, port)
        proc.wait(timeout=60)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    write_outputs(o, results)
    return proc.returncode


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except (hmc.HMCError, RuntimeError) as e:
        print(f"hmc_bench.py: {e}", file=sys.stderr)
        sys.exit(1)
