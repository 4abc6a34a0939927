"""Enums of the reference API, with the values the C++ core uses."""
import enum


class Status(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSUPPORT = 2
    INVALID_CONFIG = 3
    TIMEOUT = 4
    NOT_FOUND = 5
    INVALID_ARGUMENT = 6
    OUT_OF_RANGE = 7
    NOT_CONNECTED = 8
    PEER_LOST = 9
    PROTOCOL_ERROR = 10
    CANCELLED = 11
    CLOSED = 12
    AUTH_FAILED = 13


class MemoryType(enum.IntEnum):
    DEFAULT = 0
    CPU = 1
    NVIDIA_GPU = 2
    AMD_GPU = 3
    CAMBRICON_MLU = 4
    HUAWEI_ASCEND_NPU = 5
    MOORE_GPU = 6


class ConnType(enum.IntEnum):
    RDMA = 0
    UCX = 1


class CtrlTransport(enum.IntEnum):
    """The control channel's transport to a peer: a same-host peer moves to the Unix socket its
    server names unless CTRL_TRANSPORT=tcp (uds: the socket or nothing)."""
    TCP = 0
    UDS = 1
