"""Closing and releasing while other threads and transfers use a session; inputs that must not be
sent wrong. The crash-prone cases run in a child process: a crash fails the test."""
import asyncio
import gc
import math
import threading

import numpy as np
import pytest

import hmc
from conftest import ServerProcess, acommand, command, run_async, run_child, session_kwargs
from patterns import pattern, sha

MiB = 1 << 20


def test_close_while_another_thread_copies_512_mib_into_the_buffer():
    # close() waits for the copy: freeing the buffer under it would be a SIGSEGV.
    result = run_child("""
import threading, time, hmc
big = bytes(512 << 20)
for round in range(3):
    s = hmc.create_session(buffer_size=512 << 20, ucx_tls="tcp", ucx_net_devices="lo")
    copied, outcome = threading.Event(), []
    def writer():
        n = 0
        try:
            while True:
                s.buf.put(big, 0)
                n += 1
                copied.set()
        except hmc.ClosedError:
            outcome.append(("closed", n))
        except BaseException as e:
            outcome.append(("other", repr(e)))
    t = threading.Thread(target=writer)
    t.start()
    assert copied.wait(60)
    time.sleep(0.03)  # the writer is inside its next 512 MiB copy
    s.close()
    t.join(60)
    print(outcome)
""")
    assert result.returncode == 0, result.stderr[-2000:]
    for line in result.stdout.split("\n")[:3]:
        kind, count = eval(line)[0]  # noqa: S307 - our own child's repr
        assert kind == "closed" and count >= 1


def test_close_wakes_blocked_waits_with_closed_error():
    result = run_child("""
import tempfile, threading, time, hmc
d = tempfile.mkdtemp()
s = hmc.create_session(buffer_size=1 << 20, ucx_tls="tcp", ucx_net_devices="lo", ctrl_uds_dir=d)
s.init_server("127.0.0.1", 0, 0, 0, 0)
errors = []
def waiter(call):
    try:
        call()
        errors.append("returned")
    except hmc.HMCError as e:
        errors.append(type(e).__name__)
threads = [threading.Thread(target=waiter, args=(lambda: s.wait_peer(5, timeout=60),)),
           threading.Thread(target=waiter, args=(lambda: s.ctrl_recv(0, timeout=60),))]
for t in threads: t.start()
time.sleep(0.3)
t0 = time.monotonic()
s.close()
for t in threads: t.join(30)
print(sorted(errors), time.monotonic() - t0 < 20)
""")
    assert result.returncode == 0, result.stderr[-2000:]
    errors, prompt = result.stdout.rsplit("]", 1)
    assert "ClosedError" in errors and "returned" not in errors and prompt.strip() == "True", result.stdout


def test_release_during_a_transfer_keeps_the_memory_until_it_is_done(tls):
    server = ServerProcess("blocking", tls)
    n = 48 * MiB
    try:
        async def body(c):
            src = bytearray(pattern(n, 11))
            expected = sha(src)
            reg = c.register(src)
            task = asyncio.ensure_future(c.put(0, reg, bias=0))
            await asyncio.sleep(0)  # the put is issued
            reg.release()  # while UCX reads from it
            with pytest.raises(BufferError):
                src.clear()  # would free the memory under the transfer
            assert await task == n
            assert (await acommand(c, op="sha", offset=0, nbytes=n)).decode() == expected
            del task
            gc.collect()
            src.clear()  # the last transfer is gone: so is the registration

        # progress_thread='own': the put must still be in flight at release(); driven in-thread, the
        # submission's own progress() may finish a shared-memory put before the next line runs.
        run_async(server, tls, body, progress_thread="own")
    finally:
        server.close()


def test_a_released_registration_refuses_new_transfers(shared_client):
    client = shared_client
    reg = client.register(np.zeros(1024, np.uint8))
    reg.release()
    with pytest.raises(hmc.InvalidArgumentError, match="released"):
        client.put(0, reg)


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_close_from_a_done_callback(tls):
    server = ServerProcess("blocking", tls)
    try:
        _close_from_a_done_callback(server, tls)
    finally:
        server.close()


def _close_from_a_done_callback(server, tls):
    s = hmc.create_session(**session_kwargs(tls, server.uds_dir))
    s.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port)
    s.buf.put(b"x" * 4096, 0)
    done, seen = threading.Event(), []

    def close_from_callback(f):
        try:
            s.close()
            seen.append("closed")
        except BaseException as e:  # noqa: BLE001 - reported below
            seen.append(repr(e))
        finally:
            done.set()

    s.put_nb("127.0.0.1", 18515, 0, 0, 4096).add_done_callback(close_from_callback)
    assert done.wait(30), "the callback never ran"
    assert seen == ["closed"]
    with pytest.raises(hmc.ClosedError):
        s.put(0, b"x")


def test_size_larger_than_the_data_is_refused(shared_client):
    client = shared_client
    with pytest.raises(hmc.InvalidArgumentError, match="size=10 exceeds the 3 bytes"):
        client.put("127.0.0.1", b"abc", size=10)
    assert client.put("127.0.0.1", b"abcdef", size=2) == 2


@pytest.mark.parametrize("how", ["put", "buf.put", "memoryview", "get_into", "register"])
def test_arrays_of_python_objects_are_refused(shared_client, how):
    client = shared_client
    objects = np.array([object(), "text", 3], dtype=object)
    calls = {
        "put": lambda: client.put(0, objects),
        "buf.put": lambda: client.buf.put(objects),
        "memoryview": lambda: client.buf.put(memoryview(objects)),
        "get_into": lambda: client.get_into(0, objects),
        "register": lambda: client.register(objects),
    }
    with pytest.raises(hmc.InvalidArgumentError, match="Python objects"):
        calls[how]()


BAD_TIMEOUTS = [-1, -0.001, math.nan, "5", True]


@pytest.mark.parametrize("bad", BAD_TIMEOUTS, ids=repr)
@pytest.mark.parametrize("call", ["create_session", "ctrl_recv", "ctrl_send", "wait_peer", "put", "get",
                                  "put_remote", "get_into", "put_batch", "put_pipeline", "result", "wait"])
def test_bad_timeouts_are_refused_by_every_call(shared_client, call, bad):
    client = shared_client
    f = client.put_nb(0, None, 0, 0, 8)
    calls = {
        "create_session": lambda: hmc.create_session(buffer_size=4096, timeout=bad),
        "ctrl_recv": lambda: client.ctrl_recv(0, timeout=bad),
        "ctrl_send": lambda: client.ctrl_send(0, 1, timeout=bad),
        "wait_peer": lambda: client.wait_peer(0, timeout=bad),
        "put": lambda: client.put(0, b"x", timeout=bad),
        "get": lambda: client.get(0, 1, timeout=bad),
        "put_remote": lambda: client.put_remote(0, None, 0, 0, 1, timeout=bad),
        "get_into": lambda: client.get_into(0, bytearray(1), timeout=bad),
        "put_batch": lambda: client.put_batch(0, [(0, 0, 1)], timeout=bad),
        "put_pipeline": lambda: client.put_pipeline(0, 0, 0, 1, timeout=bad),
        "result": lambda: f.result(timeout=bad),
        "wait": lambda: client.wait([f], timeout=bad),
    }
    with pytest.raises(hmc.InvalidArgumentError, match="timeout"):
        calls[call]()
    f.result(30)


def test_infinite_and_huge_timeouts_wait_without_limit(shared_client):
    client = shared_client
    assert command(client, op="fill", offset=0, nbytes=8, seed=1) == b"ok"
    f = client.get_nb(0, None, 0, 0, 8)
    assert f.result(timeout=math.inf) is None
    client.wait([f], timeout=1e300)
    client.ctrl_send(0, b'{"op": "fill", "offset": 0, "nbytes": 8, "seed": 2}')
    assert client.ctrl_recv(0, timeout=1e300) == b"ok"  # a reply that is there returns at once
    client.ctrl_send(0, b'{"op": "fill", "offset": 0, "nbytes": 8, "seed": 3}')
    assert client.ctrl_recv(0, timeout=math.inf) == b"ok"
    with pytest.raises(hmc.InvalidArgumentError, match="finite"):
        hmc.create_session(buffer_size=4096, timeout=math.inf)
