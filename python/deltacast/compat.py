"""A checkpoint-engine-style facade over deltacast, for code written against
checkpoint-engine's ``ParameterServer`` (full-weight loads into inference
engines). docs/python.md has the table of what maps one to one and what differs.

Trainer side::

    ps = ParameterServer(token="secret")
    ps.register_checkpoint("step-100", files=["model.safetensors"])
    ps.update("step-100", req_func=lambda address: tell_workers(address), ranks=[0, 1])
    ps.unregister_checkpoint("step-100")

Worker side::

    receive_into(engine_named_tensors, address, token="secret")
"""
import threading

from . import safetensors_io
from .engine import Consumer, Producer
from .errors import InvalidArgumentError, TimeoutError


class ParameterServer:
    """Holds registered checkpoints and pushes them to inference workers.

    Each registered checkpoint gets its own producer (its own control address).
    The first ``update`` sends every byte; a later ``update`` of the same
    checkpoint, after its tensors changed in place, sends only what changed.
    """

    def __init__(self, listen="127.0.0.1:0", token=None, rails=None, value_codec="ulp"):
        self._listen, self._token, self._rails, self._codec = listen, token, rails, value_codec
        self._checkpoints = {}

    def register_checkpoint(self, checkpoint_name, *, files=None, named_tensors=None):
        """Loads ``files`` (safetensors) and/or takes ``named_tensors`` (used in
        place) under ``checkpoint_name``; consumers can join from now on."""
        if checkpoint_name in self._checkpoints:
            raise InvalidArgumentError(f"checkpoint '{checkpoint_name}' is already registered")
        tensors = {}
        for path in files or []:
            for name, value in safetensors_io.load(path).items():
                if name in tensors:
                    raise InvalidArgumentError(f"tensor '{name}' appears in more than one file")
                tensors[name] = value
        if named_tensors is not None:
            items = named_tensors.items() if hasattr(named_tensors, "items") else named_tensors
            for name, value in items:
                if name in tensors:
                    raise InvalidArgumentError(f"tensor '{name}' is both in the files and in named_tensors")
                tensors[name] = value
        if not tensors:
            raise InvalidArgumentError("register_checkpoint: give files=[...] or named_tensors=...")
        producer = Producer(tensors, listen=self._listen, token=self._token, rails=self._rails,
                            value_codec=self._codec)
        self._checkpoints[checkpoint_name] = {"producer": producer, "tensors": tensors, "version": 0}

    def gather_metas(self, checkpoint_name):
        """The checkpoint's tensor metadata (name, dtype, shape) and the address
        workers connect to. (checkpoint-engine gathers these across trainer ranks;
        here one process holds the whole checkpoint.)"""
        entry = self._entry(checkpoint_name)
        return {"address": entry["producer"].address, "tensors": entry["producer"].manifest()}

    def update(self, checkpoint_name, req_func=None, ranks=None, timeout=None):
        """Publishes the checkpoint as it is now and waits until the workers have
        it. ``req_func(address)``, run on a thread of its own once the version is
        queued, asks the inference workers to receive and returns when they did
        (e.g. an HTTP call to each engine, which runs ``receive_into``). Without
        req_func, workers kept connected (``Worker``) are waited for: ``ranks``
        gives how many must have joined. Returns the version's report."""
        entry = self._entry(checkpoint_name)
        producer = entry["producer"]
        version = producer.publish()
        entry["version"] = version
        if req_func is None:
            if ranks is not None:
                producer.wait_for_consumers(len(ranks), timeout=timeout)
            producer.wait(version, timeout=timeout)
            return producer.report(version)
        # As in checkpoint-engine, req_func returns once the workers received: run it beside the broadcast.
        failure = []
        thread = threading.Thread(target=lambda: _capture(failure, req_func, producer.address), daemon=True)
        thread.start()
        producer.wait(version, timeout=timeout)
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"req_func did not return within {timeout} s")
        if failure:
            raise failure[0]
        return producer.report(version)

    def unregister_checkpoint(self, checkpoint_name):
        """Closes the checkpoint's producer and drops its tensors."""
        entry = self._checkpoints.pop(checkpoint_name, None)
        if entry is None:
            raise InvalidArgumentError(f"checkpoint '{checkpoint_name}' is not registered")
        entry["producer"].close()

    def close(self):
        for name in list(self._checkpoints):
            self.unregister_checkpoint(name)

    def _entry(self, checkpoint_name):
        try:
            return self._checkpoints[checkpoint_name]
        except KeyError:
            raise InvalidArgumentError(f"checkpoint '{checkpoint_name}' is not registered") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


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


def _capture(failure, fn, *args):
    try:
        fn(*args)
    except BaseException as e:  # handed to the caller of update()
        failure.append(e)
