"""hmc.Future: an operation in flight, usable blocking (result/wait), with done-callbacks, and from
asyncio (await)."""
import asyncio
import logging
import threading

from . import _args
from ._callback_thread import callback_thread
from ._errors import TimeoutError

_log = logging.getLogger("hmc")


class Future:
    """done(), result(timeout), exception(timeout), add_done_callback(fn), and awaitable.

    Callbacks run once the operation completes, whether or not anybody waits. From a blocking
    Session they run on the process's hmc-callbacks thread (GIL held, never an HMC loop thread, so
    a callback may call any Session method, close() included); from an AsyncSession on its event
    loop. A callback added after completion runs at once in the adding thread. As with
    concurrent.futures, result() may return before the callbacks have run.
    """

    def __init__(self, op, aio_future=None, default_timeout=None):
        self._op = op
        self._aio = aio_future
        self._default_timeout = default_timeout
        self._lock = threading.Lock()
        self._callbacks = []  # None once they ran
        self._watched = False

    @property
    def id(self):
        """The operation id (what the reference's put_nb returned); Session.wait accepts it."""
        return self._op.id

    def done(self):
        return self._op.done()

    def running(self):
        return not self._op.done()

    def cancel(self):
        """RMA cannot be withdrawn once issued (as with concurrent.futures, a running operation is
        not cancelled): False."""
        return False

    def cancelled(self):
        return False

    def result(self, timeout=None):
        """Waits (GIL released) up to timeout seconds (None: the session timeout; inf: no limit) and
        returns the result (None, or a tag/bytes for ctrl_recv); raises the operation's HMCError."""
        limit = _args.timeout(timeout)
        limit = self._default_timeout if limit is None else limit
        if not self._op.wait(limit):
            raise TimeoutError(f"operation not complete after {limit} s (it keeps running)")
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
            self._aio.add_done_callback(lambda _: _call(fn, self))
            return
        with self._lock:
            pending = self._callbacks is not None and (self._watched or not self._op.done())
            if pending:
                self._callbacks.append(fn)
                watch, self._watched = not self._watched, True
        if not pending:
            _call(fn, self)
        elif watch:
            callback_thread().watch(self)

    def _run_callbacks(self):
        with self._lock:
            callbacks, self._callbacks = self._callbacks or [], None
        for fn in callbacks:
            _call(fn, self)

    def __await__(self):
        if self._aio is not None:
            return (yield from self._aio.__await__())
        loop = asyncio.get_running_loop()
        return (yield from loop.run_in_executor(None, self.result).__await__())


def _call(fn, future):
    try:
        fn(future)
    except Exception:  # noqa: BLE001 - as concurrent.futures: logged, the others still run
        _log.exception("exception calling callback for %r", future)
