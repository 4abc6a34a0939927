"""Collecting the output of rank processes (world_peer.py, hmc_world_peer) for the world tests, and
throw-away certificates for their stores' TLS."""
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


def openssl(folder, *args):
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)


def make_certs(folder, nodes=("node",)):
    """ca.pem and, for each node, NODE.pem / NODE.key signed by it and NODE-enc.key (password
    NODE-password); other-ca.pem with other.pem / other.key, a CA nobody trusts."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for ca, signed in (("ca", nodes), ("other-ca", ("other",))):
        openssl(folder, "req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "1", "-subj", f"/CN={ca}")
        for node in signed:
            openssl(folder, "req", *ec, "-keyout", f"{node}.key", "-out", f"{node}.csr", "-subj", f"/CN={node}")
            openssl(folder, "x509", "-req", "-in", f"{node}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                    "-CAcreateserial", "-out", f"{node}.pem", "-days", "1")
            openssl(folder, "pkey", "-in", f"{node}.key", "-aes256", "-passout", f"pass:{node}-password",
                    "-out", f"{node}-enc.key")
    return folder
