"""HMC: asynchronous one-sided transfers between peers' registered buffers (UCX), with a control
channel for tags. `create_session` gives the blocking reference API; `AsyncSession` the same
methods as asyncio coroutines."""
from ._enums import ConnType, MemoryType, Status
from ._errors import (AuthenticationError, CancelledError, ClosedError, HMCError, InvalidArgumentError,
                      InvalidConfigError, NotConnectedError, NotFoundError, OutOfRangeError, PeerLostError, ProtocolError, TimeoutError,
                      UnsupportedError)
from .aio import AsyncSession
from .future import Future
from .session import BufferView, RegisteredBuffer, Session, create_session, memory_type_available
from .world import AsyncWorld, RankSession, Store, World, init_async_world, init_world, wrap_store  # noqa: F401

__all__ = [
    "AsyncSession", "AuthenticationError", "BufferView", "CancelledError", "ClosedError", "ConnType", "Future",
    "HMCError", "InvalidArgumentError", "InvalidConfigError", "MemoryType", "NotConnectedError", "NotFoundError",
    "OutOfRangeError", "PeerLostError", "ProtocolError", "RegisteredBuffer", "Session", "Status", "TimeoutError",
    "UnsupportedError", "create_session", "memory_type_available",
]
