"""Every bad input raises the right HMCError subclass; a killed peer raises PeerLostError."""
import asyncio
import socket
import time

import numpy as np
import pytest

import hmc
from conftest import ServerProcess, session_kwargs


def test_bad_inputs_raise_typed_errors(client):
    size = 80 << 20
    with pytest.raises(hmc.OutOfRangeError, match="outside rank 0's buffer"):
        client.put_remote("127.0.0.1", 18515, 0, size, 1)
    with pytest.raises(hmc.OutOfRangeError):
        client.get_remote("127.0.0.1", 18515, size - 4, 0, 8)
    with pytest.raises(hmc.OutOfRangeError, match="session buffer of 83886080 bytes.*buffer_size.*register()"):
        client.put(0, b"x" * 10, bias=size - 5)
    with pytest.raises(hmc.OutOfRangeError, match="buffer_size"):  # larger than our own buffer: the knobs, by name
        client.put(0, b"x" * (size + 1))
    with pytest.raises(hmc.InvalidArgumentError, match="writable"):
        client.get_into(0, b"immutable")
    with pytest.raises(hmc.InvalidArgumentError, match="contiguous"):
        client.get_into(0, np.zeros((10, 10))[:, ::2])
    frozen = np.zeros(10)
    frozen.flags.writeable = False
    with pytest.raises(hmc.InvalidArgumentError, match="read-only"):
        client.get_into(0, frozen)
    with pytest.raises(hmc.InvalidArgumentError, match="nbytes must be >= 1"):
        client.put_remote("127.0.0.1", 18515, 0, 0, 0)
    with pytest.raises(hmc.NotConnectedError):
        client.put_remote("10.9.9.9", 1, 0, 0, 1)
    with pytest.raises(hmc.NotConnectedError):
        client.ctrl_send(7, 1)
    with pytest.raises(hmc.InvalidArgumentError, match="conn=ConnType.RDMA, but rank 0 is connected over ConnType.UCX"):
        client.put_remote("127.0.0.1", 18515, 0, 0, 1, conn=hmc.ConnType.RDMA)
    with pytest.raises(hmc.InvalidArgumentError):
        client.ctrl_send(0, -1)
    # All of them are HMCErrors, and also the matching Python built-in kinds.
    assert issubclass(hmc.OutOfRangeError, (hmc.HMCError, IndexError))
    assert issubclass(hmc.TimeoutError, TimeoutError)


def test_closed_session_raises_closed(server, tls):
    s = hmc.create_session(**session_kwargs(tls, server.uds_dir))
    s.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port)
    s.close()
    with pytest.raises(hmc.ClosedError):
        s.put(0, b"x")
    with pytest.raises(hmc.ClosedError):
        s.ctrl_recv(0, timeout=1)


def test_unsupported_memory_types_say_so():
    with pytest.raises(hmc.UnsupportedError, match="unsupported in this build"):
        hmc.create_session(buffer_size=4096, mem_type=hmc.MemoryType.CAMBRICON_MLU)


@pytest.mark.parametrize("style", ["blocking", "asyncio"])
def test_killed_peer_raises_peer_lost_within_timeout(style, tls):
    server = ServerProcess("blocking", tls)
    try:
        kwargs = session_kwargs(tls, server.uds_dir, timeout=5.0)
        if style == "blocking":
            with hmc.create_session(**kwargs) as s:
                s.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port)
                server.kill()
                t0 = time.monotonic()
                with pytest.raises(hmc.PeerLostError):
                    s.ctrl_recv(0, timeout=10)
                assert time.monotonic() - t0 < 5
                # Later operations, by address or by rank, say the peer was lost and how.
                with pytest.raises(hmc.PeerLostError, match="rank 0 was lost: its "):
                    s.get_remote("127.0.0.1", 18515, 0, 0, 1 << 20)
                with pytest.raises(hmc.PeerLostError, match="rank 0 was lost: its "):
                    s.put_remote(0, None, 0, 0, 8)
                with pytest.raises(hmc.NotConnectedError):  # it is a NotConnectedError too
                    s.put(0, b"after the kill")
        else:
            async def main():
                async with hmc.AsyncSession(**kwargs) as s:
                    await s.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port)
                    pending = asyncio.ensure_future(s.ctrl_recv(0, timeout=10))
                    await asyncio.sleep(0.05)
                    server.kill()
                    t0 = time.monotonic()
                    with pytest.raises(hmc.PeerLostError):
                        await pending
                    assert time.monotonic() - t0 < 5

            asyncio.run(main())
    finally:
        server.close()


def test_connect_takes_a_timeout_of_its_own(tmp_path):
    with socket.socket() as held:  # bound, never listening: every connection to it is refused
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        kwargs = dict(buffer_size=1 << 20, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path))
        with hmc.create_session(**kwargs) as sdk, hmc.create_session(**kwargs) as readme:  # sessions: 30 s
            with pytest.raises(hmc.NotConnectedError, match="refused until the timeout of 500 ms"):
                sdk.connect("127.0.0.1", port, timeout=0.5)
            with pytest.raises(hmc.NotConnectedError, match="refused until the timeout of 300 ms"):
                readme.connect(0, 1, "127.0.0.1", 18515, port, conn=hmc.ConnType.UCX, timeout=0.3)
            with pytest.raises(hmc.InvalidArgumentError, match="timeout"):
                sdk.connect("127.0.0.1", port, timeout=0)
            with pytest.raises(hmc.InvalidArgumentError, match="timeout"):
                sdk.connect("127.0.0.1", port, timeout=-1)
