"""A sharded group's coordinator on its own, for trainers that would rather
not have rank 0 host it (``Producer(..., coordinator=..., host_coordinator=False)``)."""
import json

from . import _core
from ._tensors import parse_protection, parse_token
from .engine import EngineHandle
from .errors import InvalidArgumentError


class Coordinator(EngineHandle):
    """Where a sharded group meets: trainer ranks register their shards and
    addresses here, rollout processes find the group here
    (``Consumer(layout=..., connect=coordinator.address)``). It learns the
    group's tensors from the first rank; every other rank must agree, and
    shards that overlap are refused naming the tensor. ``listen``: its
    address (port 0: any free port, see ``address``)."""

    _role = "coordinator"

    def __init__(self, world_size, listen="0.0.0.0:0", token=None, encrypt=False, insecure=False):
        if not isinstance(world_size, int) or world_size < 1:
            raise InvalidArgumentError(f"world_size: {world_size!r} is not a positive int")
        self._engine = _core.GroupCoordinator(world=world_size, listen=str(listen), token=parse_token(token),
                                              protection=parse_protection(encrypt, insecure))

    @property
    def address(self):
        """``host:port`` it listens on."""
        return self._live().address

    def registered(self):
        """How many ranks have registered."""
        return self._live().registered()

    def group(self):
        """The formed group, ``{"tensors": [...], "ranks": [{"rank", "addresses"}]}``,
        or None while ranks are missing or their shards leave a gap."""
        return json.loads(self._live().group())

    def __repr__(self):
        return "<deltacast.Coordinator closed>" if self._engine is None else \
            f"<deltacast.Coordinator on {self._engine.address}>"
