"""deltacast as SGLang's custom weight loader.

SGLang calls a custom loader inside every tensor-parallel worker process when an
``update_weights_from_tensor`` request names it as its ``load_format`` (and the server was started
with it in ``--custom-weight-loader``)::

    # server
    python -m sglang.launch_server ... --custom-weight-loader deltacast.integrations.sglang.load
    # trainer, after publishing version v to its deltacast group (coordinator at host:port)
    engine.update_weights_from_tensor(named_tensors=update_request("host:port", v),
                                      load_format=deltacast.integrations.sglang.LOADER)

The request carries no weights: one small ``__deltacast__`` tensor says which group and version.
Each worker joins the trainer's group on its first request and from then on receives and verifies
every version in the background, as the vLLM backend does; the request only applies a version
that is here whole and verified: in place where a parameter holds the checkpoint's bytes (fused
``qkv_proj`` / ``gate_up_proj`` rows and tensor-parallel shares included), through the model's own
``load_weights`` where SGLang transforms them after loading. The tensor-parallel workers apply
together or not at all (they agree over SGLang's tensor-parallel process group), and a worker that
fails puts back everything it wrote."""
import json
import logging
import os
import socket
import time

from .._tensors import parse_token
from ..environment import rails_or_env, token_or_env
from ..errors import InvalidArgumentError
from ..inference import ModelReceiver, receiver_for
from ..inference.agreement import alone, over_process_group
from ..inference.receiver import apply_together

LOADER = "deltacast.integrations.sglang.load"  # for --custom-weight-loader and load_format
SPEC_NAME = "__deltacast__"

log = logging.getLogger("deltacast.sglang")

_receivers = {}   # this worker process's receiver, kept across requests
last_update = {}  # what the last request did here (version, in_place, loaded, seconds, received_bytes)


def update_request(coordinator, version, *, group="", token=None, rails=None, timeout=300.0, in_place=True,
                   rollback=True, encrypt=False):
    """The ``named_tensors`` of an update_weights_from_tensor request that makes every worker hold
    `version` of the group whose coordinator is at `coordinator` ("host:port"). `group`: the id the
    trainer gave its group (a later trainer at the same address is another group). `token`: the
    group's token (None: each worker's DELTACAST_TOKEN). `rails`: the workers' NIC addresses (None:
    DELTACAST_RAILS there, else one). `timeout`: seconds the join or the update may take.
    `in_place=False` sends every tensor through the model's load_weights; `rollback=False` keeps
    no copy of what load_weights overwrites (a failed update may then leave a mix); `encrypt=True`:
    the workers' connections are encrypted (AES-256-GCM), not only authenticated."""
    import torch
    if not isinstance(coordinator, str) or ":" not in coordinator:
        raise InvalidArgumentError(f"coordinator: {coordinator!r} is not host:port")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InvalidArgumentError(f"version: {version!r} is not a published version number (1 or more)")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidArgumentError(f"timeout: {timeout!r} is not a number of seconds")
    if rails is not None and (isinstance(rails, str) or not all(isinstance(r, str) for r in rails)):
        raise InvalidArgumentError(f"rails: {rails!r} is not a list of addresses")
    spec = {"coordinator": coordinator, "version": version, "group": str(group),
            "token": parse_token(token) if token is not None else None, "encrypt": bool(encrypt),
            "rails": list(rails) if rails is not None else None, "timeout": float(timeout),
            "in_place": bool(in_place), "rollback": bool(rollback)}
    return [(SPEC_NAME, torch.frombuffer(bytearray(json.dumps(spec).encode()), dtype=torch.uint8))]


def spec_of(named_tensors):
    """The request's spec, from the named tensors SGLang hands the loader."""
    tensors = dict(named_tensors)
    if SPEC_NAME not in tensors:
        raise InvalidArgumentError(f"named_tensors: no '{SPEC_NAME}' tensor (got {sorted(tensors)[:5]}); make the "
                                   "request with deltacast.integrations.sglang.update_request()")
    others = sorted(n for n in tensors if n != SPEC_NAME)
    if others:
        raise InvalidArgumentError(f"named_tensors: weights sent along with '{SPEC_NAME}' ({others[:5]}); a "
                                   "deltacast request carries none, the versions come through the group")
    raw = tensors[SPEC_NAME].detach().cpu().contiguous().numpy().tobytes()
    try:
        spec = json.loads(raw.decode())
        version, coordinator = spec["version"], spec["coordinator"]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise InvalidArgumentError(f"named_tensors: '{SPEC_NAME}' is not a deltacast request ({e})") from None
    if isinstance(version, bool) or not isinstance(version, int) or version < 1 or not isinstance(coordinator, str):
        raise InvalidArgumentError(f"named_tensors: '{SPEC_NAME}' names version {version!r} of {coordinator!r}")
    return spec


def tensor_parallel():
    """(rank, size, agree) of this worker in SGLang's tensor-parallel group; (0, 1, alone) outside one."""
    try:
        from sglang.srt.distributed import get_tp_group
        group = get_tp_group()
        return group.rank_in_group, group.world_size, over_process_group(group.cpu_group, group.world_size)
    except (ImportError, AssertionError, AttributeError, ValueError):
        return 0, 1, alone


def packed_modules_of(model):
    """{fused module: [checkpoint modules, in row order]} of an SGLang model, which says it in the
    tables its load_weights uses rather than vLLM's packed_modules_mapping: ('.qkv_proj',
    '.q_proj', 'q') entries in stacked_params_mapping, ordered by bitsandbytes_stacked_params_mapping
    where the model has one (the shard's index), else as listed."""
    mapping = getattr(model, "packed_modules_mapping", None)
    if mapping:
        return mapping
    indexed = getattr(model, "bitsandbytes_stacked_params_mapping", None)
    if indexed:
        out = {}
        for shard, (fused, index) in sorted(indexed.items(), key=lambda kv: (kv[1][0], kv[1][1])):
            out.setdefault(fused.strip("."), []).append(shard.strip("."))
        return out
    out = {}
    for fused, shard, _ in getattr(model, "stacked_params_mapping", None) or ():
        out.setdefault(fused.strip("."), []).append(shard.strip("."))
    return out or None


def load(model, named_tensors):
    """SGLang's custom loader: applies the version the request names to `model` (this worker's),
    on every tensor-parallel worker or on none. Raises deltacast.UpdateError naming each failing
    worker; the model is then as it was. Returns what this worker did."""
    spec = spec_of(named_tensors)
    deadline = time.monotonic() + float(spec.get("timeout", 300.0))
    tp_rank, tp_size, agree = tensor_parallel()
    name = f"{socket.gethostname()} sglang tp rank {tp_rank} of {tp_size} (pid {os.getpid()})"

    settings = (bool(spec.get("in_place", True)), bool(spec.get("rollback", True)), bool(spec.get("encrypt", False)))

    def make():
        return ModelReceiver(model, spec["coordinator"], token=token_or_env(spec.get("token")),
                             rails=rails_or_env(spec.get("rails")) or None, name=name,
                             join_timeout=max(0.0, deadline - time.monotonic()), tp_rank=tp_rank, tp_size=tp_size,
                             in_place=settings[0], group_id=spec.get("group", ""), rollback=settings[1],
                             packed_modules=packed_modules_of(model), encrypt=settings[2])

    def receiver():
        return receiver_for(_receivers, "model", model, spec["coordinator"], spec.get("group", ""), make, settings)

    result = apply_together(receiver, spec["version"], deadline, model.load_weights, agree, name)
    last_update.clear()
    last_update.update(result)
    log.info("deltacast: version %d applied in %.3f s (%d parameters in place, %d tensors through load_weights, "
             "%d bytes received)", result["version"], result["seconds"], result["in_place"], result["loaded"],
             result["received_bytes"])
    return result


def close():
    """Leaves the group (this worker process)."""
    for receiver in _receivers.values():
        if receiver is not None:
            receiver.close()
    _receivers.clear()
