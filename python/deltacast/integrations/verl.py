"""deltacast as a verl checkpoint engine (backend ``deltacast``).

In verl's config::

    actor_rollout_ref.rollout.checkpoint_engine.backend=deltacast
    actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=deltacast.integrations.verl
    # optional: actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.deltacast.token=...

verl hands a checkpoint engine every tensor at every sync. Here each trainer rank keeps its share
of them (rows of every tensor with at least as many rows as ranks; whole small tensors dealt out by
position) and publishes it as a rank of a deltacast sharded group, numbered by verl's global step:
deltacast diffs it against the last published step, so after the first sync only the change crosses
the network, from every trainer rank at once. Rollout workers hold the whole model in host memory,
joined to the group through its coordinator (on trainer rank 0).

A sync lands everywhere or nowhere: each rollout worker stages the version whole and verified, then
the rollout workers agree (a small Ray actor on trainer rank 0's node) that every one of them has
it, and only then commit. A worker that dies or cannot get the version before that leaves every
other one at the version it held, and each of them raises deltacast.UpdateError naming the missing
workers; the next sync carries everything since the last committed version. (One that dies after
they all agreed leaves the others on the new version.) receive_weights then yields the
tensors that changed (all of them the first time) to verl's server adapter."""
import asyncio
import json
import os
import socket
import time
import zlib

import ray
import torch
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

from .. import _core
from .._dtypes import deltacast_dtype_of_torch, torch_dtype_of
from .._tensors import parse_protection, parse_token
from ..coordinator import Coordinator
from ..engine import Consumer, Producer
from ..errors import InvalidArgumentError, UpdateError
from ..group import Group, rows, whole
from ..inference.receiver import staged_in_time


def _node_ip():
    try:
        return ray.util.get_node_ip_address().strip("[]")
    except Exception:  # not in a Ray worker (a unit test): loopback
        return "127.0.0.1"


def shard_of(shape, index, rank, world_size):
    """The piece of a tensor this trainer rank publishes: (start, stop) rows when it has at least
    `world_size` rows, else the whole tensor for one rank (by the tensor's position) and None for
    the others."""
    if len(shape) >= 1 and shape[0] >= world_size:
        return (shape[0] * rank // world_size, shape[0] * (rank + 1) // world_size)
    return "whole" if index % world_size == rank else None


class Agreement:
    """The rollout workers of a sync meeting before they commit: arrive() returns once every
    worker arrived for the version, or after `timeout` seconds with the ranks that did not."""

    def __init__(self):
        self.arrived, self.events = {}, {}

    async def arrive(self, version, rank, world_size, timeout):
        here = self.arrived.setdefault(version, set())
        event = self.events.setdefault(version, asyncio.Event())
        here.add(rank)
        if len(here) >= world_size:
            event.set()
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return sorted(set(range(world_size)) - here)

    def arrived_at(self, version):
        """The ranks that arrived for `version` so far."""
        return sorted(self.arrived.get(version, ()))


@CheckpointEngineRegistry.register("deltacast")
class DeltacastCheckpointEngine(CheckpointEngine):
    """verl's CheckpointEngine over deltacast. engine_kwargs: ``token`` (default: $DELTACAST_TOKEN),
    ``rails`` (this process's NIC addresses), ``transport`` ("tcp", "rdma", "auto"), ``timeout``
    (seconds a sync may take, 600), ``agree_timeout`` (seconds rollout workers wait for each other
    once they have a version, 60), ``changed_only`` (yield only changed tensors, True), ``encrypt``
    (every connection encrypted with AES-256-GCM, not only authenticated; False; TCP rails).
    ``bucket_size`` is verl's and unused: deltacast sizes its own buckets."""

    wire_format = "named_tensors"

    def __init__(self, bucket_size, is_master=False, token=None, rails=None, transport="tcp", timeout=600.0,
                 agree_timeout=60.0, changed_only=True, encrypt=False):
        self.is_master = bool(is_master)
        self.token = token if token is not None else os.environ.get("DELTACAST_TOKEN")
        self.rails, self.transport = rails, transport
        self.timeout, self.agree_timeout = float(timeout), float(agree_timeout)
        self.changed_only = bool(changed_only)
        self.encrypt = bool(encrypt)
        self.role = None
        self._reserved = None        # trainer rank 0: the coordinator's port, held from prepare()
        self._coordinator = None     # trainer rank 0: the group's coordinator
        self._address = None
        self._producer, self._buffers, self._shapes, self._published = None, {}, None, 0
        self._consumer, self._model, self._crcs = None, {}, {}

    # -- topology: every sync, as verl rebuilds its process group each time --------------------

    def prepare(self):
        if not self.is_master:
            return {"master": False}
        if self._address is None:
            # Hold the port until init_process_group starts the coordinator on it.
            self._reserved = socket.socket()
            self._reserved.bind((_node_ip(), 0))
            self._address = "%s:%d" % self._reserved.getsockname()[:2]
        return {"master": True, "coordinator": self._address, "agreement": f"deltacast-verl-{self._address}"}

    @classmethod
    def build_topology(cls, actor_wg_world_size, rollout_world_size, metadata):
        masters = [m for m in metadata[:actor_wg_world_size] if m.get("master")]
        if len(masters) != 1:
            raise InvalidArgumentError(f"deltacast: {len(masters)} trainer ranks are is_master; exactly one must be")
        where = {"coordinator": masters[0]["coordinator"], "agreement": masters[0]["agreement"]}
        actor = {"role": ["trainer"] * actor_wg_world_size, "rank": list(range(actor_wg_world_size)),
                 "world_size": [actor_wg_world_size] * actor_wg_world_size}
        rollout = {"role": ["rollout"] * rollout_world_size, "rank": list(range(rollout_world_size)),
                   "world_size": [rollout_world_size] * rollout_world_size}
        for side, count in ((actor, actor_wg_world_size), (rollout, rollout_world_size)):
            for key, value in where.items():
                side[key] = [value] * count
        return actor, rollout

    def init_process_group(self, role, rank, world_size, coordinator, agreement):
        if self.role is not None and (self.role, self.rank, self.world_size) != (role, rank, world_size):
            raise InvalidArgumentError(f"deltacast: this worker was {self.role} rank {self.rank} of "
                                       f"{self.world_size}, now {role} rank {rank} of {world_size}; "
                                       "a resized group needs new workers")
        self.role, self.rank, self.world_size = role, rank, world_size
        self.coordinator, self.agreement_name = coordinator, agreement
        if self.is_master and self._coordinator is None:
            self._reserved.close()
            self._coordinator = Coordinator(world_size, listen=coordinator, token=self.token, encrypt=self.encrypt)
            self._agreement = ray.remote(Agreement).options(name=agreement, get_if_exists=True,
                                                            num_cpus=0).remote()

    def finalize(self):
        """Nothing to free between syncs: the group, its buffers and the rollout's model stay."""

    # -- trainer side ---------------------------------------------------------------------------

    async def send_weights(self, weights, global_steps=None):
        if self.role != "trainer":
            raise InvalidArgumentError("send_weights: on a trainer rank (init_process_group(role='trainer'))")
        index = 0
        shapes = {}
        async for name, tensor in ensure_async_iterator(weights):
            shapes[name] = (deltacast_dtype_of_torch(tensor.dtype), tuple(tensor.shape))
            if self._producer is None:
                self._take_shard(name, tensor, index)
            elif self._shapes.get(name) != shapes[name]:
                raise InvalidArgumentError(f"send_weights: tensor '{name}' is {shapes[name]}, it was "
                                           f"{self._shapes.get(name)} at the first sync")
            self._copy_shard(name, tensor)
            index += 1
        if self._producer is None:
            self._start_producer(shapes)
        elif shapes.keys() != self._shapes.keys():
            missing = sorted(self._shapes.keys() - shapes.keys()) or sorted(shapes.keys() - self._shapes.keys())
            raise InvalidArgumentError(f"send_weights: the tensors differ from the first sync's ({missing[:3]})")
        version = int(global_steps) if global_steps is not None else self._published + 1
        if version <= self._published:
            raise InvalidArgumentError(f"send_weights: global_steps {global_steps} is not above the last "
                                       f"published ({self._published})")
        self._producer.publish(version=version)
        self._published = version
        report = self._producer.report(version)
        prefix = f"deltacast/trainer{self.rank}"
        return {f"{prefix}/wire_bytes": report["wire_bytes"], f"{prefix}/dense_bytes": report["dense_bytes"],
                f"{prefix}/changed": report["changed"]}

    def _take_shard(self, name, tensor, index):
        piece = shard_of(tuple(tensor.shape), index, self.rank, self.world_size)
        if piece is None:
            return
        shape = tuple(tensor.shape)
        if piece == "whole":
            self._buffers[name] = (None, torch.empty(shape, dtype=tensor.dtype), whole(name, shape))
        else:
            start, stop = piece
            self._buffers[name] = (piece, torch.empty((stop - start,) + shape[1:], dtype=tensor.dtype),
                                   rows(name, start, stop))

    def _copy_shard(self, name, tensor):
        if name not in self._buffers:
            return
        piece, buffer, _ = self._buffers[name]
        buffer.copy_(tensor.detach() if piece is None else tensor.detach()[piece[0]:piece[1]])

    def _start_producer(self, shapes):
        self._shapes = shapes
        group = Group(shapes)
        items = [(name, buffer) for name, (_, buffer, _) in self._buffers.items()]
        shards = {name: spec for name, (_, _, spec) in self._buffers.items()}
        self._producer = Producer(items, listen=f"{_node_ip()}:0", token=self.token, rails=self.rails,
                                  transport=self.transport, group=group, rank=self.rank,
                                  world_size=self.world_size, shards=shards, coordinator=self.coordinator,
                                  host_coordinator=False, register_timeout=self.timeout, encrypt=self.encrypt)

    # -- rollout side ---------------------------------------------------------------------------

    async def receive_weights(self, global_steps=None):
        if self.role != "rollout":
            raise InvalidArgumentError("receive_weights: on a rollout worker (init_process_group(role='rollout'))")
        deadline = time.monotonic() + self.timeout
        if self._consumer is None:
            await asyncio.to_thread(self._join, deadline)
        held = self._consumer._live().version
        version = int(global_steps) if global_steps is not None else await self._newest_staged(held, deadline)
        if version > held:
            while not staged_in_time(self._consumer, version, deadline, f"rollout worker {self.rank}"):
                await asyncio.sleep(0.005)
            agreement = ray.get_actor(self.agreement_name)
            missing = await agreement.arrive.remote(version, self.rank, self.world_size, self.agree_timeout)
            if missing:
                raise UpdateError(f"rollout worker(s) {missing} of {self.world_size} did not receive version "
                                  f"{version} within {self.agree_timeout} s; rollout worker {self.rank} stays at "
                                  f"version {held}")
            await asyncio.to_thread(self._consumer.commit, version, max(1.0, deadline - time.monotonic()))
        for name, tensor in self._model.items():
            crc = zlib.crc32(tensor.view(-1).view(torch.uint8).numpy()) if self.changed_only else None
            if crc is None or self._crcs.get(name) != crc:
                self._crcs[name] = crc
                yield name, tensor

    def _join(self, deadline):
        found = json.loads(_core.find_group([self.coordinator], parse_token(self.token),
                                            max(1.0, deadline - time.monotonic()),
                                            parse_protection(self.encrypt, False)))
        self._model = {t["name"]: torch.zeros(tuple(t["shape"]) or (), dtype=torch_dtype_of(t["dtype"]))
                       for t in found["tensors"]}
        layout = {name: whole(name, tuple(t.shape)) for name, t in self._model.items()}
        self._consumer = Consumer(list(self._model.items()), layout=layout, connect=self.coordinator,
                                  token=self.token, rails=self.rails, transport=self.transport,
                                  name=f"verl-rollout-{self.rank}", commit="on_request", encrypt=self.encrypt,
                                  join_timeout=max(1.0, deadline - time.monotonic()))

    async def _newest_staged(self, held, deadline):
        """Without verl's global step: the newest version every trainer rank has sent."""
        while True:
            versions = self._consumer.state().get("rank_versions") or []
            newest = min(versions) if versions else 0
            if newest > held or time.monotonic() > deadline:
                return max(newest, held)
            await asyncio.sleep(0.01)

    def stats(self):
        """received_bytes and version of a rollout worker; the producer's of a trainer rank."""
        if self._consumer is not None:
            return self._consumer.state()
        return self._producer.stats() if self._producer is not None else {}

    def close(self):
        for engine in (self._consumer, self._producer, self._coordinator):
            if engine is not None:
                engine.close()
        self._consumer = self._producer = self._coordinator = None

