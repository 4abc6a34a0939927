"""The control channel's trust and liveness options as Python keywords: auth_key, authenticate,
heartbeat_interval/heartbeat_misses (and tls_*, which the C++ TLS tests cover end to end)."""
import os
import signal
import subprocess
import sys

import pytest

import hmc
from conftest import PYTHON

MiB = 1 << 20


def kwargs(tmp_path, **extra):
    return dict(buffer_size=MiB, ucx_tls="shm", ucx_net_devices="lo", ctrl_uds_dir=str(tmp_path), **extra)


def test_sessions_with_one_explicit_key_connect_and_another_key_is_refused(tmp_path):
    with hmc.create_session(**kwargs(tmp_path, auth_key="job-42 shared test key")) as server, \
            hmc.create_session(**kwargs(tmp_path, auth_key="job-42 shared test key")) as friend, \
            hmc.create_session(**kwargs(tmp_path, auth_key="job-43 shared test key", timeout=2.0)) as stranger:
        server.init_server("127.0.0.1", 0)
        friend.connect("127.0.0.1", server.ctrl_port)
        assert friend.put("127.0.0.1", b"trusted") == 7
        # The client says why itself (the server's log is on another host) and what to check.
        with pytest.raises(hmc.AuthenticationError, match="the two sides use different keys.*HMC_AUTH_KEY"):
            stranger.connect("127.0.0.1", server.ctrl_port)
        assert server.buf.get_bytes(0, 7) == b"trusted"


def test_opting_out_of_authentication_needs_both_sides(tmp_path):
    with hmc.create_session(**kwargs(tmp_path, authenticate=False)) as server, \
            hmc.create_session(**kwargs(tmp_path, authenticate=False)) as open_client, \
            hmc.create_session(**kwargs(tmp_path, timeout=2.0)) as careful:
        server.init_server("127.0.0.1", 0)
        open_client.connect("127.0.0.1", server.ctrl_port)
        assert open_client.put("127.0.0.1", b"open") == 4
        with pytest.raises(hmc.AuthenticationError, match="could not prove it holds our key"):
            careful.connect("127.0.0.1", server.ctrl_port)
    with hmc.create_session(**kwargs(tmp_path)) as keyed, \
            hmc.create_session(**kwargs(tmp_path, authenticate=False, timeout=2.0)) as open_client:
        keyed.init_server("127.0.0.1", 0)
        with pytest.raises(hmc.AuthenticationError, match="this side has it off"):
            open_client.connect("127.0.0.1", keyed.ctrl_port)


def test_a_stopped_peer_is_lost_at_the_configured_heartbeat_limit(tmp_path):
    # A SIGSTOPped client keeps its sockets open (the kernel still acknowledges) but sends nothing:
    # only liveness can tell. With heartbeat_interval=0.1 x 3 misses the server's receive fails
    # with PeerLostError long before its own 60 s timeout would have made it a TimeoutError.
    with hmc.create_session(**kwargs(tmp_path, heartbeat_interval=0.1, heartbeat_misses=3)) as server:
        server.init_server("127.0.0.1", 0)
        code = ("import sys, time, hmc\n"
                f"s = hmc.create_session(**{kwargs(tmp_path, heartbeat_interval=0.1, heartbeat_misses=3)!r})\n"
                f"s.connect('127.0.0.1', {server.ctrl_port})\n"
                "print('ready', flush=True)\n"
                "time.sleep(120)\n")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        child = subprocess.Popen([PYTHON, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert child.stdout.readline().strip() == "ready"
            server.wait_peer(1, timeout=20)
            os.kill(child.pid, signal.SIGSTOP)
            with pytest.raises(hmc.PeerLostError):
                server.ctrl_recv(1, timeout=60)
        finally:
            child.kill()
            child.wait()


@pytest.mark.parametrize("bad", [dict(auth_key=""), dict(auth_key=5), dict(authenticate="yes"),
                                 dict(heartbeat_interval=-1), dict(heartbeat_interval=float("nan")),
                                 dict(heartbeat_misses=0), dict(tls_cert=b"x")])
def test_bad_security_options_are_typed_errors(tmp_path, bad):
    with pytest.raises(hmc.InvalidArgumentError):
        hmc.create_session(**kwargs(tmp_path, **bad))


def test_a_key_shorter_than_16_bytes_is_refused_wherever_it_comes_from(tmp_path, monkeypatch):
    # The control channel resolves the key when it starts: at init_server or connect.
    with hmc.create_session(**kwargs(tmp_path, auth_key="too short")) as s:
        with pytest.raises(hmc.InvalidConfigError, match=r"SessionOptions::auth_key is 9 bytes: at least 16 .*urandom"):
            s.init_server("127.0.0.1", 0)
    monkeypatch.setenv("HMC_AUTH_KEY", "a")
    with hmc.create_session(**kwargs(tmp_path)) as s:
        with pytest.raises(hmc.InvalidConfigError, match="the auth key from HMC_AUTH_KEY is 1 bytes"):
            s.connect("127.0.0.1", 1)
    with pytest.raises(hmc.InvalidConfigError, match="the auth key from HMC_AUTH_KEY is 1 bytes"):
        hmc.Store("tcp://127.0.0.1:1", timeout=1)
    monkeypatch.setenv("HMC_AUTH_KEY", "k" * 16)
    with hmc.create_session(**kwargs(tmp_path)) as server, hmc.create_session(**kwargs(tmp_path)) as client:
        server.init_server("127.0.0.1", 0)
        client.connect("127.0.0.1", server.ctrl_port)


def test_sessions_that_share_no_memory_move_data_over_the_checked_tcp_path(tmp_path):
    # shared_memory=False: what peers on two hosts get; UCX's own (keyless) tcp is never used.
    opts = dict(buffer_size=8 * MiB, ctrl_uds_dir=str(tmp_path), shared_memory=False)
    with hmc.create_session(**opts) as server, hmc.create_session(**opts) as client:
        server.init_server("127.0.0.1", 0)
        client.connect("127.0.0.1", server.ctrl_port)
        assert client.transports("127.0.0.1") == "hmc-tcp"
        payload = os.urandom(3 * MiB + 7)
        assert client.put("127.0.0.1", payload, bias=4096) == len(payload)
        assert server.buf.get_bytes(4096, len(payload)) == payload
        back = bytearray(len(payload))
        client.get_into("127.0.0.1", back, bias=4096)
        assert bytes(back) == payload
        with pytest.raises(hmc.InvalidArgumentError, match="shared_memory"):
            hmc.create_session(shared_memory="no")
