"""The inference side of deltacast.compat: checkpoint-engine's worker names.

``VllmColocateWorkerExtension`` goes to vLLM's ``--worker-extension-cls
deltacast.compat.worker.VllmColocateWorkerExtension``; the ParameterServer's
``update`` then reaches ``update_weights_from_ipc`` through /collective_rpc.
Each worker stays joined to the trainer ranks' group between updates, so an
update moves only what changed: parameters it can write in place (see
vllm_layout) are written there; the rest is received whole and handed to the
model's ``load_weights``; then vLLM's post-load processing runs, where
checkpoint-engine runs it. ``deltacast_update(handle, rails=..., token=...)``
is the same with deltacast's options; without them the environment gives
DELTACAST_TOKEN, DELTACAST_RAILS (comma-separated addresses) and
DELTACAST_TIMEOUT (seconds, default 300).

Versions are received as soon as the trainer publishes them and land in the
parameters only inside a call, which returns once the version its handle
names is there: the engine's weights change only while it updates them.
Models whose weight loaders transform weights on the way in (a transpose, a
permutation) must not be written in place: set ``deltacast_in_place = False``
on the model class or DELTACAST_IN_PLACE=0, and everything goes through
``load_weights``."""
import json
import os
import socket
import threading
import time

from .. import _core
from .._tensors import parse_token
from ..engine import Consumer
from ..errors import InvalidArgumentError
from . import vllm_layout
from ._devices import cpu_device_uuid, rails_or_env, token_or_env
from ._handle import parse
from ._host_tensors import torch_dtype_of
from ._publisher import whole
from ._replies import send_report


def _settings(rails, token, timeout):
    if timeout is None:
        timeout = float(os.environ.get("DELTACAST_TIMEOUT", "300"))
    return rails_or_env(rails) or None, token_or_env(token), float(timeout)


def _in_place_allowed(model):
    """Whether parameters may be written in place: not where the model or the environment says
    its loaders transform weights on the way in (a transpose, a permutation), which writing the
    checkpoint's bytes would skip."""
    if os.environ.get("DELTACAST_IN_PLACE", "1") == "0":
        return False
    return getattr(model, "deltacast_in_place", True)


class _Receiver:
    """One model kept joined to one group: its parameters (or host mirrors of them, for
    parameters not in host memory) and the staging of what goes through load_weights. Versions
    land only when update() asks (the consumer commits on request), so the engine's weights
    change only inside an update call."""

    def __init__(self, model, handle, token, rails, tp_rank, tp_size, name, deadline):
        import torch
        found = json.loads(_core.find_group([handle.coordinator], parse_token(token), _left(deadline)))
        logical = {t["name"]: (t["dtype"], tuple(t["shape"])) for t in found["tensors"]}
        self.model, self.group = model, (handle.coordinator, handle.group)
        params = dict(model.named_parameters())
        if not _in_place_allowed(model):
            params = {}
        self.plan = vllm_layout.plan(params, logical, getattr(model, "packed_modules_mapping", None), tp_rank, tp_size)
        items, layout, self._mirrors = [], {}, []
        # Where each written parameter's memory is: post-load processing that replaces a parameter
        # (repacking, a transpose into a new tensor) makes the plan stale, and update() rebuilds.
        self._storage = {}
        for pname, spec in self.plan.in_place.items():
            target = params[pname].data
            self._storage[pname] = target.data_ptr()
            if target.device.type != "cpu":
                mirror = torch.empty(target.shape, dtype=target.dtype, pin_memory=torch.cuda.is_available())
                self._mirrors.append((target, mirror))
                target = mirror
            items.append((pname, target))
            layout[pname] = spec
        self.staging = {}
        for n in self.plan.fallback:
            dtype, shape = logical[n]
            self.staging[n] = torch.empty(shape or (1,), dtype=torch_dtype_of(dtype))
            items.append((f"load_weights:{n}", self.staging[n]))
            layout[f"load_weights:{n}"] = whole({"name": n, "shape": list(shape)})
        self.consumer = Consumer(items, layout=layout, connect=handle.coordinator, token=token, rails=rails,
                                 name=name, join_timeout=_left(deadline), commit="on_request")
        self._received = 0

    def stale(self, model):
        """Whether `model` is not the one planned for, or a written parameter moved."""
        if model is not self.model:
            return True
        params = dict(model.named_parameters())
        return any(n not in params or params[n].data.data_ptr() != p for n, p in self._storage.items())

    def update(self, version, deadline):
        start = time.monotonic()
        if version == 0:
            self._newest(deadline)
        else:
            self.consumer.commit(version, _left(deadline))
        if self._mirrors:
            import torch
            for target, mirror in self._mirrors:
                target.copy_(mirror, non_blocking=True)
            torch.cuda.synchronize()
        if self.staging:
            self.model.load_weights(list(self.staging.items()))
        # Bytes that arrived since the last update (versions are received as soon as published).
        total = self.consumer.state()["received_bytes"]
        received, self._received = total - self._received, total
        return {"version": self.consumer.version, "in_place": len(self.plan.in_place),
                "load_weights": len(self.staging), "seconds": time.monotonic() - start,
                "received_bytes": received}

    def _newest(self, deadline):
        """Lets land what has been received of the group's versions (at least one), then holds
        again: the newest version a group publishing on its own schedule has sent so far."""
        engine = self.consumer._live()
        engine.set_commit_limit(2 ** 64 - 1)
        try:
            self.consumer.wait(1, _left(deadline))
            held, quiet = engine.version, time.monotonic()
            while time.monotonic() - quiet < 0.2 and _left(deadline) > 0:  # until nothing more lands
                time.sleep(0.02)
                if engine.version != held:
                    held, quiet = engine.version, time.monotonic()
        finally:
            engine.set_commit_limit(engine.version)

    def close(self):
        self.consumer.close()


def _left(deadline):
    """Seconds to `deadline` (a time.monotonic() value); one deadline for a whole call."""
    return max(0.0, deadline - time.monotonic())


def _receiver_for(holder, key, model, handle, token, rails, tp_rank, tp_size, name, deadline):
    """The receiver kept in `holder[key]`, made anew for another group (or a model it no longer
    fits); the one it replaces is closed."""
    receiver = holder.get(key)
    if receiver is not None and (receiver.group != (handle.coordinator, handle.group) or receiver.stale(model)):
        receiver.close()
        receiver = holder[key] = None
    if receiver is None:
        receiver = _Receiver(model, handle, token, rails, tp_rank, tp_size, name, deadline)
        holder[key] = receiver
    return receiver


def _tensor_parallel():
    """(rank, size) of this worker's tensor-parallel group in vLLM; (0, 1) outside it."""
    try:
        from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size
    except ImportError:
        return 0, 1
    return get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size()


def _post_load(model, model_config, device):
    try:
        from vllm.model_executor.model_loader.utils import process_weights_after_loading
    except ImportError:
        return
    process_weights_after_loading(model, model_config, device)


def _reported(handle, worker, work):
    """Runs `work()` and tells the trainer rank behind `handle` how it went."""
    try:
        result = work()
    except BaseException as e:
        send_report(handle.reply, handle.nonce, worker, f"{type(e).__name__}: {e}")
        raise
    send_report(handle.reply, handle.nonce, worker, None)
    return result


class VllmColocateWorkerExtension:
    """Mixed into vLLM's worker class (``--worker-extension-cls``); its methods are reached
    through ``collective_rpc``."""

    @property
    def _device_uuid(self):
        device = getattr(self, "device", None)
        if device is not None and getattr(device, "type", "cpu") == "cuda":
            from vllm.platforms import current_platform
            return current_platform.get_device_uuid(device.index)
        return cpu_device_uuid(getattr(self, "local_rank", 0))

    def update_weights_from_ipc(self, zmq_handles):
        """checkpoint-engine's method: ``zmq_handles`` maps device UUIDs to the handles the
        ParameterServer gave its req_func; this worker takes its device's. A worker on a device no
        trainer rank uses (another host) takes any: they all name the same group and version.
        Returns what deltacast_update returns (checkpoint-engine returns None)."""
        if not isinstance(zmq_handles, dict) or not zmq_handles:
            raise InvalidArgumentError("update_weights_from_ipc: give {device_uuid: handle}")
        uuid = self._device_uuid
        handle = zmq_handles.get(uuid)
        if handle is None:
            parsed = {(h.coordinator, h.group, h.version) for h in map(parse, zmq_handles.values())}
            if len(parsed) != 1:
                raise InvalidArgumentError(f"worker rank {getattr(self, 'rank', '?')}: its device {uuid} is not among "
                                           f"the handles ({', '.join(zmq_handles)}), which name different groups")
            handles = sorted(zmq_handles.values())
            handle = handles[getattr(self, "local_rank", 0) % len(handles)]  # spread the reports
        return self.deltacast_update(handle)

    def deltacast_update(self, handle, rails=None, token=None, timeout=None):
        """Applies the version ``handle`` names to this worker's model (parameters written in
        place, the rest through load_weights, then vLLM's post-load processing) and returns what
        it took: version, parameters written in place, tensors through load_weights, seconds,
        bytes received since the last update. ``timeout`` bounds the whole call."""
        parsed = parse(handle)
        rails, token, timeout = _settings(rails, token, timeout)
        deadline = time.monotonic() + timeout
        name = f"{socket.gethostname()} rank {getattr(self, 'rank', 0)} ({self._device_uuid})"

        def work():
            runner = self.model_runner
            model = runner.get_model() if callable(getattr(runner, "get_model", None)) else runner.model
            tp_rank, tp_size = _tensor_parallel()
            receiver = _receiver_for(self.__dict__.setdefault("_deltacast_receivers", {}), "model", model, parsed,
                                     token, rails, tp_rank, tp_size, name, deadline)
            result = receiver.update(parsed.version, deadline)
            _post_load(model, getattr(self, "model_config", None), getattr(self, "device", None))
            return result

        return _reported(parsed, name, work)


class _WholeModel:
    """The tensors of a group, whole, for engines that load weights themselves."""

    def __init__(self, weights):
        self.weights = weights

    def named_parameters(self):
        return iter(())

    def load_weights(self, weights):
        self.weights[:] = list(weights)


_whole_receivers = {}
_whole_lock = threading.Lock()


def update_weights_from_ipc(zmq_ctx, zmq_handle, device_id, *, run, post_hook=None):
    """checkpoint-engine's worker loop for any engine: receives the version ``zmq_handle`` names
    (every tensor whole, into host memory kept for the next update, so later updates move only
    the change), calls ``run([(name, tensor)])`` with all of them, then ``post_hook()``.
    ``zmq_ctx`` and ``device_id`` are accepted and unused. Tensors with no elements are not sent
    and not handed to ``run``; 0-d tensors come as 1-element ones."""
    del zmq_ctx, device_id
    parsed = parse(zmq_handle)
    rails, token, timeout = _settings(None, None, None)
    deadline = time.monotonic() + timeout
    name = f"{socket.gethostname()}-{os.getpid()}"

    def work():
        with _whole_lock:
            receiver = _whole_receivers.get("whole")
            model = receiver.model if receiver is not None else _WholeModel([])
            receiver = _receiver_for(_whole_receivers, "whole", model, parsed, token, rails, 0, 1, name, deadline)
            receiver.update(parsed.version, deadline)
            run(list(receiver.model.weights))
        if post_hook is not None:
            post_hook()

    _reported(parsed, name, work)
