"""The server in asyncio style: serves "checksum this region" requests from a client as they come.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/server_asyncio.py [ctrl_port=18800]
"""
import asyncio
import hashlib
import json
import sys

import hmc


async def main(port):
    async with hmc.AsyncSession(buffer_size=64 << 20) as sess:
        await sess.init_server("127.0.0.1", port + 1, 0, port, 0)
        print(f"server: listening on 127.0.0.1:{port}", flush=True)
        await sess.wait_peer(1, timeout=60)
        while True:
            req = json.loads(await sess.ctrl_recv(1, timeout=60))
            if req["op"] == "bye":
                return
            data = sess.buf.get_bytes(req["offset"], req["nbytes"])
            await sess.ctrl_send(1, hashlib.sha256(data).hexdigest().encode())


asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 18800))
