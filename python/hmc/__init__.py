"""HMC: asynchronous one-sided transfers between peers' registered buffers (UCX), with a control
channel for tags. `create_session` gives the blocking reference API; `AsyncSession` the same
methods as asyncio awaitables. Which names are the reference's and which are ours: README.md."""
from ._enums import ConnType, CtrlTransport, MemoryType, Status
from ._errors import (AuthenticationError, CancelledError, ClosedError, HMCError, InvalidArgumentError,
                      InvalidConfigError, NotConnectedError, NotFoundError, OutOfRangeError, PeerLostError, ProtocolError,
                      TimeoutError, UnsupportedError, get_and_clear_last_err_msg, get_last_err_msg)
from ._reference import DeviceHint, HMCStatusError, memory_supported, memory_type_from_torch_tensor, status_t
from ._logging import get_log_level, set_extern_logger, set_log_level
from .aio import AsyncSession
from .future import Future
from ._hmc import KvLayout
from .session import BufferView, IOBuffer, RegisteredBuffer, Session, create_session, memory_type_available
from .world import AsyncWorld, RankSession, Store, World, init_async_world, init_world, wrap_store
from . import collective
from .collective import Group, GroupMember, alltoall, init_group

__all__ = [
    "alltoall", "AsyncSession", "AsyncWorld", "AuthenticationError", "BufferView", "CancelledError", "ClosedError",
    "collective", "ConnType", "create_session", "CtrlTransport", "DeviceHint", "Future", "get_and_clear_last_err_msg",
    "get_last_err_msg", "get_log_level", "Group", "GroupMember", "HMCError", "HMCStatusError", "init_async_world",
    "init_group", "init_world", "InvalidArgumentError", "InvalidConfigError", "IOBuffer", "KvLayout", "memory_supported",
    "memory_type_available", "memory_type_from_torch_tensor", "MemoryType", "NotConnectedError", "NotFoundError",
    "OutOfRangeError", "PeerLostError", "ProtocolError", "RankSession", "RegisteredBuffer", "Session",
    "set_extern_logger", "set_log_level", "Status", "status_t", "Store", "TimeoutError", "UnsupportedError", "World",
    "wrap_store",
]
