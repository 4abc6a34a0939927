"""AsyncSession against a peer process: concurrency, timeouts, cancellation."""
import asyncio
import time

import numpy as np
import pytest

import hmc
from conftest import PassCounter, acommand, session_kwargs
from patterns import pattern, sha

MiB = 1 << 20


def run(server, tls, body, **extra):
    async def main():
        async with hmc.AsyncSession(**session_kwargs(tls, server.uds_dir, **extra)) as c:
            assert await c.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port) == 0
            try:
                await body(c)
            finally:
                if server.proc.poll() is None:
                    await acommand(c, op="exit")

    asyncio.run(main())


def test_thousand_concurrent_awaited_puts(server, tls):
    async def body(c):
        blocks = [pattern(1024, i) for i in range(1000)]
        sizes = await asyncio.gather(*(c.put(0, blocks[i], bias=i * 1024) for i in range(1000)))
        assert sizes == [1024] * 1000
        assert (await acommand(c, op="sha", offset=0, nbytes=1000 * 1024)).decode() == sha(b"".join(blocks))

    run(server, tls, body)


def test_wait_for_timeout_on_ctrl_recv_loses_no_message(server, tls):
    async def body(c):
        t0 = time.monotonic()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(c.ctrl_recv(0), 0.05)
        assert time.monotonic() - t0 < 2
        # Replies after the timeout still arrive, in order, to the next receives.
        for seed in range(5):
            assert await acommand(c, op="fill", offset=0, nbytes=16, seed=seed) == b"ok"
        with pytest.raises(hmc.TimeoutError):
            await c.ctrl_recv(0, timeout=0.05)

    run(server, tls, body)


@pytest.mark.parametrize("progress_thread", ["caller", "own"])
def test_a_receive_cancelled_at_any_point_loses_and_reorders_nothing(tmp_path, progress_thread):
    """ctrl_recv awaits its operation's future directly (no shield): a cancel before the message, or
    after the message was taken but before the task resumed, hands the message to the next receive."""
    kw = dict(buffer_size=1 << 20, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path))

    async def main():
        with hmc.create_session(**kw) as server:
            server.init_server("127.0.0.1", 0)
            async with hmc.AsyncSession(**kw, progress_thread=progress_thread) as c:
                await asyncio.wait_for(c.connect("127.0.0.1", server.ctrl_port), 20)
                # Taken but not resumed: the message is settled while the task still waits for its turn.
                t = asyncio.ensure_future(c.ctrl_recv(0, timeout=20))
                await asyncio.sleep(0)
                server.ctrl_send(1, 7)
                for _ in range(100_000):
                    if not c._pending:
                        break
                    await asyncio.sleep(0)
                assert not t.done()
                t.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await t
                assert await c.ctrl_recv(0, timeout=20) == 7
                # Cancelled before the message, many times, racing with its arrival.
                sent = 200
                sender = asyncio.ensure_future(asyncio.to_thread(lambda: [server.ctrl_send(1, i) for i in range(sent)]))
                got = []
                for i in range(2 * sent):
                    t = asyncio.ensure_future(c.ctrl_recv(0, timeout=20))
                    for _ in range(i % 4):  # 0: cancelled before it starts; 1-3: while it waits or lands
                        await asyncio.sleep(0)
                    t.cancel()
                    await asyncio.wait({t})
                    if not t.cancelled():
                        got.append(t.result())
                while len(got) < sent:
                    got.append(await c.ctrl_recv(0, timeout=20))
                assert got == list(range(sent))
                # The last cancelled receive leaves _pending once the loop thread has seen its cancel:
                # with progress_thread="own" that news comes back asynchronously.
                for _ in range(5000):
                    if not c._pending:
                        break
                    await asyncio.sleep(0.001)
                assert not c._pending
                await sender

    asyncio.run(asyncio.wait_for(main(), 60))


def test_caller_session_runs_one_pass_per_turn_after_many_round_trips(tmp_path):
    """poll mode: a pass that wants another at once asks call_soon for one, and only that pass ends
    the wait for it. Before, any pass ended it (a receive that waits runs one), so each such receive
    started another chain of passes that re-scheduled itself for good: after n round trips every
    asyncio turn ran about n passes (a 6.5 ms round trip after 2000). Counted passes, not time."""
    kw = dict(buffer_size=1 << 20, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path),
              heartbeat_interval=0)
    rounds, turns = 100, 50

    async def main():
        with hmc.create_session(**kw) as server:
            server.init_server("127.0.0.1", 0)
            async with hmc.AsyncSession(**kw, progress_mode="poll", progress_thread="caller") as c:
                await asyncio.wait_for(c.connect("127.0.0.1", server.ctrl_port), 20)
                echo = asyncio.ensure_future(asyncio.to_thread(
                    lambda: [server.ctrl_send(1, server.ctrl_recv(1, 20)) for _ in range(rounds)]))
                for i in range(rounds):
                    await c.ctrl_send(0, i)
                    assert await c.ctrl_recv(0, timeout=20) == i  # most wait: their pass runs in _track
                await asyncio.wait_for(echo, 20)
                passes = PassCounter(c)
                await asyncio.sleep(0)
                passes.n = 0
                for _ in range(turns):
                    await asyncio.sleep(0)
                assert passes.n <= 3 * turns, f"{passes.n} progress passes in {turns} asyncio turns"

    asyncio.run(asyncio.wait_for(main(), 60))


def test_cancelled_transfers_neither_corrupt_nor_leak(server, tls):
    async def body(c):
        big = 32 * MiB
        c.buf.put(pattern(big, 1), 0)
        tasks = [asyncio.ensure_future(c.put_remote("127.0.0.1", 18515, 0, 0, big)) for _ in range(4)]
        tasks += [asyncio.ensure_future(c.get_remote("127.0.0.1", 18515, 40 * MiB, 40 * MiB, big)) for _ in range(4)]
        await asyncio.sleep(0)
        for t in tasks:
            t.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) or r is None for r in results)
        for _ in range(200):  # the transfers finish in the background; their results are dropped
            if not c._pending:
                break
            await asyncio.sleep(0.05)
        assert not c._pending, "completed operations must not stay registered"
        # Later transfers see exactly their own data.
        fresh = pattern(big, 2)
        c.buf.put(fresh, 0)
        await c.put_remote("127.0.0.1", 18515, 0, 0, big)
        assert (await acommand(c, op="sha", offset=0, nbytes=big)).decode() == sha(fresh)
        assert await acommand(c, op="fill", offset=MiB, nbytes=MiB, seed=3) == b"ok"
        assert await c.get(0, MiB, bias=MiB) == pattern(MiB, 3)

    run(server, tls, body)


def test_future_is_awaitable_and_has_the_blocking_api(server, tls):
    async def body(c):
        c.buf.put(b"abc" * 100, 0)
        fired = []
        f = c.put_nb("127.0.0.1", 18515, 0, 0, 300)
        f.add_done_callback(fired.append)
        assert await f is None
        assert f.done()
        await asyncio.sleep(0)
        assert fired == [f]
        futs = [c.get_nb("127.0.0.1", 18515, 1000 + i * 300, 0, 300) for i in range(10)]
        await c.wait(futs, timeout=30)
        dest = np.zeros(300, np.uint8)
        assert await c.get_into(0, dest) == 300
        assert dest.tobytes() == b"abc" * 100

    run(server, tls, body)


def test_pipeline_and_batch_from_asyncio(server, tls):
    async def body(c):
        n = 3 * MiB + 5
        c.buf.put(pattern(n, 8), 0)
        await c.put_pipeline(0, 0, 20 * MiB, n, chunk=MiB // 2, max_inflight=4)
        assert (await acommand(c, op="sha", offset=20 * MiB, nbytes=n)).decode() == sha(pattern(n, 8))
        await c.get_batch(0, [(30 * MiB, 20 * MiB, 100), (30 * MiB + 100, 20 * MiB + 100, n - 100)])
        assert c.buf.get_bytes(30 * MiB, n) == pattern(n, 8)
        # The same as an array, in reverse order: the halves swap places.
        await c.get_batch(0, np.array([(40 * MiB + n - 100, 20 * MiB, 100), (40 * MiB, 20 * MiB + 100, n - 100)]))
        assert c.buf.get_bytes(40 * MiB, n) == pattern(n, 8)[100:] + pattern(n, 8)[:100]

    run(server, tls, body)
