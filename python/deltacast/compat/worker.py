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

Versions are committed as they arrive (each atomically); a call returns once
the version its handle names, or a newer one, is in the parameters."""
import json
import os
import socket
import time

from .. import _core
from .._tensors import parse_token
from ..engine import Consumer
from ..errors import InvalidArgumentError
from . import vllm_layout
from ._devices import cpu_device_uuid
from ._handle import parse
from ._host_tensors import torch_dtype_of
from ._publisher import whole
from ._replies import send_report


def _settings(rails, token, timeout):
    if rails is None and os.environ.get("DELTACAST_RAILS"):
        rails = [r for r in os.environ["DELTACAST_RAILS"].split(",") if r]
    if token is None:
        token = os.environ.get("DELTACAST_TOKEN")
    if timeout is None:
        timeout = float(os.environ.get("DELTACAST_TIMEOUT", "300"))
    return rails, token, float(timeout)


class _Receiver:
    """One model kept joined to one group: its parameters (or host mirrors of them, for
    parameters not in host memory) and the staging of what goes through load_weights."""

    def __init__(self, model, coordinator, token, rails, tp_rank, tp_size, name, timeout):
        import torch
        found = json.loads(_core.find_group([coordinator], parse_token(token), timeout))
        logical = {t["name"]: (t["dtype"], tuple(t["shape"])) for t in found["tensors"]}
        self.model, self.coordinator = model, coordinator
        params = dict(model.named_parameters())
        self.plan = vllm_layout.plan(params, logical, getattr(model, "packed_modules_mapping", None), tp_rank, tp_size)
        items, layout, self._mirrors = [], {}, []
        for pname, spec in self.plan.in_place.items():
            target = params[pname].data
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
        self.consumer = Consumer(items, layout=layout, connect=coordinator, token=token, rails=rails, name=name,
                                 join_timeout=timeout)
        self._received = 0

    def update(self, version, timeout):
        start = time.monotonic()
        self.consumer.wait(max(version, 1), timeout)
        for target, mirror in self._mirrors:
            target.copy_(mirror, non_blocking=True)
        if self.staging:
            self.model.load_weights(list(self.staging.items()))
        # Versions land in the background, often before this call: count since the last one.
        total = self.consumer.state()["received_bytes"]
        received, self._received = total - self._received, total
        return {"version": self.consumer.version, "in_place": len(self.plan.in_place),
                "load_weights": len(self.staging), "seconds": time.monotonic() - start,
                "received_bytes": received}

    def close(self):
        self.consumer.close()


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
        ParameterServer gave its req_func; this worker takes its device's. Returns what
        deltacast_update returns (checkpoint-engine returns None)."""
        if not isinstance(zmq_handles, dict):
            raise InvalidArgumentError("update_weights_from_ipc: give {device_uuid: handle}")
        uuid = self._device_uuid
        if uuid not in zmq_handles:
            raise InvalidArgumentError(f"worker rank {getattr(self, 'rank', '?')}: its device {uuid} is not among "
                                       f"the handles ({', '.join(zmq_handles) or 'none'})")
        return self.deltacast_update(zmq_handles[uuid])

    def deltacast_update(self, handle, rails=None, token=None, timeout=None):
        """Applies the version ``handle`` names (or a newer one) to this worker's model and
        returns what it took: version, parameters written in place, tensors through
        load_weights, seconds, received bytes."""
        parsed = parse(handle)
        rails, token, timeout = _settings(rails, token, timeout)
        name = f"{socket.gethostname()} rank {getattr(self, 'rank', 0)} ({self._device_uuid})"

        def work():
            runner = self.model_runner
            model = runner.get_model() if callable(getattr(runner, "get_model", None)) else runner.model
            receiver = self.__dict__.get("_deltacast_receiver")
            if receiver is not None and receiver.coordinator != parsed.coordinator:
                receiver.close()
                receiver = None
            if receiver is None:
                tp_rank, tp_size = _tensor_parallel()
                receiver = _Receiver(model, parsed.coordinator, token, rails, tp_rank, tp_size, name, timeout)
                self.__dict__["_deltacast_receiver"] = receiver
            result = receiver.update(parsed.version, timeout)
            _post_load(model, getattr(self, "model_config", None), getattr(self, "device", None))
            return result

        return _reported(parsed, name, work)


class _WholeModel:
    """The tensors of a group, whole, for engines that load weights themselves."""

    def __init__(self, tensors):
        self._tensors = tensors

    def named_parameters(self):
        return iter(())

    def load_weights(self, weights):
        self._tensors[:] = list(weights)


_whole_receivers = {}


def update_weights_from_ipc(zmq_ctx, zmq_handle, device_id, *, run, post_hook=None):
    """checkpoint-engine's worker loop for any engine: receives the version ``zmq_handle`` names
    (every tensor whole, into host memory kept for the next update, so later updates move only
    the change), calls ``run([(name, tensor)])`` with all of them, then ``post_hook()``.
    ``zmq_ctx`` and ``device_id`` are accepted and unused."""
    del zmq_ctx, device_id
    parsed = parse(zmq_handle)
    rails, token, timeout = _settings(None, None, None)
    name = f"{socket.gethostname()}-{os.getpid()}"

    def work():
        entry = _whole_receivers.get(parsed.coordinator)
        if entry is None:
            weights = []
            receiver = _Receiver(_WholeModel(weights), parsed.coordinator, token, rails, 0, 1, name, timeout)
            entry = _whole_receivers[parsed.coordinator] = (receiver, weights)
        receiver, weights = entry
        receiver.update(parsed.version, timeout)
        run(list(weights))
        if post_hook is not None:
            post_hook()

    _reported(parsed, name, work)
