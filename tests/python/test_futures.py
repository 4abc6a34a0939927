"""hmc.Future callbacks run when the operation completes, whether or not anybody waits, on a thread
that holds the GIL and is not an HMC loop thread; Session.wait takes Futures and ids."""
import asyncio
import logging
import threading

import pytest

import hmc
from conftest import command, run_async
from patterns import pattern, sha

MiB = 1 << 20


def test_callbacks_run_without_anybody_waiting(shared_client):
    client = shared_client
    threads = []
    for _ in range(10):  # an op that completes before add_done_callback calls back at once: try again
        ran = threading.Event()
        f = client.put_nb("127.0.0.1", 18515, 0, 0, 64 * MiB)
        f.add_done_callback(lambda fut: (threads.append(threading.current_thread().name), ran.set()))
        assert ran.wait(30), "the callback did not run although the put completed"
        if threads[-1] == "hmc-callbacks":
            break
    assert threads[-1] == "hmc-callbacks", threads


def test_a_callback_may_call_blocking_session_methods(shared_client):
    client = shared_client
    client.buf.put(pattern(MiB, 4), 0)
    replies, ran = [], threading.Event()

    def cb(f):
        try:
            f.result(0)
            replies.append(command(client, op="sha", offset=0, nbytes=MiB).decode())  # ctrl_send + ctrl_recv
        finally:
            ran.set()

    client.put_nb(0, None, 0, 0, MiB).add_done_callback(cb)
    assert ran.wait(30)
    assert replies == [sha(pattern(MiB, 4))]


def test_callbacks_after_completion_run_at_once_and_errors_are_logged(shared_client, caplog):
    client = shared_client
    f = client.get_nb(0, None, 0, 0, 8)
    assert f.result(30) is None
    order = []
    with caplog.at_level(logging.ERROR, logger="hmc"):
        f.add_done_callback(lambda _: 1 / 0)
        f.add_done_callback(lambda fut: order.append(threading.current_thread() is threading.main_thread()))
    assert order == [True]
    assert "exception calling callback" in caplog.text


def test_failed_operations_complete_their_futures_too(shared_client):
    client = shared_client
    errors, ran = [], threading.Event()
    f = client.put_nb(0, None, 0, (80 << 20) - 4, 8)  # outside the peer's buffer
    f.add_done_callback(lambda fut: (errors.append(fut.exception(0)), ran.set()))
    assert ran.wait(30)
    assert isinstance(errors[0], hmc.OutOfRangeError)
    with pytest.raises(hmc.OutOfRangeError):
        client.wait(f)


def test_wait_takes_futures_ids_and_lists(shared_client):
    client = shared_client
    futs = [client.put_nb(0, None, i * 4096, i * 4096, 4096) for i in range(8)]
    client.wait(futs[0])
    client.wait(futs[1].id)
    client.wait([f.id for f in futs[2:5]] + futs[5:])
    assert all(f.done() for f in futs)
    assert not futs[0].cancel() and not futs[0].cancelled()


def test_asyncio_futures_call_back_on_the_event_loop(server, tls):
    async def body(c):
        loop_thread, fired = threading.current_thread(), []
        f = c.put_nb(0, None, 0, 0, 4096)
        f.add_done_callback(lambda fut: fired.append(threading.current_thread()))
        await f
        await asyncio.sleep(0)
        assert fired == [loop_thread]
        await c.wait([c.get_nb(0, None, 0, 0, 8).id, c.get_nb(0, None, 8, 8, 8)], timeout=30)

    run_async(server, tls, body)
