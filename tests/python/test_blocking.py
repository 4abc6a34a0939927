"""The reference API in blocking style against a peer process: payload types round trip."""
import threading
import time

import numpy as np
import pytest
import torch

import hmc
from conftest import command
from patterns import pattern, sha

MiB = 1 << 20


def remote_sha(client, offset, nbytes):
    return command(client, op="sha", offset=offset, nbytes=nbytes).decode()


def test_bytes_numpy_and_torch_round_trip(client):
    data = pattern(MiB, 1)
    assert client.put("127.0.0.1", data) == MiB
    assert remote_sha(client, 0, MiB) == sha(data)

    arr = np.random.default_rng(2).standard_normal(100_000).astype(np.float32)
    assert client.put(0, arr, bias=2 * MiB) == arr.nbytes
    assert remote_sha(client, 2 * MiB, arr.nbytes) == sha(arr.tobytes())

    strided = np.arange(20_000, dtype=np.int64).reshape(100, 200)[:, ::2]  # non-contiguous: copied
    n = client.put(("127.0.0.1", 18515), strided, bias=3 * MiB)
    assert remote_sha(client, 3 * MiB, n) == sha(np.ascontiguousarray(strided).tobytes())

    t = torch.arange(50_000, dtype=torch.float64)
    client.put("127.0.0.1:18515", t, bias=4 * MiB)
    assert remote_sha(client, 4 * MiB, t.numel() * 8) == sha(t.numpy().tobytes())

    assert command(client, op="fill", offset=5 * MiB, nbytes=MiB, seed=9) == b"ok"
    expected = pattern(MiB, 9)
    assert client.get("127.0.0.1", MiB, bias=5 * MiB) == expected
    dest = np.empty(MiB, np.uint8)
    assert client.get_into(0, dest, bias=5 * MiB) == MiB
    assert dest.tobytes() == expected
    tdest = torch.empty(MiB // 4, dtype=torch.int32)
    client.get_into(0, tdest, bias=5 * MiB)
    assert tdest.numpy().tobytes() == expected
    ba = bytearray(1000)
    client.get_into(0, memoryview(ba), bias=5 * MiB)
    assert bytes(ba) == expected[:1000]


def test_registered_arrays_and_tensors_transfer_without_staging(client):
    src = np.frombuffer(pattern(2 * MiB, 5), np.uint8).copy()
    with client.register(src) as reg:
        client.put(0, reg, bias=6 * MiB)
    assert remote_sha(client, 6 * MiB, src.nbytes) == sha(src.tobytes())
    dst = torch.zeros(2 * MiB, dtype=torch.uint8)
    with client.register(dst) as reg:
        client.get_into(0, reg, bias=6 * MiB)
    assert dst.numpy().tobytes() == src.tobytes()
    # The session buffer was not the path: its region is untouched.
    assert client.buf.get_bytes(6 * MiB, 16) == bytes(16)


def test_put_nb_get_nb_and_wait(client):
    blocks = [pattern(64 << 10, i) for i in range(16)]
    for i, b in enumerate(blocks):
        client.buf.put(b, i * (64 << 10))
    futs = [client.put_nb("127.0.0.1", 18515, i * (64 << 10), i * (64 << 10), 64 << 10) for i in range(16)]
    client.wait(futs, timeout=30)
    assert all(f.done() for f in futs)
    assert remote_sha(client, 0, 16 * (64 << 10)) == sha(b"".join(blocks))
    fired, ran = [], threading.Event()
    f = client.get_nb("127.0.0.1", 18515, 8 * MiB, 0, 64 << 10)
    f.add_done_callback(lambda fut: (fired.append(fut), ran.set()))
    assert f.result(timeout=30) is None
    assert ran.wait(30) and fired == [f]
    assert client.buf.get_bytes(8 * MiB, 64 << 10) == blocks[0]


def test_batch_and_pipeline(client):
    segs = [(i * 10_000, 7 * MiB + i * 20_000, 1000 + i * 311) for i in range(20)]
    for i, (l, _, n) in enumerate(segs):
        client.buf.put(pattern(n, 100 + i), l)
    client.put_batch(0, segs)
    for i, (_, r, n) in enumerate(segs):
        assert remote_sha(client, r, n) == sha(pattern(n, 100 + i))
    n = 5 * MiB + 17
    client.buf.put(pattern(n, 7), 0)
    client.put_pipeline(0, 0, 10 * MiB, n, chunk=MiB, max_inflight=3)
    assert remote_sha(client, 10 * MiB, n) == sha(pattern(n, 7))


def test_batch_segments_as_arrays(client):
    rows = [(i * 10_000, 9 * MiB + i * 20_000, 1000 + i * 311) for i in range(20)]
    wide = np.zeros((20, 4), dtype=np.int64)
    wide[:, :3] = rows
    forms = {"int64": np.array(rows, dtype=np.int64), "uint32": np.array(rows, dtype=np.uint32),
             "strided view": wide[:, :3], "torch": torch.tensor(rows)}
    for k, (form, segs) in enumerate(forms.items()):
        for i, (l, _, n) in enumerate(rows):
            client.buf.put(pattern(n, 1000 * k + i), l)
        client.put_batch(0, segs)
        for i, (_, r, n) in enumerate(rows):
            assert remote_sha(client, r, n) == sha(pattern(n, 1000 * k + i)), f"{form}: segment {i}"


def test_a_block_table_of_neighbouring_and_scattered_blocks(client):
    # 4 KiB blocks: runs that continue on both sides (coalesced into one transfer) and a shuffle.
    block = 4096
    src = np.arange(64, dtype=np.int64)
    dst = np.concatenate([np.arange(16), np.random.default_rng(5).permutation(np.arange(16, 64))])
    table = np.stack([src * block, 12 * MiB + dst * block, np.full(64, block)], axis=1)
    data = pattern(64 * block, 77)
    client.buf.put(data, 0)
    client.put_batch(0, table)
    for s, d in zip(src, dst):
        assert remote_sha(client, 12 * MiB + int(d) * block, block) == sha(data[s * block:(s + 1) * block])
    client.buf.put(bytes(64 * block), 0)
    client.get_batch(0, table)
    assert bytes(client.buf.get_bytes(0, 64 * block)) == data


def test_blocking_calls_release_the_gil(client):
    errors = []

    def blocked():
        try:
            client.ctrl_recv(0, timeout=0.5)
        except hmc.TimeoutError as e:
            errors.append(e)

    t = threading.Thread(target=blocked)
    t.start()
    spins, end = 0, time.monotonic() + 0.3
    while time.monotonic() < end:
        spins += 1
    t.join()
    assert len(errors) == 1
    assert spins > 10_000, "the main thread could not run while another waited in ctrl_recv"
