"""AsyncSession: the Session's methods as asyncio coroutines.

Completions reach the event loop through one eventfd: the C++ loop thread appends finished
operation ids and signals the fd only when the list goes from empty to non-empty; loop.add_reader
drains them and settles every waiting asyncio future in one go. The C++ thread never takes the GIL.
Cancelling a task that awaits an operation is safe: the transfer runs to its end on memory the
session owns (or keeps alive), and its result is dropped.
"""
import asyncio
import collections
import functools

from ._enums import ConnType, MemoryType
from ._errors import CancelledError as HMCCancelled, HMCError, InvalidArgumentError
from .future import Future
from .session import RegisteredBuffer, Session


class AsyncSession:
    """Takes the same arguments as hmc.create_session; use `async with`."""

    def __init__(self, device_id=0, buffer_size=Session.__init__.__defaults__[0], mem_type=MemoryType.CPU, num_chs=1,
                 local_ip=None, **options):
        self._sync = Session(device_id, buffer_size, mem_type, num_chs, local_ip, **options)
        self._sync._notify = True  # operations started here are drained by the event loop
        self._core = self._sync._core
        self._loop = None
        self._pending = {}  # op id -> (asyncio future, op)
        self._unclaimed = collections.defaultdict(collections.deque)  # peer -> messages of cancelled recvs
        self._orphans = collections.defaultdict(list)  # peer -> internal futures of cancelled recvs

    @property
    def buf(self):
        return self._sync.buf

    @property
    def ctrl_port(self):
        return self._sync.ctrl_port

    @property
    def timeout(self):
        return self._sync.timeout

    # -- plumbing --------------------------------------------------------------------------------
    def _attach(self):
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            loop.add_reader(self._core.completion_fd(), self._drain)
        elif loop is not self._loop:
            raise InvalidArgumentError("this AsyncSession is bound to another event loop")
        return loop

    def _drain(self):
        for op_id in self._core.drain():
            entry = self._pending.pop(op_id, None)
            if entry is None:
                continue
            fut, op = entry
            if fut.done():
                continue
            try:
                fut.set_result(op.result())
            except HMCError as e:
                fut.set_exception(e)

    def _track(self, op):
        fut = self._attach().create_future()
        self._pending[op.id] = (fut, op)
        if op.done():  # completed before we registered it: its id may already have been drained
            self._loop.call_soon(self._settle_early, op.id)
        return fut

    def _settle_early(self, op_id):
        entry = self._pending.get(op_id)
        if entry is not None and entry[1].done():
            self._pending.pop(op_id)
            fut, op = entry
            if not fut.done():
                try:
                    fut.set_result(op.result())
                except HMCError as e:
                    fut.set_exception(e)

    def _future(self, op):
        return Future(op, self._core, self._track(op), self.timeout + 1.0)

    async def _run(self, op):
        return await self._track(op)

    async def _blocking(self, fn, *args, **kwargs):
        return await self._attach().run_in_executor(None, functools.partial(fn, *args, **kwargs))

    # -- connection ------------------------------------------------------------------------------
    async def init_server(self, bind_ip, ucx_port, rdma_port, ctrl_tcp_port, self_id, ctrl_uds_dir=None):
        await self._blocking(self._sync.init_server, bind_ip, ucx_port, rdma_port, ctrl_tcp_port, self_id,
                             ctrl_uds_dir)

    async def connect(self, peer_id, self_id, peer_ip, data_port, ctrl_tcp_port, conn=ConnType.UCX):
        return await self._blocking(self._sync.connect, peer_id, self_id, peer_ip, data_port, ctrl_tcp_port, conn)

    async def wait_peer(self, rank, timeout=None):
        await self._blocking(self._sync.wait_peer, rank, timeout)

    def peers(self):
        return self._sync.peers()

    def transports(self, peer):
        return self._sync.transports(peer)

    async def disconnect(self, peer, conn=ConnType.UCX, data_port=None):
        self._sync.disconnect(peer, conn, data_port)

    async def close_server(self):
        await self.close()

    async def close(self):
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._core.completion_fd())
        await self._blocking(self._sync.close)
        for fut, _ in self._pending.values():
            if not fut.done():
                fut.cancel()
        self._pending.clear()

    async def __aenter__(self):
        self._attach()
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # -- one-sided transfers ---------------------------------------------------------------------
    async def put_remote(self, peer_ip, data_port, local_off, remote_off, nbytes, conn=ConnType.UCX):
        await self.put_nb(peer_ip, data_port, local_off, remote_off, nbytes, conn)

    async def get_remote(self, peer_ip, data_port, local_off, remote_off, nbytes, conn=ConnType.UCX):
        await self.get_nb(peer_ip, data_port, local_off, remote_off, nbytes, conn)

    def put_nb(self, peer_ip, data_port, local_off, remote_off, nbytes, conn=ConnType.UCX):
        self._sync._check_conn(conn)
        return self._future(self._core.rma(True, self._sync._rank(peer_ip, data_port), local_off, remote_off, nbytes,
                                           True))

    def get_nb(self, peer_ip, data_port, local_off, remote_off, nbytes, conn=ConnType.UCX):
        self._sync._check_conn(conn)
        return self._future(self._core.rma(False, self._sync._rank(peer_ip, data_port), local_off, remote_off,
                                           nbytes, True))

    async def wait(self, futures, timeout=None):
        if isinstance(futures, Future):
            return await asyncio.wait_for(futures, timeout)
        await asyncio.wait_for(asyncio.gather(*futures), timeout)
        return None

    async def put_batch(self, peer, segments):
        await self._run(self._core.batch(True, self._sync._rank(peer), list(segments), True))

    async def get_batch(self, peer, segments):
        await self._run(self._core.batch(False, self._sync._rank(peer), list(segments), True))

    async def put_pipeline(self, peer, local_off, remote_off, nbytes, chunk=1 << 20, max_inflight=8):
        await self._run(self._core.pipeline(True, self._sync._rank(peer), local_off, remote_off, nbytes, chunk,
                                            max_inflight, True))

    async def get_pipeline(self, peer, local_off, remote_off, nbytes, chunk=1 << 20, max_inflight=8):
        await self._run(self._core.pipeline(False, self._sync._rank(peer), local_off, remote_off, nbytes, chunk,
                                            max_inflight, True))

    # -- one-call helpers ------------------------------------------------------------------------
    async def put(self, ip, data, bias=0, size=None):
        op, n = self._sync._put_op(ip, data, bias, size)
        await self._run(op)
        return n

    async def get(self, ip, size, bias=0):
        await self._run(self._core.rma(False, self._sync._rank(ip), bias, bias, size, True))
        return self._core.read_bytes(bias, size)

    async def get_into(self, ip, dest, bias=0, size=None):
        op, n = self._sync._get_into_op(ip, dest, bias, size)
        inner = getattr(op, "_op", op)
        await self._run(inner)
        if inner is not op:
            op.result()  # copies out of the session buffer into dest
        return n

    def register(self, obj) -> RegisteredBuffer:
        return self._sync.register(obj)

    # -- control messages ------------------------------------------------------------------------
    async def ctrl_send(self, peer, tag):
        await self._run(self._core.ctrl_send(self._sync._rank(peer), tag, True))

    async def ctrl_recv(self, peer, timeout=None):
        """The next tag/bytes from peer. Cancelling it (asyncio.wait_for, task.cancel) loses no
        message: a message the cancelled receive already took is returned by the next one."""
        rank = self._sync._rank(peer)
        for orphan in self._orphans.pop(rank, []):
            await asyncio.wait({orphan})  # a cancelled receive resolves promptly: see below
        if self._unclaimed[rank]:
            return self._unclaimed[rank].popleft()
        op = self._core.ctrl_recv(rank, timeout, True)
        inner = self._track(op)
        try:
            return await asyncio.shield(inner)
        except asyncio.CancelledError:
            op.cancel()  # withdraw the C++ receive; if it already took a message, keep that message
            inner.add_done_callback(functools.partial(self._keep_unclaimed, rank))
            self._orphans[rank].append(inner)
            raise

    def _keep_unclaimed(self, rank, inner):
        if not inner.cancelled() and inner.exception() is None:
            self._unclaimed[rank].append(inner.result())
        elif not inner.cancelled() and not isinstance(inner.exception(), HMCCancelled):
            inner.exception()  # retrieved: a timeout/peer-lost of an abandoned receive is not an error
