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
