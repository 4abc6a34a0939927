"""The one place user arguments are checked and converted: every bad value becomes an
InvalidArgumentError that names the argument, before anything reaches the C++ core."""
import array
import math
import numbers
import operator
import re

from ._enums import ConnType, MemoryType
from ._errors import InvalidArgumentError
from ._hmc import KvLayout

U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1


def _kind(value):
    return f"{type(value).__name__} {value!r}" if len(repr(value)) < 40 else type(value).__name__


def integer(value, name, minimum=0, maximum=U64_MAX):
    """An int (or NumPy integer) in [minimum, maximum]; bools, floats and strings are refused."""
    if type(value) is int:  # the common case, checked first: this runs on every call
        v = value
    elif isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise InvalidArgumentError(f"{name} must be an int, not {_kind(value)}")
    else:
        v = operator.index(value)
    if v < minimum:
        raise InvalidArgumentError(f"{name} must be >= {minimum}, not {v}")
    if v > maximum:
        raise InvalidArgumentError(f"{name} must be <= {maximum}, not {v}")
    return v


def segment_array(segments, what="segments must be an (N, 3) integer array in host memory"):
    """segments as an (N, 3) integer array for the C++ reader (NumPy, a CPU torch tensor, anything
    with the buffer protocol), or None when they are a list of tuples."""
    if isinstance(segments, (str, bytes, bytearray, list, tuple)):
        return None
    try:
        memoryview(segments).release()
        return segments
    except TypeError:
        pass
    if not hasattr(segments, "__array__"):
        return None
    import numpy  # a torch tensor: NumPy reads it without a copy when it is in host memory
    try:
        return numpy.asarray(segments)
    except (TypeError, RuntimeError, ValueError) as e:
        raise InvalidArgumentError(f"{what}: {e}") from None


def block_ids(ids, name):
    """ids as a 1-D integer array for the C++ reader: arrays (NumPy, CPU torch tensors, anything with
    the buffer protocol) as they are, lists and ranges as array('q')."""
    if isinstance(ids, (str, bytes, bytearray)):
        raise InvalidArgumentError(f"{name} must be block ids (a 1-D integer array or a list), not {_kind(ids)}")
    if isinstance(ids, (list, tuple, range)):
        try:
            return array.array("q", ids)
        except (TypeError, OverflowError) as e:
            raise InvalidArgumentError(f"{name} must hold integers in [0, 2**63): {e}") from None
    held = segment_array(ids, f"{name} must be a 1-D integer array in host memory")
    if held is None:
        raise InvalidArgumentError(f"{name} must be block ids (a 1-D integer array or a list), not {_kind(ids)}")
    return held


def kv_layout(layout, name):
    if not isinstance(layout, KvLayout):
        raise InvalidArgumentError(f"{name} must be an hmc.KvLayout, not {_kind(layout)}")
    return layout


def offset(value, name):
    return integer(value, name)


def size(value, name):
    """A byte count > 0."""
    return integer(value, name, minimum=1)


def optional_size(value, name):
    return None if value is None else size(value, name)


def port(value, name="port"):
    return integer(value, name, 0, 65535)


def rank(value, name="rank"):
    return integer(value, name, 0, U32_MAX)


def timeout(value, name="timeout"):
    """None, or seconds >= 0 as a float; inf waits without limit, NaN is refused."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{name} must be a number of seconds or None, not {_kind(value)}")
    v = float(value)
    if math.isnan(v) or v < 0:
        raise InvalidArgumentError(f"{name} must be >= 0 seconds (inf: no limit; None: the session timeout), not {v}")
    return v


def session_timeout(value):
    """The deadline every operation of a session carries: finite and > 0."""
    v = timeout(value, "timeout")
    if v is None or v == 0 or math.isinf(v):
        raise InvalidArgumentError(f"timeout (the session's operation deadline) must be finite and > 0 seconds, not {value!r}")
    return v


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)


def buffer_size(value):
    """Bytes > 0: an int, or a string such as "64M", "1GiB", "512k" (binary units)."""
    if isinstance(value, str):
        m = _SIZE.match(value)
        if not m:
            raise InvalidArgumentError(f"buffer_size must be an int or a size such as '64M' or '1GiB', not {value!r}")
        value = int(m.group(1)) * _UNITS[m.group(2).upper()]
    return integer(value, "buffer_size", minimum=1)


def member(cls, value, name):
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls[value.strip().upper()]
        except KeyError:
            pass
    elif not isinstance(value, bool) and hasattr(type(value), "__index__"):
        try:
            return cls(operator.index(value))
        except ValueError:
            pass
    names = ", ".join(m.name for m in cls)
    raise InvalidArgumentError(f"{name} must be a {cls.__name__} ({names}) or its name, not {_kind(value)}")


def mem_type(value, name="mem_type"):
    return member(MemoryType, value, name)


def conn(value, name="conn"):
    """ConnType.UCX or ConnType.RDMA (or their names). connect(..., conn) chooses the transport to
    that peer (UnsupportedError when this side or the server has no RDMA device); an operation's
    conn must be its peer's (Session.check_conn, after the peer is resolved)."""
    if value is ConnType.UCX:
        return value
    return member(ConnType, value, name)


def ip(value, name="ip"):
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{name} must be an IP address string, not {_kind(value)}")
    return value.strip()


def text(value, name):
    """An optional string option (None or '' for the default)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a string or None, not {_kind(value)}")
    return value


def device(value, allowed=(None, "cpu", "cuda", "ptr")):
    if value is not None and value not in allowed:
        raise InvalidArgumentError(f"device must be one of {allowed}, not {_kind(value)}")
    return value


def peer(value, port_value=None, name="peer"):
    """A peer as (rank, None) or (ip, port or None): rank, 'ip', 'ip:port', (ip, port)."""
    if not isinstance(value, (str, tuple)) and not isinstance(value, bool) and hasattr(type(value), "__index__"):
        return rank(value, name), None
    if isinstance(value, tuple) and len(value) == 2 and port_value is None:
        value, port_value = value
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a rank, 'ip', 'ip:port' or (ip, port), not {_kind(value)}")
    host = value.strip()
    if port_value is None and host.count(":") == 1:
        host, _, text_port = host.partition(":")
        if not text_port.isdigit():
            raise InvalidArgumentError(f"{name} {value!r}: the port after ':' must be a number")
        port_value = int(text_port)
    return ip(host, name), (None if port_value is None else port(port_value))


def bias_and_conn(bias, conn_value, default_conn=ConnType.UCX):
    """The guides put `conn` and `bias` third in either order: put(ip, data, conn, bias) and
    put(ip, data, bias, conn). A ConnType in the bias position is the connection type."""
    if isinstance(bias, ConnType):
        bias, conn_value = (0 if conn_value is default_conn else conn_value), bias
    return offset(bias, "bias"), conn(conn_value)


def form(forms, args, kwargs, what):
    """Picks the calling form (name, inspect.Signature) that binds args/kwargs: (name, arguments)."""
    for name, signature in forms:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            continue
        bound.apply_defaults()
        return name, bound.arguments
    shapes = " or ".join(f"{what}{signature}" for _, signature in forms)
    raise InvalidArgumentError(f"{what}() takes {shapes}; got {len(args)} positional and {sorted(kwargs)} keywords")
