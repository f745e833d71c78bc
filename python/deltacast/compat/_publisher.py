"""The engine under a ParameterServer world: the group of trainer ranks that
publish a checkpoint's tensors. gather_metas makes its plan (which rank sends
which tensor); the plan holds as long as checkpoints keep the same tensors, so
a later checkpoint is published as a delta against the one before, whatever
its name."""
import json
import secrets
from dataclasses import dataclass

from .. import group as groups
from ..coordinator import Coordinator
from ..engine import Producer
from ..errors import InvalidArgumentError
from ._host_tensors import array_of, host_buffer
from ._rendezvous import UpdateError, agreed, error_text


@dataclass(frozen=True)
class Plan:
    logical: tuple  # ({name, dtype, shape}, ...) in rank order, then each rank's order
    owner: dict     # name -> the rank that sends it: the lowest that registered it
    owners: tuple   # the ranks that send anything, ascending

    @property
    def signature(self):
        return json.dumps([list(self.logical), sorted(self.owner.items())])

    def owned_by(self, rank):
        return [t for t in self.logical if self.owner[t["name"]] == rank]


def plan_of(metas_by_rank, checkpoint):
    """The plan from every rank's metas of `checkpoint`; a tensor two ranks define differently is
    an error naming it and both ranks. A tensor two ranks registered alike is sent by the lower.
    Empty tensors carry nothing: they are left out."""
    logical, owner, seen = [], {}, {}
    for rank, metas in enumerate(metas_by_rank):
        for t in metas:
            if 0 in t["shape"]:
                continue
            first = seen.get(t["name"])
            if first is None:
                seen[t["name"]] = (rank, t)
                owner[t["name"]] = rank
                logical.append(t)
            elif (first[1]["dtype"], first[1]["shape"]) != (t["dtype"], t["shape"]):
                raise InvalidArgumentError(
                    f"checkpoint '{checkpoint}': tensor '{t['name']}' is {first[1]['dtype']} {tuple(first[1]['shape'])} "
                    f"on rank {first[0]} and {t['dtype']} {tuple(t['shape'])} on rank {rank}")
    return Plan(tuple(logical), owner, tuple(sorted(set(owner.values()))))


def whole(t):
    """A whole logical tensor (a metas entry) as one piece."""
    return groups.whole(t["name"], t["shape"])


@dataclass
class EngineOptions:
    listen_host: str     # what sockets bind (0.0.0.0, or loopback for a one-host job)
    advertise_host: str  # how other hosts reach this one
    token: object
    rails: list          # this rank's NIC addresses (at least the advertised host's)
    value_codec: str
    transport: str
    register_timeout: float


class Publisher:
    """Rank 0 runs the group's coordinator; every rank that sends tensors runs a producer over
    buffers of its own, which each update fills from the checkpoint's host copies. Building it is
    a collective: a rank whose part fails tells the others, and every rank raises UpdateError
    naming it (no rank is left waiting in an exchange the others skipped)."""

    def __init__(self, plan, rank, rendezvous, options):
        self.plan = plan
        self._coordinator = self._producer = None
        self._buffers = {}
        mine = {"address": None, "group": None, "error": None}
        if rank == 0:
            try:
                self._coordinator = Coordinator(len(plan.owners), listen=f"{options.listen_host}:0",
                                                token=options.token)
                mine["address"] = f"{options.advertise_host}:{self._coordinator.address.rpartition(':')[2]}"
                mine["group"] = secrets.token_hex(8)
            except Exception as e:  # told to every rank below
                mine["error"] = error_text(e)
        first = rendezvous.gather("coordinator", mine)[0]
        if first["error"]:
            self.close()
            agreed([first["error"]], "starting the group's coordinator")
        self.coordinator, self.group = first["address"], first["group"]
        error = None
        owned = plan.owned_by(rank)
        if owned:
            try:
                self._start_producer(plan, rank, owned, options)
            except Exception as e:
                error = error_text(e)
        outcomes = rendezvous.gather("engine ready", error)
        try:
            agreed(outcomes, "building the engine")
        except UpdateError:
            self.close()
            raise

    def _start_producer(self, plan, rank, owned, options):
        self._buffers = {t["name"]: host_buffer(t["dtype"], t["shape"]) for t in owned}
        views = {n: self._engine_view(b) for n, b in self._buffers.items()}
        group = groups.Group({t["name"]: (t["dtype"], t["shape"] or [1]) for t in plan.logical})
        self._producer = Producer(views, listen=f"{options.listen_host}:0", token=options.token,
                                  rails=options.rails, value_codec=options.value_codec,
                                  transport=options.transport, group=group, rank=plan.owners.index(rank),
                                  world_size=len(plan.owners), shards={t["name"]: whole(t) for t in owned},
                                  coordinator=self.coordinator, host_coordinator=False,
                                  register_timeout=options.register_timeout)

    @staticmethod
    def _engine_view(buffer):
        # A 0-d tensor travels as a 1-element one.
        array = array_of(buffer)
        if array.ndim:
            return buffer
        return (array.reshape(1), buffer[1]) if isinstance(buffer, tuple) else array.reshape(1)

    @property
    def producer(self):
        return self._producer

    def publish(self, tensors, version):
        """Copies this rank's tensors of checkpoint `tensors` into the buffers and publishes them
        as `version` (nothing on a rank that sends nothing)."""
        if self._producer is None:
            return None
        for name, buffer in self._buffers.items():
            array_of(buffer)[...] = array_of(tensors[name])
        return self._producer.publish(version=version)

    def close(self):
        for engine in (self._producer, self._coordinator):
            if engine is not None:
                engine.close()
        self._producer = self._coordinator = None
