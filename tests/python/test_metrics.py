"""The Prometheus endpoint, scraped for real and parsed with prometheus_client: the bytes it reports
are the bytes that moved, sessions of one process share it, and it answers nothing but GET /metrics."""
import socket
import urllib.error
import urllib.request

import pytest

import hmc

parser = pytest.importorskip("prometheus_client.parser", reason="python3-prometheus-client is not installed")
MiB = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port, path="/metrics"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def samples(text):
    """{(name, frozenset(labels)): value} of every sample in the page."""
    out = {}
    for family in parser.text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(found, name, **labels):
    matches = [v for (n, ls), v in found.items() if n == name and set(labels.items()) <= ls]
    assert len(matches) == 1, (name, labels, matches)
    return matches[0]


def test_two_sessions_share_one_endpoint_that_counts_their_real_traffic(tmp_path):
    port = free_port()
    kwargs = dict(buffer_size=4 * MiB, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path),
                  metrics_port=port)
    with hmc.create_session(**kwargs) as server, hmc.create_session(**kwargs) as client:
        server.init_server("127.0.0.1", 0)
        client.connect("127.0.0.1", server.ctrl_port)
        for i in range(30):
            client.put_remote("127.0.0.1", None, 0, 0, 65536)
        client.get_remote("127.0.0.1", None, 0, 0, 4096)
        # The server sends its own control traffic once it sees the client; a tag sent after it and
        # received here means all of it has arrived, so the counters stand still while they are read.
        server.wait_peer(client.rank)
        server.ctrl_send(client.rank, 7)
        assert client.ctrl_recv(0) == 7
        found = samples(scrape(port))
        ids = {dict(ls)["session"] for (n, ls) in found if n == "hmc_peers_connected"}
        assert len(ids) == 2, ids
        mover = next(i for i in ids if value(found, "hmc_bytes_total", session=i, kind="put") > 0)
        stats = client.stats()
        assert value(found, "hmc_bytes_total", session=mover, kind="put") == stats["ops"]["put"]["bytes"] == 30 * 65536
        assert value(found, "hmc_bytes_total", session=mover, kind="get") == 4096
        assert value(found, "hmc_operations_total", session=mover, kind="put", outcome="done") == 30
        assert value(found, "hmc_peer_bytes_total", session=mover, peer="0", direction="put") == 30 * 65536
        assert value(found, "hmc_peer_transport_info", session=mover, peer="0", transport=client.transports(0)) == 1
        assert value(found, "hmc_operation_latency_microseconds_count", session=mover, kind="put") >= 1
        assert value(found, "hmc_peers_connected", session=mover) == 1
        assert value(found, "hmc_ctrl_messages_total", session=mover, direction="sent") == stats["ctrl"]["messages_sent"] > 0
        assert value(found, "hmc_ctrl_bytes_total", session=mover, direction="received") == stats["ctrl"]["bytes_received"]
        assert value(found, "hmc_handshakes_refused_total", session=mover, reason="auth") == 0
        assert value(found, "hmc_staging_copies_total", session=mover) == stats["staging"]["copies"] == 0
    with pytest.raises(urllib.error.URLError):  # the last session took the endpoint with it
        scrape(port)


def test_only_get_metrics_is_answered_and_a_busy_port_is_a_config_error(tmp_path):
    port = free_port()
    with hmc.create_session(buffer_size=MiB, ctrl_uds_dir=str(tmp_path), metrics_port=port):
        for path in ("/", "/metricsx", "/other"):
            with pytest.raises(urllib.error.HTTPError) as e:
                scrape(port, path)
            assert e.value.code == 404
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", data=b"x", method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 405
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # an endless header
            s.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"y" * 9000)
            assert s.recv(100).startswith(b"HTTP/1.1 431")
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # silent: dropped after 2 s
            assert s.recv(100) == b""
        assert "hmc_operations_total" in scrape(port)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(hmc.InvalidConfigError, match="metrics cannot listen"):
            hmc.create_session(buffer_size=MiB, ctrl_uds_dir=str(tmp_path), metrics_port=taken.getsockname()[1])
    with pytest.raises(hmc.InvalidArgumentError):
        hmc.create_session(buffer_size=MiB, metrics_port=70000)
