"""Collecting the output of rank processes (world_peer.py, hmc_world_peer) for the world tests."""
import subprocess
import time


class Lines(list):
    """A rank's stdout lines (its checks, then DONE or ERROR); its stderr (HMC's log lines, which
    may come at any time, also after DONE) is kept apart and shown when a check fails."""

    def __init__(self, lines, log):
        super().__init__(lines)
        self.log = log


def finish(procs, limit=120):
    """Every process's (Lines, exit status), all within `limit` seconds; one still running then is killed."""
    end = time.monotonic() + limit
    results = []
    for p in procs:
        try:
            out, log = p.communicate(timeout=max(1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, log = p.communicate()
            out += "\n(killed at the time limit)"
        results.append((Lines(out.splitlines(), log), p.returncode))
    return results


def report(lines):
    return "\n".join(lines) + (f"\n--- stderr ---\n{lines.log}" if getattr(lines, "log", "") else "")
