"""put_remote / get_remote take one C++ call when every argument is plain (docs/python.md,
"The op path"). Both paths must keep the same promises: the bytes are at the peer when
the call returns (or its await does), a bad argument raises its typed error before anything is
sent, and an operation that is not complete inside the call is awaited the usual way."""
import asyncio

import numpy as np
import pytest

import hmc
from hmc import aio
from conftest import ServerProcess, acommand, command, session_kwargs
from patterns import pattern, sha

MiB = 1 << 20
PORT = 18515  # the peer's data port (peer.py)


@pytest.fixture
def peer(tls):
    s = ServerProcess("blocking", tls)
    yield s
    s.close()


def remote_sha(client, offset, nbytes):
    return command(client, op="sha", offset=offset, nbytes=nbytes).decode()


# Calls with one argument the fast path must not take: each raises, and nothing reaches the peer.
BAD = [
    (lambda s, at: s.put_remote(0, None, True, at, 64), "local_off"),
    (lambda s, at: s.put_remote(0, None, 0, float(at), 64), "remote_off"),
    (lambda s, at: s.put_remote(0, None, -1, at, 64), "local_off"),
    (lambda s, at: s.put_remote(0, None, 2 ** 64, at, 64), "local_off"),
    (lambda s, at: s.put_remote(0, None, 0, at, 0), "nbytes"),
    (lambda s, at: s.put_remote(0, None, 0, at, "64"), "nbytes"),
    (lambda s, at: s.put_remote("127.0.0.1", 70000, 0, at, 64), "port"),
    (lambda s, at: s.put_remote("127.0.0.1", True, 0, at, 64), "port"),
    (lambda s, at: s.put_remote(None, None, 0, at, 64), "peer"),
    (lambda s, at: s.put_remote(-1, None, 0, at, 64), "peer"),
    (lambda s, at: s.put_remote(0, None, 0, at, 64, timeout=-1), "timeout"),
    (lambda s, at: s.get_remote(0, None, 0, at, 2.0), "nbytes"),
]


def test_blocking_put_and_get_land_by_every_calling_form(peer, tls):
    with hmc.create_session(**session_kwargs(tls, peer.uds_dir)) as c:
        assert c.connect(0, 1, "127.0.0.1", PORT, peer.ctrl_port) == 0
        forms = [  # plain: one C++ call; then the forms only the checked path takes
            lambda at, n: c.put_remote(0, None, 0, at, n),
            lambda at, n: c.put_remote("127.0.0.1", PORT, 0, at, n),
            lambda at, n: c.put_remote("127.0.0.1", None, 0, at, n),
            lambda at, n: c.put_remote(np.int64(0), None, np.uint32(0), np.int64(at), np.int32(n)),
            lambda at, n: c.put_remote("127.0.0.1:%d" % PORT, None, 0, at, n),
            lambda at, n: c.put_remote(("127.0.0.1", PORT), None, 0, at, n),
            lambda at, n: c.put_remote(0, None, 0, at, n, timeout=30),
        ]
        for i, put in enumerate(forms):
            data = pattern(4096, i)
            c.buf.put(data, 0)
            assert put(i * 4096, 4096) is None
            assert remote_sha(c, i * 4096, 4096) == sha(data)  # at the peer on return
        gets = [lambda at, n: c.get_remote(0, None, at, at, n),
                lambda at, n: c.get_remote(np.int8(0), None, at, at, n)]
        for i, get in enumerate(gets):
            at = MiB + i * 4096
            assert command(c, op="fill", offset=at, nbytes=4096, seed=50 + i) == b"ok"
            assert get(at, 4096) is None
            assert c.buf.get_bytes(at, 4096) == pattern(4096, 50 + i)

        at = 2 * MiB
        before = remote_sha(c, at, 64)
        c.buf.put(pattern(64, 99), 0)
        for call, name in BAD:
            with pytest.raises(hmc.InvalidArgumentError, match=name):
                call(c, at)
        assert remote_sha(c, at, 64) == before  # nothing was sent
        with pytest.raises(hmc.NotConnectedError):
            c.put_remote("127.0.0.2", None, 0, at, 64)  # no peer there: the checked path says so
        with pytest.raises(hmc.OutOfRangeError):
            c.put_remote(0, None, 0, (80 << 20) - 8, 64)  # past the peer's buffer: refused, not sent
        command(c, op="exit")


def test_asyncio_put_done_inline_or_awaited_lands_at_the_peer(peer, tls):
    async def main():
        async with hmc.AsyncSession(**session_kwargs(tls, peer.uds_dir)) as c:
            assert await c.connect(0, 1, "127.0.0.1", PORT, peer.ctrl_port) == 0
            inline = 0
            for i in range(200):
                c.buf.put(pattern(64, i), i * 64)
                awaitable = c.put_remote(0, None, i * 64, i * 64, 64)
                inline += awaitable.cr_code is aio._completed.__code__
                assert await awaitable is None
            assert await acommand(c, op="sha", offset=0, nbytes=200 * 64) == sha(
                b"".join(pattern(64, i) for i in range(200))).encode()
            if tls == "shm":
                assert inline > 0, "no 64 B shm put completed inside its call"

            big = 32 * MiB  # over tcp far from done inside one progress(): awaited through its future
            c.buf.put(pattern(big, 7), 0)
            awaitable = c.put_remote("127.0.0.1", PORT, 0, 0, big)
            if tls == "tcp":
                assert awaitable.cr_code is not aio._completed.__code__
            await awaitable
            assert await acommand(c, op="sha", offset=0, nbytes=big) == sha(pattern(big, 7)).encode()
            assert await acommand(c, op="fill", offset=big, nbytes=MiB, seed=8) == b"ok"
            await c.get_remote(0, None, big, big, MiB)
            assert c.buf.get_bytes(big, MiB) == pattern(MiB, 8)

            before = await acommand(c, op="sha", offset=0, nbytes=64)
            c.buf.put(pattern(64, 9), 0)
            for call, name in BAD:  # raised at the call, before anything is awaited or sent
                with pytest.raises(hmc.InvalidArgumentError, match=name):
                    call(c, 0)
            failed = c.put_remote(0, None, 0, (80 << 20) - 8, 64)  # refused by the peer's bounds: at await
            with pytest.raises(hmc.OutOfRangeError):
                await failed
            assert await acommand(c, op="sha", offset=0, nbytes=64) == before

            # Cancelled awaits of either kind lose nothing and leave nothing registered.
            tasks = [asyncio.ensure_future(c.put_remote(0, None, 0, 64, 64)) for _ in range(8)]
            tasks.append(asyncio.ensure_future(c.put_remote(0, None, 0, 0, big)))
            await asyncio.sleep(0)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await c.put_remote(0, None, 0, 0, 64)
            for _ in range(200):
                if not c._pending:
                    break
                await asyncio.sleep(0.05)
            assert not c._pending
            assert await acommand(c, op="sha", offset=0, nbytes=64) == sha(pattern(64, 9)).encode()
            await acommand(c, op="exit")

    asyncio.run(main())
