"""HMC's logging, process-wide in the style of memfabric: the log level and a Python log function
for HMC's C++ log lines."""
from . import _args
from ._callback_thread import callback_thread
from ._errors import InvalidArgumentError
from ._hmc import LogQueue, log_level as _core_log_level, set_log_level as _core_set_log_level, set_log_queue

# hmc::runtime::LogLevel values (trace, debug, info, warn, error, off) and the reference's 0-3.
_RUNTIME = {"trace": 0, "debug": 1, "info": 2, "warn": 3, "warning": 3, "error": 4, "off": 5}
_FROM_REFERENCE = {0: 1, 1: 2, 2: 3, 3: 4}  # 0 debug, 1 info, 2 warn, 3 error
RUNTIME_WARN = _RUNTIME["warn"]


def to_reference_level(runtime_level):
    """A C++ log level as the reference numbers it: 0 debug (and trace), 1 info, 2 warn, 3 error."""
    return max(0, min(3, runtime_level - 1))


def set_log_level(level):
    """Sets HMC's log level: 0 debug, 1 info, 2 warn, 3 error (the reference's numbers), or a name
    ('trace', 'debug', 'info', 'warn', 'error', 'off'). Returns 0."""
    if isinstance(level, str) and level.strip().lower() in _RUNTIME:
        _core_set_log_level(_RUNTIME[level.strip().lower()])
        return 0
    if isinstance(level, str):
        raise InvalidArgumentError(f"level must be 0-3 or one of {sorted(_RUNTIME)}, not {level!r}")
    _core_set_log_level(_FROM_REFERENCE[_args.integer(level, "level", 0, 3)])
    return 0


def get_log_level():
    """The current level in the reference's numbers (0 debug ... 3 error); 4 when logging is off."""
    current = _core_log_level()
    return 4 if current == _RUNTIME["off"] else to_reference_level(current)


_log_queue = None


def set_extern_logger(log_fn):
    """Sends every HMC log line to log_fn(level, message) (level: 0 debug .. 3 error) instead of
    stderr; None restores stderr. log_fn runs on the hmc-callbacks thread with the GIL held, never
    on a loop thread; lines are queued (at most 4096, then counted and dropped). Returns 0."""
    global _log_queue
    if log_fn is not None and not callable(log_fn):
        raise InvalidArgumentError(f"log_fn must be callable or None, not {type(log_fn).__name__}")
    if log_fn is None:
        set_log_queue(None)
        if _log_queue is not None:
            callback_thread().set_logger(None, None)
        return 0
    if _log_queue is None:
        _log_queue = LogQueue()
    callback_thread().set_logger(_log_queue, log_fn)
    set_log_queue(_log_queue)
    return 0
