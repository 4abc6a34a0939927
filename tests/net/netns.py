"""Three network namespaces, A | M | B, joined by two veth pairs; frames cross M through two
hmc_net_forwarder processes (one per direction) that impair them. Created and removed by the
tests themselves: names carry this process's pid, so parallel ctest jobs never collide, and a
later run removes what a killed run left behind.

    A (va 10.77.0.1/24) ---veth--- (ma) M (mb) ---veth--- (vb 10.77.0.2/24) B

Offloads are off on all four veths, so every frame carries a real IP/TCP checksum (a flipped bit
is caught by the receiving kernel) and no frame is larger than the MTU.
"""
import os
import re
import shutil
import signal
import subprocess
import itertools

from procs import BIN_DIR, Child, fields

IP_A, IP_B = "10.77.0.1", "10.77.0.2"
PREFIX = "hmcnf"
_serial = itertools.count()


def run(*argv, check=True):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def unavailable():
    """Why namespace tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, AF_PACKET)"
    for tool in ("ip", "ethtool", "nft"):
        if not shutil.which(tool):
            return f"needs {tool}"
    if not (BIN_DIR / "hmc_net_forwarder").exists():
        return f"hmc_net_forwarder not built in {BIN_DIR}"
    probe = f"{PREFIX}{os.getpid()}probe"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`ip netns add` fails: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def remove_namespace(ns):
    """Ends every process still inside ns (all started by these tests), then deletes it."""
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def sweep_stale():
    """Namespaces of earlier test processes that are gone (killed by a ctest timeout, say)."""
    for line in run("ip", "netns", "list").splitlines():
        m = re.match(rf"({PREFIX}(\d+)x\w+)", line)
        if m and not _alive(m.group(2)):
            remove_namespace(m.group(1))


class Topology:
    def __init__(self, **impairments):
        sweep_stale()
        base = f"{PREFIX}{os.getpid()}x{next(_serial)}"
        self.a, self.m, self.b = base + "a", base + "m", base + "b"
        self.forwarders = []
        self.stats = []  # one dict per forwarder run, from its STATS line
        self.nft_tables = []
        try:
            self._build()
            self.start_forwarders(**impairments)
        except BaseException:
            self.close()
            raise

    def _build(self):
        for ns in (self.a, self.m, self.b):
            run("ip", "netns", "add", ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
            run("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
        run("ip", "link", "add", "va", "netns", self.a, "type", "veth", "peer", "name", "ma", "netns", self.m)
        run("ip", "link", "add", "vb", "netns", self.b, "type", "veth", "peer", "name", "mb", "netns", self.m)
        for ns, dev in ((self.a, "va"), (self.m, "ma"), (self.m, "mb"), (self.b, "vb")):
            run("ip", "netns", "exec", ns, "ethtool", "-K", dev, "rx", "off", "tx", "off", "sg", "off", "tso", "off",
                "gso", "off", "gro", "off", check=False)  # exits 1 when some feature was already fixed off
            features = run("ip", "netns", "exec", ns, "ethtool", "-k", dev)
            for f in ("tx-checksumming", "rx-checksumming", "tcp-segmentation-offload"):
                if not re.search(rf"^{f}: off", features, re.M):
                    raise RuntimeError(f"{dev} in {ns}: {f} still on")
            run("ip", "-n", ns, "link", "set", "dev", dev, "up")
        run("ip", "-n", self.a, "addr", "add", IP_A + "/24", "dev", "va")
        run("ip", "-n", self.b, "addr", "add", IP_B + "/24", "dev", "vb")
        # Static neighbours: a corrupted or dropped ARP frame must not be what a fault test measures.
        mac_a = self.mac(self.a, "va")
        mac_b = self.mac(self.b, "vb")
        run("ip", "-n", self.a, "neigh", "replace", IP_B, "lladdr", mac_b, "dev", "va", "nud", "permanent")
        run("ip", "-n", self.b, "neigh", "replace", IP_A, "lladdr", mac_a, "dev", "vb", "nud", "permanent")

    @staticmethod
    def mac(ns, dev):
        return re.search(r"link/ether (\S+)", run("ip", "-n", ns, "link", "show", "dev", dev)).group(1)

    # -- the impairment path ------------------------------------------------------------------------
    def start_forwarders(self, max_seconds=600, **impairments):
        for src, dst in (("ma", "mb"), ("mb", "ma")):
            argv = [BIN_DIR / "hmc_net_forwarder", "--from", src, "--to", dst, "--max-seconds", max_seconds]
            for k, v in impairments.items():
                argv += ["--" + k.replace("_", "-")] + ([] if v is True else [v])
            f = Child(argv, f"forwarder {src}->{dst}", netns=self.m, stdin=False)
            f.expect("READY", 10)
            self.forwarders.append(f)

    def stop_forwarders(self):
        """Stops both forwarders; returns their summed STATS (frames in, out, dropped, ...)."""
        total = {}
        for f in self.forwarders:
            f.signal(signal.SIGTERM)
            try:
                st = fields(f.expect("STATS", 10))
            except AssertionError:
                st = {}
            f.stop()
            self.stats.append(st)
            for k, v in st.items():
                if isinstance(v, int):
                    total[k] = total.get(k, 0) + v
        self.forwarders = []
        return total

    def blackhole(self, on):
        """Silently drops every frame both ways (queued ones too) until called with False."""
        for f in self.forwarders:
            f.signal(signal.SIGUSR1 if on else signal.SIGUSR2)

    def link(self, up):
        """Carrier loss: the middle's veths go down, so A and B see their links drop, then return."""
        for dev in ("ma", "mb"):
            run("ip", "-n", self.m, "link", "set", "dev", dev, "up" if up else "down")

    def nft_partition(self, on):
        """A plain nftables drop of everything A and B receive from each other (input hook, both ends)."""
        for ns in (self.a, self.b):
            if on:
                rules = ("table inet hmcnf {\n chain input {\n  type filter hook input priority 0; policy accept;\n"
                         "  ip saddr 10.77.0.0/24 drop\n }\n}\n")
                subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules, text=True, check=True,
                               capture_output=True)
            else:
                run("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "hmcnf")

    def checksum_errors(self):
        """Frames the kernels of A and B discarded for a bad IP header or TCP checksum."""
        total = 0
        for ns in (self.a, self.b):
            snmp = run("ip", "netns", "exec", ns, "cat", "/proc/net/snmp").splitlines()
            for names, values in zip(snmp[::2], snmp[1::2]):
                row = dict(zip(names.split()[1:], map(int, values.split()[1:])))
                if names.startswith("Ip:"):
                    total += row.get("InHdrErrors", 0)
                elif names.startswith("Tcp:"):
                    total += row.get("InCsumErrors", 0)
        return total

    def close(self):
        if self.forwarders:
            self.stop_forwarders()
        for ns in (self.a, self.m, self.b):
            remove_namespace(ns)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
