"""The reference package's perf app (apps/python_app/perf.py: a server and a client process, a TCP
socket of their own for the benchmark's protocol) as a driver: the same hmc calls with the same
arguments, in the same order. Differences: each size gets its own fill byte and the server checks
every byte of it (the app checks 64); the RDMA case is dropped, saying so, where no RDMA device
exists and the emulated fabric is not asked for. --role both runs the server in a thread of the
client's process: the emulated fabric (HMC_VERBS_EMULATION=1) reaches only within one process.
Usage: --role server|client|both --port-base P --uds-dir D [--sizes 64,4k,1m] [--iters N]."""
import argparse
import os
import socket
import struct
import sys
import threading
import time

import hmc


def send_msg(sock, payload):
    sock.sendall(struct.pack("!I", len(payload)) + payload)


def recv_msg(sock):
    def exact(n):
        out = b""
        while len(out) < n:
            part = sock.recv(n - len(out))
            if not part:
                raise ConnectionError("perf control socket closed")
            out += part
        return out

    return exact(struct.unpack("!I", exact(4))[0])


def parse_sizes(text):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return [int(p[:-1]) * mult[p[-1]] if p[-1] in mult else int(p) for p in text.lower().split(",") if p]


def rdma_devices():
    try:
        return os.listdir("/sys/class/infiniband")
    except OSError:
        return []


def new_session(args):
    sess = hmc.create_session(device_id=0, buffer_size=args.buffer_size, mem_type=hmc.MemoryType.CPU, num_chs=1,
                              local_ip="127.0.0.1")
    if hasattr(sess, "set_ctrl_uds_dir"):
        sess.set_ctrl_uds_dir(args.uds_dir)
    return sess


def server(args, listening=None):
    sess = new_session(args)
    sess.init_server(bind_ip="127.0.0.1", ucx_port=args.port_base, rdma_port=args.port_base + 1,
                     ctrl_tcp_port=args.port_base + 3, self_id=0, ctrl_uds_dir=args.uds_dir)
    listener = socket.create_server(("127.0.0.1", args.port_base + 2))
    if listening is not None:
        listening.set()
    conn, _ = listener.accept()
    failures = 0
    try:
        print(f"[server] {recv_msg(conn).decode()}", flush=True)
        while True:
            msg = recv_msg(conn)
            if msg == b"BYE":
                send_msg(conn, b"OK")
                break
            if msg.startswith(b"MODE "):
                send_msg(conn, b"OK")
            elif msg.startswith(b"DONE "):
                send_msg(conn, b"ACK")
            elif msg.startswith(b"CASE_END "):
                _, mode, size, fill = msg.split()
                size, fill = int(size), int(fill)
                got = bytearray(size)
                sess.buf.buffer_get_cpu_into(got, nbytes=size, offset=0)
                ok = got == bytes([fill]) * size
                failures += not ok
                print(f"[server] verify size={size} mode={mode.decode()}: {'PASS' if ok else 'FAIL'}", flush=True)
                send_msg(conn, b"OK")
    finally:
        conn.close()
        listener.close()
        sess.close_server()
    return 1 if failures else 0


def client(args):
    sess = new_session(args)
    ctrl = socket.create_connection(("127.0.0.1", args.port_base + 2))
    send_msg(ctrl, f"HELLO client={socket.gethostname()} server=127.0.0.1 gpu=0".encode())
    cases = [("rdma", hmc.ConnType.RDMA, args.port_base + 1), ("ucx", hmc.ConnType.UCX, args.port_base)]
    if os.environ.get("HMC_VERBS_EMULATION") == "1":
        print("[client] RDMA over the emulated fabric", flush=True)
    elif not rdma_devices():
        print("[client] no RDMA device (/sys/class/infiniband is empty): the rdma case is dropped", flush=True)
        cases = cases[1:]
    seq = 0
    for index, (name, conn_type, port) in enumerate(cases):
        sess.connect(peer_id=0, self_id=1, peer_ip="127.0.0.1", data_port=port, ctrl_tcp_port=args.port_base + 3,
                     uds_dir=args.uds_dir, conn=conn_type)
        send_msg(ctrl, f"MODE {name}".encode())
        assert recv_msg(ctrl) == b"OK"
        for i, size in enumerate(args.sizes):
            fill = (0x41 + 7 * index + i) & 0xFF
            payload = bytes([fill]) * size
            start = time.perf_counter()
            for _ in range(args.warmup + args.iters):
                sess.buf.put(payload, nbytes=size, offset=0, device=None)
                sess.put_remote("127.0.0.1", port, local_off=0, remote_off=0, nbytes=size, conn=conn_type)
                seq += 1
                send_msg(ctrl, f"DONE {size} {seq}".encode())
                recv_msg(ctrl)
            seconds = time.perf_counter() - start
            print(f"[client] {name} size={size} {(args.warmup + args.iters) * size / seconds / 2**20:.1f} MiB/s",
                  flush=True)
            send_msg(ctrl, f"CASE_END {name} {size} {fill}".encode())
            recv_msg(ctrl)
        sess.disconnect("127.0.0.1", port, conn=conn_type)
    send_msg(ctrl, b"BYE")
    recv_msg(ctrl)
    ctrl.close()
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=["server", "client", "both"], required=True)
    ap.add_argument("--port-base", type=int, required=True)
    ap.add_argument("--uds-dir", required=True)
    ap.add_argument("--sizes", type=parse_sizes, default=parse_sizes("64,256,1k,4k,64k,1m,4m,16m"))
    ap.add_argument("--buffer-size", type=int, default=16 << 20)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    if args.role == "both":
        served, listening = [], threading.Event()
        thread = threading.Thread(target=lambda: served.append(server(args, listening)), daemon=True)
        thread.start()
        if not listening.wait(30):
            print("[client] the server thread did not start listening", flush=True)
            return 1
        rc = client(args)
        thread.join(60)
        return rc or (served[0] if served else 1)
    return server(args) if args.role == "server" else client(args)


if __name__ == "__main__":
    sys.exit(main())
