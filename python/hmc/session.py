"""The blocking Session: the reference API, each call releasing the GIL while it waits."""
from . import _payload
from ._enums import ConnType, MemoryType
from ._errors import InvalidArgumentError, NotConnectedError, NotFoundError, TimeoutError, UnsupportedError
from ._hmc import Core, memory_available
from .future import Future

DEFAULT_BUFFER_SIZE = 128 << 20


class RegisteredBuffer:
    """A user array/tensor registered for zero-copy transfers (Session.register). Pass it to
    put()/get_into() instead of plain data; call release() (or use `with`) when done."""

    def __init__(self, registered, obj, nbytes):
        self._reg = registered
        self.obj = obj
        self.nbytes = nbytes

    def release(self):
        self._reg.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class BufferView:
    """sess.buf: the session's registered buffer, with bounds-checked copies in and out."""

    def __init__(self, core):
        self._core = core

    def __len__(self):
        return self._core.buffer_size()

    def put(self, obj, offset=0, device=None):
        """Copies obj (bytes, array, tensor, ...) into the buffer at offset; returns nbytes."""
        dev = _payload.device_of(obj) if device in (None, "cuda") else None
        if dev is not None or device == "cuda":
            if dev is None:
                raise InvalidArgumentError("device='cuda' needs a CUDA tensor")
            n = _payload.nbytes(obj)
            self._core.device_copy(True, obj.data_ptr(), n, offset, int(MemoryType.NVIDIA_GPU), dev[1])
            return n
        return self._core.write(_payload.source(obj), offset)

    def get_into(self, obj, nbytes=None, offset=0, device=None):
        """Copies nbytes (default: all of obj) from the buffer at offset into obj; returns nbytes."""
        dev = _payload.device_of(obj)
        if dev is not None or device == "cuda":
            if dev is None:
                raise InvalidArgumentError("device='cuda' needs a CUDA tensor")
            n = _payload.nbytes(obj) if nbytes is None else nbytes
            self._core.device_copy(False, obj.data_ptr(), n, offset, int(MemoryType.NVIDIA_GPU), dev[1])
            return n
        return self._core.read_into(_payload.destination(obj), nbytes, offset)

    def get_bytes(self, offset, nbytes):
        return self._core.read_bytes(offset, nbytes)

    def copy_within(self, dst_offset, src_offset, nbytes):
        self._core.copy_within(dst_offset, src_offset, nbytes)


class Session:
    """One registered buffer, a control channel and UCX endpoints to peers (see create_session)."""

    def __init__(self, device_id=0, buffer_size=DEFAULT_BUFFER_SIZE, mem_type=MemoryType.CPU, num_chs=1,
                 local_ip=None, *, progress_mode="adaptive", ucx_tls=None, ucx_net_devices=None, timeout=30.0,
                 ctrl_uds_dir=None):
        if num_chs < 1:
            raise InvalidArgumentError("num_chs must be >= 1")
        self._core = Core(buffer_size, int(mem_type), device_id, local_ip or "", progress_mode, ucx_tls or "",
                          ucx_net_devices or "", float(timeout), ctrl_uds_dir or "")
        self.buf = BufferView(self._core)
        self.timeout = float(timeout)
        self.num_chs = num_chs  # kept for the reference API: UCX uses one endpoint per peer

    # -- connection -----------------------------------------------------------------------
    def init_server(self, bind_ip, ucx_port, rdma_port, ctrl_tcp_port, self_id, ctrl_uds_dir=None):
        self._core.init_server(bind_ip, ucx_port, rdma_port, ctrl_tcp_port, self_id, ctrl_uds_dir or "")

    @property
    def ctrl_port(self):
        return self._core.ctrl_port()

    def connect(self, peer_id, self_id, peer_ip, data_port, ctrl_tcp_port, conn=ConnType.UCX):
        """Connects to a server; returns its rank once data can flow both ways."""
        return self._core.connect(peer_id, self_id, peer_ip, data_port, ctrl_tcp_port, int(conn))

    def wait_peer(self, rank, timeout=None):
        """Waits until a client `rank` is connected (server side)."""
        self._core.wait_peer(rank, timeout)

    def peers(self):
        return self._core.peers()

    def transports(self, peer):
        return self._core.transports(self._rank(peer))

    def disconnect(self, peer, conn=ConnType.UCX, data_port=None):
        self._check_conn(conn)
        self._core.disconnect(self._rank(peer, data_port))

    def close_server(self):
        self.close()

    def close(self):
        self._core.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- one-sided transfers ----------------------------------------------------------------
    def put_remote(self, peer_ip, data_port, local_off, remote_off, nbytes, conn=ConnType.UCX, timeout=None):
        self.put_nb(peer_ip, data_port, local_off, remote_off, nbytes, conn).result(self._wait(timeout))

    def get_remote(self, peer_ip, data_port, local_off, remote_off, nbytes, conn=ConnType.UCX, timeout=None):
        self.get_nb(peer_ip, data_port, local_off, remote_off, nbytes, conn).result(self._wait(timeout))

    def put_nb(self, peer_ip, data_port, local_off, remote_off, nbytes, conn=ConnType.UCX):
        self._check_conn(conn)
        return self._future(self._core.rma(True, self._rank(peer_ip, data_port), local_off, remote_off, nbytes,
                                           self._notify))

    def get_nb(self, peer_ip, data_port, local_off, remote_off, nbytes, conn=ConnType.UCX):
        self._check_conn(conn)
        return self._future(self._core.rma(False, self._rank(peer_ip, data_port), local_off, remote_off, nbytes,
                                           self._notify))

    def wait(self, futures, timeout=None):
        """Waits for one Future or a list; raises the first error after all are done."""
        if isinstance(futures, Future):
            return futures.result(self._wait(timeout))
        first = None
        for f in futures:
            try:
                f.result(self._wait(timeout))
            except TimeoutError:
                raise
            except Exception as e:  # noqa: BLE001 - re-raised below
                first = first or e
        if first is not None:
            raise first
        return None

    def put_batch(self, peer, segments, timeout=None):
        """segments: [(local_off, remote_off, nbytes), ...]; one completion, one flush."""
        self._future(self._core.batch(True, self._rank(peer), list(segments), self._notify)).result(
            self._wait(timeout))

    def get_batch(self, peer, segments, timeout=None):
        self._future(self._core.batch(False, self._rank(peer), list(segments), self._notify)).result(
            self._wait(timeout))

    def put_pipeline(self, peer, local_off, remote_off, nbytes, chunk=1 << 20, max_inflight=8, timeout=None):
        self._future(self._core.pipeline(True, self._rank(peer), local_off, remote_off, nbytes, chunk, max_inflight,
                                         self._notify)).result(self._wait(timeout))

    def get_pipeline(self, peer, local_off, remote_off, nbytes, chunk=1 << 20, max_inflight=8, timeout=None):
        self._future(self._core.pipeline(False, self._rank(peer), local_off, remote_off, nbytes, chunk, max_inflight,
                                         self._notify)).result(self._wait(timeout))

    # -- one-call helpers ---------------------------------------------------------------------
    def put(self, ip, data, bias=0, size=None, timeout=None):
        """Puts data to the peer at remote offset `bias` (staged at local offset `bias`, or straight
        from a RegisteredBuffer). Returns nbytes."""
        return self._wait_op(self._put_op(ip, data, bias, size), timeout)

    def get(self, ip, size, bias=0, timeout=None):
        """Gets `size` bytes from the peer's offset `bias`; returns them as bytes."""
        self.get_remote(ip, None, bias, bias, size, timeout=timeout)
        return self._core.read_bytes(bias, size)

    def get_into(self, ip, dest, bias=0, size=None, timeout=None):
        """Gets into dest (writable array/tensor/bytearray, or a RegisteredBuffer: zero-copy)."""
        return self._wait_op(self._get_into_op(ip, dest, bias, size), timeout)

    def register(self, obj):
        """Registers an array/tensor/buffer for zero-copy put()/get_into()."""
        dev = _payload.device_of(obj)
        n = _payload.nbytes(obj)
        if dev is not None:
            reg = self._core.register(obj, int(MemoryType.NVIDIA_GPU), obj.data_ptr(), n)
        else:
            reg = self._core.register(_payload.destination(obj) if _writable(obj) else _payload.source(obj),
                                      int(MemoryType.CPU), 0, n)
        return RegisteredBuffer(reg, obj, n)

    # -- control messages -----------------------------------------------------------------------
    def ctrl_send(self, peer, tag, timeout=None):
        """Sends an int tag (or bytes) to peer, ordered after everything sent before."""
        self._future(self._core.ctrl_send(self._rank(peer), tag, self._notify)).result(self._wait(timeout))

    def ctrl_recv(self, peer, timeout=None):
        """The next tag (int) or bytes from peer; hmc.TimeoutError after timeout seconds."""
        op = self._core.ctrl_recv(self._rank(peer), timeout, self._notify)
        return self._future(op).result((timeout if timeout is not None else self.timeout) + 1.0)

    # -- internals ------------------------------------------------------------------------------
    _notify = False  # blocking futures are waited for, not drained

    def _future(self, op):
        return Future(op, self._core, None, self.timeout + 1.0)

    def _wait(self, timeout):
        return self.timeout + 1.0 if timeout is None else timeout

    def _wait_op(self, op_and_n, timeout):
        op, n = op_and_n
        self._future(op).result(self._wait(timeout))
        return n

    def _put_op(self, ip, data, bias, size):
        rank = self._rank(ip)
        if isinstance(data, RegisteredBuffer):
            n = data.nbytes if size is None else size
            return self._core.registered_rma(True, data._reg, 0, rank, bias, n, self._notify), n
        if size is None:
            n = self.buf.put(data, bias)
        else:
            n = self.buf.put(memoryview(_payload.source(data)).cast("B")[:size], bias)
        return self._core.rma(True, rank, bias, bias, n, self._notify), n

    def _get_into_op(self, ip, dest, bias, size):
        rank = self._rank(ip)
        if isinstance(dest, RegisteredBuffer):
            n = dest.nbytes if size is None else size
            return self._core.registered_rma(False, dest._reg, 0, rank, bias, n, self._notify), n
        n = _payload.nbytes(dest) if size is None else size
        op = self._core.rma(False, rank, bias, bias, n, self._notify)
        return _CopyOut(op, self, dest, bias, n), n

    def _rank(self, peer, data_port=None):
        """The one place reference addressing (rank, 'ip', 'ip:port', (ip, port)) becomes a rank."""
        if isinstance(peer, bool):
            raise InvalidArgumentError("peer must be a rank, 'ip', 'ip:port' or (ip, port)")
        if isinstance(peer, int):
            return peer
        if isinstance(peer, tuple) and len(peer) == 2:
            peer, data_port = peer
        if not isinstance(peer, str):
            raise InvalidArgumentError(f"peer must be a rank, 'ip', 'ip:port' or (ip, port), not {peer!r}")
        if data_port is None and peer.count(":") == 1:
            peer, port = peer.split(":")
            data_port = int(port)
        if data_port is not None:
            try:
                return self._core.rank_of(peer, int(data_port))
            except NotFoundError:
                pass
        ranks = self._core.ranks_at(peer)
        if len(ranks) == 1:
            return ranks[0]
        if not ranks:
            raise NotConnectedError(f"no peer connected at {peer}" + (f":{data_port}" if data_port else ""))
        raise InvalidArgumentError(f"{len(ranks)} peers at {peer}: pass 'ip:port' or the rank")

    @staticmethod
    def _check_conn(conn):
        if ConnType(conn) != ConnType.UCX:
            raise UnsupportedError("ConnType.RDMA is unsupported in this build; use ConnType.UCX")


class _CopyOut:
    """A get into a non-registered destination: after the transfer, copy out of the buffer."""

    def __init__(self, op, sess, dest, bias, n):
        self._op, self._sess, self._dest, self._bias, self._n = op, sess, dest, bias, n
        self.id = op.id

    def done(self):
        return self._op.done()

    def wait(self, timeout=None):
        return self._op.wait(timeout)

    def result(self):
        self._op.result()
        self._sess.buf.get_into(self._dest, self._n, self._bias)


def _writable(obj):
    try:
        return not memoryview(_payload.source(obj)).readonly
    except TypeError:
        return False


def create_session(device_id=0, buffer_size=DEFAULT_BUFFER_SIZE, mem_type=MemoryType.CPU, num_chs=1, local_ip=None,
                   **options):
    """The reference entry point: a blocking Session."""
    return Session(device_id, buffer_size, mem_type, num_chs, local_ip, **options)


def memory_type_available(mem_type, device_id=0):
    """(available, reason) for a memory type on this machine and build."""
    return memory_available(int(mem_type), device_id)
