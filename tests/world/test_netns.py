"""Four ranks in four network namespaces on a bridge (10.77.N.1-4), etcd in a fifth (10.77.N.5):
bootstrap and collectives through etcd, a rank SIGKILLed during barriers, and etcd killed during
start-up. Needs root, iproute2 and etcd; skipped with the reason otherwise. The namespaces, veths
and bridge are this test's own (named after its pid) and deleted afterwards.

UCX runs over tcp on the veths: Sessions in different namespaces of one kernel must not pick
shared memory."""
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from ranks import finish, report

PEER = os.environ.get("HMC_WORLD_PEER", str(pathlib.Path(__file__).parents[2] / "build/tests/hmc_world_peer"))
ETCD = "/usr/bin/etcd"
TAG = f"w{os.getpid() % 100000}"
NET = f"10.77.{20 + os.getpid() % 200}"


def reason_to_skip():
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip)"
    if not os.path.exists(ETCD):
        return f"{ETCD} is missing (Debian package etcd-server)"
    if not os.path.exists(PEER):
        return f"{PEER} is not built"
    return None


pytestmark = pytest.mark.skipif(reason_to_skip() is not None, reason=str(reason_to_skip()))


def sh(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Net:
    """Namespaces h<TAG>-0..4 with veths on bridge b<TAG>; host i gets NET.(i+1)."""

    def __init__(self, hosts=5):
        self.hosts = hosts
        self.bridge = f"b{TAG}"
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "link", "set", self.bridge, "up")
        for i in range(hosts):
            ns, host_end, ns_end = self.ns(i), f"{TAG}h{i}", f"{TAG}n{i}"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            sh("ip", "link", "set", ns_end, "netns", ns)
            sh("ip", "link", "set", host_end, "master", self.bridge, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.ip(i)}/24", "dev", ns_end)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", ns_end, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")

    @staticmethod
    def ns(i):
        return f"h{TAG}-{i}"

    @staticmethod
    def ip(i):
        return f"{NET}.{i + 1}"

    @staticmethod
    def dev(i):
        return f"{TAG}n{i}"

    def close(self):
        for i in range(self.hosts):
            subprocess.run(["ip", "netns", "del", self.ns(i)], stderr=subprocess.DEVNULL)
            subprocess.run(["ip", "link", "del", f"{TAG}h{i}"], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "link", "del", self.bridge], stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def net():
    n = Net()
    yield n
    n.close()


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="hmc-netns-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


class EtcdIn:
    """etcd in namespace 4, listening on NET.5:2379."""

    def __init__(self, net, workdir):
        ip = net.ip(4)
        self.url = f"etcd://{ip}:2379"
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", net.ns(4), ETCD, "--data-dir", f"{workdir}/etcd-{time.monotonic_ns()}",
             "--listen-client-urls", f"http://{ip}:2379", "--advertise-client-urls", f"http://{ip}:2379",
             "--listen-peer-urls", f"http://{ip}:2380", "--initial-advertise-peer-urls", f"http://{ip}:2380",
             "--initial-cluster", f"default=http://{ip}:2380", "--logger", "zap", "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)


def rank(net, i, url, workdir, *extra):
    os.makedirs(f"{workdir}/uds{i}", exist_ok=True)
    args = ["ip", "netns", "exec", net.ns(i), PEER, f"url={url}", "size=4", f"rank={i}", "tls=tcp",
            f"devices={net.dev(i)}", f"local_ip={net.ip(i)}", f"uds={workdir}/uds{i}", *extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, HMC_AUTH_KEY="world-netns-test-key", CTRL_TRANSPORT="tcp"))


def test_bootstrap_and_collectives_through_etcd(net, workdir):
    etcd = EtcdIn(net, workdir)
    try:
        procs = [rank(net, i, etcd.url, workdir, "job=netns-collectives", "buffer=4194304") for i in range(4)]
        for lines, rc in finish(procs, 180):
            oks = [line for line in lines if line.startswith("OK ")]
            assert rc == 0 and len(oks) == 20 and lines[-1] == "DONE", report(lines)
    finally:
        etcd.kill()


def test_a_rank_killed_during_a_barrier(net, workdir):
    etcd = EtcdIn(net, workdir)
    try:
        procs = [rank(net, i, etcd.url, workdir, "job=netns-kill", "scenario=barriers", "timeout_ms=15000")
                 for i in range(4)]
        for p in procs:
            assert p.stdout.readline().startswith("RANK")
        time.sleep(0.5)
        start = time.monotonic()
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait(timeout=10)
        results = finish([procs[0], procs[2], procs[3]], 40)
        assert time.monotonic() - start < 14  # well before the 15 s timeout
        for lines, rc in results:
            assert rc == 3 and lines[-1].startswith("ERROR peer lost") and "rank 1" in lines[-1], report(lines)
    finally:
        etcd.kill()


def test_etcd_killed_during_start_up(net, workdir):
    etcd = EtcdIn(net, workdir)
    try:
        # Three of four ranks join and wait for the fourth; then the store dies.
        procs = [rank(net, i, etcd.url, workdir, "job=netns-etcd-dies", "scenario=join", "timeout_ms=8000")
                 for i in range(3)]
        time.sleep(3)
    finally:
        etcd.kill()
    for lines, rc in finish(procs, 40):
        assert rc == 3 and lines and lines[-1].startswith("ERROR"), report(lines)
        assert "not connected" in lines[-1] or "timed out" in lines[-1], report(lines)
