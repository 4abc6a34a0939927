"""hmc.collective: the reference package's process groups and all-to-all over one blocking Session.

torch.distributed (already initialised, e.g. by torchrun) only exchanges the members' addresses in
init_group; alltoall moves every byte with the session's one-sided puts and synchronises over its
control channel with a deadline, so a missing rank is a typed hmc error (PeerLostError,
NotConnectedError, TimeoutError), never a hang. Every rank calls alltoall in the same order; the
control messages to the group's peers are the collective's own (do not ctrl_recv from them meanwhile).
"""
import dataclasses
import struct
import time

from . import _args, _payload
from ._enums import ConnType, MemoryType
from ._errors import HMCError, InvalidArgumentError, NotConnectedError, ProtocolError, TimeoutError
from .aio import AsyncSession

__all__ = ["GroupMember", "Group", "init_group", "alltoall"]


@dataclasses.dataclass(frozen=True)
class GroupMember:
    """One rank's address: data ports per transport, control port, and its buffer's memory."""

    rank: int
    world: int
    ip: str
    port_ucx: int
    port_rdma: int
    port_ctrl: int
    mem_type: int
    device_id: int
    buffer_size: int

    @property
    def memory_type(self):
        return MemoryType(int(self.mem_type))

    def port_for(self, conn):
        return int(self.port_ucx if ConnType(int(conn)) == ConnType.UCX else self.port_rdma)

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d):
        try:
            return cls(**{f.name: (str if f.name == "ip" else int)(d[f.name]) for f in dataclasses.fields(cls)})
        except (KeyError, TypeError, ValueError) as e:
            raise ProtocolError(f"init_group: a member's record is malformed ({e!r})") from None


class Group:
    """The ranks 0..world-1 of one job, each with a session serving at its GroupMember address."""

    def __init__(self, *, session, members, rank, group_id="default"):
        self.session = session
        self.group_id = str(group_id)
        self.members = sorted(members, key=lambda m: int(m.rank))
        self.rank = int(rank)
        self.world = len(self.members)
        if self.world <= 0:
            raise InvalidArgumentError("empty group")
        if not 0 <= self.rank < self.world:
            raise InvalidArgumentError(f"bad rank: {self.rank} (world={self.world})")
        for i, m in enumerate(self.members):
            if int(m.rank) != i:
                raise InvalidArgumentError("members must be contiguous ranks 0..world-1")
            if int(m.world) != self.world:
                raise InvalidArgumentError(f"member {i} says world={m.world}, the group has {self.world}")
        self.me = self.members[self.rank]
        self._calls = 0  # collectives issued: every rank counts the same, so messages name their call

    def peer(self, r):
        return self.members[int(r)]

    @property
    def right(self):
        return self.members[(self.rank + 1) % self.world]

    @property
    def left(self):
        return self.members[(self.rank - 1) % self.world]


def init_group(*, session, my_ip, port_ucx, port_rdma, port_ctrl, group_id="default", ctrl_tcp_port=None,
               ctrl_uds_dir="/tmp", start_servers=True, server_barrier=True):
    """Collective over torch.distributed's default group: starts this rank's server (rank = the
    torch rank, listening on my_ip: port_ctrl, or ctrl_tcp_port when given) and gathers every
    member's address. The server starts before the gather, so every member serves once this
    returns (server_barrier asks for that and needs no extra barrier); a rank whose server fails
    raises its error and the others NotConnectedError naming it; a rank that never arrives is
    torch's process-group timeout."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise NotConnectedError("init_group: torch.distributed is not initialised; call "
                                "dist.init_process_group first (torchrun sets its variables)")
    _blocking(session, "init_group")
    rank, world = int(dist.get_rank()), int(dist.get_world_size())
    me = GroupMember(rank=rank, world=world, ip=_args.ip(my_ip, "my_ip"), port_ucx=_args.port(port_ucx, "port_ucx"),
                     port_rdma=_args.port(port_rdma, "port_rdma"), port_ctrl=_args.port(port_ctrl, "port_ctrl"),
                     mem_type=int(session.buf.mem_type), device_id=int(session.buf.device_id),
                     buffer_size=int(session.buf.size))
    failure = None
    if start_servers:
        try:
            session.set_local_ip(me.ip)
            session.init_server(bind_ip=me.ip, ucx_port=me.port_ucx, rdma_port=me.port_rdma,
                                ctrl_tcp_port=me.port_ctrl if ctrl_tcp_port is None else ctrl_tcp_port,
                                self_id=rank, ctrl_uds_dir=ctrl_uds_dir)
        except HMCError as e:  # still gathered: every rank fails now instead of waiting for this one
            failure = e
    gathered = [None] * world
    dist.all_gather_object(gathered, dict(me.to_dict(), error=None if failure is None else f"{failure!r}"))
    if failure is not None:
        raise failure
    for i, d in enumerate(gathered):
        if isinstance(d, dict) and d.get("error"):
            raise NotConnectedError(f"init_group: rank {i} could not start its server: {d['error']:.300}")
    return Group(session=session, members=[GroupMember.from_dict(d) for d in gathered], rank=rank,
                 group_id=group_id)


def alltoall(group, send, recv, *, algo="auto", conn="auto", send_bias=0, recv_bias=None,
             chunk_bytes=4 << 20, do_self_copy=True, timeout=None):
    """recv's block i (of world equal blocks) becomes rank i's send block for this rank. Both are
    staged in the session buffer: send at send_bias, recv at recv_bias (default right after send).
    algo "direct" puts each block straight to its rank (full mesh); "ring" connects neighbours only
    and forwards blocks to the right, through two staging areas after send and recv; "auto":
    direct up to 8 ranks. conn "auto" picks per pair from the memory types (CPU: UCX); puts go in
    chunk_bytes pieces. do_self_copy=False leaves this rank's own block of recv as the buffer held it.
    timeout: seconds for the whole call (None: the session's timeout)."""
    sess = group.session
    _blocking(sess, "alltoall")
    w, r = group.world, group.rank
    total = _payload.nbytes(send)
    if _payload.nbytes(recv) != total:
        raise InvalidArgumentError(f"send/recv nbytes mismatch: send={total} recv={_payload.nbytes(recv)}")
    if total % w:
        raise InvalidArgumentError(f"send nbytes must be divisible by world: nbytes={total} world={w}")
    per = total // w
    send_bias = _args.offset(send_bias, "send_bias")
    recv_bias = send_bias + total if recv_bias is None else _args.offset(recv_bias, "recv_bias")
    chunk = _args.integer(chunk_bytes, "chunk_bytes", 1)
    algo = str(algo).strip().lower()
    if algo == "auto":
        algo = "direct" if w <= 8 else "ring"
    if algo not in ("direct", "ring"):
        raise InvalidArgumentError(f"algo must be 'auto', 'direct' or 'ring', not {algo!r}")
    staging = max(send_bias, recv_bias) + total  # ring: two areas of w - 1 blocks after send and recv
    need = staging + (2 * (w - 1) * per if algo == "ring" else 0)
    if need > sess.buf.size:
        raise InvalidArgumentError(f"alltoall needs {need} bytes of the session buffer, it has {sess.buf.size} "
                                   "(create_session(buffer_size=...))")
    if total and send_bias < recv_bias + total and recv_bias < send_bias + total:
        raise InvalidArgumentError("the send and recv areas of the session buffer overlap")
    wait = _Deadline(sess.timeout if timeout is None else _args.timeout(timeout))
    group._calls += 1
    sess.buf.put(send, send_bias, nbytes=total)
    if w > 1:
        run = _Exchange(group, conn, chunk, wait)
        if algo == "direct":
            run.direct(send_bias, recv_bias, per)
        else:
            run.ring(send_bias, recv_bias, per, staging)
    if do_self_copy and per:
        sess.buf.copy_within(recv_bias + r * per, send_bias + r * per, per)
    sess.buf.get_into(recv, total, recv_bias)


def _blocking(session, what):
    if isinstance(session, AsyncSession):
        raise InvalidArgumentError(f"{what} takes a blocking hmc.Session (create_session), not an AsyncSession")


def _pick_conn(a, b):
    """The reference's transport per pair of memory types: RDMA where an MLU or a Moore GPU is
    involved, or for two GPUs; UCX otherwise."""
    a, b = MemoryType(int(a)), MemoryType(int(b))
    gpus = {MemoryType.NVIDIA_GPU, MemoryType.AMD_GPU, MemoryType.CAMBRICON_MLU, MemoryType.MOORE_GPU}
    rdma_only = {MemoryType.CAMBRICON_MLU, MemoryType.MOORE_GPU}
    if a in rdma_only or b in rdma_only or (a != b and a in gpus and b in gpus):
        return ConnType.RDMA
    return ConnType.UCX


class _Deadline:
    def __init__(self, seconds):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self, what):
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"alltoall: {what} not done within its {self.seconds} s")
        return left


class _Exchange:
    """One alltoall call. Control messages: HMCa + kind + call + step. READY (my receiving areas
    are free for this call), DONE (direct: my block is in your recv area), DATA (ring: step's blocks
    are in your staging area), CREDIT (ring: my staging area for that step is free again)."""

    FORMAT = "<4scII"
    READY, DONE, DATA, CREDIT = b"R", b"D", b"S", b"C"

    def __init__(self, group, conn, chunk, wait):
        self.g, self.sess, self.chunk, self.wait = group, group.session, chunk, wait
        self.call = group._calls & 0xFFFFFFFF
        self.conn = conn

    def _conn(self, peer):
        if isinstance(self.conn, str) and self.conn.strip().lower() == "auto":
            return _pick_conn(self.g.me.mem_type, self.g.peer(peer).mem_type)
        return _args.conn(self.conn)

    def link(self, peers):
        """Connects each pair once: the lower rank dials the higher one's server (no cycles, so no
        two ranks wait for each other)."""
        have = set(self.sess.peers())
        for p in sorted(set(peers)):
            if p in have:
                continue
            if self.g.rank < p:
                m, c = self.g.peer(p), self._conn(p)
                self.wait.left(f"connecting to rank {p}")
                self.sess.connect(peer_id=p, self_id=self.g.rank, peer_ip=m.ip, data_port=m.port_for(c),
                                  ctrl_tcp_port=m.port_ctrl, conn=c)
            else:
                self.sess.wait_peer(p, timeout=self.wait.left(f"waiting for rank {p} to connect"))

    def send(self, peer, kind, step=0):
        self.sess.ctrl_send(peer, struct.pack(self.FORMAT, b"HMCa", kind, self.call, step),
                            timeout=self.wait.left(f"a message to rank {peer}"))

    def expect(self, peer, kind, step=0):
        got = self.sess.ctrl_recv(peer, timeout=self.wait.left(f"rank {peer}'s part"))
        want = struct.pack(self.FORMAT, b"HMCa", kind, self.call, step)
        if got != want:
            raise ProtocolError(f"alltoall: rank {peer} sent {got!r:.60} where {want!r} was due (every rank must "
                                "call the same collectives in the same order)")

    def put(self, peer, local_off, remote_off, nbytes):
        c = self._conn(peer)
        for done in range(0, nbytes, self.chunk):
            n = min(self.chunk, nbytes - done)
            self.sess.put_remote(peer, None, local_off + done, remote_off + done, n, c,
                                 timeout=self.wait.left(f"a put to rank {peer}"))

    def direct(self, send_base, recv_base, per):
        w, r = self.g.world, self.g.rank
        peers = [p for p in range(w) if p != r]
        self.link(peers)
        for p in peers:
            self.send(p, self.READY)
        for s in range(1, w):
            dst = (r + s) % w
            self.expect(dst, self.READY)
            self.put(dst, send_base + dst * per, recv_base + r * per, per)
            self.send(dst, self.DONE)
        for s in range(1, w):
            self.expect((r - s) % w, self.DONE)

    def ring(self, send_base, recv_base, per, staging):
        """Step s: forward to the right the w - s blocks that left rank r - s; keep the first (ours)."""
        w, r = self.g.world, self.g.rank
        left, right = (r - 1) % w, (r + 1) % w
        self.link({left, right})
        slot_size = (w - 1) * per
        slots = (staging, staging + slot_size)
        self.send(left, self.READY)  # covers steps 1 and 2; CREDIT s covers step s >= 3
        for s in range(1, w):
            if s == 1:
                self.expect(right, self.READY)
            elif s >= 3:
                self.expect(right, self.CREDIT, s)
            into = slots[s % 2]
            if s == 1:
                for d in range(1, w):
                    self.put(right, send_base + ((r + d) % w) * per, into + (d - 1) * per, per)
            else:
                self.put(right, slots[(s - 1) % 2] + per, into, (w - s) * per)
            self.send(right, self.DATA, s)
            if s >= 2 and s + 1 < w:
                self.send(left, self.CREDIT, s + 1)
            self.expect(left, self.DATA, s)
            if per:
                self.sess.buf.copy_within(recv_base + ((r - s) % w) * per, slots[s % 2], per)
