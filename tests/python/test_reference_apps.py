"""The reference package's own apps against this package: perf.py (a server and a client process)
and collective.py (4 ranks with torchrun's variables, gloo for torch.distributed). Our drivers
(ref_perf_app.py, ref_collective_app.py) make the apps' hmc calls and run every time; the apps
themselves run when HMC_REFERENCE_APPS names their folder (apps/python_app of the reference)."""
import os
import pathlib
import random
import re
import socket
import subprocess
import sys
import tempfile
import time

import pytest

import hmc
from conftest import PYTHON

HERE = pathlib.Path(__file__).parent
APPS = os.environ.get("HMC_REFERENCE_APPS")
needs_apps = pytest.mark.skipif(not APPS, reason="HMC_REFERENCE_APPS is not set (the reference's apps/python_app)")
LIMIT = 60  # seconds for any process here: a hang fails the test instead of stalling CI


def free_ports(*offsets):
    """A base port such that base + each offset is free on 127.0.0.1 now."""
    for _ in range(100):
        base = random.randrange(20000, 29000)
        try:
            socks = []
            for off in offsets:
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + off))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def env(**extra):
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]), UCX_NET_DEVICES="lo",
                **{k: str(v) for k, v in extra.items()})


def rdma_devices():
    try:
        return os.listdir("/sys/class/infiniband")
    except OSError:
        return []


def wait_listening(port, proc):
    """Until something listens on TCP port (read from /proc/net/tcp: a probe connection would be
    the apps' one accepted control connection)."""
    deadline = time.monotonic() + LIMIT
    while time.monotonic() < deadline and proc.poll() is None:
        with open("/proc/net/tcp") as f:
            rows = [line.split() for line in f.readlines()[1:]]
        if any(int(row[1].split(":")[1], 16) == port and row[3] == "0A" for row in rows):  # 0A: LISTEN
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} (server exit code {proc.poll()})")


def run_pair(server_cmd, client_cmd, ctrl_port, cwd=None):
    server = subprocess.Popen(server_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(),
                              cwd=cwd)
    try:
        wait_listening(ctrl_port, server)
        client = subprocess.run(client_cmd, capture_output=True, text=True, env=env(), timeout=LIMIT, cwd=cwd)
        server_out = server.communicate(timeout=LIMIT if client.returncode == 0 else 5)[0]
    finally:
        if server.poll() is None:
            server.kill()
            server_out = server.communicate()[0]
    return server.returncode, server_out, client.returncode, client.stdout + client.stderr


def rank_ports(world):
    return free_ports(*range(world), *range(1000, 1000 + world), *range(2000, 2000 + world), 3000)


def run_ranks(script, world=4, cwd=None, base=None, **extra):
    """world processes with torchrun's variables; (returncode, output) per rank."""
    base = rank_ports(world) if base is None else base
    procs = [subprocess.Popen([PYTHON, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              cwd=cwd, env=env(MASTER_ADDR="127.0.0.1", MASTER_PORT=base + 3000, WORLD_SIZE=world,
                                               RANK=r, LOCAL_RANK=r, HMC_IP="127.0.0.1", HMC_BASE_PORT=base,
                                               **extra))
             for r in range(world)]
    out = []
    try:
        for p in procs:
            out.append((p.wait(timeout=LIMIT), p.stdout.read()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def test_set_local_ip_set_ctrl_uds_dir_and_connect_uds_dir(tmp_path):
    """set_ctrl_uds_dir places init_server's Unix socket; set_local_ip is the address the server
    knows its client by; connect takes uds_dir."""
    opts = dict(buffer_size=1 << 20, ucx_tls="shm", ucx_net_devices="lo")
    with hmc.create_session(**opts) as srv, hmc.create_session(**opts) as cli:
        tmp_path.chmod(0o700)
        srv.set_ctrl_uds_dir(str(tmp_path))
        srv.init_server(bind_ip="127.0.0.1", ucx_port=1, rdma_port=2, ctrl_tcp_port=0, self_id=0)
        assert [p.suffix for p in tmp_path.iterdir()] == [".sock"]
        cli.set_local_ip("127.0.0.5")
        assert cli.connect(peer_id=0, self_id=1, peer_ip="127.0.0.1", data_port=1, ctrl_tcp_port=srv.ctrl_port,
                           uds_dir=str(tmp_path), conn=hmc.ConnType.UCX) == 0
        srv.wait_peer(1)
        assert srv.check_conn("127.0.0.5") and not srv.check_conn("127.0.0.1")
        for bad in (lambda: cli.set_local_ip("0.0.0.0"), lambda: cli.set_local_ip(5), lambda: srv.set_ctrl_uds_dir(3),
                    lambda: cli.connect(peer_id=0, self_id=1, peer_ip="127.0.0.1", data_port=1, ctrl_tcp_port=1,
                                        uds_dir=3)):
            with pytest.raises(hmc.InvalidArgumentError):
                bad()
    assert (hmc.CtrlTransport.TCP, hmc.CtrlTransport.UDS) == (0, 1) and hmc.status_t is hmc.Status
    assert hmc.HMCStatusError is hmc.HMCError and hmc.collective.alltoall is hmc.alltoall


def test_alltoall_of_one_rank_and_its_argument_errors():
    """A group of one needs no torch.distributed: the self copy is the whole exchange."""
    with hmc.create_session(buffer_size=1 << 16, ucx_tls="shm", ucx_net_devices="lo") as s:
        me = hmc.GroupMember(rank=0, world=1, ip="127.0.0.1", port_ucx=1, port_rdma=2, port_ctrl=3,
                             mem_type=int(s.buf.mem_type), device_id=0, buffer_size=s.buf.size)
        g = hmc.Group(session=s, members=[hmc.GroupMember.from_dict(me.to_dict())], rank=0)
        out = bytearray(4096)
        hmc.alltoall(g, bytes(range(256)) * 16, out, algo="ring")
        assert out == bytes(range(256)) * 16
        for send, recv, kw in ((b"ab", bytearray(3), {}), (b"a" * 40000, bytearray(40000), {}),
                               (b"ab", bytearray(2), {"algo": "tree"}), (b"ab", bytearray(2), {"chunk_bytes": 0}),
                               (b"ab", bytearray(2), {"recv_bias": 0}), (b"ab", bytearray(2), {"send_bias": 1, "recv_bias": 2})):
            with pytest.raises(hmc.InvalidArgumentError):
                hmc.alltoall(g, send, recv, **kw)
        with pytest.raises(hmc.InvalidArgumentError):
            hmc.Group(session=s, members=[me], rank=1)


def test_perf_app_calls_every_size_verified():
    sizes = ["64", "256", "1k", "4k", "64k", "1m", "4m", "16m"]
    base = free_ports(0, 1, 2, 3)
    with tempfile.TemporaryDirectory(prefix="hmc-perf-") as uds:
        common = ["--port-base", str(base), "--uds-dir", uds, "--sizes", ",".join(sizes)]
        src, sout, crc, cout = run_pair([PYTHON, str(HERE / "ref_perf_app.py"), "--role", "server", *common],
                                        [PYTHON, str(HERE / "ref_perf_app.py"), "--role", "client", *common],
                                        base + 2)
    assert (src, crc) == (0, 0), sout + cout
    modes = ["ucx"] if not rdma_devices() else ["rdma", "ucx"]
    if not rdma_devices():
        assert "the rdma case is dropped" in cout
    passed = re.findall(r"verify size=(\d+) mode=(\w+): PASS", sout)
    assert len(passed) == len(sizes) * len(modes) and "FAIL" not in sout, sout


def test_collective_app_calls_four_ranks_direct_and_ring():
    results = run_ranks(HERE / "ref_collective_app.py", ALGO="direct,ring")
    for rank, (rc, out) in enumerate(results):
        assert rc == 0, f"rank {rank}:\n{out}"
        for algo in ("direct", "ring"):
            assert f"[rank {rank}] {algo} alltoall OK" in out, out


@pytest.mark.parametrize("how", ["exit", "idle"])
def test_collective_missing_rank_is_a_typed_error(how):
    """Rank 2 of 3 exits (its peers see it lost) or idles elsewhere (their deadline passes)."""
    results = run_ranks(HERE / "ref_collective_app.py", world=3, ALGO="direct", HMC_DRIVER_MISSING_RANK=2,
                        HMC_DRIVER_MISSING_HOW=how, HMC_DRIVER_TIMEOUT=2)
    assert "missing from alltoall" in results[2][1]
    errors = "PeerLostError|NotConnectedError" if how == "exit" else "TimeoutError"
    for rank, (rc, out) in enumerate(results[:2]):
        assert rc == 3 and re.search(rf"typed error ({errors})", out), f"rank {rank}:\n{out}"


def test_collective_rank_whose_server_cannot_start_fails_every_rank():
    """Rank 1's control port is taken: it raises, and rank 0 learns it from the gather."""
    base = rank_ports(2)
    with socket.create_server(("127.0.0.1", base + 2001)):
        results = run_ranks(HERE / "ref_collective_app.py", world=2, base=base)
    assert results[1][0] == 3 and "typed error InvalidConfigError" in results[1][1], results[1][1]
    assert results[0][0] == 3 and "typed error NotConnectedError: init_group: rank 1 could not" in results[0][1], \
        results[0][1]


@needs_apps
def test_reference_perf_app_unchanged():
    """perf.py as shipped; where no RDMA device exists, a copy without its rdma case (said so)."""
    script = pathlib.Path(APPS) / "perf.py"
    text = script.read_text()
    with tempfile.TemporaryDirectory(prefix="hmc-perf-") as tmp:
        if not rdma_devices():
            case = '("rdma", hmc.ConnType.RDMA, int(rdma_port)),'
            assert case in text, "perf.py's case list changed"
            print("no RDMA device: perf.py runs without its rdma case")
            script = pathlib.Path(tmp) / "perf.py"
            script.write_text(text.replace(case, "", 1))
        base = free_ports(0, 1, 2, 3)
        ports = ["--ucx-port", str(base), "--rdma-port", str(base + 1), "--ctrl-port", str(base + 2),
                 "--ctrl-uds-dir", tmp, "--buffer-size", str(16 << 20)]
        src, sout, crc, cout = run_pair(
            [PYTHON, str(script), "--role", "server", "--bind-ip", "127.0.0.1", "--ctrl-bind-ip", "127.0.0.1",
             "--verify", *ports],
            [PYTHON, str(script), "--role", "client", "--server-ip", "127.0.0.1", "--ctrl-ip", "127.0.0.1",
             "--self-rank", "1", "--peer-rank", "0",  # its --help: server=0, client=1 (the defaults are 0, 1)
             "--sizes", "64,256,1k,4k,64k,1m,4m,16m", "--iters", "5", "--warmup", "1", *ports], base + 2)
    assert (src, crc) == (0, 0), sout + cout
    assert len(re.findall(r"verify size=\d+ mode=\w+: PASS", sout)) >= 8 and "FAIL" not in sout, sout


@needs_apps
def test_reference_collective_app_unchanged():
    results = run_ranks(pathlib.Path(APPS) / "collective.py")
    for rank, (rc, out) in enumerate(results):
        assert rc == 0 and f"[rank {rank}] direct alltoall OK" in out, f"rank {rank}:\n{out}"
