"""The one receive / verify / apply core for inference engines (vLLM's weight-transfer backend,
the checkpoint-engine worker extension, any engine that loads weights itself).

A ModelReceiver keeps one model joined to one group of trainer ranks. Versions are received and
verified in the background as soon as the trainer publishes them, into memory that is not live;
``apply(version)`` is the only moment the model changes:

* parameters that hold the checkpoint's bytes (a whole tensor, a tensor-parallel share, the fused
  rows of packed tensors; see holds and layout) are the engine's own tensors and are written in
  place by the commit, changed elements only;
* every other checkpoint tensor is kept whole in host staging and handed to the engine's loading
  path (``load``: vLLM's layerwise reload, a model's load_weights...), which processes it again.

An update is atomic. What can be checked comes first (the version whole and verified, nothing
written while waiting; a version that never comes times out having written nothing). What cannot
be checked before writing (the engine's loader refusing a tensor) is covered by a ModelState taken
just before: on failure every module's tensors, attributes and bytes are put back, and the model
computes what it did before. A receiver that had to roll back its in-place parameters no longer
holds the base its next delta applies to: it is marked broken, and the next update joins the group
anew (a full version)."""
import contextlib
import json
import logging
import time

from .. import _core
from .._dtypes import torch_dtype_of
from .._tensors import parse_protection, parse_token
from ..engine import Consumer
from ..errors import TimeoutError, UpdateError
from ..group import whole
from . import layout
from .holds import parameter_owners, parameters_holding_checkpoint_bytes
from .rollback import ModelState

log = logging.getLogger("deltacast.inference")


def left(deadline):
    """Seconds to `deadline` (a time.monotonic() value); one deadline for a whole call."""
    return max(0.0, deadline - time.monotonic())


class ModelReceiver:
    """`model` (a torch module with named_parameters(); packed_modules_mapping where it fuses
    checkpoint tensors) joined to the group whose coordinator is at `coordinator`, as tensor-
    parallel rank `tp_rank` of `tp_size`. `in_place=False` sends every tensor through `load`.
    `group_id`: the id the trainer gave the group, to tell a later group at the same address.
    `packed_modules`: {fused parameter's module name: [checkpoint module names, in order]} where
    the model does not say it as vLLM models do (packed_modules_mapping)."""

    def __init__(self, model, coordinator, token=None, rails=None, name=None, join_timeout=60.0, tp_rank=0,
                 tp_size=1, in_place=True, group_id="", rollback=True, packed_modules=None, encrypt=False):
        import torch
        deadline = time.monotonic() + float(join_timeout)
        found = json.loads(_core.find_group([coordinator], parse_token(token), float(join_timeout),
                                            protection=parse_protection(encrypt, False)))
        logical = {t["name"]: (t["dtype"], tuple(t["shape"])) for t in found["tensors"]}
        self.model, self.group, self.rollback = model, (coordinator, group_id), rollback
        self.settings = (bool(in_place), bool(rollback), bool(encrypt))  # what receiver_for keeps a receiver for
        self.broken = False
        candidates = parameters_holding_checkpoint_bytes(model) if in_place else {}
        if packed_modules is None:
            packed_modules = getattr(model, "packed_modules_mapping", None)
        self.plan = layout.plan(candidates, logical, packed_modules, tp_rank, tp_size)
        params = dict(model.named_parameters())
        items, pieces, self._mirrors, self._storage = [], {}, [], {}
        for pname, spec in self.plan.in_place.items():
            target = params[pname].data
            # Post-load processing that replaces a parameter later makes the plan stale (stale()).
            self._storage[pname] = target.data_ptr()
            if target.device.type != "cpu":  # the group consumer applies in host memory
                mirror = torch.empty(target.shape, dtype=target.dtype, pin_memory=torch.cuda.is_available())
                mirror.copy_(target)
                self._mirrors.append((target, mirror))
                target = mirror
            items.append((pname, target))
            pieces[pname] = spec
        self.staging = {}
        for n in self.plan.fallback:
            dtype, shape = logical[n]
            self.staging[n] = torch.empty(shape or (1,), dtype=torch_dtype_of(dtype))
            items.append((f"staged:{n}", self.staging[n]))
            pieces[f"staged:{n}"] = whole(n, shape)
        # The tensors an update writes besides the commit's: every tensor of the modules that own
        # a parameter not written in place (the loader reprocesses those modules).
        owners = parameter_owners(model)
        reloaded = {owners[n] for n in params if n not in self.plan.in_place and n in owners}
        self._reloaded_tensors = [t for m in reloaded for t in list(m._parameters.values()) + list(m._buffers.values())]
        self._in_place_tensors = [params[n] for n in self.plan.in_place]
        self._state, self._committed = None, False
        self.consumer = Consumer(items, layout=pieces, connect=coordinator, token=token, rails=rails, name=name,
                                 join_timeout=left(deadline), commit="on_request", encrypt=encrypt)
        self._received = 0
        log.info("deltacast: %d parameters written in place, %d checkpoint tensors through the engine's loader",
                 len(self.plan.in_place), len(self.staging))

    def stale(self, model):
        """Whether `model` is not the one planned for, a written parameter moved (post-load
        processing replaced it), or a rollback left the in-place parameters behind the group."""
        if model is not self.model or self.broken:
            return True
        params = dict(model.named_parameters())
        return any(n not in params or params[n].data.data_ptr() != p for n, p in self._storage.items())

    def apply(self, version, deadline, load=None):
        """Makes the model hold `version` (0: the newest the group has sent) or leaves it exactly
        as it was and raises. `load(list of (name, tensor))` takes the staged tensors into the
        model (required when any are staged). Returns what it did. One worker's model; workers that
        must change together go through apply_together()."""
        if version == 0:
            return self._apply_newest(deadline, load)
        target = self.prepare(version, deadline)
        if target is None:
            return self._result(time.monotonic(), changed=False)
        with self._undone_on_failure():
            return self.land(target, deadline, load)

    def prepare(self, version, deadline):
        """Phase one, nothing written: waits until every trainer rank's part of `version` is here and
        verified. Returns the version to land, or None when the model holds it (or a newer one)
        already. Raises deltacast.TimeoutError when it did not arrive whole in time."""
        if self.consumer._live().version >= version:
            return None
        while not staged_in_time(self.consumer, version, deadline):
            time.sleep(0.005)
        return version

    def land(self, version, deadline, load=None):
        """Phase two: lets the prepared `version` land (the in-place parameters and the staging at
        once) and hands the staged tensors to `load`. What it overwrites is kept until forget() (or
        put back by undo()). Returns what it did."""
        start = time.monotonic()
        if self.staging and load is None:
            raise RuntimeError("this model's checkpoint tensors need the engine's loader: give load=")
        self._keep()
        self._committed = self._commit(version, deadline)
        self._copy_mirrors()
        if self.staging:
            load(list(self.staging.items()))
        return self._result(start)

    def _keep(self):
        """Keeps what an update may overwrite, where anything goes through the engine's loader (which
        can refuse a tensor after the commit wrote): the in-place parameters and every tensor and
        attribute of the reloaded modules."""
        self._state = ModelState(self.model, self._in_place_tensors + self._reloaded_tensors) \
            if self.staging and self.rollback else None

    def undo(self):
        """Puts back what the last land() overwrote (after it failed here, or on another worker).
        Returns whether the model is as it was before it."""
        if not self._committed:
            return True
        self._committed = False
        restored = self._state is not None
        if restored:
            self._state.restore()
        # In-place parameters are back at the previous version, the consumer is not: the next
        # update joins anew. Without a kept state (nothing was staged) they could not be put back.
        self.broken = bool(self.plan.in_place)
        return restored or not self.plan.in_place

    def forget(self):
        """Ends an update: drops what land() kept for undo()."""
        self._state, self._committed = None, False

    def _result(self, start, changed=True):
        total = self.consumer.state()["received_bytes"]
        received, self._received = total - self._received, total
        return {"version": self.consumer.version, "changed": changed, "in_place": len(self.plan.in_place),
                "loaded": len(self.staging) if changed else 0, "seconds": time.monotonic() - start,
                "received_bytes": received,
                "rollback_bytes": self._state.nbytes if getattr(self, "_state", None) is not None else 0}

    def _apply_newest(self, deadline, load):
        start = time.monotonic()
        held = self.consumer.version
        self._keep()
        with self._undone_on_failure():
            self._newest(deadline)
            self._committed = self.consumer.version != held
            if self._committed:
                self._copy_mirrors()
                if self.staging:
                    load(list(self.staging.items()))
            return self._result(start, changed=self._committed)

    @contextlib.contextmanager
    def _undone_on_failure(self):
        """One worker's update: what it wrote is put back if it fails, and forgotten either way."""
        try:
            yield
        except BaseException:
            self.undo()
            raise
        finally:
            self.forget()

    def _commit(self, version, deadline):
        """Lets `version` land and waits for it; returns whether anything was written (a timeout
        writes nothing)."""
        engine = self.consumer._live()
        held = engine.version
        if held >= version:
            return False
        try:
            self.consumer.commit(version, left(deadline))
        except TimeoutError:
            engine.set_commit_limit(held)  # nothing may land once we gave up...
            if engine.version == held:
                raise TimeoutError(f"version {version} did not land in time (holding {held}); nothing written") \
                    from None
            # ...but it landed as we gave up: go on with it.
        return True

    def _newest(self, deadline):
        """Lets land what has been received of the group's versions (at least one), then holds
        again: the newest version a group publishing on its own schedule has sent so far."""
        engine = self.consumer._live()
        engine.set_commit_limit(2 ** 64 - 1)
        try:
            self.consumer.wait(1, left(deadline))
            held, quiet = engine.version, time.monotonic()
            while time.monotonic() - quiet < 0.2 and left(deadline) > 0:  # until nothing more lands
                time.sleep(0.02)
                if engine.version != held:
                    held, quiet = engine.version, time.monotonic()
        finally:
            engine.set_commit_limit(engine.version)

    def _copy_mirrors(self):
        if not self._mirrors:
            return
        import torch
        for target, mirror in self._mirrors:
            target.copy_(mirror, non_blocking=True)
        torch.cuda.synchronize()

    def close(self):
        self.consumer.close()


def _exchange(agree, name, value):
    """(every worker's (name, value), None), or (None, why) where the exchange itself broke: a
    worker died mid-update and its process group's connections closed."""
    try:
        return agree(name, value), None
    except Exception as e:
        return None, f"the exchange between workers broke (a worker died?): {type(e).__name__}: {e}"


def apply_together(receiver_of, version, deadline, load, agree, name):
    """Applies `version` on every worker of an engine or on none: each worker calls this at once
    with its own `receiver_of()` (which may join, and fail), and `agree(name, error)` exchanges the
    workers' outcomes (a list of (name, error text or None), one per worker; every worker calls
    it the same number of times). Phase one makes sure every worker holds the version whole and
    verified before any writes; phase two writes, and if any worker failed, or the exchange broke
    (a worker died), every worker that can puts back what it wrote. Raises deltacast.UpdateError
    naming each failing worker; returns what this worker did."""
    receiver, target, error = None, None, None
    try:
        receiver = receiver_of()
        target = receiver.prepare(version, deadline)
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    outcomes, broke = _exchange(agree, name, error)
    failed = [broke] if broke else [f"{n}: {e}" for n, e in outcomes if e]
    if not failed:
        targets, broke = _exchange(agree, name, None if target is None else str(target))
        failed = [broke] if broke else []
    if failed:
        raise UpdateError(f"version {version} not applied, nothing written anywhere: " + "; ".join(failed))
    if all(t is None for _, t in targets):  # all hold it already, or none
        return receiver._result(time.monotonic(), changed=False)
    start, result = time.monotonic(), None
    try:
        if target is not None:
            result = receiver.land(target, deadline, load)
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    try:
        outcomes, broke = _exchange(agree, name, error)
        if broke:
            failed = ([f"{name}: {error}"] if error else []) + [broke]
        else:
            failed = [f"{n}: {e}" for n, e in outcomes if e]
        if failed:
            restored = receiver.undo()
            who = "this worker" if broke else "every worker"
            raise UpdateError(f"version {version} not applied, {who} put back what it wrote"
                              f"{'' if restored else ' (except this one, which kept no copy)'}: " + "; ".join(failed))
        return result or receiver._result(start, changed=False)
    finally:
        receiver.forget()


def staged_in_time(consumer, version, deadline, who=""):
    """Whether every trainer rank's part of `version` is staged and verified at `consumer` (a
    Consumer with commit="on_request"); raises deltacast.TimeoutError, naming what the consumer
    holds and where the trainer ranks are, once `deadline` (time.monotonic()) has passed. One
    check: callers poll it with their own sleep (threads or asyncio)."""
    engine = consumer._live()
    if engine.staged(version):
        return True
    if left(deadline) <= 0:
        state = consumer.state()
        raise TimeoutError(f"{who + ': ' if who else ''}version {version} did not arrive whole and verified in time "
                           f"(holding {engine.version}; trainer ranks at {state.get('rank_versions')}"
                           f"{'; ' + state['last_error'] if state.get('last_error') else ''}); nothing written")
    return False


def receiver_for(holder, key, model, coordinator, group_id, make, settings=(True, True, False)):
    """The receiver kept in `holder[key]`, made anew by `make()` for another group, other settings
    ((in_place, rollback, encrypt), as `make()` passes them to ModelReceiver) or a model it no longer fits;
    the one it replaces is closed (the new one joins anew: a full version)."""
    receiver = holder.get(key)
    if receiver is not None and (receiver.group != (coordinator, group_id) or receiver.settings != tuple(settings)
                                 or receiver.stale(model)):
        receiver.close()
        receiver = holder[key] = None
    if receiver is None:
        receiver = holder[key] = make()
    return receiver
