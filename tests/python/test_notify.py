"""put(..., notify=tag) / put_remote(..., notify=tag): the peer's ctrl_recv gets the tag only after
every byte of the put is in its buffer, blocking and asyncio, over shm and tcp."""
import asyncio
import contextlib
import os
import threading

import pytest

import hmc

MiB = 1 << 20


def kwargs(tmp_path, tls, **extra):
    return dict(buffer_size=4 * MiB, ucx_tls=tls, ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path), **extra)


@contextlib.contextmanager
def pair(tmp_path, tls):
    """A server and a blocking client connected to it."""
    with hmc.create_session(**kwargs(tmp_path, tls)) as server, hmc.create_session(**kwargs(tmp_path, tls)) as client:
        server.init_server("127.0.0.1", 0)
        client.connect("127.0.0.1", server.ctrl_port)
        yield server, client


@contextlib.asynccontextmanager
async def async_pair(tmp_path):
    """A blocking server and an asyncio client connected to it, over shm."""
    with hmc.create_session(**kwargs(tmp_path, "shm")) as server:
        server.init_server("127.0.0.1", 0)
        async with hmc.AsyncSession(**kwargs(tmp_path, "shm")) as client:
            await client.connect("127.0.0.1", server.ctrl_port)
            yield server, client


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_every_byte_is_there_when_the_tag_arrives(tmp_path, tls):
    rounds, regions, size = 300, 8, 64 * 1024
    with pair(tmp_path, tls) as (server, client):
        bad = []

        def receive():
            for i in range(rounds):
                tag = server.ctrl_recv(1, timeout=20)
                at = (i % regions) * size
                if tag != i or server.buf.get_bytes(at, size) != bytes([(i * 7 + k) % 251 for k in range(4)]) * (size // 4):
                    bad.append(i)
                server.ctrl_send(1, i)

        t = threading.Thread(target=receive)
        t.start()
        for i in range(rounds):
            if i >= regions:
                assert client.ctrl_recv(0, timeout=20) == i - regions
            at = (i % regions) * size
            data = bytes([(i * 7 + k) % 251 for k in range(4)]) * (size // 4)
            if i % 2:
                client.buf.put(data, at)
                client.put_remote("127.0.0.1", None, at, at, size, notify=i)
            else:
                assert client.put("127.0.0.1", data, at, notify=i) == size
        t.join()
        for _ in range(regions):
            client.ctrl_recv(0, timeout=20)
        assert bad == []


def test_bytes_messages_bad_tags_and_a_lost_peer_are_typed(tmp_path):
    with pair(tmp_path, "shm") as (server, client):
        client.put("127.0.0.1", b"payload", 0, notify=b"ready")
        assert server.ctrl_recv(1, timeout=20) == b"ready"
        assert server.buf.get_bytes(0, 7) == b"payload"
        with pytest.raises(hmc.InvalidArgumentError):
            client.put("127.0.0.1", b"x", 0, notify=-1)
        with pytest.raises(hmc.InvalidArgumentError):
            client.put("127.0.0.1", b"x", 0, notify=2 ** 64)
        server.close()
        with pytest.raises((hmc.PeerLostError, hmc.NotConnectedError)):
            for _ in range(200):  # until the client has seen the loss
                client.put_remote("127.0.0.1", None, 0, 0, 8, notify=1)


def test_asyncio_put_with_notify(tmp_path):
    async def main():
        async with async_pair(tmp_path) as (server, client):
            for i in range(50):
                payload = os.urandom(4096)
                await client.put("127.0.0.1", payload, 0, notify=i)
                assert await asyncio.to_thread(server.ctrl_recv, 1, 20) == i
                assert server.buf.get_bytes(0, 4096) == payload
                await client.put_remote("127.0.0.1", None, 0, 8192, 4096, notify=1000 + i)
                assert await asyncio.to_thread(server.ctrl_recv, 1, 20) == 1000 + i
                assert server.buf.get_bytes(8192, 4096) == payload

    asyncio.run(main())


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_a_batch_of_scattered_blocks_is_whole_when_its_tag_arrives(tmp_path, tls):
    import numpy as np

    block, blocks, rounds = 4096, 64, 40
    order = np.random.default_rng(3).permutation(blocks)
    with pair(tmp_path, tls) as (server, client):
        for i in range(rounds):
            region = (i % 2) * MiB
            data = os.urandom(blocks * block)
            client.buf.put(data, region)
            table = np.stack([region + np.arange(blocks) * block, region + order * block, np.full(blocks, block)], axis=1)
            if i % 2:
                client.put_batch(0, table, notify=i)
            else:
                client.put_batch(0, [tuple(int(v) for v in row) for row in table], notify=b"round %d" % i)
            assert server.ctrl_recv(1, timeout=20) == (i if i % 2 else b"round %d" % i)
            got = server.buf.get_bytes(region, blocks * block)
            for b in range(blocks):
                d = int(order[b])
                assert got[d * block:(d + 1) * block] == data[b * block:(b + 1) * block], f"round {i}, block {b}"
        with pytest.raises(hmc.InvalidArgumentError):
            client.put_batch(0, [(0, 0, 8)], notify=-1)


def test_asyncio_batch_with_notify(tmp_path):
    import numpy as np

    async def main():
        async with async_pair(tmp_path) as (server, client):
            for i in range(20):
                payload = os.urandom(8 * 4096)
                client.buf.put(payload, 0)
                table = np.array([(b * 4096, (7 - b) * 4096 + MiB, 4096) for b in range(8)])
                await client.put_batch(0, table, notify=i)
                assert await asyncio.to_thread(server.ctrl_recv, 1, 20) == i
                got = server.buf.get_bytes(MiB, 8 * 4096)
                assert all(got[(7 - b) * 4096:(8 - b) * 4096] == payload[b * 4096:(b + 1) * 4096] for b in range(8))

    asyncio.run(main())
