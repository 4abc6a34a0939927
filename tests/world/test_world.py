"""The Python world layer across processes: every collective with odd sizes and checked contents
(blocking and asyncio, shm and tcp), torchrun's environment, a torch TCPStore, two jobs on one
standalone store (python -m hmc.store), a rank killed during barriers, and typed store errors."""
import asyncio
import math
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

import hmc
from ranks import finish, make_certs, report

HERE = pathlib.Path(__file__).parent
PYTHON = "/usr/bin/python3"  # Debian's interpreter: it sees python3-numpy/torch
CHECKS = 17                  # "OK" lines of the collectives scenario without torch
TORCH_CHECKS = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def auth_key(monkeypatch):
    monkeypatch.setenv("HMC_AUTH_KEY", "python-world-test")


@pytest.fixture
def uds_dir():
    d = tempfile.mkdtemp(prefix="hmc-pyworld-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def env_for(extra=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]))
    env.update(extra or {})
    return env


def spawn(args, env=None):
    return subprocess.Popen([PYTHON, str(HERE / "world_peer.py"), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env or env_for())


def assert_all_ok(results, checks):
    for lines, rc in results:
        oks = [line for line in lines if line.startswith("OK ")]
        assert rc == 0 and len(oks) == checks and lines[-1] == "DONE", report(lines)


# CI runs two corners of the matrix; the long runs (HMC_NET_LONG=1, scripts/test --long) all four.
MATRIX = [("blocking", "shm"), ("asyncio", "tcp")]
if os.environ.get("HMC_NET_LONG") == "1":
    MATRIX += [("asyncio", "shm"), ("blocking", "tcp")]


# Said once by every session whose UCX_TLS names tcp: configuration, not trouble.
TCP_NOTICE = "UCX_TLS names tcp"


@pytest.mark.parametrize("style,tls", MATRIX)
def test_eight_ranks_every_collective(style, tls):
    url = f"tcp://127.0.0.1:{free_port()}"  # rank 0 hosts the embedded store
    procs = [spawn([url, 8, r, style, tls, "collectives"]) for r in range(8)]
    results = finish(procs)
    assert_all_ok(results, CHECKS)
    # An orderly run and close logs nothing above info (no endpoint "failing" as the others close).
    for lines, _ in results:
        loud = [line for line in lines.log.splitlines()
                if ("[warning]" in line or "[error]" in line) and TCP_NOTICE not in line]
        assert not loud, report(lines)


def test_odd_world_with_tensors_and_automatic_ranks():
    with StandaloneStore() as url:
        procs = [spawn([url, 3, "auto", "asyncio" if i % 2 else "blocking", "shm", "collectives", "odd", "torch"])
                 for i in range(3)]
        results = finish(procs)
    assert_all_ok(results, CHECKS + TORCH_CHECKS)
    assert sorted(lines[0] for lines, _ in results) == ["RANK 0", "RANK 1", "RANK 2"]


def test_torchrun_style_environment():
    port = free_port()
    procs = []
    for r in range(4):
        env = env_for({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "4", "RANK": str(r),
                       "LOCAL_RANK": str(r)})
        env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
        procs.append(spawn(["env://", 0, "auto", "blocking", "shm", "join"], env))
    results = finish(procs, 60)
    for r, (lines, rc) in enumerate(results):
        assert rc == 0 and lines[0] == f"RANK {r}", report(lines)


def test_under_torchruns_agent_store_env_uses_torchs_store():
    """What torchrun's workers see: MASTER_PORT is the agent's TCPStore (torchrun itself crashes on
    Debian's Python 3.11 before it starts a worker, so the test plays the agent)."""
    import datetime

    import torch.distributed as dist

    port = free_port()
    agent = dist.TCPStore("127.0.0.1", port, 1, True, timeout=datetime.timedelta(seconds=30))
    procs = []
    for r in range(3):
        procs.append(spawn(["env://", 0, "auto", "blocking", "shm", "join"], env_for({
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "3", "RANK": str(r),
            "LOCAL_RANK": str(r), "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "agent-run"})))
    results = finish(procs, 90)
    for r, (lines, rc) in enumerate(results):
        assert rc == 0 and lines[0] == f"RANK {r}" and lines[-1] == "DONE", report(lines)
    assert agent.get("agent-run/world/size") == b"3"  # the world's keys went to torch's store


def test_a_torch_tcpstore_bootstraps_the_world():
    port = free_port()
    procs = [spawn([f"torch:127.0.0.1:{port}" + (":master" if r == 0 else ""), 3, r, "blocking", "shm", "join"])
             for r in range(3)]
    for lines, rc in finish(procs, 90):
        assert rc == 0 and lines[-1] == "DONE", report(lines)


class StandaloneStore:
    """python -m hmc.store on a free port (args: more of its options)."""

    def __init__(self, *args):
        self.args = list(args)

    def __enter__(self):
        self.proc = subprocess.Popen([PYTHON, "-m", "hmc.store", "--host", "127.0.0.1", "--port", "0", *self.args],
                                     stdout=subprocess.PIPE, text=True, env=env_for())
        line = self.proc.stdout.readline().split()
        assert line and line[0] == "READY", line
        return f"tcp://{line[1]}"

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=10) == 0


def test_two_jobs_share_one_standalone_store():
    with StandaloneStore() as url:
        procs = [spawn([url, 2, "auto", "blocking", "tcp", "collectives", f"job{i % 2}"]) for i in range(4)]
        results = finish(procs)
    assert_all_ok(results, CHECKS)


def test_a_standalone_store_over_tls_serves_verified_worlds_and_clients_only(tmp_path):
    certs = make_certs(tmp_path, nodes=("store", "rank"))
    tls = {"cert": str(certs / "rank.pem"), "key": str(certs / "rank-enc.key"), "key_password": "rank-password",
           "ca": [str(certs / "ca.pem")]}
    with StandaloneStore("--tls-cert", str(certs / "store.pem"), "--tls-key", str(certs / "store.key"),
                         "--tls-ca", str(certs / "ca.pem")) as url:
        with hmc.World(url, 1, 0, ucx_tls="shm", buffer_size=1 << 20, store_tls=tls, job_id="tls",
                       start_store=False) as world:
            world.barrier()
        with hmc.Store(url, job_id="tls", tls=tls) as store:
            assert store.get("world/size") == b"1"  # the world's own keys, read back over TLS
        with pytest.raises(hmc.AuthenticationError, match="this store requires TLS"):
            hmc.Store(url, job_id="tls", timeout=5)
        stranger = {**tls, "cert": str(certs / "other.pem"), "key": str(certs / "other.key"), "key_password": ""}
        with pytest.raises(hmc.AuthenticationError):
            hmc.Store(url, job_id="tls", tls=stranger, timeout=5)
        with pytest.raises(hmc.InvalidConfigError, match="wrong password"):
            hmc.Store(url, job_id="tls", tls={**tls, "key_password": "not it"}, timeout=5)


def test_a_rank_killed_during_barriers_fails_the_others_naming_it():
    with StandaloneStore() as url:
        procs = [spawn([url, 4, "auto", "blocking", "shm", "barriers"]) for _ in range(4)]
        by_rank = {}
        for p in procs:
            line = p.stdout.readline()
            assert line.startswith("RANK"), line
            by_rank[int(line.split()[1])] = p
        time.sleep(0.3)
        start = time.monotonic()
        by_rank[2].kill()
        by_rank[2].wait()
        results = finish([by_rank[r] for r in (0, 1, 3)], 30)
        assert time.monotonic() - start < 12
    for lines, rc in results:
        assert rc == 3 and lines[-1].startswith("ERROR PeerLostError") and "rank 2" in lines[-1], report(lines)


def test_store_operations_and_typed_errors():
    with StandaloneStore() as url:
        s = hmc.Store(url, job_id="api")
        s.set("k", b"v")
        s.set("text", "x")
        assert s.get("k") == b"v" and s.get("text") == b"x"
        assert s.add("n", 2) == 2 and s.add("n", 3) == 5
        assert s.compare_set("c", b"", b"first") == b"first"
        assert s.compare_set("c", b"other", b"second") == b"first"
        assert s.check(["k", "n"]) and not s.check(["missing"])
        assert s.delete_key("k") and not s.check(["k"])
        with pytest.raises(hmc.TimeoutError, match="never"):
            s.get("never", timeout=0.2)
        other = hmc.Store(url, job_id="other")
        assert not other.check(["n"])  # jobs never see each other's keys
        with pytest.raises(hmc.AuthenticationError, match=url):
            hmc.Store(url, auth_key="a wrong world test key", timeout=2)
        s.close()
    for bad in ("127.0.0.1:1", "tcp://nowhere", "zk://h:1", "etcd://"):
        with pytest.raises(hmc.InvalidConfigError, match=bad.split(":")[0]):
            hmc.Store(bad)
    dead = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(hmc.NotConnectedError, match=dead):
        hmc.Store(dead, timeout=0.3)


def test_a_torch_style_store_object_is_wrapped():
    import datetime

    import torch.distributed as dist

    port = free_port()
    master = dist.TCPStore("127.0.0.1", port, 1, True, timeout=datetime.timedelta(seconds=10))
    s = hmc.wrap_store(master, job_id="j")
    s.set("a", b"1")
    assert s.get("a") == b"1" and s.add("n", 4) == 4
    assert master.get("j/a") == b"1"  # namespaced by the job
    with pytest.raises(hmc.TimeoutError):
        s.wait(["never"], timeout=0.3)


def test_one_rank_in_process_waits_and_checks_timeouts_as_a_session_does():
    """World and AsyncWorld wait through the Session's hooks: inf is no limit; NaN, negatives and
    non-numbers (a str too, not a TypeError) are InvalidArgumentError before anything starts."""
    url = f"tcp://127.0.0.1:{free_port()}"
    with hmc.init_world(url, world_size=1, rank=0, ucx_tls="shm", timeout=5) as w:
        assert w.all_gather(b"abc", timeout=math.inf) == [b"abc"]
        assert (w.all_reduce(np.arange(3), timeout=2) == np.arange(3)).all()
        for bad in (float("nan"), -1, "1"):
            with pytest.raises(hmc.InvalidArgumentError, match="timeout"):
                w.barrier(timeout=bad)
        w.barrier()

    async def main():
        a = await hmc.init_async_world(f"tcp://127.0.0.1:{free_port()}", world_size=1, rank=0, ucx_tls="shm")
        try:
            assert await a.all_to_all([b"zz"], timeout=math.inf) == [b"zz"]
            assert (await a.broadcast(np.ones(2)) == 1).all()
            with pytest.raises(hmc.InvalidArgumentError, match="timeout"):
                await a.barrier(timeout="1")
        finally:
            await a.close()

    asyncio.run(main())
