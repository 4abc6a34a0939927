"""Torch CUDA tensors through put_torch_cuda / get_torch_cuda / register, staged through pinned host
memory where UCX cannot move CUDA memory (docs/gpu-staging.md). The CUDA cases need a GPU
and skip, saying why, without one; the memory-type query runs everywhere."""
import shutil
import tempfile

import pytest

import hmc

torch = pytest.importorskip("torch")
CUDA = torch.cuda.is_available()
NO_GPU = "no CUDA device: torch.cuda.is_available() is False"


@pytest.fixture
def pair(tls):
    """A server and a client session in this process, connected (client is rank 1)."""
    uds = tempfile.mkdtemp(prefix="hmc-py-gpu-")
    kw = dict(buffer_size=32 << 20, ucx_tls=tls, ucx_net_devices="lo", ctrl_uds_dir=uds)
    with hmc.create_session(**kw) as server, hmc.create_session(**kw) as client:
        server.init_server("127.0.0.1", 18751, 0, 0, 0, uds)
        assert client.connect(0, 1, "127.0.0.1", 18751, server.ctrl_port()) == 0
        server.wait_peer(1, 10)
        yield server, client
    shutil.rmtree(uds, ignore_errors=True)


def test_native_memory_types_and_staging_flag():
    with hmc.create_session(buffer_size=1 << 20) as s:
        types = s.native_memory_types
        assert hmc.MemoryType.CPU in types
        assert s.buffer_staged is False  # a CPU buffer never is


@pytest.mark.skipif(not CUDA, reason=NO_GPU)
@pytest.mark.parametrize("n", [1, 4097, (1 << 20) + 3, 8 << 20])
def test_put_and_get_torch_cuda(pair, n):
    server, client = pair
    src = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
    assert client.put_torch_cuda(0, src, bias=4096) == n
    assert server.buf.get_bytes(4096, n) == bytes(src.cpu().numpy())
    dst = torch.zeros(n, dtype=torch.uint8, device="cuda")
    assert client.get_torch_cuda(0, dst, bias=4096) == n
    assert torch.equal(dst, src)


@pytest.mark.skipif(not CUDA, reason=NO_GPU)
def test_registered_cuda_tensor(pair):
    server, client = pair
    t = torch.arange(1 << 18, dtype=torch.int32, device="cuda")
    with client.register(t) as reg:
        client.put(0, reg, 0)
        assert server.buf.get_bytes(0, t.numel() * 4) == bytes(t.cpu().numpy())
        server.buf.put(bytes(range(256)) * 4096, 0)
        client.get_into(0, reg, 0)
    assert bytes(t.cpu().numpy()) == bytes(range(256)) * 4096


@pytest.mark.skipif(not CUDA, reason=NO_GPU)
def test_cuda_session_buffer_is_staged_where_ucx_lacks_cuda(pair):
    server, _ = pair
    with hmc.create_session(buffer_size=1 << 20, mem_type=hmc.MemoryType.NVIDIA_GPU) as s:
        staged = hmc.MemoryType.NVIDIA_GPU not in s.native_memory_types
        assert s.buffer_staged is staged
