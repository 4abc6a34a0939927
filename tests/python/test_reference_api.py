"""The reference package's names and calling forms, with its meaning, against a peer process
(blocking and asyncio); the SDK-guide session form once the control channel assigns ranks."""
import asyncio
import ctypes
import json
import threading

import numpy as np
import pytest
import torch

import hmc
from conftest import ServerProcess, acommand, command, run_async, session_kwargs
from patterns import pattern, sha

MiB = 1 << 20
UCX = hmc.ConnType.UCX


# -- IOBuffer: the directional names over sess.buf ------------------------------------------------
def test_iobuffer_directional_names_act_on_the_session_buffer():
    with hmc.create_session(buffer_size="1M") as s:
        buf = s.buf
        assert isinstance(buf, hmc.IOBuffer) and buf.size == MiB and buf.mem_type == hmc.MemoryType.CPU
        assert buf.device_id == 0 and buf.ptr != 0
        data = np.arange(100, dtype=np.int32)
        assert buf.buffer_put_cpu(data, offset=16) == 400
        assert buf.buffer_put_cpu(b"abcdef", nbytes=3, offset=1000) == 3
        out = np.zeros(100, np.int32)
        buf.buffer_get_cpu_into(out, nbytes=400, offset=16)
        assert np.array_equal(out, data)
        assert buf.buffer_get_cpu(nbytes=4, offset=1000) == bytearray(b"abc\0")
        buf.buffer_copy_within(dst_offset=2000, src_offset=1000, nbytes=3)
        assert s.buf.get_bytes(2000, 3) == b"abc"
        s.buffer_copy_within(dst_offset=3000, src_offset=2000, nbytes=3)
        assert bytes(ctypes.string_at(buf.ptr + 3000, 3)) == b"abc"  # ptr is the buffer's address
        assert buf.put(data, offset=0, nbytes=8) == 8  # the reference's put(data, nbytes=, offset=)
        assert buf.get_into(out, nbytes=8, offset=0) == 8


def test_pointer_and_cuda_names_need_device_memory():
    if hmc.memory_supported(hmc.MemoryType.NVIDIA_GPU):
        pytest.skip("this machine has CUDA memory")
    with hmc.create_session(buffer_size=4096) as s:
        with pytest.raises(hmc.UnsupportedError):
            s.buf.buffer_put_gpu_ptr(0x1000, nbytes=8)
        with pytest.raises(hmc.UnsupportedError):
            s.buf.buffer_get_gpu_ptr(0x1000, nbytes=8)


def test_module_level_reference_names():
    assert hmc.status_t is hmc.Status and hmc.status_t.SUCCESS == 0
    assert issubclass(hmc.NotConnectedError, hmc.HMCStatusError)
    assert hmc.memory_supported(hmc.MemoryType.CPU) and hmc.memory_supported("CPU")
    assert hmc.memory_type_from_torch_tensor(torch.zeros(1)) == hmc.MemoryType.CPU


# -- logging and the last error (memfabric's calls) ------------------------------------------------
def test_extern_logger_gets_cpp_log_lines_on_the_callback_thread(tmp_path):
    lines, got = [], threading.Event()

    def logger(level, message):
        lines.append((level, message, threading.current_thread().name))
        if "listening on" in message:
            got.set()

    before = hmc.get_log_level()
    assert hmc.set_log_level(1) == 0 and hmc.get_log_level() == 1  # info
    assert hmc.set_extern_logger(logger) == 0
    try:
        with hmc.create_session(buffer_size=4096, ctrl_uds_dir=str(tmp_path)) as s:
            s.init_server("127.0.0.1", 2025, 2026, 0, 0)  # the README's form
            assert got.wait(10)
    finally:
        hmc.set_extern_logger(None)
        hmc.set_log_level(before)
    level, message, thread = next(line for line in lines if "listening on" in line[1])
    assert level == 1 and "ctrl rank 0 listening on 127.0.0.1" in message and thread == "hmc-callbacks"


def test_last_error_message_is_per_thread():
    hmc.get_and_clear_last_err_msg()
    with pytest.raises(hmc.InvalidArgumentError):
        hmc.create_session(buffer_size=-1)
    mine = hmc.get_last_err_msg()
    assert "buffer_size" in mine
    other = []
    t = threading.Thread(target=lambda: other.append(hmc.get_last_err_msg()))
    t.start()
    t.join()
    assert other == [""]
    assert hmc.get_and_clear_last_err_msg() == mine
    assert hmc.get_last_err_msg() == ""


# -- the Session's reference forms against a peer ----------------------------------------------------
def test_put_get_forms_and_conn_everywhere(shared_client):
    c = shared_client
    data = pattern(5000, 21)
    assert c.put("127.0.0.1", data, conn=UCX) == 5000  # SDK guide overview order
    assert c.put("127.0.0.1", data[:100], UCX, 8192) == 100  # put(ip, data, conn, bias)
    assert c.put("127.0.0.1", data[:100], 12288, UCX) == 100  # put(ip, data, bias, conn)
    assert c.get("127.0.0.1", 5000, conn=UCX) == data
    assert c.get(5000, "127.0.0.1", bias=0, conn=UCX) == data  # the API reference's get(size, ip)
    assert c.get("127.0.0.1", 100, UCX, 8192) == data[:100]
    dest = bytearray(100)
    assert c.get_into("127.0.0.1", dest, UCX, 12288) == 100 and bytes(dest) == data[:100]
    c.buf.put(data, 0)
    c.put_remote("127.0.0.1", 18515, local_off=0, remote_off=16384, nbytes=5000, conn=UCX)
    c.get_remote("127.0.0.1", 18515, local_off=20000, remote_off=16384, nbytes=5000, conn=UCX)
    assert c.buf.get_bytes(20000, 5000) == data
    ids = [c.put_nb("127.0.0.1", 18515, 0, 30000, 100, UCX).id, c.get_nb("127.0.0.1", 18515, 0, 0, 100, UCX)]
    c.wait(ids)  # the reference's wait(id | list)


def test_buffer_then_put_and_get_then_buffer(shared_client):
    c = shared_client
    x = np.arange(1024, dtype=np.int32)
    assert c.buffer_put_then_put("127.0.0.1", 18515, x, local_off=4096, remote_off=40000, conn=UCX) == x.nbytes
    assert command(c, op="sha", offset=40000, nbytes=x.nbytes).decode() == sha(x.tobytes())
    y = np.empty_like(x)
    assert c.get_then_buffer_get_into("127.0.0.1", 18515, y, local_off=60000, remote_off=40000) == x.nbytes
    assert np.array_equal(x, y)
    t = torch.empty(10, dtype=torch.int32)
    assert c.get_then_buffer_get_into("127.0.0.1", 18515, t, remote_off=40000, nbytes=40) == 40
    assert torch.equal(t, torch.arange(10, dtype=torch.int32))


def test_check_conn_never_falls_back_from_a_wrong_port(shared_client):
    c = shared_client
    assert c.check_conn("127.0.0.1", 18515, UCX)
    assert c.check_conn("127.0.0.1")
    assert not c.check_conn("127.0.0.1", 18516)  # a wrong port is not the peer at that ip
    assert not c.check_conn("10.77.0.9", 18515)
    with pytest.raises(hmc.NotConnectedError):
        c.put_remote("127.0.0.1", 18516, 0, 0, 8)


@pytest.mark.parametrize("form", ["ip, port, conn", "ip, conn", "rank"])
def test_disconnect_forms(form):
    server = ServerProcess("blocking", "shm")
    try:
        with hmc.create_session(**session_kwargs("shm", server.uds_dir)) as s:
            s.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port)
            assert s.check_conn("127.0.0.1", 18515)
            {"ip, port, conn": lambda: s.disconnect("127.0.0.1", 18515, UCX),
             "ip, conn": lambda: s.disconnect("127.0.0.1", UCX),
             "rank": lambda: s.disconnect(0)}[form]()
            assert not s.check_conn("127.0.0.1", 18515)
            with pytest.raises((hmc.NotConnectedError, hmc.PeerLostError)):
                s.put_remote("127.0.0.1", 18515, 0, 0, 8)
    finally:
        server.close()


@pytest.mark.parametrize("nbytes", [1, 3 * MiB + 3], ids=["1B", "3MiB"])
def test_send_data_to_and_recv_data_from(server, tls, nbytes):
    """Pointer + size + memory type, streamed through both buffers' halves (a 1 MiB buffer here:
    a 3 MiB stream takes seven 512 KiB chunks each way, credits included)."""
    with hmc.create_session(**{**session_kwargs(tls, server.uds_dir), "buffer_size": MiB}) as c:
        c.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port)
        src = np.frombuffer(pattern(nbytes, 31), np.uint8).copy()
        c.ctrl_send(0, json.dumps({"op": "recv_stream", "nbytes": nbytes}).encode())
        c.send_data_to("127.0.0.1", 18515, src.ctypes.data, nbytes, hmc.MemoryType.CPU, UCX)
        count, digest = c.ctrl_recv(0, timeout=60).decode().split()
        assert int(count) == nbytes and digest == sha(src.tobytes())

        dst, flag = np.zeros(nbytes + 10, np.uint8), ctypes.c_size_t(0)
        c.ctrl_send(0, json.dumps({"op": "send_stream", "nbytes": nbytes, "seed": 32}).encode())
        c.recv_data_from("127.0.0.1", 18515, dst.ctypes.data, dst.nbytes, "CPU", ctypes.addressof(flag), UCX)
        assert c.ctrl_recv(0, timeout=60) == b"ok"
        assert flag.value == nbytes and dst[:nbytes].tobytes() == pattern(nbytes, 32)
        command(c, op="exit")


def test_readme_server_with_both_ports_serves_a_ucx_client_by_its_ucx_port(tls):
    server = ServerProcess("blocking", tls, rdma_port=2026)
    try:
        with hmc.create_session(**session_kwargs(tls, server.uds_dir)) as c:
            assert c.connect(peer_id=0, self_id=1, peer_ip="127.0.0.1", data_port=18515,
                             ctrl_tcp_port=server.ctrl_port, conn=UCX) == 0
            n = c.buf.put(b"hello hmc", offset=0)
            c.put_remote("127.0.0.1", 18515, local_off=0, remote_off=0, nbytes=n, conn=UCX)
            assert command(c, op="sha", offset=0, nbytes=n).decode() == sha(b"hello hmc")
            with pytest.raises(hmc.InvalidArgumentError, match="connected over ConnType.UCX"):
                c.put_remote("127.0.0.1", 18515, 0, 0, n, conn=hmc.ConnType.RDMA)
            command(c, op="exit")
    finally:
        server.close()


def test_asyncio_has_the_same_names(server, tls):
    async def body(c):
        data = pattern(3000, 41)
        assert await c.put("127.0.0.1", data, UCX, 1000) == 3000
        assert await c.get(3000, "127.0.0.1", bias=1000, conn=UCX) == data
        dest = np.zeros(3000, np.uint8)
        assert await c.get_into("127.0.0.1", dest, conn=UCX, bias=1000) == 3000
        assert dest.tobytes() == data
        assert await c.buffer_put_then_put("127.0.0.1", 18515, data, local_off=0, remote_off=9000) == 3000
        out = bytearray(3000)
        assert await c.get_then_buffer_get_into("127.0.0.1", 18515, out, local_off=50000, remote_off=9000) == 3000
        assert bytes(out) == data and c.check_conn("127.0.0.1", 18515)
        c.buf.buffer_put_cpu(data, offset=0)
        await c.put_remote("127.0.0.1", 18515, local_off=0, remote_off=70000, nbytes=3000, conn=UCX)
        await c.wait([c.put_nb("127.0.0.1", 18515, 0, 0, 10, UCX).id])
        assert (await acommand(c, op="sha", offset=70000, nbytes=3000)).decode() == sha(data)
        src = np.frombuffer(pattern(5 * MiB, 42), np.uint8).copy()
        await c.ctrl_send(0, json.dumps({"op": "recv_stream", "nbytes": src.nbytes}).encode())
        await c.send_data_to("127.0.0.1", 18515, src.ctypes.data, src.nbytes, hmc.MemoryType.CPU)
        assert (await c.ctrl_recv(0, timeout=60)).decode().split()[1] == sha(src.tobytes())

    run_async(server, tls, body)


# -- the SDK guide's session form (ranks assigned by the server) ------------------------------------
def test_sdk_form_assigns_ranks_in_connection_order(tmp_path):
    kwargs = dict(buffer_size=MiB, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path))
    with hmc.create_session(**kwargs) as server, hmc.create_session(**kwargs) as a, \
            hmc.create_session(**kwargs) as b:
        server.init_server("127.0.0.1", 0, conn=UCX)
        port = server.ctrl_port
        assert a.connect("127.0.0.1", port, conn=UCX) == 0
        assert b.connect("127.0.0.1", port) == 0
        assert (server.rank, a.rank, b.rank) == (0, 1, 2)
        a.put("127.0.0.1", b"from a", conn=UCX)
        assert server.buf.get_bytes(0, 6) == b"from a"


def test_sdk_form_server_receives_before_the_client_connects(tmp_path):
    kwargs = dict(buffer_size=MiB, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path))
    with hmc.create_session(**kwargs) as server, hmc.create_session(**kwargs) as client:
        server.init_server("127.0.0.1", 0)
        got = []
        t = threading.Thread(target=lambda: got.append(server.ctrl_recv(1, timeout=20)))
        t.start()
        client.connect("127.0.0.1", server.ctrl_port)
        client.ctrl_send(0, 7)
        t.join(30)
        assert got == [7]


def test_close_server_stops_only_the_listener(tmp_path):
    kwargs = dict(buffer_size=MiB, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path))
    with hmc.create_session(**kwargs) as s, hmc.create_session(**kwargs) as c, \
            hmc.create_session(**kwargs, timeout=1.0) as late:  # a refused connect is retried until the timeout
        s.init_server("127.0.0.1", 18600, 0, 0, 0)
        c.connect(0, 1, "127.0.0.1", 18600, s.ctrl_port)
        port = s.ctrl_port
        s.close_server()
        assert c.put(0, b"still works") == 11
        assert s.get(1, 11) == b"still works"  # both ways
        with pytest.raises(hmc.NotConnectedError, match="refused"):
            late.connect(0, 2, "127.0.0.1", 18600, port)


def test_a_server_naming_its_client_by_ip_waits_for_it_and_times_out_without_it(tmp_path):
    kwargs = dict(buffer_size=MiB, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path))
    with hmc.create_session(**kwargs, timeout=0.3) as lonely:
        lonely.init_server("127.0.0.1", 0)
        with pytest.raises(hmc.TimeoutError):
            lonely.get("127.0.0.1", 4)  # no client ever: the session timeout, not a hang
        with pytest.raises(hmc.NotConnectedError):
            lonely.put_nb("127.0.0.1", None, 0, 0, 4)  # the non-blocking call never waits
        assert not lonely.check_conn("127.0.0.1")
    with hmc.create_session(**kwargs) as server, hmc.create_session(**kwargs) as client:
        server.init_server("127.0.0.1", 0)
        got = []
        t = threading.Thread(target=lambda: got.append(server.get("127.0.0.1", 5)))
        t.start()
        client.connect("127.0.0.1", server.ctrl_port)
        client.buf.put(b"early")
        t.join(30)
        assert len(got) == 1 and got[0] in (b"early", bytes(5))  # it ran once the client was there


def test_an_async_server_awaits_its_client_without_blocking_the_event_loop(tmp_path):
    kwargs = dict(buffer_size=MiB, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path))

    async def body():
        async with hmc.AsyncSession(**kwargs) as server:
            await server.init_server("127.0.0.1", 0)
            ticks = 0

            async def tick():
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.01)

            ticker = asyncio.ensure_future(tick())
            waiting = asyncio.ensure_future(server.put("127.0.0.1", b"to the client"))
            await asyncio.sleep(0.3)
            assert not waiting.done() and ticks > 5
            with hmc.create_session(**kwargs) as client:
                await asyncio.get_running_loop().run_in_executor(None, client.connect, "127.0.0.1", server.ctrl_port)
                assert await asyncio.wait_for(waiting, 20) == 13
                assert client.buf.get_bytes(0, 13) == b"to the client"
            ticker.cancel()

    asyncio.run(body())
