"""The process's HMC callback thread: runs hmc.Future done-callbacks and the user's log function.

The C++ loop threads never take the GIL: a finished operation with callbacks pushes its id to a
CompletionQueue and a log line goes to a bounded LogQueue, each signalling an eventfd. This one
Python thread sleeps in poll() on those fds (GIL released) and runs the Python code, so callbacks
run whether or not anybody waits, on a thread that holds the GIL and is not a loop thread: a
callback may call any Session method, close() included.
"""
import atexit
import logging
import os
import select
import threading

from ._hmc import CompletionQueue

_log = logging.getLogger("hmc")


class _CallbackThread:
    def __init__(self):
        self.queue = CompletionQueue()
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._lock = threading.Lock()
        self._futures = {}  # op id -> hmc.Future whose callbacks wait for its completion
        self._logger = None  # (LogQueue, fn) while hmc.set_extern_logger is active
        self._stopping = False
        self.thread = threading.Thread(target=self._run, name="hmc-callbacks", daemon=True)
        self.thread.start()

    def watch(self, future):
        with self._lock:
            self._futures[future.id] = future
        future._op.notify(self.queue)  # pushes at once if the operation is already done

    def set_logger(self, log_queue, fn):
        with self._lock:
            self._logger = (log_queue, fn) if fn is not None else None
        self._poke()

    def stop(self):
        self._stopping = True
        self._poke()
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout=5)

    def _poke(self):
        os.eventfd_write(self._wake, 1)

    def _run(self):
        poller = select.poll()
        poller.register(self.queue.fd(), select.POLLIN)
        poller.register(self._wake, select.POLLIN)
        log_fd = None
        while True:
            with self._lock:
                logger = self._logger
            fd = logger[0].fd() if logger else None
            if fd != log_fd:
                if log_fd is not None:
                    poller.unregister(log_fd)
                if fd is not None:
                    poller.register(fd, select.POLLIN)
                log_fd = fd
            poller.poll()  # no timeout: every event that matters writes one of the fds
            try:
                os.eventfd_read(self._wake)
            except BlockingIOError:
                pass
            if logger:
                _deliver_logs(*logger)
            for op_id in self.queue.drain():
                with self._lock:
                    future = self._futures.pop(op_id, None)
                if future is not None:
                    future._run_callbacks()
            if self._stopping:
                return


def _deliver_logs(log_queue, fn):
    from ._logging import RUNTIME_WARN, to_reference_level

    lines, dropped = log_queue.drain()
    if dropped:
        lines.append((RUNTIME_WARN, f"{dropped} HMC log lines dropped: the Python logger could not keep up"))
    for level, message in lines:
        try:
            fn(to_reference_level(level), message)
        except Exception:  # noqa: BLE001 - a faulty logger must not stop the callback thread
            _log.exception("the function given to hmc.set_extern_logger raised")


_instance = None
_instance_lock = threading.Lock()


def callback_thread():
    """The process's callback thread, started on first use (and again in a forked child)."""
    global _instance
    with _instance_lock:
        if _instance is None:
            _instance = _CallbackThread()
        return _instance


def _forget_in_child():
    global _instance
    _instance = None  # the thread did not survive the fork


def _stop_at_exit():
    if _instance is not None:
        _instance.stop()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(_stop_at_exit)
