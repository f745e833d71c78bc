"""deltacast: sparse, multi-rail, bit-exact weight sync from an RL trainer to
its rollout workers.

    producer = deltacast.Producer(model.named_parameters(), token="secret")
    version = producer.publish()            # after each optimizer step
    consumer = deltacast.Consumer(weights, connect=producer.address, token="secret")
    consumer.pull(timeout=30)               # or consumer.start(on_commit=...)
"""
from . import _core
from .coordinator import Coordinator
from .engine import Consumer, Producer
from .group import Group, columns, flat, fused, piece, rows
from .errors import (ClosedError, ConnectionError, CorruptDataError, DeltacastError, DeviceError, DTypeError,
                     InvalidArgumentError, ManifestMismatchError, NotContiguousError, TimeoutError, TokenError,
                     TransportMismatchError, UpdateError)

__version__ = _core.__version__

__all__ = [
    "Producer", "Consumer", "Coordinator", "Group", "rows", "columns", "piece", "flat", "fused", "__version__",
    "DeltacastError", "InvalidArgumentError", "ManifestMismatchError", "TransportMismatchError", "DTypeError", "NotContiguousError",
    "DeviceError", "TokenError", "TimeoutError", "ConnectionError", "CorruptDataError", "ClosedError", "UpdateError",
]
