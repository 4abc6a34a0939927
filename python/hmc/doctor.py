"""python -m hmc doctor: what this host offers HMC, a loopback self-test of what is actually chosen
and how fast, and a warning for every silent fallback it can see. Exit status 1 on a problem.

    python -m hmc doctor [--json] [--expect rdma,cuda,rocm] [--size 64M]
"""
import ctypes
import json
import os
import socket
import stat
import tempfile
import time

from . import _args
from ._errors import HMCError
from .session import create_session, memory_type_available

_RDMA_SYSFS = "/sys/class/infiniband"
_GPU_MEMORY = {"cuda": "NVIDIA_GPU", "rocm": "AMD_GPU"}


def _ucx_version():
    """The UCX library HMC runs on, as it names itself."""
    try:
        lib = ctypes.CDLL("libucp.so.0")
    except OSError as e:
        return None, str(e)
    lib.ucp_get_version_string.restype = ctypes.c_char_p
    return lib.ucp_get_version_string().decode(), None


def _rdma_devices():
    """{device: [(port, state), ...]} from sysfs; empty where the kernel has no RDMA modules."""
    out = {}
    if not os.path.isdir(_RDMA_SYSFS):
        return out
    for dev in sorted(os.listdir(_RDMA_SYSFS)):
        ports_dir = os.path.join(_RDMA_SYSFS, dev, "ports")
        ports = []
        for port in sorted(os.listdir(ports_dir)) if os.path.isdir(ports_dir) else []:
            try:
                with open(os.path.join(ports_dir, port, "state")) as f:
                    ports.append((int(port), f.read().strip()))
            except OSError:
                ports.append((int(port), "unknown"))
        out[dev] = ports
    return out


def _key():
    """Where the shared key comes from, and what is wrong with it (a session would refuse it)."""
    if os.environ.get("HMC_AUTH_KEY"):
        return {"source": "HMC_AUTH_KEY"}, None
    path = os.environ.get("HMC_AUTH_KEY_FILE") or os.path.join(os.path.expanduser("~"), ".hmc", "auth_key")
    info = {"source": "file", "path": path}
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        info["state"] = "missing: the first session creates it (mode 0600)"
        return info, None
    info["mode"] = f"{stat.S_IMODE(st.st_mode):04o}"
    if not stat.S_ISREG(st.st_mode):
        return info, f"key file {path} is not a regular file"
    if st.st_mode & 0o077 or st.st_uid != os.geteuid():
        return info, f"key file {path} has mode {info['mode']} or another owner: sessions refuse it (chmod 600 {path})"
    return info, None


def _self_test(size):
    """Two sessions in this process over the transports UCX picks: what carries a put, and how fast."""
    with tempfile.TemporaryDirectory(prefix="hmc-doctor-") as d:
        kwargs = dict(buffer_size=size, ctrl_uds_dir=d, timeout=20)
        with create_session(**kwargs) as server, create_session(**kwargs) as client:
            started = time.perf_counter()
            server.init_server("127.0.0.1", 0)
            client.connect("127.0.0.1", server.ctrl_port, timeout=20)
            connect_ms = (time.perf_counter() - started) * 1e3
            small = []
            for _ in range(200):
                t = time.perf_counter()
                client.put_remote("127.0.0.1", None, 0, 0, 64)
                small.append(time.perf_counter() - t)
            rounds = 5
            t = time.perf_counter()
            for _ in range(rounds):
                client.put_remote("127.0.0.1", None, 0, 0, size)
            secs = time.perf_counter() - t
            small.sort()
            return {"transports": client.transports(0), "connect_ms": round(connect_ms, 1),
                    "put_64B_p50_us": round(small[len(small) // 2] * 1e6, 2),
                    "put_bandwidth_GBps": round(rounds * size / secs / 1e9, 2), "put_bytes": size}


def diagnose(expect=(), size=64 << 20):
    """The report as a dict: host facts, the self-test, and the problems found (a list of strings)."""
    problems, notes = [], []
    report = {"hmc": {}, "host": {}, "self_test": None, "problems": problems, "notes": notes}
    version, why = _ucx_version()
    report["host"]["ucx"] = version or f"not loadable: {why}"
    if version is None:
        problems.append(f"libucp.so.0 cannot be loaded: {why}")
    report["host"]["interfaces"] = [name for _, name in socket.if_nameindex()]
    if all(name == "lo" for name in report["host"]["interfaces"]):
        notes.append("only a loopback interface: peers on other hosts cannot reach this one")
    rdma = _rdma_devices()
    report["host"]["rdma"] = {dev: [f"port {p}: {s}" for p, s in ports] for dev, ports in rdma.items()}
    active = any("ACTIVE" in s for ports in rdma.values() for _, s in ports)
    if "rdma" in expect and not active:
        problems.append("RDMA expected but no active RDMA port (" + ("no device in " + _RDMA_SYSFS if not rdma
                                                                     else "devices without an ACTIVE port") +
                        "): ConnType.RDMA is UnsupportedError here and UCX falls back to tcp or shm")
    gpus = {}
    for name, mem in _GPU_MEMORY.items():
        ok, reason = memory_type_available(mem)
        gpus[name] = "available" if ok else reason
        if name in expect and not ok:
            problems.append(f"{name.upper()} expected but not usable: {reason}")
    report["host"]["gpu_memory"] = gpus
    key, why = _key()
    report["host"]["auth_key"] = key
    if why:
        problems.append(why)
    try:
        test = _self_test(size)
    except HMCError as e:
        problems.append(f"loopback self-test failed: {type(e).__name__}: {e}")
    else:
        report["self_test"] = test
        if "tcp" in test["transports"].split(",") and "posix" not in test["transports"]:
            problems.append(f"same-host peers use {test['transports']}: shared memory is unusable here "
                            "(separate namespaces or UCX_TLS without shm), so local transfers go through TCP")
    with create_session(buffer_size=1 << 20) as s:
        native = [t.name for t in s.native_memory_types]
    report["hmc"]["native_memory_types"] = native
    for name, mem in _GPU_MEMORY.items():
        if gpus[name] == "available" and mem not in native:
            problems.append(f"{name.upper()} memory is staged through host buffers: this UCX was built without "
                            f"{name.upper()} support, so GPU transfers cost a copy each way")
    return report


def _print(report):
    host, test = report["host"], report["self_test"]
    print(f"UCX           {host['ucx']}")
    print(f"interfaces    {', '.join(host['interfaces'])}")
    print(f"RDMA          {json.dumps(host['rdma']) if host['rdma'] else 'none (' + _RDMA_SYSFS + ' is empty or absent)'}")
    print("GPU memory    " + ", ".join(f"{k}: {v}" for k, v in host["gpu_memory"].items()))
    print("auth key      " + ", ".join(f"{k} {v}" for k, v in host["auth_key"].items()))
    print(f"UCX moves     {', '.join(report['hmc']['native_memory_types'])} memory itself")
    if test:
        print(f"self-test     {test['transports']}: connect {test['connect_ms']} ms, 64 B put p50 "
              f"{test['put_64B_p50_us']} us, {test['put_bytes'] >> 20} MiB puts at {test['put_bandwidth_GBps']} GB/s")
    for n in report["notes"]:
        print(f"note          {n}")
    for p in report["problems"]:
        print(f"PROBLEM       {p}")
    print("doctor: " + (f"{len(report['problems'])} problem(s)" if report["problems"] else "no problems found"))


def main(argv):
    import argparse
    p = argparse.ArgumentParser(prog="python -m hmc doctor", description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--expect", default="", help="comma-separated: rdma, cuda, rocm (a missing one is a problem)")
    p.add_argument("--size", default="64M", help="bytes per put in the self-test (default 64M)")
    a = p.parse_args(argv)
    expect = {e.strip().lower() for e in a.expect.split(",") if e.strip()}
    unknown = expect - {"rdma", "cuda", "rocm"}
    if unknown:
        p.error(f"--expect: unknown {', '.join(sorted(unknown))} (rdma, cuda, rocm)")
    report = diagnose(expect, _args.buffer_size(a.size))
    print(json.dumps(report, indent=2)) if a.json else _print(report)
    return 1 if report["problems"] else 0
