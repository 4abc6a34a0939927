"""The reference client, blocking style: put a NumPy array, check the server's digest, get a reply.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/client_blocking.py [ctrl_port=18700]
"""
import hashlib
import sys

import numpy as np

import hmc

port = int(sys.argv[1]) if len(sys.argv) > 1 else 18700
with hmc.create_session(buffer_size=64 << 20) as sess:
    sess.connect(peer_id=0, self_id=1, peer_ip="127.0.0.1", data_port=port + 1, ctrl_tcp_port=port)
    data = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    sess.put("127.0.0.1", data)  # copied into our buffer, then put: visible at the server when this returns
    sess.ctrl_send(0, data.nbytes)  # "data ready"
    digest = sess.ctrl_recv(0, timeout=60).decode()
    ok = digest == hashlib.sha256(data.tobytes()).hexdigest()
    reply = sess.get("127.0.0.1", len(b"hello from the server"), bias=data.nbytes)
    print(f"client: server digest {'matches' if ok else 'DIFFERS'}; reply {reply!r}")
    sess.ctrl_send(0, 0)
    sys.exit(0 if ok else 1)
