"""A plain TCP stream across the forwarder, to prove the impairment path itself (no HMC involved).

    tcp_probe.py serve IP PORT                        -> READY, then GOT n=<bytes> sha=<hex>
    tcp_probe.py send IP PORT NBYTES SEED TIMEOUT_S   -> SENT n=<bytes> sha=<hex> connect_ms=<ms> | ERR <why>
"""
import hashlib
import random
import socket
import sys
import time


def serve(ip, port):
    with socket.create_server((ip, int(port))) as srv:
        print("READY", flush=True)
        conn, _ = srv.accept()
        sha, n = hashlib.sha256(), 0
        with conn:
            while chunk := conn.recv(1 << 16):
                sha.update(chunk)
                n += len(chunk)
        print(f"GOT n={n} sha={sha.hexdigest()}", flush=True)


def send(ip, port, nbytes, seed, timeout):
    data = random.Random(int(seed)).randbytes(int(nbytes))
    t0 = time.monotonic()
    try:
        with socket.create_connection((ip, int(port)), timeout=float(timeout)) as s:
            connect_ms = (time.monotonic() - t0) * 1000
            s.sendall(data)
    except OSError as e:
        print(f"ERR {type(e).__name__} {e}", flush=True)
        return
    print(f"SENT n={len(data)} sha={hashlib.sha256(data).hexdigest()} connect_ms={connect_ms:.0f}", flush=True)


if __name__ == "__main__":
    {"serve": serve, "send": send}[sys.argv[1]](*sys.argv[2:])
