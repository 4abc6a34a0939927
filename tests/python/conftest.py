"""Fixtures: a server peer process (blocking or asyncio style) and a connected client session."""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

import hmc

HERE = pathlib.Path(__file__).parent
PYTHON = "/usr/bin/python3"  # Debian's interpreter: it sees python3-numpy/torch


class ServerProcess:
    def __init__(self, style, tls, rdma_port=0):
        self.uds_dir = tempfile.mkdtemp(prefix="hmc-py-")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]))
        self.proc = subprocess.Popen([PYTHON, str(HERE / "peer.py"), style, tls, self.uds_dir, str(rdma_port)],
                                     stdout=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "READY":
            self.proc.kill()
            raise RuntimeError(f"peer did not start: {line}")
        self.ctrl_port = int(line[1])

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        shutil.rmtree(self.uds_dir, ignore_errors=True)


@pytest.fixture(params=["shm", "tcp"])
def tls(request):
    return request.param


@pytest.fixture(params=["blocking", "asyncio"])
def server(request, tls):
    s = ServerProcess(request.param, tls)
    yield s
    s.close()


def session_kwargs(tls, uds_dir, **extra):
    return dict(buffer_size=80 << 20, ucx_tls=tls, ucx_net_devices="lo", ctrl_uds_dir=uds_dir, **extra)


def command(sess, **cmd):
    """Blocking request/response with the peer."""
    sess.ctrl_send(0, json.dumps(cmd).encode())
    return sess.ctrl_recv(0, timeout=30)


async def acommand(sess, **cmd):
    await sess.ctrl_send(0, json.dumps(cmd).encode())
    return await sess.ctrl_recv(0, timeout=30)


@pytest.fixture
def client(server, tls):
    with hmc.create_session(**session_kwargs(tls, server.uds_dir)) as s:
        assert s.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port) == 0
        yield s
        if server.proc.poll() is None:
            command(s, op="exit")


def run_async(server, tls, body, **extra):
    """Runs body(async_session) connected to the server as rank 1, then tells the server to exit."""
    import asyncio

    async def main():
        async with hmc.AsyncSession(**session_kwargs(tls, server.uds_dir, **extra)) as c:
            assert await c.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port) == 0
            try:
                await body(c)
            finally:
                if server.proc.poll() is None:
                    await acommand(c, op="exit")

    asyncio.run(main())


class PassCounter:
    """Counts an AsyncSession's progress passes from now on: its _progress, which the wakeup fd's reader
    and set_soon's hook look up for every pass."""

    def __init__(self, session):
        self.n = 0
        progress = session._progress

        def counted(*args):
            self.n += 1
            progress(*args)

        session._progress = counted


def run_child(code, timeout=120):
    """Runs Python code in a child process (a crash there fails the test instead of killing pytest)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]))
    return subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def shared_client():
    """One connected blocking client (shm, blocking server) for a module's many small cases."""
    server = ServerProcess("blocking", "shm")
    s = hmc.create_session(**session_kwargs("shm", server.uds_dir))
    try:
        assert s.connect(0, 1, "127.0.0.1", 18515, server.ctrl_port) == 0
        yield s
        if server.proc.poll() is None:
            command(s, op="exit")
    finally:
        s.close()
        server.close()


def pytest_terminal_summary(terminalreporter):
    """Every skip says why, also under -q (the GPU and network cases skip on machines without them)."""
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        terminalreporter.write_line(f"SKIPPED {report.nodeid}: {reason}")
