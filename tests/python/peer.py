"""A server peer for the Python tests, in its own process, in blocking or asyncio style.

    python3 peer.py <blocking|asyncio> <tls> <uds_dir> [rdma_port=0]

Prints "READY <ctrl_port>", then serves JSON commands that client rank 1 sends as control bytes:
  {"op": "sha", "offset": o, "nbytes": n}         -> replies the sha256 hex of its buffer region
  {"op": "fill", "offset": o, "nbytes": n, "seed": s} -> writes pattern(s) there, replies "ok"
  {"op": "recv_stream", "nbytes": n}               -> recv_data_from the client into an n-byte array,
                                                      replies "<count> <sha256 of what arrived>"
  {"op": "send_stream", "nbytes": n, "seed": s}    -> send_data_to the client pattern(s), replies "ok"
  {"op": "exit"}                                   -> replies "bye" and exits
"""
import asyncio
import ctypes
import hashlib
import json
import sys

import numpy as np

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


class Stream:
    """The arrays and flag of one send_data_to / recv_data_from."""

    def __init__(self, cmd):
        self.cmd = cmd
        if cmd["op"] == "recv_stream":
            self.array = np.zeros(cmd["nbytes"], np.uint8)
        else:
            self.array = np.frombuffer(pattern(cmd["nbytes"], cmd["seed"]), np.uint8).copy()
        self.flag = ctypes.c_size_t(0)

    def args(self):
        ptr = self.array.ctypes.data
        if self.cmd["op"] == "recv_stream":
            return "recv_data_from", ("127.0.0.1", None, ptr, self.array.nbytes, hmc.MemoryType.CPU,
                                      ctypes.addressof(self.flag))
        return "send_data_to", ("127.0.0.1", None, ptr, self.array.nbytes, hmc.MemoryType.CPU)

    def reply(self):
        if self.cmd["op"] == "recv_stream":
            n = self.flag.value
            return f"{n} {hashlib.sha256(self.array[:n].tobytes()).hexdigest()}".encode()
        return b"ok"


def blocking(tls, uds_dir, rdma_port):
    with hmc.create_session(buffer_size=BUFFER, ucx_tls=tls, ucx_net_devices="lo", ctrl_uds_dir=uds_dir) as s:
        s.init_server("127.0.0.1", 18515, rdma_port, 0, 0)
        print("READY", s.ctrl_port, flush=True)
        s.wait_peer(1, timeout=30)
        while True:
            cmd = json.loads(s.ctrl_recv(1, timeout=60))
            if cmd["op"].endswith("_stream"):
                stream = Stream(cmd)
                name, args = stream.args()
                getattr(s, name)(*args)
                s.ctrl_send(1, stream.reply())
                continue
            s.ctrl_send(1, handle(s.buf, cmd))
            if cmd["op"] == "exit":
                return


async def asyncio_style(tls, uds_dir, rdma_port):
    async with hmc.AsyncSession(buffer_size=BUFFER, ucx_tls=tls, ucx_net_devices="lo", ctrl_uds_dir=uds_dir) as s:
        await s.init_server("127.0.0.1", 18515, rdma_port, 0, 0)
        print("READY", s.ctrl_port, flush=True)
        await s.wait_peer(1, timeout=30)
        while True:
            cmd = json.loads(await s.ctrl_recv(1, timeout=60))
            if cmd["op"].endswith("_stream"):
                stream = Stream(cmd)
                name, args = stream.args()
                await getattr(s, name)(*args)
                await s.ctrl_send(1, stream.reply())
                continue
            await s.ctrl_send(1, handle(s.buf, cmd))
            if cmd["op"] == "exit":
                return


if __name__ == "__main__":
    style, tls, uds = sys.argv[1], sys.argv[2], sys.argv[3]
    rdma = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    if style == "blocking":
        blocking(tls, uds, rdma)
    else:
        asyncio.run(asyncio_style(tls, uds, rdma))
