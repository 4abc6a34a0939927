"""Child processes the net tests drive by lines: HMC peers, forwarders, probes (optionally in a netns)."""
import os
import pathlib
import queue
import secrets
import signal
import subprocess
import threading
import time

HERE = pathlib.Path(__file__).parent
BIN_DIR = pathlib.Path(os.environ.get("HMC_NET_BIN_DIR", HERE.parent.parent / "build" / "tests"))
PYTHON = "/usr/bin/python3"

# Variables that would silently override what a test asks for.
_SCRUB = ("UCX_TLS", "UCX_NET_DEVICES", "CTRL_TRANSPORT", "HMC_CTRL_UDS_DIR")
# Peers that authenticate share a key (HMC_AUTH_KEY): one per test run, never the user's key file.
RUN_KEY = secrets.token_hex(32)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.setdefault("HMC_LOG_LEVEL", "warn")
    env.setdefault("HMC_AUTH_KEY", RUN_KEY)
    env.update(extra)
    return env


class Child:
    """A process whose stdout lines are read by a thread; expect() waits for one with a prefix."""

    def __init__(self, argv, name, netns=None, env=None, stdin=True):
        self.name = name
        self.argv = (["ip", "netns", "exec", netns] if netns else []) + [str(a) for a in argv]
        self.log = []  # every stdout/stderr line, for failure messages
        self.lines = queue.Queue()
        self.unclaimed = []
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                                     env=env or clean_env())
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, True), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, False), daemon=True)]
        for t in self._readers:
            t.start()

    def _read(self, stream, is_stdout):
        for line in stream:
            line = line.rstrip("\n")
            self.log.append(line if is_stdout else "[stderr] " + line)
            if is_stdout:
                self.lines.put(line)
        if is_stdout:
            self.lines.put(None)  # end of output

    def tail(self, n=40):
        return f"--- {self.name} ({' '.join(self.argv)}), last lines:\n" + "\n".join(self.log[-n:])

    def send(self, line):
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise AssertionError(f"{self.name} is gone ({e})\n{self.tail()}") from None

    def expect(self, prefixes, timeout):
        """The first unclaimed line starting with one of prefixes; lines it passes over stay
        unclaimed for later calls (a peer's LOST may come before the FLOOD a test waits for)."""
        if isinstance(prefixes, str):
            prefixes = (prefixes,)
        for i, line in enumerate(self.unclaimed):
            if line.startswith(tuple(prefixes)):
                return self.unclaimed.pop(i)
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            try:
                line = self.lines.get(timeout=max(left, 0.001))
            except queue.Empty:
                raise AssertionError(f"{self.name}: no {prefixes} within {timeout} s\n{self.tail()}") from None
            if line is None:
                self.proc.wait(timeout=5)
                raise AssertionError(f"{self.name} exited ({self.proc.returncode}) before {prefixes}\n{self.tail()}")
            if line.startswith(tuple(prefixes)):
                return line
            self.unclaimed.append(line)

    def ask(self, command, prefixes, timeout):
        self.send(command)
        return self.expect(prefixes, timeout)

    def signal(self, sig):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=10):
        """quit (when it takes commands), then SIGKILL if it lingers; returns the exit status."""
        if self.proc.poll() is None and self.proc.stdin:
            try:
                self.send("quit")
            except AssertionError:
                pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for t in self._readers:
            t.join(timeout=5)
        return self.proc.returncode


def fields(line):
    """'WORD k=v k2=v2 | free text' -> {'k': 'v', ..., 'text': 'free text'} (ints where they are)."""
    head, _, text = line.partition(" | ")
    out = {"text": text}
    for item in head.split()[1:]:
        if "=" in item:
            k, v = item.split("=", 1)
            try:
                out[k] = int(v)
            except ValueError:
                out[k] = v
    return out


def counts(text):
    """'PEER_LOST:3,TIMEOUT:1' -> {'PEER_LOST': 3, 'TIMEOUT': 1}; '-' -> {}."""
    if text in ("-", ""):
        return {}
    return {k: int(v) for k, v in (p.split(":") for p in text.split(","))}


class Peer(Child):
    """hmc_net_peer: a Session server or client (see tests/net/net_peer_main.cpp for the commands)."""

    def __init__(self, role, name, netns=None, env=None, ready=True, **options):
        argv = [BIN_DIR / "hmc_net_peer", role]
        if os.environ.get("HMC_NET_PROGRESS_THREAD"):  # own, shared or caller: every peer's, to compare
            options.setdefault("progress_thread", os.environ["HMC_NET_PROGRESS_THREAD"])
        for k, v in options.items():
            argv += ["--" + k.replace("_", "-"), v]
        super().__init__(argv, name, netns, env)
        self.ctrl_port = self.data_port = 0
        if ready:
            self.ready()

    def ready(self, timeout=60):
        """Waits for the Session to exist (READY ctrl_port data_port)."""
        line = self.expect(("READY", "ERR start"), timeout)
        if not line.startswith("READY"):
            raise AssertionError(f"{self.name} did not start: {line}\n{self.tail()}")
        parts = line.split()
        self.ctrl_port = int(parts[1])
        self.data_port = int(parts[2]) if len(parts) > 2 else 0
        return self

    def stats(self):
        return fields(self.ask("stats", "STATS", 10))

    def idle_cpu_ms(self, wall_ms):
        return fields(self.ask(f"idle {wall_ms}", "IDLE", wall_ms / 1000 + 10))["cpu_ms"]

    killed = False  # by the test, on purpose

    def sigkill(self):
        self.killed = True
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
