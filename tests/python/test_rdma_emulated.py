"""ConnType.RDMA from Python, over the in-process EMULATED verbs fabric (HMC_VERBS_EMULATION=1,
tests only): the reference's calls with conn=ConnType.RDMA move the bytes, and a session that
carries UCX refuses RDMA by name. The C++ suite (tests/verbs) covers errors and faults."""
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


def test_a_ucx_session_refuses_rdma_by_name(tmp_path):
    with hmc.create_session(buffer_size=4096, ctrl_uds_dir=str(tmp_path)) as s:
        s.init_server("127.0.0.1", 1, 0, 0, 0)
        with pytest.raises(hmc.InvalidArgumentError, match="RDMA"):
            s.connect(0, 1, "127.0.0.1", 1, 1, RDMA)
        with pytest.raises(hmc.UnsupportedError, match="carries its data over UCX"):
            s.put_remote("127.0.0.1", 1, 0, 0, 1, conn=RDMA)


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
