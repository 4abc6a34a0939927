"""python -m hmc bench: put and get between two HMC sessions in two processes, as a table of
bandwidth, messages per second, p50 / p99 / p99.9 latency and CPU seconds per GB moved.
benchmarks/python/hmc_bench.py runs this same code with every test and size by default.

Tests: put_bw and get_bw (`--depth` operations in flight), put_lat (put, then a control tag; the
peer puts the same bytes back and returns the tag: a round trip with data both ways), get_lat
(sequential gets), tag_lat (put, then a tag the peer answers) and notify_lat
(put_remote(..., notify=tag), answered by the peer). The client uses hmc.AsyncSession (asyncio) or,
with --api blocking, the blocking hmc.Session from this thread (one operation at a time).

`--role loopback` (default) starts the server side as a subprocess (`python -m hmc bench --role
server`, which prints "READY <ctrl_port>") and runs the client; `--role server` / `--role client
--port P` run the two sides apart (two hosts: add --host). Before each test the client sends the
test (JSON bytes) and the server answers a tag when ready; in the echo tests the server answers each
round; after the test the client sends a tag and the server replies with the CPU time it used.
"""
import argparse
import asyncio
import json
import os
import select
import subprocess
import sys
import time

from ._errors import HMCError
from ._units import human, parse_sizes
from .aio import AsyncSession
from .session import Session

TESTS = ("put_bw", "get_bw", "put_lat", "get_lat", "tag_lat", "notify_lat")
LATENCY_TESTS = ("put_lat", "get_lat", "tag_lat", "notify_lat")  # one operation in flight
ECHO_TESTS = ("put_lat", "tag_lat", "notify_lat")  # the server answers each round with a tag
SERVER_RANK = 100
DONE = "done"
OP_TIMEOUT = 60  # seconds: any one operation or control message of a test
START_TIMEOUT = 60  # seconds: the server's READY line, the client's connect, the server's exit
TEST_TIMEOUT = 600  # seconds: the server waits this long for the client between and through tests

# what hmc_bench.py runs by default: every test at every size
FULL_TESTS = list(TESTS)
FULL_SIZES = parse_sizes("8,64,512,4K,64K,256K,1M,4M,16M")
# what python -m hmc bench runs by default: bandwidth where it levels off, latency where it is per-operation cost
QUICK_TESTS = ["put_bw", "get_bw", "put_lat", "get_lat"]
QUICK_BW_SIZES = parse_sizes("64K,1M,16M")
QUICK_LAT_SIZES = parse_sizes("8,4K")

COMMAND_EPILOG = """examples:
  python -m hmc bench                                   the quick loopback run (seconds)
  python -m hmc bench --tls tcp --json bench.json       over TCP; the results also as JSON
  python -m hmc bench --test put_lat,get_lat --sizes 8,64,512 --iters 5000
  python -m hmc bench --role server --host IP --port 18600   on one host, then on another:
  python -m hmc bench --role client --host IP --port 18600
"""


# ------------------------------------------------------------------------------------------ options
def parse_tests(text):
    tests = [t for t in text.split(",") if t]
    for t in tests:
        if t not in TESTS:
            raise argparse.ArgumentTypeError(f"unknown test '{t}' (there are {', '.join(TESTS)})")
    return tests


def options(argv=None, prog="python -m hmc bench", full=False, description=None):
    """The parsed flags; full=True gives hmc_bench.py's defaults (every test at every size)."""
    p = argparse.ArgumentParser(prog=prog, description=description or __doc__.split("\n\n")[0],
                                epilog=None if full else COMMAND_EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    tests = ",".join(FULL_TESTS if full else QUICK_TESTS)
    sizes = ",".join(map(human, FULL_SIZES)) if full else (
        f"{','.join(map(human, QUICK_BW_SIZES))} for bandwidth, {','.join(map(human, QUICK_LAT_SIZES))} for latency")
    what = p.add_argument_group("what to measure")
    what.add_argument("--test", type=parse_tests, default=list(FULL_TESTS if full else QUICK_TESTS),
                      help=f"comma-separated, of {', '.join(TESTS)} (default {tests})")
    what.add_argument("--sizes", type=parse_sizes, default=None,
                      help=f"bytes per operation: 8,64K,1M or a power-of-two range 8:16M (default {sizes})")
    what.add_argument("--iters", type=int, default=0,
                      help="operations per measurement (default: 512 MiB of bandwidth tests, 64 MiB of latency "
                           "tests, clamped to 64..100000 and 100..10000)")
    what.add_argument("--warmup", type=int, default=0, help="unmeasured operations per lane first (default: a tenth)")
    what.add_argument("--depth", type=int, default=16, help="operations in flight in the bandwidth tests (default 16)")
    what.add_argument("--api", choices=("asyncio", "blocking"), default="asyncio",
                      help="the client's API: hmc.AsyncSession or the blocking hmc.Session (default asyncio)")
    what.add_argument("--progress-thread", choices=("default", "own", "shared", "caller"), default="default",
                      help="progress_thread= of the client's session (default: the API's own default)")
    how = p.add_argument_group("transport")
    how.add_argument("--tls", default="", help="UCX_TLS for both sides, e.g. shm, tcp (default: UCX's choice)")
    how.add_argument("--mode", choices=("adaptive", "event", "poll"), default="adaptive",
                     help="progress_mode of both sessions (default adaptive)")
    how.add_argument("--net-devices", default="lo", help="UCX_NET_DEVICES for both sides (default lo)")
    out = p.add_argument_group("output")
    out.add_argument("--json", default="", metavar="FILE", help="also write the results as JSON")
    out.add_argument("--csv", default="", metavar="FILE", help="also write the results as CSV")
    out.add_argument("--quiet", action="store_true", help="no table, no progress line")
    two = p.add_argument_group("two processes or hosts")
    two.add_argument("--role", choices=("loopback", "server", "client"), default="loopback",
                     help="loopback (default): start the server as a subprocess and run the client; "
                          "server / client: run one side")
    two.add_argument("--host", default="127.0.0.1", help="the server's address (default 127.0.0.1)")
    two.add_argument("--port", type=int, default=0, help="the server's control port (server: 0 = any free port)")
    two.add_argument("--rank", type=int, default=1, help="the client's rank (default 1)")
    two.add_argument("--buffer", type=int, default=0,
                     help="session buffer bytes (default: the biggest size, at least 1 MiB)")
    o = p.parse_args(argv)
    if o.depth < 1 or o.iters < 0 or o.warmup < 0 or (o.sizes is not None and (not o.sizes or min(o.sizes) < 1)):
        p.error("--depth and --sizes must be > 0, --iters and --warmup >= 0")
    o.prog = prog
    o.bw_sizes = o.sizes or (FULL_SIZES if full else QUICK_BW_SIZES)
    o.lat_sizes = o.sizes or (FULL_SIZES if full else QUICK_LAT_SIZES)
    return o


def sizes_for(o, test):
    return o.lat_sizes if test in LATENCY_TESTS else o.bw_sizes


def buffer_for(o):
    return o.buffer or max(max(o.bw_sizes), max(o.lat_sizes), 1 << 20)


def session(o, client=False):
    kw = dict(buffer_size=buffer_for(o), progress_mode=o.mode, ucx_tls=o.tls or None, ucx_net_devices=o.net_devices,
              timeout=OP_TIMEOUT)
    if client and o.progress_thread != "default":
        kw["progress_thread"] = o.progress_thread
    return (Session if client and o.api == "blocking" else AsyncSession)(**kw)


def iterations(o, test, size):
    """hmc_bench's choice: 512 MiB (bandwidth) or 64 MiB (latency) per measurement, clamped."""
    if o.iters > 0:
        return o.iters
    latency = test in LATENCY_TESTS
    n = ((64 << 20) if latency else (512 << 20)) // size
    return max(100, min(n, 10_000)) if latency else max(64, min(n, 100_000))


# ------------------------------------------------------------------------------------------- server
async def run_server(o):
    async with session(o) as s:
        await s.init_server(o.host, o.port, 0, o.port, SERVER_RANK)
        print("READY", s.ctrl_port, flush=True)
        await s.wait_peer(o.rank, timeout=2 * START_TIMEOUT)
        client = o.rank
        while True:
            spec = json.loads(await s.ctrl_recv(client, timeout=TEST_TIMEOUT))
            if spec["test"] == DONE:
                return
            cpu0 = time.process_time()
            await s.ctrl_send(client, 1)  # ready: the client starts its clock now
            if spec["test"] in ECHO_TESTS:
                size = spec["size"]
                for _ in range(spec["iters"]):
                    tag = await s.ctrl_recv(client, timeout=OP_TIMEOUT)
                    if spec["test"] == "put_lat":
                        await s.put_remote(client, None, 0, 0, size)
                    await s.ctrl_send(client, tag)
            await s.ctrl_recv(client, timeout=TEST_TIMEOUT)  # the client finished
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
    elif test == "notify_lat":
        for i in range(n):
            t0 = clock()
            await s.put_remote(peer, None, 0, 0, size, notify=i)
            await s.ctrl_recv(peer, timeout=OP_TIMEOUT)
            lat.append(clock() - t0)
    else:  # put_lat, tag_lat: put, tag, and wait for the peer's tag (put_lat: its put back has landed by then)
        for i in range(n):
            t0 = clock()
            await s.put_remote(peer, None, 0, 0, size)
            await s.ctrl_send(peer, i)
            await s.ctrl_recv(peer, timeout=OP_TIMEOUT)
            lat.append(clock() - t0)


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
        if test == "notify_lat":
            s.put_remote(peer, None, 0, 0, size, notify=i)
        else:
            s.put_remote(peer, None, 0, 0, size)
            s.ctrl_send(peer, i)
        s.ctrl_recv(peer, timeout=OP_TIMEOUT)
        lat.append(clock() - t0)


def percentile(sorted_values, p):
    if not sorted_values:
        return 0.0
    return sorted_values[int(p * (len(sorted_values) - 1))]


def result(test, size, lanes, lat, iters, secs, cpu):
    all_lat = sorted(x for v in lat for x in v)
    moved = size * iters * (2 if test == "put_lat" else 1)
    return {"test": test, "size": size, "depth": lanes, "iters": iters, "seconds": secs,
            "bw_mbps": moved / secs / 1e6, "msg_rate": iters / secs,
            "lat_p50_us": percentile(all_lat, 0.50) * 1e6, "lat_p99_us": percentile(all_lat, 0.99) * 1e6,
            "lat_p999_us": percentile(all_lat, 0.999) * 1e6, "lat_max_us": (all_lat[-1] if all_lat else 0.0) * 1e6,
            "cpu_s_per_gb": cpu / (moved / 1e9)}


def sync_measure(s, peer, o, test, size):
    n = iterations(o, test, size)
    warm = o.warmup if o.warmup > 0 else max(n // 10, 4)
    s.ctrl_send(peer, json.dumps({"test": test, "size": size, "iters": n + warm, "depth": 1}).encode())
    s.ctrl_recv(peer, timeout=OP_TIMEOUT)
    lat = [[]]
    sync_lane(s, peer, test, size, warm, lat[0])
    lat[0].clear()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    sync_lane(s, peer, test, size, n, lat[0])
    secs = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    s.ctrl_send(peer, 0)
    cpu += json.loads(s.ctrl_recv(peer, timeout=OP_TIMEOUT))["cpu_seconds"]
    return result(test, size, 1, lat, n, secs, cpu)


async def measure(s, peer, o, test, size):
    lanes = 1 if test in LATENCY_TESTS else o.depth
    n = iterations(o, test, size)
    per_lane = max(n // lanes, 1)
    warm = o.warmup if o.warmup > 0 else max(per_lane // 10, 4)
    spec = {"test": test, "size": size, "iters": per_lane + warm, "depth": o.depth}
    await s.ctrl_send(peer, json.dumps(spec).encode())
    await s.ctrl_recv(peer, timeout=OP_TIMEOUT)
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
    cpu += json.loads(await s.ctrl_recv(peer, timeout=OP_TIMEOUT))["cpu_seconds"]
    return result(test, size, lanes, lat, per_lane * lanes, secs, cpu)


# ------------------------------------------------------------------------------------------- output
FIELDS = ("test", "size", "depth", "iters", "seconds", "bw_mbps", "msg_rate", "lat_p50_us", "lat_p99_us",
          "lat_p999_us", "lat_max_us", "cpu_s_per_gb")


def write_outputs(o, results):
    tls = o.tls or "default"
    if o.json:
        with open(o.json, "w") as f:
            json.dump({"meta": {"impl": "hmc-python", "api": o.api, "progress_thread": o.progress_thread, "tls": tls,
                                "mode": o.mode, "depth": o.depth if o.api == "asyncio" else 1, "peers": 1},
                       "results": results}, f, indent=1)
            f.write("\n")
    if o.csv:
        with open(o.csv, "w") as f:
            f.write("impl,api,tls,mode," + ",".join(FIELDS) + "\n")
            for r in results:
                f.write(f"hmc-python,{o.api},{tls},{o.mode}," + ",".join(str(r[k]) for k in FIELDS) + "\n")


def header(o, s, peer):
    if not o.quiet:
        print(f"{o.prog}: {o.mode} progress, progress thread {o.progress_thread}, UCX {s.transports(peer)}, "
              f"depth {o.depth if o.api == 'asyncio' else 1}, 1 peer(s), {o.api}, Python {sys.version.split()[0]}")
        print(f"{'test':<10} {'size':>6} {'iters':>7} {'GB/s':>8} {'msg/s':>10} {'p50 us':>9} {'p99 us':>9} "
              f"{'p99.9 us':>9} {'max us':>9} {'CPU s/GB':>10}", flush=True)


def points(o):
    """(test, size) for each measurement, with the progress line on stderr."""
    total, done = sum(len(sizes_for(o, t)) for t in o.test), 0
    for test in o.test:
        for size in sizes_for(o, test):
            done += 1
            if not o.quiet:
                sys.stderr.write(f"\r[{done}/{total}] {test} {human(size)} ...      ")
                sys.stderr.flush()
            yield test, size


def show(o, r):
    if not o.quiet:
        sys.stderr.write("\r" + " " * 60 + "\r")
        print(f"{r['test']:<10} {human(r['size']):>6} {r['iters']:>7} {r['bw_mbps'] / 1e3:>8.3f} "
              f"{r['msg_rate']:>10.0f} {r['lat_p50_us']:>9.2f} {r['lat_p99_us']:>9.2f} {r['lat_p999_us']:>9.2f} "
              f"{r['lat_max_us']:>9.2f} {r['cpu_s_per_gb']:>10.3f}", flush=True)
    return r


# ---------------------------------------------------------------------------------------- processes
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
    """The server side as `python -m hmc bench --role server` of this package: (process, control port)."""
    args = [sys.executable, "-m", "hmc", "bench", "--role", "server", "--host", o.host, "--port", "0",
            "--mode", o.mode, "--net-devices", o.net_devices, "--rank", str(o.rank), "--buffer", str(buffer_for(o))]
    if o.tls:
        args += ["--tls", o.tls]
    # the child imports this very package, wherever this process found it
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
    ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT)
    line = proc.stdout.readline().split() if ready else []
    if len(line) == 2 and line[0] == "READY":
        return proc, int(line[1])
    exited = proc.poll()
    stop(proc)
    raise RuntimeError(f"the server process exited with status {exited} before READY" if exited is not None
                       else f"the server process said no READY within {START_TIMEOUT} s")


def stop(proc):
    """Kills the server process if it still runs, and reaps it."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=START_TIMEOUT)
    proc.stdout.close()


def run(o):
    if o.role == "server":
        asyncio.run(run_server(o))
        return 0
    if o.role == "client":
        write_outputs(o, client(o, o.port))
        return 0
    proc, port = spawn_server(o)
    try:
        results = client(o, port)
        proc.wait(timeout=START_TIMEOUT)
    finally:
        stop(proc)  # on any error or timeout above, the server goes too
    write_outputs(o, results)
    return proc.returncode


def main(argv=None, prog="python -m hmc bench", full=False, description=None):
    """The command line: an exit status (2 from argparse for a bad flag, 1 for a failed run)."""
    o = options(argv, prog, full, description)
    try:
        return run(o)
    except KeyboardInterrupt:
        return 130
    except (HMCError, RuntimeError, OSError, subprocess.SubprocessError) as e:
        if not o.quiet and o.role != "server":
            sys.stderr.write("\n")  # off the progress line
        print(f"{prog}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
