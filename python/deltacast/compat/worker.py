"""The inference side of deltacast.compat: checkpoint-engine's worker names.

``VllmColocateWorkerExtension`` goes to vLLM's ``--worker-extension-cls
deltacast.compat.worker.VllmColocateWorkerExtension``; the ParameterServer's
``update`` then reaches ``update_weights_from_ipc`` through /collective_rpc.
Each worker stays joined to the trainer ranks' group between updates, so an
update moves only what changed. It goes through the same core as the vLLM
weight-transfer backend (deltacast.inference): parameters that hold the
checkpoint's bytes are written in place; the rest is received whole and
taken in through vLLM's layerwise reload (on a vLLM without it: the model's
``load_weights``, then its post-load processing); a failed update leaves
the model as it was. ``deltacast_update(handle, rails=..., token=...)``
is the same with deltacast's options; without them the environment gives
DELTACAST_TOKEN, DELTACAST_RAILS (comma-separated addresses) and
DELTACAST_TIMEOUT (seconds, default 300).

Versions are received as soon as the trainer publishes them and land in the
parameters only inside a call, which returns once the version its handle
names is there: the engine's weights change only while it updates them.
Models whose weight loaders transform weights on the way in (a transpose, a
permutation) must not be written in place: set ``deltacast_in_place = False``
on the model class or DELTACAST_IN_PLACE=0, and everything goes through
the engine's loader."""
import os
import socket
import threading
import time

from ..errors import InvalidArgumentError, UpdateError
from ..inference import ModelReceiver, receiver_for
from ..inference.receiver import apply_together, left
from ..inference.reports import send_report
from ..integrations.vllm.loading import (loader_for, raise_where_vllm_reads_it, tensor_parallel, worker_place,
                                         workers_agree)
from ..environment import rails_or_env, token_or_env
from ._devices import cpu_device_uuid
from ._handle import parse


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


def _receiver(holder, key, model, handle, token, rails, tp_rank, tp_size, name, deadline, rollback=True):
    """The receiver of `model` for the group `handle` names, kept in `holder[key]` between updates."""
    in_place = _in_place_allowed(model)

    def make():
        return ModelReceiver(model, handle.coordinator, token=token, rails=rails, name=name,
                             join_timeout=left(deadline), tp_rank=tp_rank, tp_size=tp_size,
                             in_place=in_place, group_id=handle.group, rollback=rollback)

    return receiver_for(holder, key, model, handle.coordinator, handle.group, make, (in_place, rollback, False))


def _reported(handle, worker, work, place=(None, None)):
    """Runs `work()` and tells the trainer rank behind `handle` how it went."""
    try:
        result = work()
    except BaseException as e:
        send_report(handle.reply, handle.nonce, worker, f"{type(e).__name__}: {e}", index=place[0], of=place[1])
        raise
    send_report(handle.reply, handle.nonce, worker, None, index=place[0], of=place[1])
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
        """Applies the version ``handle`` names to this worker's model, atomically (parameters
        that hold the checkpoint's bytes written in place, the rest through vLLM's layerwise
        reload, which processes them again; on failure the model is left as it was) and returns
        what it took: version, parameters written in place, tensors loaded, seconds, bytes
        received since the last update. ``timeout`` bounds the whole call."""
        parsed = parse(handle)
        rails, token, timeout = _settings(rails, token, timeout)
        deadline = time.monotonic() + timeout
        name = f"{socket.gethostname()} rank {getattr(self, 'rank', 0)} ({self._device_uuid})"

        runner = self.model_runner
        model = runner.get_model() if callable(getattr(runner, "get_model", None)) else runner.model
        tp_rank, tp_size = tensor_parallel()
        holder = self.__dict__.setdefault("_deltacast_receivers", {})
        load = loader_for(model, getattr(self, "model_config", None), getattr(self, "device", None))
        place = worker_place()

        def work():
            def receiver_of():
                return _receiver(holder, "model", model, parsed, token, rails, tp_rank, tp_size, name, deadline)
            if parsed.version == 0:  # whatever the group has: each worker on its own
                return receiver_of().apply(0, deadline, load=load)
            return apply_together(receiver_of, parsed.version, deadline, load, workers_agree(), name)

        try:
            return _reported(parsed, name, work, place)
        except UpdateError as e:
            raise_where_vllm_reads_it(e, place)
            return None


def _whole_model():
    import torch

    class _WholeModel(torch.nn.Module):
        """No parameters of its own: every tensor of the group is staged whole and handed over."""

    return _WholeModel()


_whole_receivers = {}
_whole_lock = threading.Lock()


def update_weights_from_ipc(zmq_ctx, zmq_handle, device_id, *, run, post_hook=None):
    """checkpoint-engine's worker loop for any engine: receives the version ``zmq_handle`` names
    (every tensor whole, into host memory kept for the next update, so later updates move only
    the change), calls ``run([(name, tensor)])`` with all of them, then ``post_hook()``.
    ``zmq_ctx`` and ``device_id`` are accepted and unused. Tensors with no elements are not sent
    and not handed to ``run``; 0-d tensors come as 1-element ones. An engine deltacast does not
    know is not rolled back: ``run`` failing leaves whatever it did."""
    del zmq_ctx, device_id
    parsed = parse(zmq_handle)
    rails, token, timeout = _settings(None, None, None)
    deadline = time.monotonic() + timeout
    name = f"{socket.gethostname()}-{os.getpid()}"

    def work():
        with _whole_lock:
            current = _whole_receivers.get("whole")
            model = current.model if current is not None else _whole_model()
            receiver = _receiver(_whole_receivers, "whole", model, parsed, token, rails, 0, 1, name, deadline,
                                 rollback=False)
            receiver.apply(parsed.version, deadline, load=run)
        if post_hook is not None:
            post_hook()

    _reported(parsed, name, work)
