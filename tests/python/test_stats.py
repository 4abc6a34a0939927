"""sess.stats() against real traffic: the bytes it counts are the bytes that moved."""
import asyncio
import time

import numpy as np
import pytest

import hmc

MiB = 1 << 20


def kwargs(tmp_path):
    return dict(buffer_size=4 * MiB, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path))


def test_counts_follow_the_traffic_and_a_leaving_peer(tmp_path):
    with hmc.create_session(**kwargs(tmp_path)) as server:
        server.init_server("127.0.0.1", 0)
        client = hmc.create_session(**kwargs(tmp_path))
        client.connect("127.0.0.1", server.ctrl_port)
        for i in range(40):
            client.put_remote("127.0.0.1", None, 0, 4096 * i, 4096)
        client.get_remote("127.0.0.1", None, 0, 0, 1000)
        client.put_batch(0, np.array([[0, 0, 100], [500, 900, 28]]))
        layout = hmc.KvLayout([(0, 256, 64), (64 * 256, 256, 64)])
        client.put_blocks(0, layout, [1, 5, 9], [2, 7, 30], notify=7)
        server.wait_notify(1, 7, timeout=20)
        s = client.stats()
        ops = s["ops"]
        assert (ops["put"]["done"], ops["put"]["bytes"]) == (40, 40 * 4096)
        assert (ops["get"]["done"], ops["get"]["bytes"]) == (1, 1000)
        assert (ops["put_batch"]["done"], ops["put_batch"]["bytes"]) == (1, 128)
        assert (ops["put_notify"]["done"], ops["put_notify"]["bytes"]) == (1, 2 * 3 * 256)
        assert all(k["failed"] == k["timed_out"] == k["aborted"] == 0 for k in ops.values())
        assert s["in_flight"] == 0 and s["peers_connected"] == 1 and s["peers_lost"] == 0
        assert sum(ops["put"]["latency_us"]["buckets"]) >= 2  # one put in 16 is timed
        assert 0 < ops["put"]["latency_us"]["p50"] <= ops["put"]["latency_us"]["p99"]
        assert s["staging"] == {"copies": 0, "bytes": 0}  # host memory: nothing staged
        assert set(s["ctrl"]["handshakes_refused"]) == {"auth", "rank", "busy", "protocol", "transport", "timeout"}
        peer = s["peers"][0]
        assert peer["transport"] == client.transports(0)
        assert peer["put_bytes"] == 40 * 4096 + 128 + 2 * 3 * 256 and peer["get_bytes"] == 1000
        client.close()
        deadline = time.monotonic() + 20
        while server.stats()["peers_lost"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        after = server.stats()
        assert after["peers_lost"] == 1 and after["peers_connected"] == 0 and after["peers"] == {}


def test_refused_handshakes_are_counted_by_reason(tmp_path):
    with hmc.create_session(**kwargs(tmp_path)) as server, hmc.create_session(**kwargs(tmp_path)) as client:
        server.init_server("127.0.0.1", 0)
        with hmc.create_session(**kwargs(tmp_path), auth_key="not the server's key") as stranger:
            with pytest.raises(hmc.AuthenticationError):
                stranger.connect("127.0.0.1", server.ctrl_port, timeout=10)
        client.connect("127.0.0.1", server.ctrl_port)
        # connect() returns once the client's side is up; the server reads the client's address on its own.
        server.wait_peer(client.rank)
        refused = server.stats()["ctrl"]["handshakes_refused"]
        assert refused == {"auth": 1, "rank": 0, "busy": 0, "protocol": 0, "transport": 0, "timeout": 0}
        received = server.stats()["ctrl"]["messages_received"]
        assert received > 0  # the client's transport address came over the control channel
        assert client.stats()["ctrl"]["messages_sent"] >= received


def test_an_async_session_reads_its_stats_too(tmp_path):
    async def main():
        with hmc.create_session(**kwargs(tmp_path)) as server:
            server.init_server("127.0.0.1", 0)
            async with hmc.AsyncSession(**kwargs(tmp_path)) as client:
                await client.connect("127.0.0.1", server.ctrl_port)
                await asyncio.gather(*(client.put("127.0.0.1", b"x" * 512, 512 * i) for i in range(8)))
                assert client.stats()["ops"]["put"]["bytes"] == 8 * 512

    asyncio.run(main())
