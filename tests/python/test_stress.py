"""Threads sharing one Session: every progress_thread x shm / tcp x 2, 4 and 8 threads, each thread
mixing put, get, put_nb + get_nb + wait, ctrl_send and ctrl_recv on its own region with every byte
checked, then a close while the other threads still call in; and asyncio tasks sharing one
AsyncSession. HMC_MATRIX_ROUNDS sets the rounds per thread (CI: a short form; scripts/test --long:
many). The server is a session with its own thread in this process, so its buffer is read directly."""
import asyncio
import os
import tempfile
import threading
import shutil

import pytest

import hmc
from patterns import pattern

ROUNDS = int(os.environ.get("HMC_MATRIX_ROUNDS", "12"))
REGION = 64 << 10
BOUND = 60  # seconds: no step may take longer
PORT = 18596


def kwargs(tls, uds_dir, **extra):
    return dict(buffer_size=8 * REGION, ucx_tls=tls, ucx_net_devices="lo", ctrl_uds_dir=uds_dir, timeout=BOUND,
                **extra)


@pytest.fixture
def uds_dir():
    d = tempfile.mkdtemp(prefix="hmc-stress-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def start_server(tls, uds_dir):
    server = hmc.create_session(**kwargs(tls, uds_dir), progress_thread="own")
    server.init_server("127.0.0.1", PORT, 0, 0, 0)
    return server


def echo_tags(server, count, seen, errors):
    """The server's side of the tag rounds: every tag back to the client, plus one."""
    try:
        for _ in range(count):
            tag = server.ctrl_recv(1, timeout=BOUND)
            seen.append(tag)
            server.ctrl_send(1, tag + 1)
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(e)


def sent_tags(threads, rounds):
    return sorted((k << 32) | i for k in range(threads) for i in range(3, rounds, 4))


@pytest.mark.parametrize("threads", [2, 4, 8])
@pytest.mark.parametrize("tls", ["shm", "tcp"])
@pytest.mark.parametrize("progress_thread", ["own", "shared", "caller"])
def test_threads_sharing_one_session(uds_dir, progress_thread, tls, threads):
    server = start_server(tls, uds_dir)
    client = hmc.create_session(**kwargs(tls, uds_dir), progress_thread=progress_thread)
    try:
        assert client.connect(0, 1, "127.0.0.1", PORT, server.ctrl_port) == 0
        ready = threading.Thread(target=server.wait_peer, args=(1, BOUND))
        ready.start()
        while ready.is_alive():
            client.progress()  # a caller-driven client moves only when called; a no-op otherwise
        ready.join()

        seen, errors, echoes = [], [], []
        echo = threading.Thread(target=echo_tags, args=(server, threads * (ROUNDS // 4), seen, errors))
        echo.start()

        def worker(k):
            base = k * REGION
            half = base + REGION // 2
            try:
                for i in range(ROUNDS):
                    seed = (k << 32) | i
                    n = 1 + (i * 7919 + k * 131) % (REGION // 2)
                    op = i % 4
                    if op == 0:
                        data = pattern(n, seed)
                        client.buf.put(data, base)
                        client.put_remote("127.0.0.1", PORT, base, base, n)
                        assert server.buf.get_bytes(base, n) == data, f"put round {i}"
                    elif op == 1:
                        data = pattern(n, seed)
                        server.buf.put(data, half)
                        client.get_remote("127.0.0.1", PORT, half, half, n)
                        assert client.buf.get_bytes(half, n) == data, f"get round {i}"
                    elif op == 2:
                        out, back = pattern(n, seed), pattern(n, seed + 1)
                        client.buf.put(out, base)
                        server.buf.put(back, half)
                        futs = [client.put_nb("127.0.0.1", PORT, base, base, n),
                                client.get_nb("127.0.0.1", PORT, half, half, n)]
                        client.wait(futs, timeout=BOUND)
                        assert server.buf.get_bytes(base, n) == out, f"put_nb round {i}"
                        assert client.buf.get_bytes(half, n) == back, f"get_nb round {i}"
                    else:
                        client.ctrl_send(0, seed)
                        echoes.append(client.ctrl_recv(0, timeout=BOUND) - 1)
            except Exception as e:  # noqa: BLE001 - reported by the test
                errors.append(e)

        workers = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(BOUND * 2)
        echo.join(BOUND * 2)
        assert not any(t.is_alive() for t in workers + [echo]), "a thread hung"
        assert errors == []
        assert sorted(seen) == sent_tags(threads, ROUNDS), "the server's tags"
        assert sorted(echoes) == sent_tags(threads, ROUNDS), "the echoes"

        # A close while the others still put: each call succeeds or raises a typed hmc error.
        closing, untyped = threading.Event(), []

        def late(k):
            for _ in range(200):
                try:
                    client.put_remote("127.0.0.1", PORT, k * REGION, k * REGION, 256)
                except hmc.HMCError:
                    if closing.is_set():
                        return
                except BaseException as e:  # noqa: BLE001 - the failure this test looks for
                    untyped.append(e)
                    return

        lates = [threading.Thread(target=late, args=(k,)) for k in range(1, threads)]
        for t in lates:
            t.start()
        closing.set()
        client.close()
        for t in lates:
            t.join(BOUND)
        assert not any(t.is_alive() for t in lates), "a call hung across close()"
        assert untyped == []
        with pytest.raises(hmc.HMCError):
            client.put_remote("127.0.0.1", PORT, 0, 0, 8)
    finally:
        client.close()
        server.close()


@pytest.mark.parametrize("tls", ["shm", "tcp"])
@pytest.mark.parametrize("progress_thread", ["caller", "own"])
def test_asyncio_tasks_sharing_one_session(uds_dir, progress_thread, tls):
    server = start_server(tls, uds_dir)
    tasks = 8

    async def main():
        async with hmc.AsyncSession(**kwargs(tls, uds_dir), progress_thread=progress_thread) as c:
            connected = asyncio.ensure_future(c.connect(0, 1, "127.0.0.1", PORT, server.ctrl_port))
            await asyncio.wait_for(asyncio.to_thread(server.wait_peer, 1, BOUND), BOUND)
            assert await asyncio.wait_for(connected, BOUND) == 0
            seen, errors = [], []
            echo = threading.Thread(target=echo_tags, args=(server, tasks * (ROUNDS // 4), seen, errors))
            echo.start()
            echoes = []

            async def task(k):
                base = k * REGION
                half = base + REGION // 2
                for i in range(ROUNDS):
                    seed = (k << 32) | i
                    n = 1 + (i * 7919 + k * 131) % (REGION // 2)
                    op = i % 4
                    if op in (0, 2):
                        data = pattern(n, seed)
                        assert await c.put(0, data, bias=base) == n
                        assert server.buf.get_bytes(base, n) == data, f"put round {i}"
                    elif op == 1:
                        data = pattern(n, seed)
                        server.buf.put(data, half)
                        assert await c.get(0, n, bias=half) == data, f"get round {i}"
                    else:
                        await c.ctrl_send(0, seed)
                        echoes.append(await c.ctrl_recv(0, timeout=BOUND) - 1)

            await asyncio.wait_for(asyncio.gather(*(task(k) for k in range(tasks))), BOUND * 2)
            await asyncio.wait_for(asyncio.to_thread(echo.join, BOUND), BOUND + 5)
            assert errors == []
            assert sorted(seen) == sent_tags(tasks, ROUNDS)
            assert sorted(echoes) == sent_tags(tasks, ROUNDS)

    try:
        asyncio.run(main())
    finally:
        server.close()
