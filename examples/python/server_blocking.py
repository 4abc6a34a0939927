"""The reference server, blocking style: wait for a client, report what it put, answer.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/server_blocking.py [ctrl_port=18700]
"""
import hashlib
import sys

import hmc

port = int(sys.argv[1]) if len(sys.argv) > 1 else 18700
with hmc.create_session(buffer_size=64 << 20) as sess:
    sess.init_server("127.0.0.1", ucx_port=port + 1, rdma_port=0, ctrl_tcp_port=port, self_id=0)
    print(f"server: listening on 127.0.0.1:{port}, waiting for client rank 1", flush=True)
    sess.wait_peer(1, timeout=60)
    nbytes = sess.ctrl_recv(1, timeout=60)  # the client sends the size after its put completed
    digest = hashlib.sha256(sess.buf.get_bytes(0, nbytes)).hexdigest()
    print(f"server: client put {nbytes} bytes, sha256 {digest[:16]}...")
    sess.buf.put(b"hello from the server", offset=nbytes)
    sess.ctrl_send(1, digest.encode())
    sess.ctrl_recv(1, timeout=60)  # goodbye
