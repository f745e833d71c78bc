"""deltacast-native worker helpers for code that manages its own workers:
``receive_into`` (one shot) and ``Worker`` (kept connected), both joined to a
plain deltacast.Producer's address."""
from ..engine import Consumer


def receive_into(named_tensors, address, token=None, timeout=60.0, name=None):
    """Worker side, one shot: joins the producer at ``address``, receives the
    newest version into ``named_tensors`` (an engine's parameters, in place),
    leaves, and returns the version. Raises on mismatched tensors, a wrong
    token or a timeout, with the tensors left as they were."""
    with Consumer(named_tensors, connect=address, token=token, name=name, join_timeout=timeout) as consumer:
        return consumer.pull(timeout=timeout)


class Worker:
    """Worker side, kept connected between updates: ``update()`` commits the
    next version into the tensors; with ``start(on_commit)`` versions are
    committed in the background as they arrive."""

    def __init__(self, named_tensors, address, token=None, name=None, join_timeout=60.0):
        self.consumer = Consumer(named_tensors, connect=address, token=token, name=name, join_timeout=join_timeout)

    def update(self, timeout=60.0):
        return self.consumer.pull(timeout=timeout)

    def start(self, on_commit=None):
        self.consumer.start(on_commit)
        return self

    def close(self):
        self.consumer.close()
