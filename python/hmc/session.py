"""The Session: one C++ hmc::Session (buffer, control channel, UCX endpoints) behind the reference
API. Every method is written once: a blocking call ends in `_finish` (wait for the operation) or
`_call` (run a blocking core call); aio.AsyncSession overrides those two hooks to return awaitables,
so both styles share one code path. The reference's extra names are thin aliases in _reference.py.
"""
import collections
import inspect
import math
import threading
import time

from . import _args, _payload
from ._enums import ConnType, MemoryType
from ._errors import InvalidArgumentError, NotConnectedError, TimeoutError
from ._hmc import MAX_NUM_CHS, KvLayout, SessionHandle, memory_available
from ._reference import ReferenceBuffer, ReferenceSession, memory_type_from_torch_tensor
from .future import Future

DEFAULT_BUFFER_SIZE = 128 << 20
_UCX = ConnType.UCX
_SLOW = object()  # a fast path's answer when it sent nothing: take the general path
_KEEP_IDS = 4096  # finished operations still waitable by id (Session.wait) once more have been issued


class RegisteredBuffer:
    """A user array/tensor registered for zero-copy transfers (Session.register). Pass it to
    put()/get_into() instead of plain data; call release() (or use `with`) when done. Operations
    in flight keep the registration (and the object) alive until they are done."""

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


class IOBuffer(ReferenceBuffer):
    """sess.buf: the session's registered buffer with bounds-checked copies in and out. The
    reference's directional names (buffer_put_*: external -> buffer, buffer_get_*: buffer ->
    external) come from ReferenceBuffer and act on the same buffer."""

    def __init__(self, core):
        self._core = core

    def __len__(self):
        return self._core.buffer_size()

    @property
    def size(self):
        return self._core.buffer_size()

    @property
    def ptr(self):
        return self._core.buffer_ptr()

    @property
    def mem_type(self):
        return MemoryType(self._core.buffer_mem_type())

    @property
    def device_id(self):
        return self._core.buffer_device_id()

    def put(self, data, offset=0, device=None, *, nbytes=None):
        """Copies data (bytes-like, array, tensor; with device='ptr' a device pointer and nbytes)
        into the buffer at offset; returns the bytes copied. nbytes copies only a prefix."""
        offset = _args.offset(offset, "offset")
        device = _args.device(device)
        nbytes = _args.optional_size(nbytes, "nbytes")
        if device == "ptr":
            return self._at_pointer(True, data, nbytes, offset)
        if device == "cuda" or _payload.device_of(data) is not None:
            return self._cuda(True, data, nbytes, offset)
        src = _payload.source(data, "data")
        if nbytes is not None:
            src = _payload.prefix(src, nbytes, "nbytes")
        return self._core.write(src, offset)

    def get_into(self, dest, nbytes=None, offset=0, device=None):
        """Copies nbytes (default: all of dest) from the buffer at offset into dest; returns nbytes."""
        nbytes = _args.optional_size(nbytes, "nbytes")
        offset = _args.offset(offset, "offset")
        device = _args.device(device)
        if device == "ptr":
            return self._at_pointer(False, dest, nbytes, offset)
        if device == "cuda" or _payload.device_of(dest) is not None:
            return self._cuda(False, dest, nbytes, offset)
        return self._core.read_into(_payload.destination(dest, "dest"), nbytes, offset)

    def get_bytes(self, offset, nbytes):
        return self._core.read_bytes(_args.offset(offset, "offset"), _args.integer(nbytes, "nbytes"))

    def copy_within(self, dst_offset, src_offset, nbytes):
        self._core.copy_within(_args.offset(dst_offset, "dst_offset"), _args.offset(src_offset, "src_offset"),
                               _args.integer(nbytes, "nbytes"))

    def _device_type(self):
        """The memory type a raw device pointer is taken to be: the buffer's own GPU type, else CUDA."""
        own = self.mem_type
        return own if own not in (MemoryType.CPU, MemoryType.DEFAULT) else MemoryType.NVIDIA_GPU

    def _at_pointer(self, into, ptr, nbytes, offset):
        if nbytes is None:
            raise InvalidArgumentError("device='ptr' needs nbytes")
        ptr = _args.integer(ptr, "ptr (a device pointer)", minimum=1)
        _payload.require_memory(self._device_type(), self.device_id, "device='ptr'")
        self._core.copy_ptr(into, ptr, nbytes, offset, int(self._device_type()), self.device_id)
        return nbytes

    def _cuda(self, into, t, nbytes, offset):
        index = _payload.cuda_device(t, "device='cuda'")
        if not t.is_contiguous():
            if not into:
                raise InvalidArgumentError("dest: the CUDA tensor must be contiguous")
            t = t.contiguous()
        n = _payload.nbytes(t) if nbytes is None else nbytes
        if n > _payload.nbytes(t):
            raise InvalidArgumentError(f"nbytes={n} exceeds the tensor's {_payload.nbytes(t)} bytes")
        self._core.copy_ptr(into, t.data_ptr(), n, offset, int(MemoryType.NVIDIA_GPU), index)
        return n


BufferView = IOBuffer  # the name this package used first


class Session(ReferenceSession):
    """One registered buffer, a control channel and UCX endpoints to peers (see create_session)."""

    _notify = False  # blocking operations are waited for, not announced to an event loop
    # Blocking calls drive the session on the caller's thread; a keeper thread covers idle spells
    # (docs/python.md, "Who drives the session").
    _default_progress_thread = "shared"

    def __init__(self, device_id=0, buffer_size=DEFAULT_BUFFER_SIZE, mem_type=MemoryType.CPU, num_chs=1,
                 local_ip=None, *, progress_mode="adaptive", progress_thread=None, ucx_tls=None, ucx_net_devices=None, timeout=30.0,
                 ctrl_uds_dir=None, auth_key=None, authenticate=True, heartbeat_interval=None,
                 heartbeat_misses=None, tls_cert=None, tls_key=None, tls_ca=None, shared_memory=True,
                 metrics_port=None, metrics_host=None):
        device_id = _args.integer(device_id, "device_id", 0, (1 << 31) - 1)
        if not isinstance(shared_memory, bool):
            raise InvalidArgumentError(f"shared_memory must be True or False, not {shared_memory!r}")
        size = _args.buffer_size(buffer_size)
        mem = _args.mem_type(mem_type)
        self.num_chs = _args.integer(num_chs, "num_chs", 1, MAX_NUM_CHS)  # RDMA: QPs per peer; UCX: one endpoint
        local_ip = None if local_ip in (None, "") else _args.ip(local_ip, "local_ip")
        if progress_mode not in ("adaptive", "event", "poll"):
            raise InvalidArgumentError(
                f"progress_mode must be 'adaptive', 'event' or 'poll', not {progress_mode!r}")
        if progress_thread is None:
            progress_thread = self._default_progress_thread
        if progress_thread not in ("shared", "caller", "own"):
            raise InvalidArgumentError(
                f"progress_thread must be 'shared', 'caller' or 'own', not {progress_thread!r}")
        self.progress_thread = progress_thread
        self.timeout = _args.session_timeout(timeout)
        metrics_port = 0 if metrics_port is None else _args.integer(metrics_port, "metrics_port", 1, 65535)
        metrics_host = "" if metrics_host is None else _args.ip(metrics_host, "metrics_host")
        self._core = SessionHandle(size, int(mem), device_id, local_ip or "", progress_mode, progress_thread,
                                   _args.text(ucx_tls, "ucx_tls"),
                                   _args.text(ucx_net_devices, "ucx_net_devices"), self.timeout,
                                   _args.text(ctrl_uds_dir, "ctrl_uds_dir"), **_security(
                                       auth_key, authenticate, heartbeat_interval, heartbeat_misses, tls_cert, tls_key, tls_ca),
                                   num_chs=self.num_chs, shared_memory=shared_memory, metrics_port=metrics_port,
                                   metrics_host=metrics_host)
        self.buf = IOBuffer(self._core)
        self._ctrl_uds_dir = None  # set_ctrl_uds_dir: init_server's default ctrl_uds_dir
        self._issued = collections.OrderedDict()  # op id -> Future, for wait(id)
        self._issued_lock = threading.Lock()

    # -- the two hooks AsyncSession overrides -------------------------------------------------
    def _finish(self, op, timeout=None, then=None):
        """Waits for op (timeout None: the session timeout + 1 s, so the op's own error comes
        first), raises its error, returns then() (or None)."""
        limit = self.timeout + 1.0 if timeout is None else timeout
        if not op.wait(limit):
            raise TimeoutError(f"operation not complete after {limit} s (it keeps running)")
        op.result()
        return then() if then is not None else None

    def _call(self, fn, *args):
        return fn(*args)

    def _quick_rma(self, is_put, ip, port, local_off, remote_off, nbytes):
        """put_remote/get_remote with plain arguments (ints, a rank or an 'ip') in one C++ call that
        submits and waits; _SLOW, with nothing sent, for anything else (the general path checks it)."""
        return None if self._core.rma_wait(is_put, ip, port, local_off, remote_off, nbytes) else _SLOW

    def _future(self, op):
        return Future(op, None, self.timeout + 1.0)

    # -- connection -----------------------------------------------------------------------------
    def init_server(self, *args, **kwargs):
        """Two forms: init_server(bind_ip, ucx_port, rdma_port, ctrl_tcp_port, self_id, ctrl_uds_dir=None)
        (README: this session is rank self_id; it serves RDMA when only rdma_port is given, else UCX) and
        init_server(ip, port, conn=ConnType.UCX) (SDK guide: rank 0, clients get 1, 2, ...)."""
        return self._by_form("init_server", (self._init_server_readme, self._init_server_sdk), args, kwargs)

    def _init_server_readme(self, bind_ip, ucx_port, rdma_port, ctrl_tcp_port, self_id, ctrl_uds_dir=None):
        if ctrl_uds_dir is None:
            ctrl_uds_dir = self._ctrl_uds_dir
        return self._call(self._core.init_server, _args.ip(bind_ip, "bind_ip"), _args.port(ucx_port, "ucx_port"),
                          _args.port(rdma_port, "rdma_port"), _args.port(ctrl_tcp_port, "ctrl_tcp_port"),
                          _args.rank(self_id, "self_id"), _args.text(ctrl_uds_dir, "ctrl_uds_dir"))

    def _init_server_sdk(self, ip, port, conn=ConnType.UCX):
        return self._call(self._core.init_server_sdk, _args.ip(ip), _args.port(port), int(_args.conn(conn)))

    def connect(self, *args, **kwargs):
        """Two forms, each returning the server's rank once data can flow both ways:
        connect(peer_id, self_id, peer_ip, data_port, ctrl_tcp_port, conn=ConnType.UCX, *, uds_dir=None)
        (README) and connect(ip, port, conn=ConnType.UCX) (SDK guide: the server assigns this session's
        rank). timeout= (seconds, keyword only; default the session's) bounds the whole connect: a peer
        not listening yet is retried until then, with a warning every 5 s saying whom it waits for.
        uds_dir, where the reference's client looked for a same-host server's Unix socket, is checked
        and not needed: our server names its socket in the handshake (CTRL_TRANSPORT picks)."""
        return self._by_form("connect", (self._connect_readme, self._connect_sdk), args, kwargs)

    def _connect_readme(self, peer_id, self_id, peer_ip, data_port, ctrl_tcp_port, conn=ConnType.UCX, *,
                        timeout=None, uds_dir=None):
        _args.text(uds_dir, "uds_dir")
        return self._call(self._core.connect, _args.rank(peer_id, "peer_id"), _args.rank(self_id, "self_id"),
                          _args.ip(peer_ip, "peer_ip"), _args.port(data_port, "data_port"),
                          _args.port(ctrl_tcp_port, "ctrl_tcp_port"), int(_args.conn(conn)), _args.timeout(timeout))

    def _connect_sdk(self, ip, port, conn=ConnType.UCX, *, timeout=None):
        return self._call(self._core.connect_sdk, _args.ip(ip), _args.port(port), int(_args.conn(conn)),
                          _args.timeout(timeout))

    @staticmethod
    def _by_form(what, methods, args, kwargs):
        method, arguments = _args.form([(m, inspect.signature(m)) for m in methods], args, kwargs, what)
        return method(**arguments)

    def wait_peer(self, rank, timeout=None):
        """Waits until a client `rank` is connected (server side)."""
        return self._call(self._core.wait_peer, _args.rank(rank), _args.timeout(timeout))

    @property
    def ctrl_port(self):
        return self._core.ctrl_port()

    @property
    def rank(self):
        """This session's rank once init_server/connect fixed it (None before, or in builds
        without the SDK form's rank assignment)."""
        return self._core.rank()

    def peers(self):
        return self._core.peers()

    @property
    def native_memory_types(self):
        """Memory types UCX moves itself (CPU only with Debian's UCX); other device memory is
        staged through pinned host bounce buffers."""
        return [MemoryType(t) for t in self._core.native_memory_types()]

    @property
    def buffer_staged(self):
        """Whether this session's buffer is device memory staged through a pinned host mirror."""
        return self._core.buffer_staged()

    def stats(self):
        """Counters since the session started, as plain numbers and strings:
        {"ops": {kind: {"done", "bytes", "failed", "timed_out", "aborted", "latency_us": {"p50",
        "p99", "p999", "buckets"}}}, "in_flight", "peers_connected", "peers_lost", "peers": {rank:
        {"transport", "put_bytes", "get_bytes", "message_bytes", "done", "failed"}}}. Kinds: put, get, put_batch
        (and put_blocks), get_batch (and get_blocks), put_notify, message. Latency is sampled (one
        operation in 16); bucket i counts those under 2**i us, and p50/p99/p999 are bucket bounds."""
        return self._core.stats()

    def transports(self, peer):
        """What carries the data to peer: 'rc' ('rc-emulated') over RDMA, UCX's transports (e.g.
        'posix,cma', 'tcp') over UCX; ' (staged)' when device memory goes through host buffers."""
        return self._core.transports(self._rank(peer, wait=False))

    def conn_of(self, peer):
        """The ConnType carrying peer's data: the one its client named in connect(..., conn)."""
        return ConnType(self._core.peer_conn(self._rank(peer, wait=False)))

    def disconnect(self, peer, port=None, conn=ConnType.UCX):
        """Drops one peer: disconnect(ip, port, conn) (reference), disconnect(ip, conn) (SDK guide),
        or a rank / 'ip:port'. conn must be the peer's; connect again with either conn."""
        if isinstance(port, ConnType):
            port, conn = None, port
        return self._call(self._core.disconnect, self._peer(peer, port, False, _args.conn(conn)))

    def close_server(self):
        """Stops the control listener; connected peers keep working (close() ends everything)."""
        return self._call(self._core.close_server)

    def close(self):
        """Ends the session. Calls in flight in other threads finish or fail with ClosedError
        first; safe from a Future callback."""
        return self._call(self._core.close)

    def progress(self):
        """progress_thread='caller' (or 'shared'): runs what is ready (handlers, one UCX progress) on this thread
        and returns at once. Blocking calls drive the session while they wait; call this when
        nothing else does (a passive target over tcp) or from your own event loop on wakeup_fd().
        Does nothing with progress_thread='own' (or while another thread drives)."""
        self._core.progress()

    def wakeup_fd(self):
        """progress_thread='caller': an fd readable while progress() has work (for select/epoll);
        owned by the session. InvalidArgumentError unless progress_thread='caller'."""
        return self._core.wakeup_fd()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- one-sided transfers ----------------------------------------------------------------------
    def put_remote(self, ip, port, local_off, remote_off, nbytes, conn=ConnType.UCX, timeout=None, *, notify=None):
        """Puts local [local_off, +nbytes) to the peer's [remote_off, +nbytes); the bytes are in the
        peer's buffer on return. port None: the only peer at ip. notify: a tag (int) or bytes that
        the peer's ctrl_recv gets only after these bytes are visible to it (one operation)."""
        if conn is _UCX and timeout is None and notify is None:  # the common call: one C++ call
            done = self._quick_rma(True, ip, port, local_off, remote_off, nbytes)
            if done is not _SLOW:
                return done
        timeout = _args.timeout(timeout)
        op = self._rma_op(True, ip, port, local_off, remote_off, nbytes, conn, notify=notify)
        return self._finish(op, timeout)

    def get_remote(self, ip, port, local_off, remote_off, nbytes, conn=ConnType.UCX, timeout=None):
        if conn is _UCX and timeout is None:
            done = self._quick_rma(False, ip, port, local_off, remote_off, nbytes)
            if done is not _SLOW:
                return done
        timeout = _args.timeout(timeout)
        return self._finish(self._rma_op(False, ip, port, local_off, remote_off, nbytes, conn), timeout)

    def put_nb(self, ip, port, local_off, remote_off, nbytes, conn=ConnType.UCX):
        """Starts a put; returns an hmc.Future (its .id is what the reference returned)."""
        return self._issue(self._rma_op(True, ip, port, local_off, remote_off, nbytes, conn, wait=False))

    def get_nb(self, ip, port, local_off, remote_off, nbytes, conn=ConnType.UCX):
        return self._issue(self._rma_op(False, ip, port, local_off, remote_off, nbytes, conn, wait=False))

    def wait(self, ops, timeout=None):
        """Waits for one operation (a Future or its id) or a list of them, all within timeout;
        raises the first error after all are done."""
        futures = self._futures_of(ops)
        timeout = _args.timeout(timeout)
        deadline = time.monotonic() + (self.timeout + 1.0 if timeout is None else timeout)
        first = None
        for f in futures:
            try:
                f.result(max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise
            except Exception as e:  # noqa: BLE001 - re-raised below
                first = first or e
        if first is not None:
            raise first

    def put_batch(self, peer, segments, conn=ConnType.UCX, timeout=None, *, notify=None):
        """segments: [(local_off, remote_off, nbytes), ...] or an (N, 3) integer array (NumPy, a CPU
        torch tensor), read in C++ with no Python object per segment; segments that continue one
        another on both sides travel as one. One completion, one flush. notify: a tag (int) or bytes
        that the peer's ctrl_recv gets only after every segment's bytes are visible to it."""
        timeout = _args.timeout(timeout)
        return self._finish(self._batch_op(True, peer, segments, conn, notify), timeout)

    def get_batch(self, peer, segments, conn=ConnType.UCX, timeout=None):
        timeout = _args.timeout(timeout)
        return self._finish(self._batch_op(False, peer, segments, conn), timeout)

    def put_blocks(self, peer, layout, src_ids, dst_ids, remote_layout=None, conn=ConnType.UCX, timeout=None, *,
                   notify=None, memory=None):
        """Blocks src_ids[i] of layout (an hmc.KvLayout of the session buffer, or of `memory`, a
        RegisteredBuffer: a KV cache in a registered tensor, sent zero-copy) to blocks dst_ids[i] of the
        peer's remote_layout (default: layout) in its session buffer, in every region, as one batch.
        Ids: 1-D integer arrays (NumPy, CPU torch tensors) or lists. An id past either layout is an
        InvalidArgumentError naming it, and nothing is sent. notify: as put_batch's."""
        timeout = _args.timeout(timeout)
        op = self._blocks_op(True, peer, layout, src_ids, dst_ids, remote_layout, conn, memory, notify)
        return self._finish(op, timeout)

    def get_blocks(self, peer, layout, src_ids, dst_ids, remote_layout=None, conn=ConnType.UCX, timeout=None, *,
                   memory=None):
        """The peer's blocks src_ids[i] of remote_layout (default: layout) into blocks dst_ids[i] of
        layout (in the session buffer, or in `memory`, a RegisteredBuffer), in every region, as one
        batch."""
        timeout = _args.timeout(timeout)
        return self._finish(self._blocks_op(False, peer, layout, src_ids, dst_ids, remote_layout, conn, memory), timeout)

    def exchange_layout(self, peer, layout, timeout=None):
        """Sends layout to peer and returns the peer's (an hmc.KvLayout). Both sides call it, as their
        next control message to each other; anything else received first is an InvalidArgumentError."""
        _args.kv_layout(layout, "layout")
        self.ctrl_send(peer, layout.to_bytes(), timeout)
        return _layout_from(self.ctrl_recv(peer, timeout))

    def put_pipeline(self, peer, local_off, remote_off, nbytes, chunk=1 << 20, max_inflight=8, conn=ConnType.UCX,
                     timeout=None):
        timeout = _args.timeout(timeout)
        return self._finish(self._pipeline_op(True, peer, local_off, remote_off, nbytes, chunk, max_inflight, conn),
                            timeout)

    def get_pipeline(self, peer, local_off, remote_off, nbytes, chunk=1 << 20, max_inflight=8, conn=ConnType.UCX,
                     timeout=None):
        timeout = _args.timeout(timeout)
        return self._finish(self._pipeline_op(False, peer, local_off, remote_off, nbytes, chunk, max_inflight, conn),
                            timeout)

    # -- one-call helpers (stage through the buffer at offset `bias` on both sides) -----------------
    def put(self, ip, data, bias=0, conn=ConnType.UCX, size=None, timeout=None, *, notify=None):
        """Puts data to the peer's offset `bias` (staged at local offset `bias`, or straight from a
        RegisteredBuffer; CUDA tensors through the device path). Returns nbytes. `conn` and `bias`
        may come third in either order, as in the guides. notify: as put_remote's."""
        timeout = _args.timeout(timeout)
        op, n = self._put_op(ip, data, bias, conn, size, notify)
        return self._finish(op, timeout, lambda: n)

    def get(self, ip, size, bias=0, conn=ConnType.UCX, timeout=None):
        """Gets `size` bytes from the peer's offset `bias`; returns them as bytes. The guide's order
        get(size, ip, ...) works too."""
        if _is_count(ip) and isinstance(size, (str, tuple)):
            ip, size = size, ip
        timeout = _args.timeout(timeout)
        bias, conn = _args.bias_and_conn(bias, conn)
        size = _args.size(size, "size")
        op = self._core.rma(False, self._peer(ip, conn=conn), bias, bias, size, self._notify)
        return self._finish(op, timeout, lambda: self._core.read_bytes(bias, size))

    def get_into(self, ip, dest, bias=0, conn=ConnType.UCX, size=None, timeout=None):
        """Gets into dest (writable array/tensor/bytearray; a CUDA tensor; or a RegisteredBuffer:
        zero-copy); size defaults to all of dest. Returns nbytes."""
        timeout = _args.timeout(timeout)
        bias, conn = _args.bias_and_conn(bias, conn)
        size = _args.optional_size(size, "size")
        if isinstance(dest, RegisteredBuffer):
            n = _fits(dest.nbytes, size)
            op = self._core.registered_rma(False, dest._reg, 0, self._peer(ip, conn=conn), bias, n, self._notify)
            return self._finish(op, timeout, lambda: n)
        if _payload.device_of(dest) is not None:
            n = _fits(_payload.nbytes(dest), size)
            op = self._core.rma(False, self._peer(ip, conn=conn), bias, bias, n, self._notify)
            return self._finish(op, timeout, lambda: self.buf.get_into(dest, n, bias, "cuda"))
        dst = _payload.destination(dest, "dest")
        n = _fits(_payload.nbytes(dst), size)
        op = self._core.rma(False, self._peer(ip, conn=conn), bias, bias, n, self._notify)
        return self._finish(op, timeout, lambda: self._core.read_into(dst, n, bias))

    def register(self, obj):
        """Registers an array/tensor/buffer for zero-copy put()/get_into()."""
        dev = _payload.device_of(obj)
        if dev is not None:  # device memory UCX cannot move is staged (docs/gpu-staging.md)
            if not obj.is_contiguous():
                raise InvalidArgumentError("obj: the CUDA tensor must be contiguous")
            n = _payload.nbytes(obj)
            reg = self._core.register(obj, int(memory_type_from_torch_tensor(obj)), obj.data_ptr(), n)
        else:
            view = _payload.destination(obj, "obj") if _payload.writable(obj) else _payload.source(obj, "obj")
            n = _payload.nbytes(view)
            reg = self._core.register(view, int(MemoryType.CPU), 0, n)
        return RegisteredBuffer(reg, obj, n)

    # -- control messages ---------------------------------------------------------------------------
    def ctrl_send(self, peer, tag, timeout=None):
        """Sends an int tag in [0, 2**64) (or bytes) to peer, ordered after everything sent before."""
        timeout, tag = _args.timeout(timeout), _tag(tag)
        return self._finish(self._core.ctrl_send(self._rank(peer), tag, self._notify), timeout)

    def ctrl_recv(self, peer, timeout=None):
        """The next tag (int) or bytes from peer; hmc.TimeoutError after timeout seconds."""
        timeout = _args.timeout(timeout)
        op = self._core.ctrl_recv(self._rank(peer), timeout, self._notify)
        return self._finish(op, (self.timeout if timeout is None else timeout) + 1.0, op.result)

    def wait_notify(self, peer, tag, count=1, timeout=None):
        """Returns once `count` tags equal to `tag` (an int) arrived from peer: the notify of
        put/put_batch/put_blocks(..., notify=tag), or a ctrl_send, each after the bytes it announces.
        They are taken out of ctrl_recv's order; tags already received count; many waits may be
        pending. hmc.TimeoutError after timeout seconds (what it counted goes to the next wait for
        that tag); hmc.PeerLostError once the peer is gone and not enough arrived."""
        timeout, tag = _args.timeout(timeout), _args.integer(tag, "tag")
        count = _args.integer(count, "count", minimum=1, maximum=1 << 32)
        op = self._core.wait_notify(self._rank(peer), tag, count, timeout, self._notify)
        return self._finish(op, (self.timeout if timeout is None else timeout) + 1.0)

    # -- internals ------------------------------------------------------------------------------------
    def _rank(self, peer, port=None, wait=True):
        """The one place reference addressing (rank, 'ip', 'ip:port', (ip, port)) becomes a rank.
        A port that matches no peer is an error, never a fallback to the ip alone. On a serving
        session an address no client holds yet is waited for (the SDK guide's server names its
        client right after init_server); `wait=False` for calls that must not block."""
        where, port = _args.peer(peer, port)
        if not isinstance(where, str):
            return where
        try:
            return self._core.resolve(where, port)
        except NotConnectedError:
            if not wait or not self._serving():
                raise
        return self._peer_at(where, port)

    def _peer(self, peer, port=None, wait=True, conn=_UCX):
        """_rank(), and the peer must be carried by `conn` (an InvalidArgumentError naming both
        otherwise; no lock is taken while no peer is on RDMA)."""
        rank = self._rank(peer, port, wait)
        self._core.check_conn(rank, conn)
        return rank

    def _serving(self):
        try:
            self._core.ctrl_port()
            return True
        except NotConnectedError:
            return False

    def _peer_at(self, where, port):
        """The third hook: a blocking wait here; AsyncSession awaits it instead."""
        return self._core.wait_peer_at(where, port, self.timeout)

    def _rma_op(self, is_put, ip, port, local_off, remote_off, nbytes, conn, wait=True, notify=None):
        conn = _args.conn(conn)
        local_off, remote_off = _args.offset(local_off, "local_off"), _args.offset(remote_off, "remote_off")
        nbytes = _args.size(nbytes, "nbytes")
        if notify is not None:
            return self._core.put_notify(self._peer(ip, port, wait, conn), local_off, remote_off, nbytes, notify,
                                         self._notify)
        return self._core.rma(is_put, self._peer(ip, port, wait, conn), local_off, remote_off, nbytes, self._notify)

    def _batch_op(self, is_put, peer, segments, conn, tag=None):
        conn = _args.conn(conn)
        array = _args.segment_array(segments)
        if array is not None:
            return self._core.batch_array(is_put, self._peer(peer, conn=conn), array, self._notify, tag)
        if isinstance(segments, (str, bytes)) or not hasattr(segments, "__iter__"):
            raise InvalidArgumentError("segments must be a list of (local_off, remote_off, nbytes)")
        segs = []
        for i, seg in enumerate(segments):
            if not isinstance(seg, (tuple, list)) or len(seg) != 3:
                raise InvalidArgumentError(f"segments[{i}] must be (local_off, remote_off, nbytes), not {seg!r}")
            segs.append((_args.offset(seg[0], f"segments[{i}] local_off"),
                         _args.offset(seg[1], f"segments[{i}] remote_off"), _args.size(seg[2], f"segments[{i}] nbytes")))
        return self._core.batch(is_put, self._peer(peer, conn=conn), segs, self._notify, tag)

    def _blocks_op(self, is_put, peer, layout, src_ids, dst_ids, remote_layout, conn, memory, tag=None):
        conn = _args.conn(conn)
        layout = _args.kv_layout(layout, "layout")
        remote = layout if remote_layout is None else _args.kv_layout(remote_layout, "remote_layout")
        src, dst = _args.block_ids(src_ids, "src_ids"), _args.block_ids(dst_ids, "dst_ids")
        if memory is not None and not isinstance(memory, RegisteredBuffer):
            raise InvalidArgumentError(f"memory must be a RegisteredBuffer (Session.register), not {type(memory).__name__}")
        reg = None if memory is None else memory._reg
        return self._core.blocks(is_put, self._peer(peer, conn=conn), layout, src, remote, dst, reg, self._notify, tag)

    def _pipeline_op(self, is_put, peer, local_off, remote_off, nbytes, chunk, max_inflight, conn):
        conn = _args.conn(conn)
        args = (_args.offset(local_off, "local_off"), _args.offset(remote_off, "remote_off"),
                _args.size(nbytes, "nbytes"), _args.size(chunk, "chunk"),
                _args.integer(max_inflight, "max_inflight", 1, 1 << 20))
        return self._core.pipeline(is_put, self._peer(peer, conn=conn), *args, self._notify)

    def _put_op(self, ip, data, bias, conn, size, notify=None):
        """Checks everything, then stages data at `bias` (unless registered) and starts the put
        (with its notify message, if any)."""
        bias, conn = _args.bias_and_conn(bias, conn)
        size = _args.optional_size(size, "size")

        def start(rank, n):
            if notify is None:
                return self._core.rma(True, rank, bias, bias, n, self._notify)
            return self._core.put_notify(rank, bias, bias, n, notify, self._notify)

        if isinstance(data, RegisteredBuffer):
            n = _fits(data.nbytes, size)
            if notify is None:
                return self._core.registered_rma(True, data._reg, 0, self._peer(ip, conn=conn), bias, n,
                                                 self._notify), n
            return self._core.registered_put_notify(data._reg, 0, self._peer(ip, conn=conn), bias, n, notify,
                                                    self._notify), n
        if _payload.device_of(data) is not None:
            rank = self._peer(ip, conn=conn)
            n = self.buf.put(data, bias, "cuda", nbytes=size)
            return start(rank, n), n
        src = _payload.source(data, "data")
        if size is not None:
            src = _payload.prefix(src, size, "size")
        rank = self._peer(ip, conn=conn)  # before staging: a bad peer leaves the buffer untouched
        n = self._core.write(src, bias)
        return start(rank, n), n

    def _issue(self, op):
        f = self._future(op)
        with self._issued_lock:
            self._issued[f.id] = f
            while len(self._issued) > _KEEP_IDS:
                oldest = next(iter(self._issued.values()))
                if not oldest.done():
                    break
                self._issued.popitem(last=False)
        return f

    def _futures_of(self, ops):
        if isinstance(ops, Future):
            return [ops]
        if isinstance(ops, (list, tuple)):
            return [f for op in ops for f in self._futures_of(op)]
        op_id = _args.integer(ops, "ops (a Future, an operation id, or a list of them)")
        with self._issued_lock:
            future = self._issued.get(op_id)
        if future is None:
            raise InvalidArgumentError(f"no operation {op_id} from put_nb/get_nb of this session (or it finished "
                                       f"more than {_KEEP_IDS} operations ago)")
        return [future]


def _is_count(value):
    return not isinstance(value, bool) and hasattr(type(value), "__index__")


def _fits(have, size):
    """size (None: all) bytes of an object holding `have`; more than it holds is an error."""
    if size is None:
        return have
    if size > have:
        raise InvalidArgumentError(f"size={size} exceeds the {have} bytes of the data")
    return size


def _layout_from(message):
    """The peer's layout from its control message (exchange_layout)."""
    if not isinstance(message, bytes):
        raise InvalidArgumentError(f"expected the peer's KV layout, received tag {message!r}")
    return KvLayout.from_bytes(message)


def _tag(tag):
    if _is_count(tag):
        return _args.integer(tag, "tag")
    if isinstance(tag, (bytes, bytearray, memoryview)):
        return tag
    raise InvalidArgumentError(f"tag must be an int in [0, 2**64) or bytes, not {type(tag).__name__}")


def _security(auth_key, authenticate, heartbeat_interval, heartbeat_misses, tls_cert, tls_key, tls_ca):
    """The control channel's trust and liveness options; None keeps the default (and its HMC_* variable)."""
    if not isinstance(authenticate, bool):
        raise InvalidArgumentError(f"authenticate must be True or False, not {authenticate!r}")
    if heartbeat_interval is not None:
        heartbeat_interval = _args.timeout(heartbeat_interval, "heartbeat_interval")
        if math.isinf(heartbeat_interval):
            raise InvalidArgumentError("heartbeat_interval must be finite and >= 0 seconds (0: no heartbeats), not inf")
    if heartbeat_misses is not None:
        heartbeat_misses = _args.integer(heartbeat_misses, "heartbeat_misses", 1, (1 << 32) - 1)
    texts = {name: _args.text(value, name) if value is not None else None
             for name, value in (("auth_key", auth_key), ("tls_cert", tls_cert), ("tls_key", tls_key), ("tls_ca", tls_ca))}
    if texts["auth_key"] == "":
        raise InvalidArgumentError("auth_key must not be empty (None: HMC_AUTH_KEY, then the key file)")
    return dict(authenticate=authenticate, heartbeat_interval=heartbeat_interval, heartbeat_misses=heartbeat_misses,
                **texts)


def create_session(device_id=0, buffer_size=DEFAULT_BUFFER_SIZE, mem_type=MemoryType.CPU, num_chs=1, local_ip=None,
                   **options):
    """The reference entry point: a blocking Session. buffer_size takes bytes or a size string
    ("64M", "1GiB"); mem_type a MemoryType or its name."""
    return Session(device_id, buffer_size, mem_type, num_chs, local_ip, **options)


def memory_type_available(mem_type, device_id=0):
    """(available, reason) for a memory type on this machine and build."""
    return memory_available(int(_args.mem_type(mem_type)), _args.integer(device_id, "device_id", 0, (1 << 31) - 1))
