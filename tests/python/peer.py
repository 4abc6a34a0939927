"""A server peer for the Python tests, in its own process, in blocking or asyncio style.

    python3 peer.py <blocking|asyncio> <tls> <uds_dir>

Prints "READY <ctrl_port>", then serves JSON commands that client rank 1 sends as control bytes:
  {"op": "sha", "offset": o, "nbytes": n}         -> replies the sha256 hex of its buffer region
  {"op": "fill", "offset": o, "nbytes": n, "seed": s} -> writes pattern(s) there, replies "ok"
  {"op": "exit"}                                   -> replies "bye" and exits
"""
import asyncio
import hashlib
import json
import sys

import hmc
from patterns import pattern

BUFFER = 80 << 20


def handle(buf, cmd):
    if cmd["op"] == "sha":
        return hashlib.sha256(buf.get_bytes(cmd["offset"], cmd["nbytes"])).hexdigest().encode()
    if cmd["op"] == "fill":
        buf.put(pattern(cmd["nbytes"], cmd["seed"]), cmd["offset"])
        return b"ok"
    return b"bye"


def blocking(tls, uds_dir):
    with hmc.create_session(buffer_size=BUFFER, ucx_tls=tls, ucx_net_devices="lo", ctrl_uds_dir=uds_dir) as s:
        s.init_server("127.0.0.1", 18515, 0, 0, 0)
        print("READY", s.ctrl_port, flush=True)
        s.wait_peer(1, timeout=30)
        while True:
            cmd = json.loads(s.ctrl_recv(1, timeout=60))
            s.ctrl_send(1, handle(s.buf, cmd))
            if cmd["op"] == "exit":
                return


async def asyncio_style(tls, uds_dir):
    async with hmc.AsyncSession(buffer_size=BUFFER, ucx_tls=tls, ucx_net_devices="lo", ctrl_uds_dir=uds_dir) as s:
        await s.init_server("127.0.0.1", 18515, 0, 0, 0)
        print("READY", s.ctrl_port, flush=True)
        await s.wait_peer(1, timeout=30)
        while True:
            cmd = json.loads(await s.ctrl_recv(1, timeout=60))
            await s.ctrl_send(1, handle(s.buf, cmd))
            if cmd["op"] == "exit":
                return


if __name__ == "__main__":
    style, tls, uds = sys.argv[1], sys.argv[2], sys.argv[3]
    if style == "blocking":
        blocking(tls, uds)
    else:
        asyncio.run(asyncio_style(tls, uds))
