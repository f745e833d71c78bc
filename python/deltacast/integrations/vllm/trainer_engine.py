"""The trainer side of the ``deltacast`` backend: vLLM's TrainerWeightTransferEngine.

Every trainer rank runs one. At ``trainer_init`` each rank starts a deltacast producer over
buffers of its own for the tensors it publishes (its ``shards`` of a sharded trainer, else its
share of the source's tensors), rank 0 hosting the group's coordinator; rank 0 then tells the
server to join (``init_weight_transfer_engine``). At ``send_weights`` every rank copies the
source's tensors into its buffers and publishes them as the next version (a delta against the
last one); rank 0 drives the update phase (start, update, finish) and collects each worker's
report, and every rank raises the same UpdateError naming each failing worker."""
import secrets
import socket
import time
from dataclasses import dataclass
from typing import ClassVar

from vllm.distributed.weight_transfer.base import TrainerInitInfo, TrainerWeightTransferEngine

from ..._dtypes import deltacast_dtype_of_torch, torch_dtype_of
from ..._tensors import parse_token
from ...engine import Producer
from ...errors import DTypeError, InvalidArgumentError, UpdateError
from ...group import Group, Piece, whole
from ...inference.reports import ReplyListener


@dataclass
class DeltacastTrainerInitInfo(TrainerInitInfo):
    """``rank`` (keyword) of ``world_size`` trainer ranks; ``coordinator``: host:port where rank 0
    hosts the group's coordinator (port 0: any free port, for a world of one); ``advertise``: the
    host this rank listens on and the inference workers reach it at (default: the coordinator's host); ``shards``:
    this rank's {tensor name: deltacast piece} of a sharded trainer (the source then yields this
    rank's local tensors), None to publish whole tensors (each name by one rank, dealt round-robin,
    or the source's held_names()); ``device``: where the producer keeps its buffers and diffs
    ("cpu", or "cuda" to diff on the trainer's GPU); ``rollback=False``: the workers keep no copy of
    what vLLM's reload overwrites (a shorter pause where weights go through the reload, but a
    failure there can leave the model mixed; in-place parameters need no copy)."""

    backend: ClassVar[str] = "deltacast"
    coordinator: str = "127.0.0.1:0"
    world_size: int = 1
    token: str | int | None = None
    rails: list[str] | None = None
    advertise: str | None = None
    shards: dict | None = None
    device: str = "cpu"
    timeout: float = 300.0
    in_place: bool = True
    rollback: bool = True
    encrypt: bool = False  # True: every connection encrypted (AES-256-GCM), not only authenticated
    send_token: bool = True
    value_codec: str = "ulp"
    transport: str = "tcp"


def _logical(metadata):
    out = {}
    for meta in metadata:
        dtype = deltacast_dtype_of_torch(meta.dtype)
        if dtype is None:
            raise DTypeError(f"tensor '{meta.name}': dtype {meta.dtype} is not one deltacast carries")
        out[meta.name] = (dtype, tuple(meta.shape) or (1,))
    return out


def _mine(info, logical, held):
    """{local name: piece} this rank publishes."""
    if info.shards is not None:
        unknown = [n for n, p in info.shards.items() if not isinstance(p, Piece) or p.tensor not in logical]
        if unknown:
            raise InvalidArgumentError(f"shards: {', '.join(map(repr, unknown))} are not pieces of the source's tensors")
        return dict(info.shards)
    names = list(logical)
    if held is not None:
        held = set(held)
        names = [n for n in names if n in held]
    elif info.world_size > 1:
        names = names[info.rank::info.world_size]
    return {n: whole(n, logical[n][1]) for n in names}


def _host_of(address):
    return address.rpartition(":")[0].strip("[]")


class _Ranks:
    """Agreement among the trainer ranks (torch.distributed's default group; nothing with one rank)."""

    def __init__(self, world_size):
        self.world_size = world_size
        if world_size > 1:
            import torch.distributed as dist
            if not dist.is_initialized():
                raise InvalidArgumentError("world_size > 1: initialise torch.distributed on every trainer rank first")
            self._dist = dist

    def from_zero(self, value):
        if self.world_size == 1:
            return value
        box = [value]
        self._dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, value):
        if self.world_size == 1:
            return [value]
        out = [None] * self.world_size
        self._dist.all_gather_object(out, value)
        return out


class DeltacastTrainerWeightTransferEngine(TrainerWeightTransferEngine[DeltacastTrainerInitInfo]):
    init_info_cls = DeltacastTrainerInitInfo

    def __init__(self, info, client, source):
        super().__init__(client=client, source=source, is_sender=info.rank == 0)
        import torch
        self.info = info
        self._ranks = _Ranks(info.world_size)
        self._logical = _logical(source.metadata())
        self._pieces = _mine(info, self._logical, source.held_names() if info.shards is None else None)
        group = Group(self._logical)
        shapes = group.resolve(self._pieces)
        device = torch.device(info.device)
        self._buffers = {n: torch.zeros(shape, dtype=torch_dtype_of(dtype), device=device)
                         for n, (dtype, shape) in shapes.items()}
        self.version = 0
        self.last_reports = []  # rank 0: each worker's report of the last update (error, result)
        self.last_update_seconds = None  # rank 0: the last update phase on the server, start to finish
        self.workers = {}  # rank 0: the server's workers by index, as they reported joining
        self.producer = None
        if self._buffers:
            self.producer = Producer(self._buffers, listen=f"{self._host()}:0", token=info.token,
                                     rails=info.rails, value_codec=info.value_codec, transport=info.transport,
                                     group=group, rank=info.rank, world_size=info.world_size, shards=self._pieces,
                                     coordinator=info.coordinator, register_timeout=info.timeout,
                                     encrypt=info.encrypt)
        if info.rank == 0 and self.producer is None:
            raise InvalidArgumentError("shards: rank 0 hosts the group and must publish at least one tensor")
        self.coordinator = self._ranks.from_zero(self.producer.coordinator if self.producer else None)
        self.group_id = self._ranks.from_zero(secrets.token_hex(8))

    def _host(self):
        """The address this rank listens on and workers reach it at: ``advertise``, else the
        coordinator's host (this host's name's address where that is a wildcard)."""
        host = self.info.advertise or _host_of(self.info.coordinator)
        return host if host not in ("0.0.0.0", "", "::") else socket.gethostbyname(socket.gethostname())

    @classmethod
    def trainer_init(cls, init_info, *, client, source=None):
        if source is None:
            raise InvalidArgumentError("deltacast: give trainer_init a source (a WeightSource of the trainer's "
                                       "tensors, e.g. ModuleSource(model))")
        if not isinstance(init_info.world_size, int) or not 0 <= init_info.rank < init_info.world_size:
            raise InvalidArgumentError(f"rank {init_info.rank!r} is not in [0, world_size={init_info.world_size!r})")
        port = init_info.coordinator.rpartition(":")[2]
        if not port.isdigit() or (init_info.world_size > 1 and int(port) == 0):
            raise InvalidArgumentError(f"coordinator: {init_info.coordinator!r} is not host:port"
                                       f"{' with a fixed port (every rank must know it)' if port == '0' else ''}")
        engine = cls(init_info, client, source)
        error = None
        if engine.is_sender:
            error = engine._join_server()
        error = engine._ranks.from_zero(error)
        if error:
            engine.shutdown()
            raise UpdateError(error)
        return engine

    def _join_server(self):
        """Rank 0: has the server's workers join the group; learns their names (each reports).
        Returns an error text, or None."""
        info = self.info
        listener = ReplyListener(self._host(), secrets.token_hex(8))
        try:
            self.client.init_weight_transfer_engine({
                "coordinator": self.coordinator, "group": self.group_id,
                "token": parse_token(info.token) if info.send_token and info.token is not None else None,
                "encrypt": bool(info.encrypt),
                "timeout": float(info.timeout), "in_place": bool(info.in_place), "rollback": bool(info.rollback),
                "reply": f"{self._host()}:{listener.port}", "nonce": listener.nonce})
            listener.wait_all(time.monotonic() + 10.0)
        except Exception as e:
            failed = [f"worker {r['worker']}: {r['error']}" for r in listener.failures()]
            return f"the server's workers did not join ({type(e).__name__}: {e}){': ' if failed else ''}" + \
                "; ".join(failed)
        finally:
            listener.close()
        self.workers = {r["index"]: r["worker"] for r in listener.reports if r["index"] is not None}
        return None

    def send_weights(self):
        """Publishes the source's tensors as the next version and has the server apply it. Every
        rank raises the same UpdateError when any rank or worker failed (naming each); the server
        then still serves the previous version."""
        self.version += 1
        error = None
        try:
            self._publish()
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        errors = [f"trainer rank {r}: {e}" for r, e in enumerate(self._ranks.gather(error)) if e]
        if not errors and self.is_sender:
            errors = self._update()
        try:
            errors = self._ranks.from_zero(errors)
        except Exception as e:  # a trainer rank went away: rank 0 still says what it knows
            if not self.is_sender:
                raise
            errors = errors + [f"telling the other trainer ranks failed ({type(e).__name__}: {e})"]
        if errors:
            raise UpdateError(f"update to version {self.version} failed: " + "; ".join(errors))
        return self.version

    def _publish(self):
        import torch
        with torch.no_grad():
            for name, tensor in self.source:
                buffer = self._buffers.get(name)
                if buffer is None or tensor is None:
                    continue
                buffer.copy_(tensor.reshape(buffer.shape))
        if self.producer is not None:
            self.producer.publish(version=self.version)

    def _update(self):
        """Rank 0: the update phase on the server; returns the problems (empty: applied everywhere)."""
        listener = ReplyListener(self._host(), secrets.token_hex(8))
        problems, server_error = [], None
        start = time.monotonic()
        try:
            self.client.start_weight_update()
            try:
                self.client.update_weights({"version": self.version, "nonce": listener.nonce,
                                            "reply": f"{self._host()}:{listener.port}"})
            except Exception as e:
                server_error = f"{type(e).__name__}: {e}"
                try:  # ends the session on the workers that returned (only the last worker raises)
                    self.client.finish_weight_update(None)
                except Exception:
                    pass
            else:
                self.client.finish_weight_update(str(self.version))
        except Exception as e:
            server_error = f"{type(e).__name__}: {e}"
        self.last_update_seconds = time.monotonic() - start
        # Every worker that got the call reports; one that died does not.
        missing = listener.wait_all(time.monotonic() + (10.0 if server_error else 30.0))
        self.last_reports = sorted(listener.reports, key=lambda r: (r["index"] is None, r["index"]))
        problems += [f"worker {r['worker']}: {r['error']}" for r in listener.failures()]
        unheard = sorted(set(self.workers) - {r["index"] for r in listener.reports})
        if unheard:
            problems.append("no report from " + ", ".join(f"worker {self.workers[i]}" for i in unheard) +
                            " (the process gone, or the server down)")
        elif missing:
            problems.append(f"worker(s) {', '.join(map(str, missing))} did not report (gone?)")
        if server_error and not problems:
            problems.append(f"the server: {server_error}")
        elif server_error:
            problems.append(f"the server answered {server_error}")
        listener.close()
        return problems

    def shutdown(self):
        if self.producer is not None:
            self.producer.close()
            self.producer = None
