"""AsyncSession: the Session's methods as asyncio awaitables, through the same code path.

AsyncSession is a Session whose two hooks return awaitables: `_finish` (an operation) awaits its
completion, `_call` (a blocking core call: connect, init_server, close, ...) runs in the default
executor. Every other line, validation included, is the Session's. Calls check their arguments when
called, before anything is awaited.

With progress_thread='caller' (the default, and the fastest) the event loop itself drives the
session: there is no HMC thread. loop.add_reader(wakeup_fd) runs the session's progress() when the loop has work, every
submission runs a pass inside its own call (an op done there needs no asyncio future), and a pass
that wants another at once (a spinning poller) asks for it with call_soon; completions found there
are returned by progress() and set the asyncio futures directly on this thread. Blocking core calls (connect, close, ...) run in the default
executor and drive the session there meanwhile; what they complete reaches the loop through the
completion fd. With progress_thread='own' the session's own C++ loop thread completes operations
and appends their ids to that completion queue (the fd is signalled only when no signal is
pending); loop.add_reader drains it and settles every waiting future in one go. The C++ code never
takes the GIL. Cancelling a task that awaits an operation is safe: the transfer runs to its end on
memory the session owns (or keeps alive), and its result is dropped.
"""
import asyncio
import collections
import functools
import threading
import weakref

from . import _args
from ._errors import CancelledError as HMCCancelled, ClosedError, HMCError, InvalidArgumentError, NotConnectedError, TimeoutError
from .future import Future
from .session import _SLOW, Session, _layout_from


class AsyncSession(Session):
    """Takes the same arguments as hmc.create_session; use `async with`."""

    _notify = True  # operations started here are drained by the event loop
    # The asyncio thread drives the session: no HMC thread, no hop (docs/python.md "Who drives the session").
    _default_progress_thread = "caller"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._loop = None
        self._wakeup = None  # the session's wakeup fd while the loop watches it (progress_thread='caller')
        self._pending = {}  # op id -> (asyncio future, op)
        self._unclaimed = collections.defaultdict(collections.deque)  # peer -> messages of cancelled recvs
        self._orphans = collections.defaultdict(list)  # peer -> internal futures of cancelled recvs

    # -- the hooks ---------------------------------------------------------------------------------
    def _finish(self, op, timeout=None, then=None):
        return self._settle(op, timeout, then)

    async def _settle(self, op, timeout, then):
        if op.done():  # completed inside its call (caller-driven: its own progress pass): no asyncio future
            op.result()  # raises its error
            return then() if then is not None else None
        fut = self._track(op)
        try:
            await (fut if timeout is None else asyncio.wait_for(fut, timeout))
        except asyncio.TimeoutError:
            raise TimeoutError(f"operation not complete after {timeout} s (it keeps running)") from None
        return then() if then is not None else None

    def _quick_rma(self, is_put, ip, port, local_off, remote_off, nbytes):
        """put_remote/get_remote with plain arguments in one C++ call that submits and progresses: an
        operation already complete needs no asyncio future; one still running is awaited as usual."""
        if not self._on_loop():
            return _SLOW  # not attached to this event loop (yet): the general path attaches or refuses
        got = self._core.rma_start(is_put, ip, port, local_off, remote_off, nbytes)
        if got is True:
            return _completed()
        if got is None:
            return _SLOW
        return self._settle(got, None, None)

    def _call(self, fn, *args):
        return self._blocking(fn, *args)

    def _future(self, op):
        return Future(op, self._track(op), self.timeout + 1.0)

    def _peer_at(self, where, port):
        raise _PeerNotYet(where, port)  # waiting here would stall the event loop: _awaits_peer waits

    async def _after_peer(self, wait, method, args, kwargs):
        await self._blocking(self._core.wait_peer_at, wait.where, wait.port, self.timeout)
        return await method(self, *args, **kwargs)

    async def _peer_rank(self, peer):
        try:
            return self._rank(peer)
        except _PeerNotYet as wait:
            return await self._blocking(self._core.wait_peer_at, wait.where, wait.port, self.timeout)

    # -- plumbing --------------------------------------------------------------------------------
    def _on_loop(self):
        """This thread runs the event loop this session is attached to. asyncio.get_running_loop()
        says the same but costs a getpid() system call (Python 3.11); a loop's _thread_id is the
        thread inside its run_forever (None otherwise)."""
        return self._loop is not None and getattr(self._loop, "_thread_id", None) == threading.get_ident()

    def _attach(self):
        if self._on_loop():
            return self._loop
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            loop.add_reader(self._core.completion_fd(), self._drain)
            if self.progress_thread == "caller":
                self._wakeup = self._core.wakeup_fd()
                loop.add_reader(self._wakeup, self._progress)
                # Submissions from this thread progress inside their call; a pass that wants another
                # schedules it with call_soon instead of making the wakeup fd readable.
                self._core.set_soon(_soon_hook(weakref.ref(self), loop))
        elif loop is not self._loop:
            raise InvalidArgumentError("this AsyncSession is bound to another event loop")
        return loop

    def _drain(self):
        for op_id in self._core.drain():
            self._settle_one(self._pending.pop(op_id, None))

    def progress(self):
        """Session.progress() for an asyncio session: what it completes settles the awaited
        operations (on the event loop's thread at once; from another thread through the loop)."""
        if self._on_loop():
            self._progress()
            return
        done = self._core.progress()
        if done and self._loop is not None:
            self._loop.call_soon_threadsafe(self._settle_ids, done)

    def _settle_ids(self, done):
        for op_id in done:
            self._settle_one(self._pending.pop(op_id, None))

    def _progress(self, soon=False):
        """One pass; `soon`: the pass set_soon's hook scheduled (see _soon_hook)."""
        try:
            done = self._core.progress(soon)
        except ClosedError:
            return  # close() is under way: it settles what is pending
        self._settle_ids(done)

    def _track(self, op, again=True):
        fut = self._attach().create_future()
        self._pending[op.id] = (fut, op)
        if self._wakeup is not None and again:
            # One more pass (its submission ran one already): it settles what other operations
            # completed meanwhile and finds this one's progress sooner (1 MiB at depth 16: +20%).
            self._progress()
        if op.done():  # completed before we registered it (another thread drove): settle now
            self._settle_early(op.id)
        return fut

    def _settle_early(self, op_id):
        entry = self._pending.get(op_id)
        if entry is not None and entry[1].done():
            self._settle_one(self._pending.pop(op_id))

    @staticmethod
    def _settle_one(entry):
        if entry is None:
            return
        fut, op = entry
        if fut.done():
            return
        try:
            fut.set_result(op.result())
        except HMCError as e:
            fut.set_exception(e)

    async def _blocking(self, fn, *args):
        return await self._attach().run_in_executor(None, functools.partial(fn, *args))

    # -- where asyncio differs ------------------------------------------------------------------------
    async def close(self):
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._core.completion_fd())
            if self._wakeup is not None:
                self._loop.remove_reader(self._wakeup)
        self._wakeup = None  # progress() would raise ClosedError from now on
        await self._blocking(self._core.close)
        self._drain()  # operations the close failed: their awaiters see the error (ClosedError)
        for fut, _ in self._pending.values():
            if not fut.done():
                fut.cancel()
        self._pending.clear()

    def __enter__(self):
        raise InvalidArgumentError("AsyncSession is used with `async with` (hmc.create_session for `with`)")

    async def __aenter__(self):
        self._attach()
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def wait(self, ops, timeout=None):
        futures = self._futures_of(ops)
        timeout = _args.timeout(timeout)
        try:
            await asyncio.wait_for(asyncio.gather(*futures), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"operations not complete after {timeout} s (they keep running)") from None

    async def ctrl_recv(self, peer, timeout=None):
        """The next tag/bytes from peer. Cancelling it (asyncio.wait_for, task.cancel) loses no
        message: a message the cancelled receive already took is returned by the next one."""
        timeout = _args.timeout(timeout)
        rank = await self._peer_rank(peer)
        while self._orphans[rank]:  # a cancelled receive resolves promptly: see _orphan
            await asyncio.wait(self._orphans[rank])  # cancelled here, they stay for the next receive
            self._orphans[rank] = [o for o in self._orphans[rank] if not o.done()]
        if self._unclaimed[rank]:
            return self._unclaimed[rank].popleft()
        op = self._core.ctrl_recv(rank, timeout, True)
        if op.done():  # taken inside its call (its own progress pass)
            return op.result()
        # No second pass right after the receive's own: a message comes from the peer, not from
        # this pass (a transfer's pass can find its own progress; a receive's finds ~never).
        fut = self._track(op, not self._on_loop())
        try:
            return await fut  # not shielded: a shield costs an event-loop turn per message
        except asyncio.CancelledError:
            self._orphan(rank, op)
            raise

    async def exchange_layout(self, peer, layout, timeout=None):
        """Session.exchange_layout, awaited."""
        _args.kv_layout(layout, "layout")
        await self.ctrl_send(peer, layout.to_bytes(), timeout)
        return _layout_from(await self.ctrl_recv(peer, timeout))

    def _orphan(self, rank, op):
        """The receive `op` was cancelled: a message it took (now or later) goes to the next receive."""
        entry = self._pending.pop(op.id, None)
        if op.done():  # settled or not, the op holds the message
            try:
                self._unclaimed[rank].append(op.result())
            except HMCError:
                pass  # a timeout/peer-lost of an abandoned receive is not an error
            return
        if entry is None:
            return  # close() dropped it: no message can come
        op.cancel()  # withdraw the C++ receive; if it already took a message, keep that message
        orphan = self._loop.create_future()
        self._pending[op.id] = (orphan, op)  # its completion settles the orphan
        orphan.add_done_callback(functools.partial(self._keep_unclaimed, rank))
        self._orphans[rank].append(orphan)

    def _keep_unclaimed(self, rank, inner):
        if not inner.cancelled() and inner.exception() is None:
            self._unclaimed[rank].append(inner.result())
        elif not inner.cancelled() and not isinstance(inner.exception(), HMCCancelled):
            inner.exception()  # retrieved: a timeout/peer-lost of an abandoned receive is not an error


def _soon_hook(ref, loop):
    """SessionHandle.set_soon's hook: the session's next progress() in the loop's next turn, the one pass
    that ends the wait for it (soon=True): the core asks again only after that pass, so at most one
    is scheduled. It holds the session weakly: the SessionHandle holds the hook, and a cycle through it
    would keep both alive."""
    def soon():
        session = ref()
        if session is not None and not loop.is_closed():
            loop.call_soon(session._progress, True)
    return soon


async def _completed():
    """What awaiting an operation that completed inside its call returns."""
    return None


class _PeerNotYet(NotConnectedError):
    """A serving AsyncSession was named a client address no peer holds yet."""

    def __init__(self, where, port):
        super().__init__(f"no connected peer at {where}" + (f":{port}" if port is not None else ""))
        self.where, self.port = where, port


def _awaits_peer(name):
    """The Session method `name`, which on a serving session first awaits a client not yet connected
    (the blocking Session waits in the same place); every other error is raised at call time."""
    method = getattr(Session, name)

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except _PeerNotYet as wait:
            return self._after_peer(wait, method, args, kwargs)

    return call


for _name in ("put", "get", "get_into", "put_remote", "get_remote", "put_batch", "get_batch", "put_blocks", "get_blocks",
              "put_pipeline", "get_pipeline", "ctrl_send", "put_torch_cuda", "get_torch_cuda", "buffer_put_then_put",
              "get_then_buffer_get_into", "send_data_to", "recv_data_from"):
    setattr(AsyncSession, _name, _awaits_peer(_name))
