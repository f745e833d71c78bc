"""checkpoint-engine's ParameterServer, over deltacast: one per trainer rank
(under torchrun), argument for argument. docs/python.md lists what differs.

Each rank registers checkpoints (copied into host memory it owns) and
``gather_metas`` agrees among the ranks on which rank sends which tensor.
``update`` publishes the checkpoint through deltacast's sharded engine (every
rank its tensors, over every rail, with failover) and calls ``req_func`` with
one ``(device_uuid, handle)`` pair per rank, where checkpoint-engine passes
ZMQ socket paths; the worker extension (deltacast.compat.worker) takes the
handle for its device. An update after the tensors changed, under any
checkpoint name with the same tensors, sends only the change."""
import ipaddress
import logging
import os
import secrets
import threading
import traceback
from datetime import timedelta

from ..errors import DeltacastError, InvalidArgumentError
from . import _host_tensors
from ._devices import device_count, device_uuid, host_ip
from ._handle import Handle
from ._publisher import EngineOptions, Publisher, plan_of
from ._rendezvous import Rendezvous, seconds_of, torch_module
from ._replies import ReplyListener

log = logging.getLogger("deltacast.compat")


class UpdateError(DeltacastError, RuntimeError):
    """An update did not reach every worker; the message names the ranks and workers that failed."""


def _env_int(name):
    value = os.environ.get(name)
    if value is None:
        raise InvalidArgumentError(f"{name} is not set: run under torchrun, or give it as an argument")
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"{name}={value!r} is not an integer") from None


def _is_loopback(host):
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _default_master_port(master_port):
    # As checkpoint-engine: torchrun's rendezvous has MASTER_PORT, its store takes the next one.
    if master_port is not None:
        return int(master_port)
    return _env_int("MASTER_PORT") + 1


class ParameterServer:
    """One per trainer rank. ``rank``, ``world_size`` and ``master_addr`` default to torchrun's
    RANK, WORLD_SIZE and MASTER_ADDR (outside torchrun, with none of them set: one rank of one);
    the ranks meet in a store at ``master_port`` (default MASTER_PORT + 1). ``auto_pg``: create
    the torch.distributed process group when gather_metas or update needs it and destroy it after
    each update, as checkpoint-engine does (deltacast itself moves no byte through it).
    ``gpu_count`` places the rank on its device (rank % gpu_count); ``mem_fraction`` is accepted
    and unused (no device buffers are sized here).

    deltacast's own keyword arguments: ``token`` (shared with the workers; default:
    DELTACAST_TOKEN), ``rails`` (this rank's NIC addresses; default: DELTACAST_RAILS,
    comma-separated; the first is where other hosts reach this rank), ``listen_host`` (where to listen; default: loopback when MASTER_ADDR is,
    every interface otherwise), ``advertise_host`` (how other hosts reach this one), ``value_codec``,
    ``transport``, and ``timeout``: how long a rank waits for the others in gather_metas and
    update before raising (default: DELTACAST_RENDEZVOUS_TIMEOUT seconds, or 10 minutes)."""

    shared_memory_pool_name = "__shared_memory_pool__"

    def __init__(self, *, rank=None, world_size=None, auto_pg=True, gpu_count=None, mem_fraction=None,
                 master_addr=None, master_port=None, token=None, rails=None, listen_host=None,
                 advertise_host=None, value_codec="ulp", transport="tcp", timeout=None):
        alone = rank is None and world_size is None and "RANK" not in os.environ and "WORLD_SIZE" not in os.environ
        self._rank = 0 if alone else (int(rank) if rank is not None else _env_int("RANK"))
        self._world_size = 1 if alone else (int(world_size) if world_size is not None else _env_int("WORLD_SIZE"))
        if not 0 <= self._rank < self._world_size:
            raise InvalidArgumentError(f"rank {self._rank} is not in [0, world_size={self._world_size})")
        if mem_fraction is not None and not 0 < float(mem_fraction) <= 1:
            raise InvalidArgumentError(f"mem_fraction: {mem_fraction!r} is not in (0, 1]")
        local_devices = device_count() or int(os.environ.get("LOCAL_WORLD_SIZE", self._world_size))
        self._gpu_count = int(gpu_count) if gpu_count is not None else local_devices
        if self._gpu_count < 1:
            raise InvalidArgumentError(f"gpu_count: {gpu_count!r} is not a positive int")
        self._local_rank = self._rank % self._gpu_count
        self._auto_pg = bool(auto_pg)
        if alone:
            master_addr = master_addr or "127.0.0.1"
        master_addr = master_addr or os.environ.get("MASTER_ADDR")
        if not master_addr:
            raise InvalidArgumentError("master_addr: not given and MASTER_ADDR is not set")
        self._master_addr = master_addr
        self._master_port = 0 if self._world_size == 1 else _default_master_port(master_port)
        env_timeout = os.environ.get("DELTACAST_RENDEZVOUS_TIMEOUT")
        self._timeout = seconds_of(timeout if timeout is not None else
                                   float(env_timeout) if env_timeout else timedelta(minutes=10))
        # Unchanged checkpoint-engine scripts pass none of deltacast's options: the environment may.
        if rails is None and os.environ.get("DELTACAST_RAILS"):
            rails = [r for r in os.environ["DELTACAST_RAILS"].split(",") if r]
        if token is None:
            token = os.environ.get("DELTACAST_TOKEN")
        listen_host = listen_host or ("127.0.0.1" if _is_loopback(master_addr) else "0.0.0.0")
        if advertise_host is None:
            advertise_host = rails[0] if isinstance(rails, (list, tuple)) and rails else \
                rails if isinstance(rails, str) else listen_host if listen_host != "0.0.0.0" else host_ip()
        self._options = EngineOptions(listen_host, advertise_host, token, rails, str(value_codec), str(transport),
                                      self._timeout)
        self._device_uuid = device_uuid(self._local_rank)
        self._rendezvous = Rendezvous(self._rank, self._world_size, master_addr, self._master_port, self._timeout)
        self._store_counter = 0
        self._memory_pool = {}  # checkpoint name -> {tensor name: host copy}
        self._shared_pool = None  # host copies kept for the next user of the shared pool
        self._current_shared_memory_pool_user = ""
        self._metas = {}  # rank -> what gather_metas learned of it
        self._publisher = None
        self._remote = None  # load_metas: another world's group, updated from here
        self._version = 0
        self._lock = threading.Lock()

    # ---- checkpoints

    def register_checkpoint(self, checkpoint_name, *, files=None, named_tensors=None,
                            use_shared_memory_pool=False, use_inplace_pin_memory=True):
        """Copies ``files`` (safetensors) and ``named_tensors`` into host memory under
        ``checkpoint_name``: later changes to the tensors do not change the checkpoint.
        ``use_shared_memory_pool``: reuse one set of host buffers across checkpoints of the same
        tensors (one user at a time; ``unregister_checkpoint(name, force=True)`` frees it).
        ``use_inplace_pin_memory`` is accepted; files are always copied, never removed."""
        del use_inplace_pin_memory  # checkpoint-engine pins /dev/shm files in place and deletes them; not done here
        with self._lock:
            if use_shared_memory_pool:
                if self._current_shared_memory_pool_user:
                    raise InvalidArgumentError(
                        f"cannot register checkpoint '{checkpoint_name}' to the shared memory pool: checkpoint "
                        f"'{self._current_shared_memory_pool_user}' is using it")
                tensors = _host_tensors.snapshot(files, named_tensors)
                self._shared_pool = self._into_shared_pool(checkpoint_name, tensors)
                self._current_shared_memory_pool_user = checkpoint_name
                return
            if checkpoint_name in self._memory_pool or checkpoint_name == self._current_shared_memory_pool_user:
                raise InvalidArgumentError(f"checkpoint '{checkpoint_name}' is already registered")
            self._memory_pool[checkpoint_name] = _host_tensors.snapshot(files, named_tensors)

    def _into_shared_pool(self, checkpoint_name, tensors):
        if self._shared_pool is None:
            return tensors
        old, new = _host_tensors.metas_of(self._shared_pool), _host_tensors.metas_of(tensors)
        if old != new:
            raise InvalidArgumentError(
                f"checkpoint '{checkpoint_name}': the shared memory pool holds other tensors (its shape is fixed "
                "by its first user); unregister that one with force=True first")
        for name, value in tensors.items():
            _host_tensors.array_of(self._shared_pool[name])[...] = _host_tensors.array_of(value)
        return self._shared_pool

    def unregister_checkpoint(self, checkpoint_name, force=False):
        """Drops the checkpoint's host copies. The shared pool's user keeps the pool for the next
        one unless ``force``. An unknown name is logged and ignored, as in checkpoint-engine."""
        with self._lock:
            if checkpoint_name == self._current_shared_memory_pool_user:
                self._current_shared_memory_pool_user = ""
                if force:
                    self._shared_pool = None
                return
            if self._memory_pool.pop(checkpoint_name, None) is None:
                log.warning("[rank%d] unregister checkpoint name %s not found", self._rank, checkpoint_name)

    def _tensors(self, checkpoint_name):
        if checkpoint_name == self._current_shared_memory_pool_user:
            return self._shared_pool
        return self._memory_pool.get(checkpoint_name)

    # ---- the ranks together

    def init_process_group(self, *, timeout=timedelta(minutes=10)):
        """Creates torch.distributed's default process group among the ranks (gloo without CUDA,
        nccl with), on the ranks' store, as checkpoint-engine does."""
        torch = torch_module()
        from . import distributed
        self._store_counter += 1
        store = torch.distributed.PrefixStore(f"prefix-{self._store_counter}", self._rendezvous.store)
        distributed.init_process_group(self._rank, self._world_size, store, timeout=timeout)

    def store_based_barrier(self, timeout=timedelta(minutes=5)):
        """Waits until every rank got here (through the store: no process group needed)."""
        self._rendezvous.barrier("store_based_barrier", seconds_of(timeout))

    def _maybe_init_process_group(self):
        # Called once the ranks met through the store (which names a missing rank), and bounded
        # by the rendezvous timeout: a rank that died does not hold the others for 10 minutes.
        if not self._auto_pg or self._world_size == 1:
            return
        torch = torch_module()
        if not torch.distributed.is_initialized():
            self.init_process_group(timeout=timedelta(seconds=self._timeout))

    def gather_metas(self, checkpoint_name):
        """Collective: every rank tells the others which tensors it holds of ``checkpoint_name``
        (none where it did not register it); together they settle which rank sends which tensor.
        When those are the tensors of the last gather, the engine stays (the next update is a
        delta); otherwise it is rebuilt (the next update sends everything)."""
        tensors = self._tensors(checkpoint_name) or {}
        mine = {"checkpoint": checkpoint_name, "tensors": _host_tensors.metas_of(tensors),
                "device_uuid": self._device_uuid, "host": self._options.advertise_host}
        everyone = self._rendezvous.gather("gather_metas", mine)
        self._maybe_init_process_group()
        plan = plan_of([m["tensors"] for m in everyone], checkpoint_name)
        if self._publisher is None or self._publisher.plan.signature != plan.signature:
            if self._publisher is not None:
                self._publisher.close()
                self._publisher = None
            if plan.logical:
                self._publisher = Publisher(plan, self._rank, self._rendezvous, self._options)
        self._remote = None
        coordinator = self._publisher.coordinator if self._publisher else None
        self._metas = {r: dict(m, coordinator=coordinator, version=self._version) for r, m in enumerate(everyone)}
        return self.get_metas()

    def get_metas(self):
        """What gather_metas learned, per rank: checkpoint, tensors, device_uuid, host, and the
        group's coordinator and version (for load_metas on another world's ranks)."""
        return {r: dict(m) for r, m in self._metas.items()}

    def load_metas(self, metas):
        """Takes another world's metas (its ``get_metas()``): this world's update then hands its
        workers that world's group, whose ranks keep publishing; nothing is sent from here."""
        try:
            first = next(iter(metas.values()))
            coordinator, checkpoint = first["coordinator"], first["checkpoint"]
        except (AttributeError, KeyError, StopIteration, TypeError):
            raise InvalidArgumentError("load_metas: give another ParameterServer's get_metas()") from None
        if not coordinator:
            raise InvalidArgumentError("load_metas: those metas name no group (no rank had tensors)")
        self._remote = {"coordinator": coordinator, "checkpoint": checkpoint, "version": int(first.get("version", 0))}
        self._metas = {int(r): dict(m) for r, m in metas.items()}

    # ---- updates

    def update(self, checkpoint_name, req_func, *, timeout=timedelta(minutes=10), ranks=None):
        """Collective: publishes ``checkpoint_name`` as the next version and calls
        ``req_func(socket_paths)`` (on a thread; on every rank, or only on those in ``ranks``)
        with ``[(device_uuid, handle)]`` for every rank, which the worker extension's
        ``update_weights_from_ipc`` takes. Returns once every rank's req_func returned and the
        ranks agreed, with this rank's report of the version (None where it sent nothing).
        Raises UpdateError naming each rank whose req_func failed or did not return within
        ``timeout`` and each worker that reported a failure; deltacast.TimeoutError naming the
        ranks that did not take part (dead)."""
        if req_func is None:
            raise InvalidArgumentError("req_func is required")
        seconds = seconds_of(timeout)
        if ranks is not None and any(not isinstance(r, int) or not 0 <= r < self._world_size for r in ranks):
            raise InvalidArgumentError(f"ranks: {ranks!r} are not ranks of a world of {self._world_size}")
        try:
            coordinator, version = self._publish(checkpoint_name)
            listener = ReplyListener(self._options.listen_host, secrets.token_hex(8))
            try:
                handle = Handle(coordinator, checkpoint_name, version,
                                f"{self._options.advertise_host}:{listener.port}", listener.nonce)
                handles = self._rendezvous.gather("update handles", str(handle))
                self._maybe_init_process_group()
                uuids = [self._metas[r]["device_uuid"] for r in range(self._world_size)] if self._metas else \
                    [self._device_uuid] * self._world_size
                socket_paths = list(zip(uuids, handles))
                error = None
                if not ranks or self._rank in ranks:
                    error = self._call(req_func, socket_paths, seconds)
                # Workers report to the rank whose handle they took, which need not be the one that
                # called req_func: every listener stays open until every req_func returned.
                errors = self._rendezvous.gather("update req_func", error, self._timeout + (seconds or 0))
                reports = self._rendezvous.gather("update reports", listener.failures())
            finally:
                listener.close()
            self._raise_for(errors, reports, checkpoint_name, version)
            producer = self._publisher.producer if self._publisher else None
            return producer.report(version) if producer is not None else None
        finally:
            if self._auto_pg and self._world_size > 1:
                torch = torch_module()
                if torch.distributed.is_initialized():
                    torch.distributed.destroy_process_group()

    def _publish(self, checkpoint_name):
        """(coordinator, version) of this update; publishes this rank's part of the checkpoint."""
        if self._remote is not None:
            if checkpoint_name != self._remote["checkpoint"]:
                raise InvalidArgumentError(f"update('{checkpoint_name}'): the loaded metas are of checkpoint "
                                           f"'{self._remote['checkpoint']}'")
            return self._remote["coordinator"], self._remote["version"]
        if self._publisher is None:
            raise InvalidArgumentError(f"update('{checkpoint_name}'): no rank holds tensors of a gathered "
                                       f"checkpoint; call register_checkpoint and gather_metas first")
        tensors = self._tensors(checkpoint_name) or {}
        if _host_tensors.metas_of(tensors) != self._metas[self._rank]["tensors"]:
            raise InvalidArgumentError(f"update('{checkpoint_name}'): its tensors are not the ones gathered last; "
                                       f"call gather_metas('{checkpoint_name}') first")
        version = self._version + 1
        self._publisher.publish(tensors, version)
        self._version = version  # even if the update fails: a version number is used once
        return self._publisher.coordinator, version

    def _call(self, req_func, socket_paths, seconds):
        """req_func(socket_paths) on a thread of its own; None, or why it failed."""
        failure = []

        def run():
            try:
                req_func(socket_paths)
            except BaseException as e:  # handed to every rank in the outcome
                failure.append(f"{type(e).__name__}: {e}")
                log.debug("req_func failed:\n%s", traceback.format_exc())

        thread = threading.Thread(target=run, name="deltacast-req-func", daemon=True)
        thread.start()
        thread.join(seconds)
        if thread.is_alive():
            return f"req_func did not return within {seconds:.0f} s"
        return failure[0] if failure else None

    def _raise_for(self, errors, reports, checkpoint_name, version):
        problems = [f"rank {rank}: {error}" for rank, error in enumerate(errors) if error]
        problems += [f"worker {w['worker']}: {w['error']}" for failures in reports for w in failures]
        if problems:
            raise UpdateError(f"update of checkpoint '{checkpoint_name}' (version {version}) failed: " +
                              "; ".join(problems))

    def close(self):
        """Stops this rank's engine (deltacast's addition; checkpoint-engine has no close)."""
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
