"""KV layouts and block transfers by id (put_blocks / get_blocks / exchange_layout), blocking and
asyncio, over real UCX: every block lands where its id says, ids are checked before anything is
sent, and a notify never overtakes the blocks it announces."""
import asyncio
import contextlib
import threading

import numpy as np
import pytest

import hmc

MiB = 1 << 20
BLOCK, BLOCKS = 4096, 64


def kwargs(tmp_path, tls):
    return dict(buffer_size=4 * MiB, ucx_tls=tls, ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path))


@contextlib.contextmanager
def pair(tmp_path, tls):
    with hmc.create_session(**kwargs(tmp_path, tls)) as server, hmc.create_session(**kwargs(tmp_path, tls)) as client:
        server.init_server("127.0.0.1", 0)
        client.connect("127.0.0.1", server.ctrl_port)
        yield server, client


def local_layout():
    """K and V of two layers, one region each."""
    return hmc.KvLayout([(r * BLOCKS * BLOCK, BLOCK, BLOCKS) for r in range(4)])


def remote_layout():
    """The same shape at other offsets, layer 1's K and V interleaved (stride two blocks)."""
    base = 2 * MiB
    return hmc.KvLayout([(base, BLOCK, BLOCKS), (base + BLOCKS * BLOCK, BLOCK, BLOCKS),
                         (base + 2 * BLOCKS * BLOCK, BLOCK, BLOCKS, 2 * BLOCK),
                         (base + 2 * BLOCKS * BLOCK + BLOCK, BLOCK, BLOCKS, 2 * BLOCK)])


def at(layout, region, block):
    offset, _, _, stride = layout.regions[region]
    return offset + block * stride


def block(region, i, seed=0):
    return bytes([(region * 31 + i * 7 + seed + k) % 251 for k in range(8)]) * (BLOCK // 8)


def fill(sess, layout, seed=0):
    for r in range(4):
        for i in range(BLOCKS):
            sess.buf.put(block(r, i, seed), at(layout, r, i))


def test_a_layout_refuses_regions_that_cannot_hold_blocks_and_round_trips_as_bytes():
    for bad in ([], [(0, 0, 4)], [(0, 16, 0)], [(0, 16, 4, 8)], [(0, 16)], [(0, 16, 4, 16, 1)], [(-1, 16, 4)],
                [(0, True, 4)], [(0, "16", 4)], ["abc"], [(2 ** 64 - 8, 16, 1)]):
        with pytest.raises(hmc.InvalidArgumentError):
            hmc.KvLayout(bad)
    layout = remote_layout()
    assert layout.regions[2] == (2 * MiB + 2 * BLOCKS * BLOCK, BLOCK, BLOCKS, 2 * BLOCK)
    assert hmc.KvLayout([(8, 16, 4)]).regions == [(8, 16, 4, 16)]  # stride defaults to the block size
    assert hmc.KvLayout.from_bytes(layout.to_bytes()) == layout
    assert not hmc.KvLayout.from_bytes(local_layout().to_bytes()) == layout
    for junk in (b"", b"HMCKVL1\0", layout.to_bytes()[:-1], b"x" * 44):
        with pytest.raises(hmc.InvalidArgumentError):
            hmc.KvLayout.from_bytes(junk)


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_blocks_land_where_their_ids_say_and_come_back(tmp_path, tls):
    rng = np.random.default_rng(3)
    src = np.arange(5, 5 + BLOCKS // 2, dtype=np.int64)
    dst = rng.permutation(BLOCKS)[:BLOCKS // 2]
    with pair(tmp_path, tls) as (server, client):
        lo, ro = local_layout(), remote_layout()
        fill(client, lo)
        fill(server, ro, seed=100)
        client.put_blocks(0, lo, src, dst, remote_layout=ro)
        for r in range(4):
            for s, d in zip(src, dst):
                assert server.buf.get_bytes(at(ro, r, d), BLOCK) == block(r, s), (r, s, d)
            for d in set(range(BLOCKS)) - set(dst.tolist()):
                assert server.buf.get_bytes(at(ro, r, d), BLOCK) == block(r, d, seed=100), (r, d)
        back = list(range(BLOCKS - len(src), BLOCKS))  # a list works as well as an array
        client.get_blocks(0, lo, dst.astype(np.uint32), back, remote_layout=ro)
        for r in range(4):
            for s, b in zip(src, back):
                assert client.buf.get_bytes(at(lo, r, b), BLOCK) == block(r, s), (r, s, b)


def test_ids_past_either_layout_bad_arrays_and_layouts_send_nothing(tmp_path):
    with pair(tmp_path, "shm") as (server, client):
        lo, ro = local_layout(), remote_layout()
        server.buf.put(b"\x05" * BLOCK, at(ro, 0, 0))
        client.buf.put(b"\x06" * BLOCK, 0)
        with pytest.raises(hmc.InvalidArgumentError, match=r"dst_ids\[1\] = 64"):
            client.put_blocks(0, lo, [0, 1], np.array([0, BLOCKS]), remote_layout=ro)
        with pytest.raises(hmc.InvalidArgumentError, match=r"src_ids\[0\] = 64"):
            client.put_blocks(0, lo, [BLOCKS], [0], remote_layout=ro, notify=1)
        for bad_ids in (np.array([0, -1]), [0, -1], np.zeros((2, 1), dtype=np.int64), np.array([0.0, 1.0]), "01",
                        [0, "1"], [2 ** 64], 7):
            with pytest.raises(hmc.InvalidArgumentError):
                client.put_blocks(0, lo, bad_ids, [0, 1], remote_layout=ro)
        with pytest.raises(hmc.InvalidArgumentError):
            client.put_blocks(0, lo, [0, 1], [0], remote_layout=ro)
        with pytest.raises(hmc.InvalidArgumentError):
            client.put_blocks(0, lo, [0], [0], remote_layout=hmc.KvLayout([(0, BLOCK, BLOCKS)]))
        with pytest.raises(hmc.InvalidArgumentError):
            client.put_blocks(0, [(0, BLOCK, BLOCKS)], [0], [0])
        with pytest.raises(hmc.OutOfRangeError):  # a layout past the peer's buffer: the batch's own check
            client.put_blocks(0, hmc.KvLayout([(0, BLOCK, 2)]), [0], [1],
                              remote_layout=hmc.KvLayout([(4 * MiB - BLOCK, BLOCK, 2)]))
        assert server.buf.get_bytes(at(ro, 0, 0), BLOCK) == b"\x05" * BLOCK


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_the_notify_of_a_block_transfer_never_overtakes_its_blocks(tmp_path, tls):
    rounds = 30
    ids = np.arange(BLOCKS)
    with pair(tmp_path, tls) as (server, client):
        lo, ro = local_layout(), remote_layout()
        stale = []

        def receive():
            for n in range(rounds):
                if server.ctrl_recv(1, timeout=20) != n:
                    stale.append(("order", n))
                for r in range(4):
                    for i in range(BLOCKS):
                        if server.buf.get_bytes(at(ro, r, BLOCKS - 1 - i), BLOCK) != block(r, i, seed=n):
                            stale.append((n, r, i))
                server.ctrl_send(1, n)

        t = threading.Thread(target=receive)
        t.start()
        for n in range(rounds):
            fill(client, lo, seed=n)
            client.put_blocks(0, lo, ids, ids[::-1], remote_layout=ro, notify=n)
            assert client.ctrl_recv(0, timeout=20) == n  # the receiver checked this round
        t.join()
        assert stale == []


def test_layouts_are_exchanged_and_anything_else_first_is_refused(tmp_path):
    with pair(tmp_path, "shm") as (server, client):
        got = {}
        t = threading.Thread(target=lambda: got.update(server=server.exchange_layout(1, remote_layout(), timeout=20)))
        t.start()
        assert client.exchange_layout(0, local_layout(), timeout=20) == remote_layout()
        t.join()
        assert got["server"] == local_layout()
        server.ctrl_send(1, 42)
        with pytest.raises(hmc.InvalidArgumentError, match="tag 42"):
            client.exchange_layout(0, local_layout(), timeout=20)
        server.ctrl_send(1, b"not a layout")
        with pytest.raises(hmc.InvalidArgumentError):
            client.exchange_layout(0, local_layout(), timeout=20)


def test_asyncio_exchanges_layouts_and_moves_blocks(tmp_path):
    async def main():
        with hmc.create_session(**kwargs(tmp_path, "shm")) as server:
            server.init_server("127.0.0.1", 0)
            async with hmc.AsyncSession(**kwargs(tmp_path, "shm")) as client:
                await client.connect("127.0.0.1", server.ctrl_port)
                lo = local_layout()
                theirs = asyncio.get_running_loop().run_in_executor(None, server.exchange_layout, 1, remote_layout(), 20)
                ro = await client.exchange_layout(0, lo, timeout=20)
                assert await theirs == lo and ro == remote_layout()
                fill(client, lo, seed=9)
                ids = np.arange(BLOCKS, dtype=np.int32)
                await client.put_blocks(0, lo, ids, ids, remote_layout=ro, notify=b"kv")
                assert server.ctrl_recv(1, timeout=20) == b"kv"
                for r in range(4):
                    for i in range(BLOCKS):
                        assert server.buf.get_bytes(at(ro, r, i), BLOCK) == block(r, i, seed=9)
                with pytest.raises(hmc.InvalidArgumentError):
                    await client.get_blocks(0, lo, [BLOCKS], [0], remote_layout=ro)

    asyncio.run(main())


def test_torch_cpu_tensors_are_id_arrays(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    with pair(tmp_path, "shm") as (server, client):
        lo = local_layout()
        fill(client, lo, seed=4)
        client.put_blocks(0, lo, torch.arange(8), torch.arange(8, 16), remote_layout=lo)
        for r in range(4):
            for i in range(8):
                assert server.buf.get_bytes(at(lo, r, 8 + i), BLOCK) == block(r, i, seed=4)


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_wait_notify_takes_its_tag_out_of_order_and_counts(tmp_path, tls):
    with pair(tmp_path, tls) as (server, client):
        lo, ro = local_layout(), remote_layout()
        fill(client, lo, seed=5)
        for k in range(4):  # request k: blocks 16k .. 16k + 15, announced by tag 100 + k
            client.ctrl_send(0, 9000 + k)
            ids = np.arange(16 * k, 16 * k + 16)
            client.put_blocks(0, lo, ids, ids, remote_layout=ro, notify=100 + k)
        for k in reversed(range(4)):
            server.wait_notify(1, 100 + k, timeout=20)
            for r in range(4):
                for i in range(16 * k, 16 * k + 16):
                    assert server.buf.get_bytes(at(ro, r, i), BLOCK) == block(r, i, seed=5), (k, r, i)
        assert [server.ctrl_recv(1, timeout=20) for _ in range(4)] == [9000, 9001, 9002, 9003]
        for _ in range(3):
            client.put_batch(0, [(0, 0, 8)], notify=7)
        server.wait_notify(1, 7, count=3, timeout=20)
        with pytest.raises(hmc.TimeoutError):
            server.wait_notify(1, 7, timeout=0.1)
        for bad in (dict(tag=-1), dict(tag=2 ** 64), dict(tag="7"), dict(tag=7, count=0), dict(tag=7, count=1.5)):
            with pytest.raises(hmc.InvalidArgumentError):
                server.wait_notify(1, timeout=1, **bad)


def test_asyncio_waits_many_notifies_at_once_and_a_lost_peer_fails_them(tmp_path):
    async def main():
        server = hmc.create_session(**kwargs(tmp_path, "shm"))
        server.init_server("127.0.0.1", 0)
        async with hmc.AsyncSession(**kwargs(tmp_path, "shm")) as client:
            await client.connect("127.0.0.1", server.ctrl_port)
            waits = [asyncio.ensure_future(client.wait_notify(0, t, timeout=20)) for t in range(100)]
            await asyncio.sleep(0)
            order = [int(t) for t in np.random.default_rng(5).permutation(100)]
            # From another thread: the blocking server must not stall the loop that drives the client.
            await asyncio.get_running_loop().run_in_executor(None, lambda: [server.ctrl_send(1, t) for t in order])
            await asyncio.gather(*waits)
            pending = [asyncio.ensure_future(client.wait_notify(0, 5000 + t, timeout=20)) for t in range(10)]
            await asyncio.sleep(0.05)
            await asyncio.get_running_loop().run_in_executor(None, server.close)
            for p in pending:
                with pytest.raises(hmc.PeerLostError):
                    await p

    asyncio.run(main())


def test_a_kv_cache_in_a_registered_tensor_moves_zero_copy(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    with pair(tmp_path, "shm") as (server, client):
        cache = torch.empty((4, BLOCKS, BLOCK), dtype=torch.uint8)  # regions x blocks x bytes
        for r in range(4):
            for i in range(BLOCKS):
                cache[r, i] = torch.frombuffer(bytearray(block(r, i, seed=3)), dtype=torch.uint8)
        reg = client.register(cache)
        in_cache = hmc.KvLayout([(r * BLOCKS * BLOCK, BLOCK, BLOCKS) for r in range(4)])  # offsets into `cache`
        ro = remote_layout()
        src, dst = np.array([9, 3, 40]), np.array([0, 63, 17])
        client.put_blocks(0, in_cache, src, dst, remote_layout=ro, memory=reg, notify=5)
        server.wait_notify(1, 5, timeout=20)
        for r in range(4):
            for s, d in zip(src, dst):
                assert server.buf.get_bytes(at(ro, r, d), BLOCK) == block(r, s, seed=3), (r, s, d)
        client.get_blocks(0, in_cache, dst, [60, 61, 62], remote_layout=ro, memory=reg)
        for r in range(4):
            for s, b in zip(src, (60, 61, 62)):
                assert bytes(cache[r, b].numpy()) == block(r, s, seed=3), (r, s, b)
        with pytest.raises(hmc.OutOfRangeError):  # the layout runs past the registered tensor
            client.put_blocks(0, hmc.KvLayout([(r * BLOCKS * BLOCK, BLOCK, BLOCKS + 1) for r in range(4)]), [BLOCKS],
                              [0], remote_layout=ro, memory=reg)
        with pytest.raises(hmc.InvalidArgumentError):
            client.put_blocks(0, in_cache, [0], [0], remote_layout=ro, memory=cache)
        with pytest.raises(hmc.InvalidArgumentError, match=r"src_ids\[0\] = 64"):
            client.put_blocks(0, in_cache, [BLOCKS], [0], remote_layout=ro, memory=reg)
        reg.release()
        with pytest.raises(hmc.HMCError):
            client.put_blocks(0, in_cache, [0], [0], remote_layout=ro, memory=reg)
