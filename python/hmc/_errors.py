"""The exception hierarchy, and each thread's last error message. The C++ core raises these
through by_status() (its one translator)."""
import builtins
import threading

from ._enums import Status

last_error = threading.local()  # .message: the last HMCError created in this thread (hmc.get_last_err_msg)


def get_last_err_msg():
    """The message of the last HMC error raised in this thread ('' if none)."""
    return getattr(last_error, "message", "")


def get_and_clear_last_err_msg():
    """The last error message of this thread, which is then forgotten."""
    message = get_last_err_msg()
    last_error.message = ""
    return message


class HMCError(Exception):
    """Base of every HMC error; `status` is the hmc.Status code."""

    status = Status.ERROR

    def __init__(self, *args):
        super().__init__(*args)
        last_error.message = str(self)


class TimeoutError(HMCError, builtins.TimeoutError):  # noqa: A001 - the reference name
    status = Status.TIMEOUT


class NotFoundError(HMCError, LookupError):
    status = Status.NOT_FOUND


class UnsupportedError(HMCError, NotImplementedError):
    status = Status.UNSUPPORT


class InvalidConfigError(HMCError, ValueError):
    status = Status.INVALID_CONFIG


class InvalidArgumentError(HMCError, ValueError):
    status = Status.INVALID_ARGUMENT


class OutOfRangeError(HMCError, IndexError):
    status = Status.OUT_OF_RANGE


class NotConnectedError(HMCError, ConnectionError):
    status = Status.NOT_CONNECTED


class PeerLostError(NotConnectedError):
    """A peer that was connected went away; `except NotConnectedError` catches it too."""

    status = Status.PEER_LOST


class ProtocolError(HMCError):
    status = Status.PROTOCOL_ERROR


class CancelledError(HMCError):
    status = Status.CANCELLED


class ClosedError(HMCError):
    status = Status.CLOSED


class AuthenticationError(HMCError, PermissionError):
    status = Status.AUTH_FAILED


def _hierarchy(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _hierarchy(sub)


_BY_STATUS = {cls.status: cls for cls in _hierarchy(HMCError)}  # the classes above, before any outside subclass


def by_status(code):
    """The exception class for a C++ status code."""
    return _BY_STATUS.get(code, HMCError)
