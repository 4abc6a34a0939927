"""ConnType.RDMA from Python, over the in-process EMULATED verbs fabric (HMC_VERBS_EMULATION=1,
tests only): the reference's calls with conn=ConnType.RDMA move the bytes; one server serves UCX
and RDMA clients at once; an operation's conn must be its peer's. The C++ suite (tests/verbs) covers
errors and faults."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import hmc

RDMA = hmc.ConnType.RDMA
PORT = 18517


@pytest.fixture
def pair(tmp_path, monkeypatch):
    monkeypatch.setenv("HMC_VERBS_EMULATION", "1")
    server = hmc.create_session(buffer_size="1M", ctrl_uds_dir=str(tmp_path))
    client = hmc.create_session(buffer_size="1M", ctrl_uds_dir=str(tmp_path))
    try:
        server.init_server("127.0.0.1", 0, PORT, 0, 0)  # only an rdma_port: this session serves RDMA
        assert client.connect(0, 1, "127.0.0.1", PORT, server.ctrl_port, RDMA) == 0
        server.wait_peer(1)
        yield server, client
    finally:
        client.close()
        server.close()


def test_put_get_and_tags_over_rdma(pair):
    server, client = pair
    data = np.arange(1000, dtype=np.uint32)
    client.buf.put(data, offset=0)
    client.put_remote("127.0.0.1", PORT, 0, 4096, data.nbytes, conn=RDMA)
    client.ctrl_send(0, 42)
    assert server.ctrl_recv(1) == 42
    out = np.zeros_like(data)
    server.buf.get_into(out, nbytes=data.nbytes, offset=4096)
    assert np.array_equal(out, data)
    client.get_remote("127.0.0.1", PORT, 8192, 4096, data.nbytes, conn=RDMA)
    back = np.zeros_like(data)
    client.buf.get_into(back, nbytes=data.nbytes, offset=8192)
    assert np.array_equal(back, data)
    client.put_batch(0, [(0, 100000, 16), (16, 200000, 16)], conn=RDMA)
    assert server.buf.get_bytes(200000, 16) == client.buf.get_bytes(16, 16)


UCX_PORT = 18518


def test_one_server_serves_ucx_and_rdma_clients_and_each_op_names_its_peers_conn(tmp_path, monkeypatch):
    monkeypatch.setenv("HMC_VERBS_EMULATION", "1")
    with hmc.create_session(buffer_size="1M", ctrl_uds_dir=str(tmp_path)) as server, \
            hmc.create_session(buffer_size="1M", ctrl_uds_dir=str(tmp_path)) as u, \
            hmc.create_session(buffer_size="1M", ctrl_uds_dir=str(tmp_path)) as r:
        server.init_server("127.0.0.1", UCX_PORT, PORT, 0, 0)
        assert u.connect(0, 1, "127.0.0.1", UCX_PORT, server.ctrl_port, hmc.ConnType.UCX) == 0
        assert r.connect(0, 2, "127.0.0.1", PORT, server.ctrl_port, RDMA) == 0
        server.wait_peer(1)
        server.wait_peer(2)
        assert (server.conn_of(1), server.conn_of(2)) == (hmc.ConnType.UCX, RDMA)
        assert (u.conn_of(0), r.conn_of(0)) == (hmc.ConnType.UCX, RDMA)
        assert r.transports(0) == server.transports(2) == "rc-emulated"
        assert "rc" not in server.transports(1)
        assert r.check_conn("127.0.0.1", PORT, RDMA) and not r.check_conn("127.0.0.1", PORT, hmc.ConnType.UCX)
        a, b = np.arange(50000, dtype=np.uint32), np.arange(50000, dtype=np.uint32)[::-1].copy()
        u.put("127.0.0.1", a, 0)  # UCX is the default conn
        r.put("127.0.0.1", b, 300000, RDMA)
        assert server.buf.get_bytes(0, a.nbytes) == a.tobytes()
        assert server.buf.get_bytes(300000, b.nbytes) == b.tobytes()
        assert r.get("127.0.0.1", a.nbytes, 0, RDMA) == a.tobytes()
        assert u.get("127.0.0.1", b.nbytes, 300000) == b.tobytes()
        server.put(1, b"from the server over UCX", 700000)
        server.put(2, b"from the server over RDMA", 700000, conn=RDMA)
        assert u.buf.get_bytes(700000, 24) == b"from the server over UCX"
        assert r.buf.get_bytes(700000, 25) == b"from the server over RDMA"
        # An operation whose conn is not its peer's: a typed error naming both, nothing sent.
        with pytest.raises(hmc.InvalidArgumentError, match="conn=ConnType.UCX, but rank 0 is connected over ConnType.RDMA"):
            r.put_remote("127.0.0.1", PORT, 0, 0, 8)
        with pytest.raises(hmc.InvalidArgumentError, match="conn=ConnType.RDMA, but rank 1"):
            server.put_batch(1, [(0, 0, 8)], conn=RDMA)
        with pytest.raises(hmc.InvalidArgumentError, match="ConnType.RDMA"):
            server.get(2, 8, 0)
        assert server.buf.get_bytes(0, a.nbytes) == a.tobytes()
        # The UCX client moves to RDMA: disconnect, then connect with the other conn and its port.
        u.disconnect("127.0.0.1", UCX_PORT, hmc.ConnType.UCX)
        assert u.connect(0, 1, "127.0.0.1", PORT, server.ctrl_port, RDMA) == 0
        server.wait_peer(1)
        assert u.conn_of(0) == RDMA and server.conn_of(1) == RDMA
        u.buf.put(b"moved", offset=0)
        u.put_remote("127.0.0.1", PORT, 0, 900000, 5, conn=RDMA)
        assert server.buf.get_bytes(900000, 5) == b"moved"


def test_the_reference_perf_apps_rdma_and_ucx_cases_against_one_server_in_one_process(tmp_path):
    """The app's RDMA case, then its UCX case, from one client session to one server session: over
    the emulated fabric, so both sessions share a process (the server runs in a thread)."""
    from test_reference_apps import HERE, LIMIT, env, free_ports
    base = free_ports(0, 1, 2, 3)
    out = subprocess.run([sys.executable, str(HERE / "ref_perf_app.py"), "--role", "both", "--port-base", str(base),
                          "--uds-dir", str(tmp_path), "--sizes", "64,4k,1m,4m"],
                         capture_output=True, text=True, env=env(HMC_VERBS_EMULATION="1"), timeout=LIMIT)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    for mode in ("rdma", "ucx"):
        passed = re.findall(rf"verify size=(\d+) mode={mode}: PASS", text)
        assert passed == ["64", "4096", "1048576", "4194304"], text
    assert "FAIL" not in text and "dropped" not in text, text


STRIPE = 64 << 10  # the verbs transport's stripe threshold (VerbsOptions::kDefaultStripeMin)


@pytest.mark.parametrize("num_chs", [1, 2, 4])
def test_num_chs_sets_the_qps_per_peer_and_every_byte_arrives(tmp_path, monkeypatch, num_chs):
    """create_session(num_chs=N): N RC QPs per peer (transports() names them), and puts, gets and
    put-with-notify around the stripe threshold (one piece per QP above it) move every byte."""
    monkeypatch.setenv("HMC_VERBS_EMULATION", "1")
    server = hmc.create_session(buffer_size="4M", num_chs=num_chs, ctrl_uds_dir=str(tmp_path))
    client = hmc.create_session(buffer_size="4M", num_chs=num_chs, ctrl_uds_dir=str(tmp_path))
    try:
        server.init_server("127.0.0.1", 0, PORT, 0, 0)
        assert client.connect(0, 1, "127.0.0.1", PORT, server.ctrl_port, RDMA) == 0
        server.wait_peer(1)
        expected = "rc-emulated" if num_chs == 1 else f"rc-emulated ({num_chs} QPs)"
        assert client.transports(0) == expected and server.transports(1) == expected
        rng = np.random.default_rng(num_chs)
        for tag, n in enumerate([1, STRIPE - 1, STRIPE, STRIPE + 1, 3 * STRIPE + 7, (1 << 20) + 3]):
            data = rng.integers(0, 256, n, dtype=np.uint8)
            client.buf.put(data, offset=5)
            client.put_remote("127.0.0.1", PORT, 5, 1000003, n, conn=RDMA, notify=tag)
            assert server.ctrl_recv(1) == tag
            got = np.zeros_like(data)
            server.buf.get_into(got, nbytes=n, offset=1000003)  # already there when the tag arrived
            assert np.array_equal(got, data), n
            back = rng.integers(0, 256, n, dtype=np.uint8)
            server.buf.put(back, offset=2500001)
            client.get_remote("127.0.0.1", PORT, 9, 2500001, n, conn=RDMA)
            got = np.zeros_like(back)
            client.buf.get_into(got, nbytes=n, offset=9)
            assert np.array_equal(got, back), n
    finally:
        client.close()
        server.close()


@pytest.mark.parametrize("bad", [0, -1, 65, 1 << 40, 2.0, True, "2"])
def test_num_chs_out_of_range_or_not_an_int_is_refused_by_name(bad):
    for make in (hmc.create_session, hmc.Session, hmc.AsyncSession):
        with pytest.raises(hmc.InvalidArgumentError, match="num_chs"):
            make(buffer_size=4096, num_chs=bad)


def test_the_largest_num_chs_is_accepted():
    with hmc.create_session(buffer_size=4096, num_chs=64) as s:
        assert s.num_chs == 64  # the documented limit (README)


@pytest.mark.skipif(not os.environ.get("HMC_REFERENCE_APPS"),
                    reason="HMC_REFERENCE_APPS is not set (the folder of the reference's Python apps)")
def test_the_reference_perf_py_unchanged_runs_rdma_then_ucx_against_one_server(tmp_path):
    """perf.py as shipped, its run_server in a thread of its run_client's process (the emulation's reach)."""
    from test_reference_apps import HERE, LIMIT, env, free_ports
    base = free_ports(0, 1, 2, 3)
    out = subprocess.run([sys.executable, str(HERE / "ref_perf_one_process.py"),
                          os.path.join(os.environ["HMC_REFERENCE_APPS"], "perf.py"), str(base), str(tmp_path)],
                         capture_output=True, text=True, env=env(HMC_VERBS_EMULATION="1"), timeout=LIMIT)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    for mode in ("rdma", "ucx"):
        assert len(re.findall(rf"verify size=\d+ mode={mode}: PASS", text)) == 3, text
    assert "FAIL" not in text, text
