"""The reference package's extra names, as thin aliases over the Session and its buffer (one
code path: each name is a composition of the methods in session.py). Parameters and meaning
follow the reference; its default conn was RDMA, ours is UCX: an operation to a peer connected over
RDMA names conn=ConnType.RDMA.
"""
import ctypes
import struct
import typing

from . import _args, _payload
from ._enums import ConnType, MemoryType, Status
from ._errors import HMCError, InvalidArgumentError, NotConnectedError, ProtocolError, TimeoutError
from ._hmc import memory_available


class ReferenceBuffer:
    """IOBuffer's directional names: buffer_put_* (external -> buffer), buffer_get_* (buffer -> external)."""

    def buffer_put_cpu(self, src, *, nbytes=None, offset=0):
        return self.put(src, offset, "cpu", nbytes=nbytes)

    def buffer_get_cpu_into(self, dst, *, nbytes=None, offset=0):
        return self.get_into(dst, nbytes, offset, "cpu")

    def buffer_get_cpu(self, *, nbytes, offset=0):
        out = bytearray(_args.size(nbytes, "nbytes"))
        self.get_into(out, nbytes, offset, "cpu")
        return out

    def buffer_put_gpu_ptr(self, src_ptr, *, nbytes, offset=0):
        self.put(src_ptr, offset, "ptr", nbytes=nbytes)

    def buffer_get_gpu_ptr(self, dst_ptr, *, nbytes, offset=0):
        self.get_into(dst_ptr, nbytes, offset, "ptr")

    def buffer_put_cuda(self, t, *, nbytes=None, offset=0):
        _payload.cuda_device(t, "buffer_put_cuda")
        return self.put(t, offset, "cuda", nbytes=nbytes)

    def buffer_get_cuda(self, t, *, nbytes=None, offset=0):
        _payload.cuda_device(t, "buffer_get_cuda")
        return self.get_into(t, nbytes, offset, "cuda")

    def buffer_copy_within(self, *, dst_offset, src_offset, nbytes):
        self.copy_within(dst_offset, src_offset, nbytes)


class ReferenceSession:
    """Session names of the reference package and of the SDK guide."""

    def set_local_ip(self, ip):
        """The address peers know this session by (create_session's local_ip), for a later
        init_server on 0.0.0.0 or the first connect; an address already advertised stays."""
        return self._call(self._core.set_local_ip, _args.ip(ip, "ip"))

    def set_ctrl_uds_dir(self, d):
        """The directory of this session's control Unix socket when init_server(bind_ip, ...) is not
        given ctrl_uds_dir (a directory not private to this user gets an hmc-<uid> subdirectory)."""
        self._ctrl_uds_dir = _args.text(d, "d") or None

    def check_conn(self, ip, port=None, conn=ConnType.UCX):
        """Whether a peer is connected at ip (and port) over `conn`."""
        conn = _args.member(ConnType, conn, "conn")
        try:
            rank = self._rank(ip, port, wait=False)
            # a disconnected peer's address may linger
            return rank in self.peers() and self._core.peer_conn(rank) == conn
        except NotConnectedError:
            return False

    def buffer_copy_within(self, *, dst_offset, src_offset, nbytes):
        self.buf.copy_within(dst_offset, src_offset, nbytes)

    def put_torch_cuda(self, ip, tensor, bias=0, conn=ConnType.UCX, size=None, timeout=None):
        """Puts a CUDA tensor to the peer's offset `bias`; UnsupportedError without CUDA. Where UCX
        cannot move CUDA memory the tensor goes to the wire through pinned bounce buffers in a
        pipeline (docs/gpu-staging.md) and the local buffer is not used; else device ->
        buffer at `bias` -> peer."""
        _payload.cuda_device(tensor, "put_torch_cuda")
        if not self._staged_tensor(tensor):
            return self.put(ip, tensor, bias, conn, size, timeout)
        rank = self._rank(ip)  # before registering: an async session may first await its client
        reg = self.register(tensor.contiguous())
        try:
            return self.put(rank, reg, bias, conn, size, timeout)
        finally:
            reg.release()  # the operation in flight keeps the registration until it is done

    def get_torch_cuda(self, ip, tensor, bias=0, conn=ConnType.UCX, size=None, timeout=None):
        """get_into() a CUDA tensor from the peer's offset `bias`, staged like put_torch_cuda."""
        _payload.cuda_device(tensor, "get_torch_cuda")
        if not self._staged_tensor(tensor):
            return self.get_into(ip, tensor, bias, conn, size, timeout)
        if not tensor.is_contiguous():
            raise InvalidArgumentError("get_torch_cuda: the CUDA tensor must be contiguous")
        rank = self._rank(ip)
        reg = self.register(tensor)
        try:
            return self.get_into(rank, reg, bias, conn, size, timeout)
        finally:
            reg.release()

    def _staged_tensor(self, tensor):
        """Whether UCX lacks the tensor's memory type, so that HMC stages it through host memory."""
        return memory_type_from_torch_tensor(tensor) not in self.native_memory_types

    def buffer_put_then_put(self, ip, port, data, *, local_off=0, remote_off=0, conn=ConnType.UCX, nbytes=None,
                            device=None, timeout=None):
        """buf.put(data) at local_off, then put_remote to remote_off; returns nbytes."""
        timeout = _args.timeout(timeout)
        rank = self._peer(ip, port, conn=_args.conn(conn))  # before staging: a bad peer leaves the buffer untouched
        n = self.buf.put(data, local_off, device, nbytes=nbytes)
        return self._finish(self._rma_op(True, rank, None, local_off, remote_off, n, conn), timeout, lambda: n)

    def get_then_buffer_get_into(self, ip, port, dst, *, local_off=0, remote_off=0, nbytes=None, conn=ConnType.UCX,
                                 device=None, timeout=None):
        """get_remote into local_off, then buf.get_into(dst); returns nbytes (default: all of dst)."""
        timeout = _args.timeout(timeout)
        device = _args.device(device)
        nbytes = _args.optional_size(nbytes, "nbytes")
        if nbytes is None:
            if device == "ptr":
                raise InvalidArgumentError("device='ptr' needs nbytes")
            nbytes = _payload.nbytes(dst if _payload.is_tensor(dst) else _payload.destination(dst, "dst"))
        op = self._rma_op(False, ip, port, local_off, remote_off, nbytes, conn)
        return self._finish(op, timeout, lambda: self.buf.get_into(dst, nbytes, local_off, device))

    def send_data_to(self, ip, port, send_buf_ptr, buf_size, buf_type, conn=ConnType.UCX):
        """Streams buf_size bytes at send_buf_ptr (memory of buf_type) to a peer's recv_data_from,
        staged through both session buffers in two halves. Uses the control channel to that peer
        (do not ctrl_recv from it meanwhile) and the whole session buffer."""
        conn = _args.conn(conn)
        args = (_args.integer(send_buf_ptr, "send_buf_ptr", 1), _args.size(buf_size, "buf_size"),
                _args.mem_type(buf_type, "buf_type"))
        _device_memory(args[2], "send_data_to")
        return self._call(_Stream(self).send, self._peer(ip, port, conn=conn), *args)

    def recv_data_from(self, ip, port, recv_buf_ptr, buf_size, buf_type, flag_ptr, conn=ConnType.UCX):
        """Receives what the peer's send_data_to streams into recv_buf_ptr (room for buf_size bytes
        of buf_type memory); writes the byte count as a size_t at flag_ptr (0: none). The peer is
        found by ip (the reference's rule; port is accepted)."""
        conn = _args.conn(conn)
        if port is not None:
            _args.port(port)
        args = (_args.integer(recv_buf_ptr, "recv_buf_ptr", 1), _args.size(buf_size, "buf_size"),
                _args.mem_type(buf_type, "buf_type"), _args.integer(flag_ptr, "flag_ptr"))
        _device_memory(args[2], "recv_data_from")
        return self._call(_Stream(self).recv, self._peer(ip, conn=conn), *args)


def _device_memory(mem_type, what):
    if mem_type not in (MemoryType.CPU, MemoryType.DEFAULT):
        _payload.require_memory(mem_type, 0, what)


class _Stream:
    """The send_data_to / recv_data_from protocol: control messages HMCs + kind + two u64.
    R(eady: half, capacity) from the receiver; L(ength: total, chunk) from the sender, chunk 0 =
    refused; D(ata: chunk i in half i % 2) and C(redit: half of chunk i free again)."""

    MAGIC = b"HMCs"
    FORMAT = "<4scQQ"

    def __init__(self, session):
        self.core = session._core
        self.buffer_size = session.buf.size
        self.limit = session.timeout + 1.0

    def send(self, rank, ptr, total, mem):
        half_r, capacity = self._expect(rank, b"R")
        chunk = min(half_r, self.buffer_size // 2)
        if total > capacity:
            self._send(rank, b"L", total, 0)
            raise InvalidArgumentError(f"send_data_to: {total} bytes exceed the receiver's {capacity}")
        self._send(rank, b"L", total, chunk)
        count = -(-total // chunk)
        for i in range(count):
            if i >= 2:
                self._credit(rank, i - 2)
            off, n = (i % 2) * chunk, min(chunk, total - i * chunk)
            self.core.copy_ptr(True, ptr + i * chunk, n, off, int(mem), 0)
            self._wait(self.core.rma(True, rank, off, off, n, False))
            self._send(rank, b"D", i, n)
        for i in range(max(0, count - 2), count):
            self._credit(rank, i)  # the receiver has copied everything out

    def recv(self, rank, ptr, capacity, mem, flag_ptr):
        self._send(rank, b"R", self.buffer_size // 2, capacity)
        total, chunk = self._expect(rank, b"L")
        if chunk == 0:
            raise InvalidArgumentError(f"recv_data_from: the sender has {total} bytes, more than buf_size {capacity}")
        got = 0
        for i in range(-(-total // chunk)):
            index, n = self._expect(rank, b"D")
            if index != i or n == 0 or got + n > min(total, capacity) or n > chunk:
                raise ProtocolError(f"recv_data_from: chunk {index} of {n} bytes where chunk {i} was due")
            self.core.copy_ptr(False, ptr + got, n, (i % 2) * chunk, int(mem), 0)
            got += n
            self._send(rank, b"C", i, 0)
        if flag_ptr:
            ctypes.c_size_t.from_address(flag_ptr).value = got
        return got

    def _credit(self, rank, i):
        index, _ = self._expect(rank, b"C")
        if index != i:
            raise ProtocolError(f"send_data_to: credit for chunk {index} where {i} was due")

    def _send(self, rank, kind, a, b):
        self._wait(self.core.ctrl_send(rank, struct.pack(self.FORMAT, self.MAGIC, kind, a, b), False))

    def _expect(self, rank, kind):
        op = self.core.ctrl_recv(rank, None, False)
        message = self._wait(op)
        if not isinstance(message, bytes) or len(message) != struct.calcsize(self.FORMAT):
            raise ProtocolError(f"data stream: expected a '{kind.decode()}' message, got {message!r:.60}")
        magic, got, a, b = struct.unpack(self.FORMAT, message)
        if magic != self.MAGIC or got != kind:
            raise ProtocolError(f"data stream: expected a '{kind.decode()}' message, got {message!r:.60}")
        return a, b

    def _wait(self, op):
        if not op.wait(self.limit):
            raise TimeoutError(f"data stream: no progress within {self.limit} s")
        return op.result()


# Module-level names of the reference package.
status_t = Status
HMCStatusError = HMCError
DeviceHint = typing.Optional[typing.Literal["cpu", "cuda", "ptr"]]  # IOBuffer.put / get_into's device


def memory_supported(mem_type, device_id=0):
    """Whether memory of mem_type can be used here (see hmc.memory_type_available for the reason)."""
    return bool(memory_available(int(_args.mem_type(mem_type)), _args.integer(device_id, "device_id"))[0])


def memory_type_from_torch_tensor(t, *, default=None):
    """The MemoryType of a tensor's device: cpu -> CPU, cuda -> NVIDIA_GPU (AMD_GPU on ROCm torch),
    mlu -> CAMBRICON_MLU, musa -> MOORE_GPU, else `default` (MemoryType.DEFAULT)."""
    if not _payload.is_tensor(t):
        raise InvalidArgumentError(f"t must be a torch.Tensor, not {type(t).__name__}")
    kind = t.device.type
    if kind == "cpu":
        return MemoryType.CPU
    if kind == "cuda":
        import torch

        return MemoryType.AMD_GPU if getattr(torch.version, "hip", None) else MemoryType.NVIDIA_GPU
    return {"mlu": MemoryType.CAMBRICON_MLU, "musa": MemoryType.MOORE_GPU}.get(
        kind, MemoryType.DEFAULT if default is None else default)
