"""HMC side by side with the HMC reference: blocking Python put_remote through the
reference's own API, ours and theirs interleaved in one run, on loopback between two processes.

    /usr/bin/python3 benchmarks/python/hmcref_bench.py [--tls shm,tcp] [--sizes 64,4K,64K,1M] [--rounds 3]
        [--ours build/python] [--hmcref PYTHONPATH | --hmcref-build SCRIPT] [--json FILE] [--quick]
        [--progress-thread own|shared|caller]

The reference is built by ../shared/tools/hmcref-build.sh beside the checkout (or --hmcref-build / $HMCREF_BUILD),
which prints its PYTHONPATH; when it cannot be built (no mirror, no compiler) this prints
"HMC reference: skipped (...)" and measures ours alone. Both sides run the same code, written
against the reference README's calls only (create_session, init_server(bind_ip, ucx_port,
rdma_port, ctrl_tcp_port, self_id, ctrl_uds_dir), connect(peer_id, self_id, peer_ip, data_port,
ctrl_tcp_port, conn), sess.buf.put, put_remote(ip, port, local_off, remote_off, nbytes, conn),
ctrl_send / ctrl_recv), as ../shared/tools/hmcref_put.py does. Each round starts one server
and one client process per library, alternating which goes first; each point is the best (lowest
p50) over the rounds. After each size the server checks its buffer holds the client's bytes.

What is compared: the reference's put_remote returns when ucp_put_nbx has completed locally (no
flush: a tag sent next may overtake the data); ours returns when the bytes are in the peer's
buffer. Transports: "shm" sets UCX_TLS=posix,sysv,cma,tcp for both (the reference connects its
UCX endpoint through a TCP listener, so tcp must be allowed; UCX then picks the lane), "tcp"
UCX_TLS=tcp; UCX_NET_DEVICES=lo for both.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_units import human, parse_sizes  # noqa: E402 - after the path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IP = "127.0.0.1"
HELLO = 7
TLS_ENV = {"shm": "posix,sysv,cma,tcp", "tcp": "tcp"}
DEFAULT_BUILD = os.path.join(os.path.dirname(ROOT), "shared", "tools", "hmcref-build.sh")


def ops_for(size, scale):
    """Timed operations per size: about 32 MiB moved, clamped to 200..5000, times --scale."""
    return max(int(max(200, min((32 << 20) // size, 5000)) * scale), 50)


# ------------------------------------------------------------------------------- the two processes
def pattern(size):
    import numpy as np
    return (np.arange(size, dtype=np.uint32) * 7 + size.bit_length()).astype(np.uint8)


def first_ctrl_recv(sess, peer, timeout):
    """The reference's ctrl_recv fails at once until the client's control link is registered."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return sess.ctrl_recv(peer=peer)
        except Exception:  # noqa: BLE001 - the reference raises its own types
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def ours_only(hmc, a):
    """--progress-thread for our package (the reference has no such option)."""
    import inspect
    try:
        ours = "progress_thread" in inspect.signature(hmc.Session.__init__).parameters
    except (AttributeError, TypeError, ValueError):  # the reference's classes are pybind11's
        ours = False
    return {"progress_thread": a.progress_thread} if a.progress_thread and ours else {}


def serve(a):
    import hmc
    sess = hmc.create_session(device_id=0, buffer_size=a.buffer, mem_type=hmc.MemoryType.CPU, num_chs=1,
                              **ours_only(hmc, a))
    sess.init_server(bind_ip=a.ip, ucx_port=a.ucx_port, rdma_port=a.rdma_port, ctrl_tcp_port=a.ctrl_port, self_id=0,
                     ctrl_uds_dir=a.tmp)
    open(os.path.join(a.tmp, "ready"), "w").close()
    if hasattr(sess, "wait_peer"):
        sess.wait_peer(1, 30)
    assert first_ctrl_recv(sess, 1, 30) == HELLO
    sess.ctrl_send(peer=1, tag=HELLO)
    import numpy as np
    while True:
        size = int(sess.ctrl_recv(peer=1))
        if size == 0:
            break
        got = np.empty(size, dtype=np.uint8)
        sess.buf.get_into(got, nbytes=size, offset=0)
        sess.ctrl_send(peer=1, tag=1 if np.array_equal(got, pattern(size)) else 2)
    sess.ctrl_send(peer=1, tag=0)
    try:  # until the client's control link drops: its endpoint closes while this side progresses
        sess.ctrl_recv(peer=1)
    except Exception:  # noqa: BLE001
        pass
    sess.close_server()


def client(a):
    import hmc
    sess = hmc.create_session(device_id=0, buffer_size=a.buffer, mem_type=hmc.MemoryType.CPU, num_chs=1,
                              **ours_only(hmc, a))
    sess.connect(peer_id=0, self_id=1, peer_ip=a.ip, data_port=a.ucx_port, ctrl_tcp_port=a.ctrl_port,
                 conn=hmc.ConnType.UCX)
    sess.ctrl_send(peer=0, tag=HELLO)
    assert int(sess.ctrl_recv(peer=0)) == HELLO
    clock, conn, port = time.perf_counter, hmc.ConnType.UCX, a.ucx_port
    rows = []
    for size in a.sizes:
        n = sess.buf.put(pattern(size), offset=0)
        ops = ops_for(size, a.scale)
        for _ in range(max(ops // 10, 20)):
            sess.put_remote(a.ip, port, local_off=0, remote_off=0, nbytes=n, conn=conn)
        lat = []
        t_start = clock()
        for _ in range(ops):
            t0 = clock()
            sess.put_remote(a.ip, port, local_off=0, remote_off=0, nbytes=n, conn=conn)
            lat.append(clock() - t0)
        secs = clock() - t_start
        sess.ctrl_send(peer=0, tag=size)
        ok = int(sess.ctrl_recv(peer=0)) == 1
        lat.sort()
        rows.append({"size": size, "iters": ops, "lat_p50_us": lat[len(lat) // 2] * 1e6,
                     "lat_p99_us": lat[int(len(lat) * 0.99)] * 1e6, "lat_mean_us": secs / ops * 1e6,
                     "bw_mbps": size * ops / secs / 1e6, "verified": ok})
    sess.ctrl_send(peer=0, tag=0)
    sess.ctrl_recv(peer=0)
    print("RESULT " + json.dumps({"hmc": os.path.dirname(hmc.__file__), "rows": rows}), flush=True)
    if hasattr(sess, "close"):  # the reference has no client-side close: the process just exits
        sess.close()


# -------------------------------------------------------------------------------------- launcher
def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind((IP, 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def one_run(impl, pythonpath, tls, o):
    """One server + client pair of `impl`; its rows, or None (and the reason) when it failed."""
    ucx_port, rdma_port, ctrl_port = free_ports(3)
    with tempfile.TemporaryDirectory(prefix="hmcref_bench.") as tmp:
        env = dict(os.environ, PYTHONPATH=pythonpath, UCX_TLS=TLS_ENV.get(tls, tls), UCX_NET_DEVICES="lo")
        common = [o.python, os.path.abspath(__file__), "--ip", IP, "--ucx-port", str(ucx_port), "--rdma-port",
                  str(0 if impl == "hmc" else rdma_port), "--ctrl-port", str(ctrl_port), "--tmp", tmp,
                  "--buffer", str(max(max(o.sizes), 1 << 20)), "--sizes", ",".join(map(str, o.sizes)),
                  "--scale", str(o.scale)] + (["--progress-thread", o.progress_thread] if o.progress_thread else [])
        slog = open(os.path.join(tmp, "server.log"), "w+")
        srv = subprocess.Popen(common + ["--role", "server"], env=env, stdout=slog, stderr=subprocess.STDOUT,
                               cwd=tmp)
        deadline = time.monotonic() + 30
        while not os.path.exists(os.path.join(tmp, "ready")):
            if srv.poll() is not None or time.monotonic() > deadline:
                srv.kill()
                srv.wait()
                slog.seek(0)
                return None, "server did not start: " + slog.read()[-300:]
            time.sleep(0.01)
        cli = subprocess.Popen(common + ["--role", "client"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=tmp)
        result, lines, deadline = None, [], time.monotonic() + o.timeout
        for line in cli.stdout:  # the RESULT line, then the process may linger (the reference's exit)
            lines.append(line)
            if line.startswith("RESULT "):
                result = json.loads(line[7:])
                break
            if time.monotonic() > deadline:
                break
        for p in (cli, srv):  # exit codes are not part of the measurement (the reference exits 255)
            try:
                p.wait(timeout=3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        slog.close()
        if result is None:
            return None, "client: " + "".join(lines)[-400:]
        return result["rows"], None


def find_reference(o):
    """The reference's PYTHONPATH, or (None, why)."""
    if o.hmcref:
        return o.hmcref, None
    script = o.hmcref_build
    if not os.path.exists(script):
        return None, f"{script} is missing"
    try:
        proc = subprocess.run(["nice", "-n", "5", "bash", script], capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return None, f"{script} timed out"
    path = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0 or not os.path.isdir(path):
        return None, f"{script} failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
    return path, None


def options(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tls", default="shm,tcp")
    p.add_argument("--sizes", type=parse_sizes, default=None, help="default 64,512,4K,64K,256K,1M")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the lowest mean of each point is kept")
    p.add_argument("--scale", type=float, default=1.0, help="times the operations per size")
    p.add_argument("--quick", action="store_true", help="sizes 64,64K,1M, one round, a quarter of the operations")
    p.add_argument("--ours", default=os.path.join(ROOT, "build/python"), help="PYTHONPATH of our package")
    p.add_argument("--hmcref", default=os.environ.get("HMCREF_PYTHONPATH", ""),
                   help="PYTHONPATH of the reference (default: what --hmcref-build prints)")
    p.add_argument("--hmcref-build", default=os.environ.get("HMCREF_BUILD", DEFAULT_BUILD))
    p.add_argument("--no-hmcref", action="store_true", help="ours only")
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--json", default="")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--progress-thread", default="", choices=("", "own", "shared", "caller"),
                   help="our sessions' progress_thread (default: the package's default)")
    # the two processes
    p.add_argument("--role", choices=("server", "client"), help=argparse.SUPPRESS)
    for flag in ("--ucx-port", "--rdma-port", "--ctrl-port", "--buffer"):
        p.add_argument(flag, type=int, help=argparse.SUPPRESS)
    p.add_argument("--ip", default=IP, help=argparse.SUPPRESS)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    o = p.parse_args(argv)
    if o.quick:
        o.sizes = o.sizes or [64, 64 << 10, 1 << 20]
        o.rounds, o.scale = 1, o.scale * 0.25
    o.sizes = o.sizes or parse_sizes("64,512,4K,64K,256K,1M")
    return o


def main(argv=None):
    o = options(argv)
    if o.role == "server":
        return serve(o)
    if o.role == "client":
        return client(o)
    say = (lambda *a: None) if o.quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
    ref, why = (None, "--no-hmcref") if o.no_hmcref else find_reference(o)
    impls = [("hmc", o.ours)] + ([("hmcref", ref)] if ref else [])
    if not ref:
        print(f"HMC reference: skipped ({why})")
    out = {"meta": {"sizes": o.sizes, "rounds": o.rounds, "scale": o.scale, "tls_env": TLS_ENV,
                    "hmcref": ref, "hmcref_skipped": why, "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    "load_before": round(os.getloadavg()[0], 2)}, "results": {}}
    for tls in [t for t in o.tls.split(",") if t]:
        best = {impl: {} for impl, _ in impls}
        for r in range(o.rounds):
            order = impls if r % 2 == 0 else impls[::-1]
            for impl, path in order:
                t0 = time.monotonic()
                rows, err = one_run(impl, path, tls, o)
                say(f"hmcref_bench: {tls} round {r + 1}/{o.rounds}: {impl} ({time.monotonic() - t0:.1f} s)")
                if rows is None:
                    print(f"hmcref_bench: {impl} over {tls} failed: {err}", file=sys.stderr)
                    continue
                for row in rows:
                    cur = best[impl].get(row["size"])
                    if cur is None or row["lat_mean_us"] < cur["lat_mean_us"]:
                        best[impl][row["size"]] = row
        out["results"][tls] = {impl: [best[impl][s] for s in o.sizes if s in best[impl]] for impl in best}
        print(f"\n{tls} (UCX_TLS={TLS_ENV.get(tls, tls)}): blocking put_remote, us per op (p50 / mean = time per "
              f"op), best of {o.rounds} interleaved rounds; hmc/ref: of the means")
        print(f"{'size':>6} {'hmc p50':>9} {'mean':>9} {'ref p50':>9} {'mean':>9} {'hmc/ref':>8}  verified")
        for s in o.sizes:
            h, f = best["hmc"].get(s), best.get("hmcref", {}).get(s)
            ratio = f"{h['lat_mean_us'] / f['lat_mean_us']:.2f}" if h and f else "n/a"
            cell = lambda r: f"{r['lat_p50_us']:>9.2f} {r['lat_mean_us']:>9.2f}" if r else f"{'n/a':>9} {'n/a':>9}"
            ver = "/".join("ok" if r and r["verified"] else ("-" if not r else "BAD") for r in (h, f))
            print(f"{human(s):>6} {cell(h)} {cell(f)} {ratio:>8}  {ver}")
    out["meta"]["load_after"] = round(os.getloadavg()[0], 2)
    if o.json:
        with open(o.json, "w") as fh:
            json.dump(out, fh, indent=1)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
