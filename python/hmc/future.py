"""hmc.Future: the result of put_nb/get_nb, usable blocking (result/wait) and from asyncio (await)."""
import asyncio

from ._errors import TimeoutError


class Future:
    """An operation in flight. done(), result(timeout), add_done_callback(fn), and awaitable.

    From an AsyncSession, callbacks run on its event loop when the operation completes. From a
    blocking Session they run in the thread that first sees the completion (result, wait, done).
    """

    def __init__(self, op, core, aio_future=None, default_timeout=None):
        self._op = op
        self._core = core
        self._aio = aio_future
        self._default_timeout = default_timeout
        self._callbacks = []

    @property
    def id(self):
        return self._op.id

    def done(self):
        finished = self._op.done()
        if finished:
            self._run_callbacks()
        return finished

    def result(self, timeout=None):
        """Waits (GIL released) up to timeout seconds (None: the session timeout) and returns the
        result (None, or a tag/bytes for ctrl_recv); raises the operation's HMCError."""
        limit = self._default_timeout if timeout is None else timeout
        if not self._op.wait(limit):
            raise TimeoutError(f"operation not complete after {limit} s (it keeps running)")
        self._run_callbacks()
        return self._op.result()

    def exception(self, timeout=None):
        try:
            self.result(timeout)
        except TimeoutError:
            raise
        except Exception as e:  # noqa: BLE001 - returned, not swallowed
            return e
        return None

    def add_done_callback(self, fn):
        if self._aio is not None:
            self._aio.add_done_callback(lambda _: fn(self))
        elif self._op.done():
            fn(self)
        else:
            self._callbacks.append(fn)

    def _run_callbacks(self):
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)

    def __await__(self):
        if self._aio is not None:
            return (yield from self._aio.__await__())
        loop = asyncio.get_running_loop()
        return (yield from loop.run_in_executor(None, self.result).__await__())

    def __del__(self):
        # Objects the transfer reads or writes stay alive until it is done, even if we are dropped.
        op = getattr(self._op, "_op", self._op)
        if not op.done():
            self._core.bury(op)
