"""hmc.mf.bm and hmc.mf.shm: memfabric's BM and SMEM over a world of real processes (mf_bm_peer.py),
memfabric's example's host half (mf_bm_example_host.py), and the argument limits in one process."""
import pathlib
import socket
import subprocess

import numpy as np
import pytest

import hmc
import hmc.mf as mf
from hmc.mf import bm, shm
from test_world import PYTHON, env_for
from ranks import finish, make_certs, report

HERE = pathlib.Path(__file__).parent
SIZE = 4
COPIES_CHECKS = 89  # "OK" lines of the copies scenario on every rank
KILL_CHECKS = 8


@pytest.fixture(autouse=True)
def auth_key(monkeypatch):
    monkeypatch.setenv("HMC_AUTH_KEY", "python-mf-bm-test-key")


def free_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def ranks(url, tls, scenario, *certs):
    return [subprocess.Popen([PYTHON, str(HERE / "mf_bm_peer.py"), url, str(SIZE), str(r), tls, scenario, *certs],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for())
            for r in range(SIZE)]


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_four_ranks_every_host_copy_type_batches_refusals_and_smem(tls):
    for lines, rc in finish(ranks(free_url(), tls, "copies"), 90):
        oks = [line for line in lines if line.startswith("OK ")]
        assert rc == 0 and lines[-1] == "DONE" and len(oks) == COPIES_CHECKS, report(lines)


def test_four_ranks_over_a_config_store_in_tls(tmp_path):
    certs = make_certs(tmp_path)
    for lines, rc in finish(ranks(free_url(), "tcp", "copies", str(certs)), 90):
        oks = [line for line in lines if line.startswith("OK ")]
        assert rc == 0 and lines[-1] == "DONE" and len(oks) == COPIES_CHECKS + 4, report(lines)


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_a_killed_rank_fails_the_others_copies_with_peer_lost(tls):
    results = finish(ranks(free_url(), tls, "kill"), 60)
    assert results[-1][1] == 0, report(results[-1][0])  # the victim left with os._exit(0)
    for lines, rc in results[:-1]:
        oks = [line for line in lines if line.startswith("OK ")]
        assert rc == 0 and lines[-1] == "DONE" and len(oks) == KILL_CHECKS, report(lines)


def test_memfabric_example_host_half_with_the_import_changed():
    proc = subprocess.Popen([PYTHON, str(HERE / "mf_bm_example_host.py"), "--world_size", str(SIZE),
                             "--local_ranks", str(SIZE), "--url", free_url()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for())
    [(lines, rc)] = finish([proc], 90)
    assert rc == 0 and lines == [f"OK rank {r}" for r in range(SIZE)], report(lines)


@pytest.fixture
def one_rank():
    """A world of one rank in this process for BM and SMEM (torn down even when a check fails)."""
    config = bm.BmConfig()
    config.init_timeout = config.operation_timeout = 10
    config.world_options = {"ucx_tls": "shm", "buffer_size": 8 << 20}
    url = free_url()
    assert bm.initialize(url, 1, 0, config) == 0, mf.get_last_err_msg()
    assert shm.initialize(url, 1, 0, 0, shm.ShmConfig()) == 0, mf.get_last_err_msg()
    yield
    bm.uninitialize()
    shm.uninitialize()


def test_create_limits_hbm_and_device_copies(one_rank):
    with pytest.raises(hmc.InvalidArgumentError, match="id=64"):
        bm.create(64, 4096, 0)
    with pytest.raises(hmc.InvalidArgumentError, match="does not fit"):
        bm.create(1, 8 << 20, 0)
    with pytest.raises(hmc.UnsupportedError, match="local_hbm_size=4096") as hbm:
        bm.create(1, 4096, 4096)
    mem = bm.create(1, 4096, 0)
    assert bm.create(2, 4096, 0).local_mem_size(bm.BmMemType.HOST) == 4096
    with pytest.raises(hmc.InvalidArgumentError, match="in use"):
        bm.create(1, 4096, 0)
    host = np.zeros(64, dtype=np.uint8)
    assert mem.copy_data(host.ctypes.data, mem.peer_rank_ptr(0, bm.BmMemType.HOST), 8, bm.BmCopyType.H2G) == \
        -int(hmc.Status.INVALID_ARGUMENT) and "join" in mf.get_last_err_msg()
    assert mem.join() == 0
    assert mem.peer_rank_ptr(1, bm.BmMemType.HOST) == 0 and "outside the world" in mf.get_last_err_msg()
    assert mem.get_rank_id_by_gva(mem.peer_rank_ptr(0, bm.BmMemType.HOST) + 5) == 0
    assert mem.register(host.ctypes.data, 64) == 0 and mem.register(host.ctypes.data + 8, 8) != 0
    assert mem.unregister(host.ctypes.data) == 0 and mem.unregister(host.ctypes.data) != 0
    gva = mem.peer_rank_ptr(0, bm.BmMemType.HOST)
    for kind in (bm.BmCopyType.L2G, bm.BmCopyType.G2L, bm.BmCopyType.L2GH, bm.BmCopyType.GH2L):
        src, dst = (host.ctypes.data, gva) if kind.name.startswith("L") else (gva, host.ctypes.data)
        assert mem.copy_data(src, dst, 8, kind) == -int(hmc.Status.UNSUPPORT), kind
        assert "device memory" in mf.get_last_err_msg()
    assert mem.leave() == 0
    gpu = any(hmc.memory_type_available(m)[0] for m in (hmc.MemoryType.NVIDIA_GPU, hmc.MemoryType.AMD_GPU,
                                                         hmc.MemoryType.HUAWEI_ASCEND_NPU))
    if not gpu:
        pytest.skip(f"HBM contributions and L2G/G2L/L2GH/GH2L copies: {hbm.value}")


def test_smem_create_limits_barrier_and_all_gather(one_rank):
    MiB = 1 << 20
    bad = [dict(id=64), dict(id=-1), dict(rank_size=1025), dict(rank_size=2), dict(rank_id=1),
           dict(local_mem_size=MiB), dict(local_mem_size=3 * MiB), dict(local_mem_size=(4 << 30) + 2 * MiB),
           dict(data_op_type=3)]
    for change in bad:
        with pytest.raises(hmc.InvalidArgumentError):
            shm.create(**{**dict(id=0, rank_size=1, rank_id=0, local_mem_size=2 * MiB), **change})
    big = shm.create(63, 1, 0, 4 << 30, shm.ShmDataOpType.ROCE)
    obj = shm.create(0, 1, 0, 2 * MiB)
    with pytest.raises(hmc.InvalidArgumentError, match="in use"):
        shm.create(0, 1, 0, 2 * MiB)
    obj.barrier()
    assert obj.all_gather(b"x" * 20000) == b"x" * 20000
    assert (obj.local_rank, obj.rank_size) == (0, 1) and obj.gva != big.gva
    assert mf.all_gather(b"top level too") == b"top level too"


def test_config_store_and_tls(tmp_path):
    url = free_url()
    assert mf.create_config_store(url) == 0, mf.get_last_err_msg()
    assert mf.create_config_store(url) == -int(hmc.Status.INVALID_ARGUMENT)
    engine = mf.TransferEngine()
    assert engine.initialize(url, "127.0.0.1:5101", "", 0, ucx_tls="shm") == 0, mf.get_last_err_msg()
    engine.destroy()
    assert mf.set_conf_store_tls(False, "") == 0
    assert mf.set_conf_store_tls(True, "tlsCert: a") == -int(hmc.Status.INVALID_ARGUMENT)
    assert mf.set_conf_store_tls(True, "tlsCaPath: /nowhere; tlsCert: /nowhere/c.pem; tlsCaFile: ca.pem") \
        == -int(hmc.Status.INVALID_ARGUMENT)
    assert "/nowhere/c.pem, which is not a file" in mf.get_and_clear_last_err_msg()
    assert mf.set_conf_store_tls_key("key", "cipher", None) == -int(hmc.Status.INVALID_ARGUMENT)
    assert mf.set_conf_store_tls_key("-----BEGIN PRIVATE KEY-----", "pw", 7) == -int(hmc.Status.INVALID_ARGUMENT)
    assert [o.name for o in mf.TransferOpcode] == ["READ", "WRITE"]
    assert mf.initialize() == 0 and mf.initialize(0) == 0
    mf.uninitialize()


def test_a_config_store_in_tls_serves_verified_clients_only_and_keeps_its_password_secret(tmp_path, caplog):
    certs = make_certs(tmp_path, nodes=("node", "client"))
    client = {"cert": str(certs / "client.pem"), "key": str(certs / "client.key"), "ca": str(certs / "ca.pem")}
    logged = []
    mf.set_extern_logger(lambda level, message: logged.append(message))
    try:
        assert mf.set_conf_store_tls(True, f"tlsCaPath: {certs}; tlsCaFile: ca.pem; tlsCert: {certs}/node.pem; "
                                           "packagePath: /usr/lib") == 0, mf.get_last_err_msg()
        url = free_url()
        assert mf.create_config_store(url) == -int(hmc.Status.INVALID_ARGUMENT)  # no key yet
        assert "set_conf_store_tls_key" in mf.get_and_clear_last_err_msg()
        key = (certs / "node-enc.key").read_text()
        # A wrong password: the store does not start, and nothing says the password.
        assert mf.set_conf_store_tls_key(key, "ciphertext", lambda c: "a-wrong-secret") == 0
        assert mf.create_config_store(url) == -int(hmc.Status.INVALID_CONFIG)
        assert "wrong password?" in mf.get_and_clear_last_err_msg()
        calls = []
        assert mf.set_conf_store_tls_key(key, "ciphertext", lambda c: calls.append(c) or "node-password") == 0
        assert calls == ["ciphertext"]
        assert mf.create_config_store(url) == 0, mf.get_last_err_msg()
        assert calls == ["ciphertext"], "the decrypt function is called once, when the key is set"
        with hmc.Store(url, tls=client, timeout=10) as store:
            store.set("k", b"over tls")
            assert store.get("k") == b"over tls"
        with pytest.raises(hmc.AuthenticationError, match="this store requires TLS"):
            hmc.Store(url, timeout=10)
        stranger = {"cert": str(certs / "other.pem"), "key": str(certs / "other.key"), "ca": str(certs / "ca.pem")}
        with pytest.raises(hmc.AuthenticationError):
            hmc.Store(url, tls=stranger, timeout=10)
        with pytest.raises(hmc.InvalidArgumentError, match="unknown store_tls key 'certificate'"):
            hmc.Store(url, tls={"certificate": "x"}, timeout=10)
    finally:
        mf.uninitialize()
        mf.set_conf_store_tls(False, "")
        mf.set_extern_logger(None)
    text = "\n".join(logged) + caplog.text
    assert "a-wrong-secret" not in text and "node-password" not in text
