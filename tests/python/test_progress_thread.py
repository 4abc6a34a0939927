"""progress_thread: 'caller' (no HMC thread: asyncio or the blocking caller drives the session) and
'own' (a dedicated C++ loop thread), against a peer process and between two sessions of one loop.
Every wait is bounded (asyncio.wait_for, thread joins with a timeout)."""
import asyncio
import os
import select
import threading
import time

import pytest

import hmc
from conftest import PassCounter, acommand, command, session_kwargs
from patterns import pattern, sha

MiB = 1 << 20
BOUND = 60  # seconds: no test step may take longer; a hang fails instead of stalling the suite


def threads():
    """The ids of this process's threads other than UCX's own ('async'). Ids, not a count: a thread
    of an earlier test that ends meanwhile must not cancel out one that starts."""
    tids = set()
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                if f.read().strip() != "async":
                    tids.add(t)
        except FileNotFoundError:  # ended meanwhile
            pass
    return tids


def run(server, tls, body, progress_thread="caller", **extra):
    async def main():
        async with hmc.AsyncSession(**session_kwargs(tls, server.uds_dir, **extra),
                                    progress_thread=progress_thread) as c:
            assert await asyncio.wait_for(c.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port), BOUND) == 0
            try:
                await asyncio.wait_for(body(c), BOUND)
            finally:
                if server.proc.poll() is None:
                    await asyncio.wait_for(acommand(c, op="exit"), BOUND)

    asyncio.run(main())


@pytest.mark.parametrize("progress_thread", ["caller", "own"])
def test_asyncio_put_get_and_tags_thousand_times(server, tls, progress_thread):
    async def body(c):
        assert c.progress_thread == progress_thread
        blocks = [pattern(8, i) for i in range(1000)]
        for i in range(1000):  # one in flight at a time: the latency path
            assert await c.put(0, blocks[i], bias=i * 8) == 8
        assert (await acommand(c, op="sha", offset=0, nbytes=8000)).decode() == sha(b"".join(blocks))
        for i in range(0, 1000, 100):
            assert await c.get(0, 8, bias=i * 8) == blocks[i]
        for seed in range(20):  # put + tag round trips, the peer answers each tag
            assert await acommand(c, op="fill", offset=MiB, nbytes=64, seed=seed) == b"ok"
            assert await c.get(0, 64, bias=MiB) == pattern(64, seed)

    run(server, tls, body, progress_thread=progress_thread)


def test_in_thread_asyncio_session_starts_no_thread(tls):
    async def main():
        before = threads()
        async with hmc.AsyncSession(**session_kwargs(tls, ""), progress_thread="caller") as s:
            assert s.progress_thread == "caller"
            in_thread = threads()
            assert not in_thread - before, "an in-thread AsyncSession runs no HMC loop thread"
            assert isinstance(s.wakeup_fd(), int)
            own = hmc.AsyncSession(**session_kwargs(tls, ""), progress_thread="own")
            try:
                assert threads() - in_thread, "progress_thread='own' runs the loop on its own thread"
                with pytest.raises(hmc.InvalidArgumentError):
                    own.wakeup_fd()
            finally:
                await asyncio.wait_for(own.close(), BOUND)

    asyncio.run(main())


def test_bad_progress_thread_is_refused():
    with pytest.raises(hmc.InvalidArgumentError, match="progress_thread"):
        hmc.create_session(buffer_size=1 << 20, progress_thread="mine")


@pytest.mark.parametrize("progress_thread", ["caller", "own"])
def test_close_while_awaiting_fails_the_awaiters(server, tls, progress_thread):
    async def main():
        c = hmc.AsyncSession(**session_kwargs(tls, server.uds_dir), progress_thread=progress_thread)
        assert await asyncio.wait_for(c.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port), BOUND) == 0
        recv = asyncio.ensure_future(c.ctrl_recv(0, timeout=BOUND))  # nobody answers it
        await asyncio.sleep(0.05)
        await asyncio.wait_for(c.close(), BOUND)
        with pytest.raises((hmc.ClosedError, hmc.PeerLostError, asyncio.CancelledError)):
            await asyncio.wait_for(recv, BOUND)
        with pytest.raises(hmc.ClosedError):
            await c.put(0, b"x")

    asyncio.run(main())


@pytest.mark.parametrize("progress_thread", ["caller", "own"])
def test_peer_killed_while_awaiting_is_a_typed_error(server, tls, progress_thread):
    async def main():
        async with hmc.AsyncSession(**session_kwargs(tls, server.uds_dir), progress_thread=progress_thread) as c:
            assert await asyncio.wait_for(c.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port), BOUND) == 0
            recv = asyncio.ensure_future(c.ctrl_recv(0, timeout=BOUND))
            await asyncio.sleep(0.05)
            server.kill()
            with pytest.raises(hmc.HMCError) as err:
                await asyncio.wait_for(recv, BOUND)
            assert not isinstance(err.value, hmc.TimeoutError), "the loss is seen, not waited out"

    asyncio.run(main())


def test_cancelled_receive_is_withdrawn_while_asyncio_drives(server, tls):
    async def body(c):
        task = asyncio.ensure_future(c.ctrl_recv(0, timeout=BOUND))
        await asyncio.sleep(0.05)
        task.cancel()  # the withdrawal is posted to the loop: the wakeup fd must tell asyncio
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.wait_for(acommand(c, op="fill", offset=0, nbytes=8, seed=4), BOUND) == b"ok"

    run(server, tls, body)


def test_two_sessions_on_one_event_loop_serve_each_other(tls, tmp_path):
    """Server and client both in-thread on one asyncio loop: the passive side progresses only
    through the loop's readers, the connect runs in the executor and drives the client there."""
    async def main():
        kw = session_kwargs(tls, str(tmp_path))
        async with hmc.AsyncSession(**kw) as server, hmc.AsyncSession(**kw) as client:
            await asyncio.wait_for(server.init_server("127.0.0.1", 18600, 0, 0, 0), BOUND)
            assert await asyncio.wait_for(client.connect(0, 1, "127.0.0.1", 18600, server.ctrl_port), BOUND) == 0
            await asyncio.wait_for(server.wait_peer(1, timeout=BOUND), BOUND)
            for i in range(200):
                data = pattern(64, i)
                await asyncio.wait_for(client.put(0, data, bias=i * 64), BOUND)
                await asyncio.wait_for(client.ctrl_send(0, i), BOUND)
                assert await asyncio.wait_for(server.ctrl_recv(1), BOUND) == i
                assert server.buf.get_bytes(i * 64, 64) == data  # the data is there before its tag
            await asyncio.wait_for(server.put(1, b"from the server", bias=MiB), BOUND)
            assert client.buf.get_bytes(MiB, 15) == b"from the server"

    asyncio.run(main())


def test_blocking_caller_driven_session_from_four_threads(server, tls):
    """Four threads on one caller-driven session: one drives at a time, the others sleep until
    their own operation is done; every thread sees its own data."""
    with hmc.create_session(**session_kwargs(tls, server.uds_dir), progress_thread="caller") as s:
        assert s.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port) == 0
        errors = []

        def worker(k):
            try:
                for i in range(100):
                    off = (k * 100 + i) * 256
                    data = pattern(256, off)
                    s.buf.put(data, off)
                    s.put_remote("127.0.0.1", 18515, off, off + 8 * MiB, 256)
                    s.get_remote("127.0.0.1", 18515, off + 16 * MiB, off + 8 * MiB, 256)
                    assert s.buf.get_bytes(off + 16 * MiB, 256) == data
            except Exception as e:  # noqa: BLE001 - reported by the main thread
                errors.append(e)

        workers = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(BOUND)
        assert not any(t.is_alive() for t in workers), "a waiting thread hung"
        assert errors == []
        assert command(s, op="sha", offset=8 * MiB, nbytes=400 * 256).decode() == \
            sha(b"".join(pattern(256, j * 256) for j in range(400)))
        command(s, op="exit")


def test_blocking_caller_driven_progress_and_futures(server, tls):
    with hmc.create_session(**session_kwargs(tls, server.uds_dir), progress_thread="caller") as s:
        assert s.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port) == 0
        s.buf.put(pattern(MiB, 3), 0)
        futs = [s.put_nb("127.0.0.1", 18515, i * 4096, i * 4096, 4096) for i in range(32)]
        s.wait(futs, timeout=BOUND)  # waiting drives the session
        assert command(s, op="sha", offset=0, nbytes=32 * 4096).decode() == sha(pattern(MiB, 3)[:32 * 4096])
        f = s.put_nb("127.0.0.1", 18515, 0, 0, 8)
        # Explicit progress, never blocking, bounded by time: over tcp the put needs the peer process,
        # which a loaded machine may not run for a while (a count of passes failed in CI).
        deadline = time.monotonic() + BOUND
        while not f.done() and time.monotonic() < deadline:
            s.progress()
        assert f.done() and f.result(0) is None
        command(s, op="exit")


def test_caller_session_polls_again_by_call_soon_not_by_its_wakeup_fd(tmp_path):
    """A progress pass that wants another at once (poll mode: every pass) asks asyncio's call_soon
    on the loop's own thread: the wakeup fd is left for real events (before: one eventfd write per
    operation and a read in the next pass). Progress goes on meanwhile: a tag from the peer lands."""
    kw = dict(buffer_size=1 << 20, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path),
              heartbeat_interval=0)

    async def main():
        with hmc.create_session(**kw) as server:
            server.init_server("127.0.0.1", 0)
            async with hmc.AsyncSession(**kw, progress_mode="poll", progress_thread="caller") as c:
                await asyncio.wait_for(c.connect("127.0.0.1", server.ctrl_port), BOUND)
                fd = c.wakeup_fd()
                for i in range(50):
                    await c.put_remote(0, None, 0, 0, 8)
                    await c.ctrl_send(0, i)
                    assert select.select([fd], [], [], 0)[0] == [], f"wakeup fd readable after operation {i}"
                for i in range(50):
                    assert await asyncio.to_thread(server.ctrl_recv, 1, BOUND) == i
                await asyncio.to_thread(server.ctrl_send, 1, 77)
                assert await asyncio.wait_for(c.ctrl_recv(0), BOUND) == 77

    asyncio.run(main())


def test_idle_caller_session_stops_asking_for_progress(tmp_path):
    """Passes scheduled with call_soon end with the adaptive spin: an idle session is not polled in
    a loop (counted passes, not time: a busy loop would make hundreds of thousands in the pause)."""
    kw = dict(buffer_size=1 << 20, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path),
              heartbeat_interval=0)

    async def main():
        with hmc.create_session(**kw) as server:
            server.init_server("127.0.0.1", 0)
            async with hmc.AsyncSession(**kw, progress_thread="caller") as c:
                await asyncio.wait_for(c.connect("127.0.0.1", server.ctrl_port), BOUND)
                for _ in range(200):
                    await c.put_remote(0, None, 0, 0, 8)
                await asyncio.sleep(0.1)  # the spin after the last activity ends (at most 100 us of it)
                passes = PassCounter(c)
                await asyncio.sleep(0.3)
                assert passes.n < 1000, f"{passes.n} progress passes while idle"

    asyncio.run(main())


@pytest.mark.parametrize("progress_thread", ["caller", "own"])
def test_receives_done_inside_their_call_keep_the_order_and_survive_cancels(tmp_path, progress_thread):
    """A ctrl_recv whose message is already there completes inside its call (no asyncio future);
    mixed with receives that wait and with cancelled ones, every message arrives once, in order."""
    kw = dict(buffer_size=1 << 20, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path))

    async def main():
        with hmc.create_session(**kw) as server:
            server.init_server("127.0.0.1", 0)
            async with hmc.AsyncSession(**kw, progress_thread=progress_thread) as c:
                await asyncio.wait_for(c.connect("127.0.0.1", server.ctrl_port), BOUND)
                sent = 300
                sender = asyncio.ensure_future(asyncio.to_thread(lambda: [server.ctrl_send(1, i) for i in range(sent)]))
                got, i = [], 0
                while len(got) < sent:
                    i += 1
                    if i % 5 == 0:  # started, then cancelled at once: whatever it took goes to the next one
                        t = asyncio.ensure_future(c.ctrl_recv(0, timeout=BOUND))
                        await asyncio.sleep(0)
                        t.cancel()
                        await asyncio.wait({t})
                        if not t.cancelled():
                            got.append(t.result())
                        continue
                    if i % 3 == 0:
                        await asyncio.sleep(0.001)  # let messages pile up: the next receives find theirs there
                    if i % 7 == 0 and len(got) + 2 <= sent:  # two waiting at once
                        got.extend(await asyncio.gather(c.ctrl_recv(0, timeout=BOUND), c.ctrl_recv(0, timeout=BOUND)))
                    else:
                        got.append(await c.ctrl_recv(0, timeout=BOUND))
                assert got == list(range(sent))
                assert not c._pending
                await sender

    asyncio.run(asyncio.wait_for(main(), BOUND))


def test_explicit_progress_on_an_asyncio_session_settles_what_it_completes(tmp_path):
    """sess.progress() called by the user on the loop's thread completes a waiting receive: its
    awaiter is settled (before, the completion's id was taken by progress() and dropped: a hang)."""
    kw = dict(buffer_size=1 << 20, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path))

    async def main():
        with hmc.create_session(**kw) as server:
            server.init_server("127.0.0.1", 0)
            async with hmc.AsyncSession(**kw, progress_thread="caller") as c:
                await asyncio.wait_for(c.connect("127.0.0.1", server.ctrl_port), BOUND)
                await asyncio.to_thread(server.wait_peer, 1, BOUND)
                recv = asyncio.ensure_future(c.ctrl_recv(0, timeout=BOUND))
                await asyncio.sleep(0)  # the receive is submitted and waits
                sender = threading.Timer(0.1, server.ctrl_send, (1, 42))
                sender.start()
                end = time.monotonic() + 1.0
                while time.monotonic() < end:  # only explicit progress: the loop gets no turn
                    c.progress()
                sender.join(BOUND)
                assert await asyncio.wait_for(recv, 10) == 42

    asyncio.run(main())
