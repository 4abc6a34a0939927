"""The client in asyncio style: many concurrent puts from separate tasks, then one check.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/client_asyncio.py [ctrl_port=18800]
"""
import asyncio
import hashlib
import json
import sys

import hmc

BLOCK = 256 << 10
TASKS = 64


async def send_block(sess, i):
    block = bytes([i % 251]) * BLOCK
    await sess.put("127.0.0.1", block, bias=i * BLOCK)  # each task its own region
    return block


async def main(port):
    async with hmc.AsyncSession(buffer_size=64 << 20) as sess:
        await sess.connect(0, 1, "127.0.0.1", port + 1, port)
        blocks = await asyncio.gather(*(send_block(sess, i) for i in range(TASKS)))
        await sess.ctrl_send(0, json.dumps({"op": "sha", "offset": 0, "nbytes": TASKS * BLOCK}).encode())
        digest = (await asyncio.wait_for(sess.ctrl_recv(0), timeout=30)).decode()
        ok = digest == hashlib.sha256(b"".join(blocks)).hexdigest()
        print(f"client: {TASKS} concurrent puts of {BLOCK} bytes; server digest {'matches' if ok else 'DIFFERS'}")
        await sess.ctrl_send(0, json.dumps({"op": "bye"}).encode())
        return ok


sys.exit(0 if asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 18800)) else 1)
