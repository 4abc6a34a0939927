"""hmc.mf: memfabric's names (initialize/barrier/all_gather across processes, TransferEngine
between two engines) over the world layer."""
import numpy as np
import pytest

import hmc
import hmc.mf as mf
from test_world import StandaloneStore, assert_all_ok, finish, free_port, spawn


@pytest.fixture(autouse=True)
def auth_key(monkeypatch):
    monkeypatch.setenv("HMC_AUTH_KEY", "python-mf-test-key")


def test_initialize_barrier_all_gather_across_processes():
    url = f"tcp://127.0.0.1:{free_port()}"  # rank 0 starts the store, as memfabric's start_store
    procs = [spawn([url, 3, r, "mf", "shm", "-"]) for r in range(3)]
    assert_all_ok(finish(procs, 60), 1)


def test_transfer_engine_writes_and_reads_by_peer_address():
    with StandaloneStore() as url:
        a, b = mf.TransferEngine(), mf.TransferEngine()
        opts = dict(ucx_tls="tcp", ucx_net_devices="lo", buffer_size=1 << 20)
        assert a.initialize(url, "127.0.0.1:5001", "prefill", 0, **opts) == 0, mf.get_last_err_msg()
        assert b.initialize(url, "127.0.0.1:5002", "decode", 0, **opts) == 0, mf.get_last_err_msg()
        assert a.get_rpc_port() > 0
        target = np.zeros(3 << 20, dtype=np.uint8)
        extra = np.zeros(4096, dtype=np.uint8)
        assert a.batch_register_memory([target.ctypes.data, extra], [target.nbytes, extra.nbytes]) == 0
        base = target.ctypes.data
        src = (np.arange(2_000_003) % 251).astype(np.uint8)
        assert b.transfer_sync_write("127.0.0.1:5001", src.ctypes.data, base + 7, src.nbytes) == 0
        assert (target[7:7 + src.nbytes] == src).all()
        back = np.zeros(src.nbytes, dtype=np.uint8)
        b.transfer_async_read_submit("127.0.0.1:5001", back, base + 7, src.nbytes).result(10)
        assert (back == src).all()
        futures = [b.transfer_async_write_submit("127.0.0.1:5001", src[i:], base + 100 * i, 50) for i in range(5)]
        for f in futures:
            f.result(10)
        assert all((target[100 * i:100 * i + 50] == src[i:i + 50]).all() for i in range(5))
        assert b.batch_transfer_sync_write("127.0.0.1:5001", [src, src[3:]], [base, extra.ctypes.data], [9, 11]) == 0
        assert (extra[:11] == src[3:14]).all()
        # Outside registered memory: refused, nothing written, the reason kept.
        before = target.copy()
        rc = b.transfer_sync_write("127.0.0.1:5001", src.ctypes.data, base + target.nbytes - 5, 100)
        assert rc == -int(hmc.Status.OUT_OF_RANGE)
        assert "not inside memory it registered" in mf.get_and_clear_last_err_msg()
        assert (target == before).all()
        assert a.unregister_memory(extra) == 0
        assert b.transfer_sync_write("127.0.0.1:5001", src.ctypes.data, extra.ctypes.data, 10) != 0
        c = mf.TransferEngine()  # an engine that waits briefly for peers to join
        assert c.initialize(url, "127.0.0.1:5003", "", 0, timeout=0.5, **opts) == 0
        assert c.transfer_sync_write("nobody:1", src.ctypes.data, base, 10) == -int(hmc.Status.NOT_FOUND)
        for e in (a, b, c):
            e.destroy()


def test_set_log_level_and_errors_before_initialize():
    assert mf.set_log_level(3) == 0
    assert mf.set_log_level(9) != 0 and "level" in mf.get_last_err_msg()
    with pytest.raises(hmc.InvalidArgumentError, match="not initialized"):
        mf.barrier()
    mf.set_log_level(2)
