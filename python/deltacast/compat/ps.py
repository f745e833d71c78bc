"""checkpoint-engine's ParameterServer, over deltacast: one per trainer rank
(under torchrun), argument for argument. docs/python.md lists what differs.

Each rank registers checkpoints (copied into host memory it owns) and
``gather_metas`` agrees among the ranks on which rank sends which tensor.
``update`` publishes the checkpoint through deltacast's sharded engine (every
rank its tensors, over every rail, with failover) and calls ``req_func`` with
one ``(device_uuid, handle)`` pair per rank, where checkpoint-engine passes
ZMQ socket paths; the worker extension (deltacast.compat.worker) takes the
handle for its device. An update after the tensors changed, under any
checkpoint name with the same tensors, sends only the change.

Collective calls agree before they act: a rank whose part fails tells the
others, every rank raises UpdateError naming it, and the ranks stay in step
for the next call. A rank that dies is named by the others' TimeoutError;
after that the world has to be started again."""
import ipaddress
import logging
import os
import secrets
import threading
import traceback
from datetime import timedelta

from ..errors import InvalidArgumentError
from . import _host_tensors
from ..environment import rails_or_env, token_or_env
from ._devices import device_count, device_uuid, host_ip
from ._handle import Handle
from ._publisher import EngineOptions, Publisher, plan_of
from ._rendezvous import Rendezvous, UpdateError, agreed, error_text, seconds_of, torch_module
from ..inference.reports import ReplyListener

log = logging.getLogger("deltacast.compat")

__all__ = ["ParameterServer", "UpdateError"]

# How long ranks that are done with an update's req_func wait for the others beyond its timeout.
_SETTLE_SECONDS = 30.0


def _env_seconds(name):
    """The environment variable `name` in seconds, or None where it is unset or empty."""
    value = os.environ.get(name)
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        raise InvalidArgumentError(f"{name}={value!r} is not a number of seconds") from None


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
    # Checked here: a port no store can have otherwise fails inside torch's TCPStore, naming nothing.
    if master_port is None:
        port = _env_int("MASTER_PORT") + 1
        what = f"MASTER_PORT + 1 = {port}"
    else:
        try:
            port = int(master_port)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"master_port={master_port!r} is not an integer") from None
        what = f"master_port={master_port!r}"
    if not 0 < port < 65536:
        raise InvalidArgumentError(f"{what}: the ranks' store needs a port in [1, 65535]")
    return port


class ParameterServer:
    """One per trainer rank. ``rank``, ``world_size`` and ``master_addr`` default to torchrun's
    RANK, WORLD_SIZE and MASTER_ADDR (outside torchrun, with none of them set: one rank of one);
    the ranks meet in a store at ``master_port`` (default MASTER_PORT + 1). ``auto_pg``: create
    the torch.distributed process group when gather_metas or update needs it and destroy it after
    each update, as checkpoint-engine does (deltacast itself moves no byte through it).
    ``gpu_count``: the GPUs of a node; the rank uses GPU rank % gpu_count (made the current CUDA
    device, as checkpoint-engine does). ``mem_fraction`` is checked and unused (no device buffers
    are sized here).

    deltacast's own keyword arguments: ``token`` (shared with the workers; default:
    DELTACAST_TOKEN), ``rails`` (this rank's NIC addresses; default: DELTACAST_RAILS,
    comma-separated; the first is where other hosts reach this rank), ``advertise_host`` (how
    other hosts reach this one, when not the first rail; default without rails: this host's
    outbound address, or loopback when MASTER_ADDR is), ``listen_host`` (what sockets bind;
    default: loopback for a one-host job, every interface otherwise), ``value_codec``,
    ``transport``, and ``timeout``: how long a rank waits for the others in a collective call
    before naming those that did not come (default: DELTACAST_RENDEZVOUS_TIMEOUT seconds, or 10
    minutes). At its start a rank waits longer for rank 0's store: DELTACAST_RENDEZVOUS_START_TIMEOUT
    seconds, or the longer of ``timeout`` and 5 minutes."""

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
        gpus = device_count()
        self._gpu_count = int(gpu_count) if gpu_count is not None else \
            gpus or int(os.environ.get("LOCAL_WORLD_SIZE", self._world_size))
        if self._gpu_count < 1 or (gpus and self._gpu_count > gpus):
            raise InvalidArgumentError(f"gpu_count: {gpu_count!r} is not in [1, {gpus or 'any'}]")
        self._local_rank = self._rank % self._gpu_count
        if gpus:
            torch_module().cuda.set_device(self._local_rank)
        self._auto_pg = bool(auto_pg)
        master_addr = master_addr or ("127.0.0.1" if alone else os.environ.get("MASTER_ADDR"))
        if not master_addr:
            raise InvalidArgumentError("master_addr: not given and MASTER_ADDR is not set")
        self._master_port = 0 if self._world_size == 1 else _default_master_port(master_port)
        env_timeout = _env_seconds("DELTACAST_RENDEZVOUS_TIMEOUT")
        self._timeout = seconds_of(timeout if timeout is not None else
                                   env_timeout if env_timeout is not None else timedelta(minutes=10))
        rails, token = rails_or_env(rails), token_or_env(token)
        if advertise_host is None:
            advertise_host = rails[0] if rails else "127.0.0.1" if _is_loopback(master_addr) else host_ip()
        listen_host = listen_host or ("127.0.0.1" if _is_loopback(advertise_host) else "0.0.0.0")
        # Without rails the advertised address carries the data too (a producer listening on every
        # interface needs an address to give the group).
        self._options = EngineOptions(listen_host, advertise_host, token, rails or [advertise_host],
                                      str(value_codec), str(transport), self._timeout)
        self._device_uuid = device_uuid(self._local_rank)
        self._rendezvous = Rendezvous(self._rank, self._world_size, master_addr, self._master_port, self._timeout,
                                      seconds_of(_env_seconds("DELTACAST_RENDEZVOUS_START_TIMEOUT"),
                                                 "DELTACAST_RENDEZVOUS_START_TIMEOUT"))
        self._store_counter = 0
        self._memory_pool = {}  # checkpoint name -> {tensor name: host copy}
        self._shared_pool = None  # host copies kept for the next user of the shared pool
        self._current_shared_memory_pool_user = ""
        self._metas = {}  # rank -> what gather_metas learned of it (or load_metas was given)
        self._gathered = None  # this rank's tensors at the last gather_metas
        self._publisher = None
        self._remote = None  # load_metas: another world's group, updated from here
        self._version = 0
        self._lock = threading.Lock()

    # ---- checkpoints

    def register_checkpoint(self, checkpoint_name, *, files=None, named_tensors=None,
                            use_shared_memory_pool=False, use_inplace_pin_memory=True):
        """Copies ``files`` (safetensors) and ``named_tensors`` into host memory under
        ``checkpoint_name``: later changes to the tensors do not change the checkpoint.
        ``use_shared_memory_pool``: copy into one set of host buffers kept across checkpoints of
        the same tensors (one user at a time; ``unregister_checkpoint(name, force=True)`` by its
        user frees it). ``use_inplace_pin_memory`` is accepted; files are always copied, never
        removed."""
        del use_inplace_pin_memory  # checkpoint-engine pins /dev/shm files in place and deletes them; not done here
        if not isinstance(checkpoint_name, str) or not checkpoint_name:
            raise InvalidArgumentError(f"checkpoint_name: {checkpoint_name!r} is not a non-empty string")
        with self._lock:
            if use_shared_memory_pool:
                if self._current_shared_memory_pool_user:
                    raise InvalidArgumentError(
                        f"cannot register checkpoint '{checkpoint_name}' to the shared memory pool: checkpoint "
                        f"'{self._current_shared_memory_pool_user}' is using it")
                self._shared_pool = _host_tensors.snapshot(files, named_tensors, into=self._shared_pool,
                                                           what=f"checkpoint '{checkpoint_name}'")
                self._current_shared_memory_pool_user = checkpoint_name
                return
            if checkpoint_name in self._memory_pool or checkpoint_name == self._current_shared_memory_pool_user:
                raise InvalidArgumentError(f"checkpoint '{checkpoint_name}' is already registered")
            self._memory_pool[checkpoint_name] = _host_tensors.snapshot(files, named_tensors)

    def unregister_checkpoint(self, checkpoint_name, force=False):
        """Drops the checkpoint's host copies. The shared pool's user keeps the pool for the next
        one unless ``force``. An unknown name is logged and ignored, as in checkpoint-engine."""
        with self._lock:
            if checkpoint_name and checkpoint_name == self._current_shared_memory_pool_user:
                self._current_shared_memory_pool_user = ""
                if force:
                    self._shared_pool = None
                return
            if self._memory_pool.pop(checkpoint_name, None) is None:
                log.warning("[rank%d] unregister checkpoint name %s not found", self._rank, checkpoint_name)

    def _tensors(self, checkpoint_name):
        if checkpoint_name and checkpoint_name == self._current_shared_memory_pool_user:
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
        """Waits until every rank got here (through the store: no process group needed); raises
        deltacast.TimeoutError naming the ranks that did not."""
        self._rendezvous.barrier("store_based_barrier", seconds_of(timeout))

    def _maybe_init_process_group(self):
        """None, or why the process group could not be made. Called once the ranks met through the
        store and bounded by the rendezvous timeout: a dead rank does not hold the others for
        checkpoint-engine's 10 minutes."""
        if not self._auto_pg or self._world_size == 1:
            return None
        try:
            torch = torch_module()
            if not torch.distributed.is_initialized():
                self.init_process_group(timeout=timedelta(seconds=self._timeout))
        except Exception as e:
            return f"creating the process group: {error_text(e)}"
        return None

    def gather_metas(self, checkpoint_name):
        """Collective: every rank tells the others which tensors it holds of ``checkpoint_name``
        (none where it did not register it); together they settle which rank sends which tensor.
        When those are the tensors of the last gather, the engine stays (the next update is a
        delta); otherwise it is rebuilt (the next update sends everything). Returns the metas."""
        tensors = self._tensors(checkpoint_name) or {}
        mine = {"checkpoint": checkpoint_name, "tensors": _host_tensors.metas_of(tensors),
                "device_uuid": self._device_uuid, "host": self._options.advertise_host}
        everyone = self._rendezvous.gather("gather_metas", mine)
        made = self._rendezvous.gather("gather_metas process group", self._maybe_init_process_group())
        agreed(made, f"gather_metas('{checkpoint_name}')")
        try:
            plan = plan_of([m["tensors"] for m in everyone], checkpoint_name)  # the same verdict on every rank
        except InvalidArgumentError as e:
            raise UpdateError(f"gather_metas('{checkpoint_name}') failed: {e}") from None
        if self._publisher is None or self._publisher.plan.signature != plan.signature:
            if self._publisher is not None:
                self._publisher.close()
                self._publisher = None
            if plan.logical:
                self._publisher = Publisher(plan, self._rank, self._rendezvous, self._options)
        self._remote = None
        self._gathered = mine["tensors"]
        coordinator = self._publisher.coordinator if self._publisher else None
        group = self._publisher.group if self._publisher else None
        self._metas = {r: dict(m, coordinator=coordinator, group=group, version=self._version)
                       for r, m in enumerate(everyone)}
        return self.get_metas()

    def get_metas(self):
        """What gather_metas learned, per rank: checkpoint, tensors, device_uuid, host, and the
        group's coordinator, id and version (for load_metas on another world's ranks)."""
        return {r: dict(m) for r, m in self._metas.items()}

    def load_metas(self, metas):
        """Takes another world's metas (its ``get_metas()``): this world's updates then hand its
        workers that world's group, whose ranks keep publishing; each update brings them the
        newest version that group has. Nothing is sent from here."""
        try:
            first = next(iter(metas.values()))
            coordinator, checkpoint = first["coordinator"], first["checkpoint"]
        except (AttributeError, KeyError, StopIteration, TypeError):
            raise InvalidArgumentError("load_metas: give another ParameterServer's get_metas()") from None
        if not coordinator:
            raise InvalidArgumentError("load_metas: those metas name no group (no rank had tensors)")
        self._remote = {"coordinator": coordinator, "checkpoint": checkpoint, "group": first.get("group") or ""}
        self._metas = {int(r): dict(m) for r, m in metas.items()}

    # ---- updates

    def update(self, checkpoint_name, req_func, *, timeout=timedelta(minutes=10), ranks=None):
        """Collective: publishes ``checkpoint_name`` as the next version and calls
        ``req_func(socket_paths)`` (on a thread; on every rank, or only on those in ``ranks``)
        with ``[(device_uuid, handle)]`` for every rank, which the worker extension's
        ``update_weights_from_ipc`` takes; ``req_func`` returns once the workers applied it (as
        ``request_inference_to_update`` does). Returns this rank's report of the version (None
        where it sent nothing). Raises UpdateError on every rank naming each rank whose part or
        req_func failed or did not return within ``timeout``, and each worker that reported a
        failure; deltacast.TimeoutError naming ranks that did not take part (dead): at the start
        of the update after the rendezvous timeout, once it started after ``timeout`` + 30 s."""
        if req_func is None:
            raise InvalidArgumentError("req_func is required")
        seconds = seconds_of(timeout)
        if seconds is None:
            raise InvalidArgumentError("timeout: give a timedelta (an update without a limit could hang)")
        if ranks is not None and any(not isinstance(r, int) or not 0 <= r < self._world_size for r in ranks):
            raise InvalidArgumentError(f"ranks: {ranks!r} are not ranks of a world of {self._world_size}")
        what = f"update of checkpoint '{checkpoint_name}'"
        listener = None
        try:
            # Agree before acting: every rank ready, on one version number.
            start = self._rendezvous.gather("update start", {"error": self._not_ready(checkpoint_name),
                                                             "version": self._version, "uuid": self._device_uuid})
            agreed([s["error"] for s in start], what)
            version = max(s["version"] for s in start) + 1
            uuids = [s["uuid"] for s in start]
            error = handle = None
            try:
                listener = self._listener()
                handle = str(self._handle(checkpoint_name, version, listener))
                if self._remote is None:
                    self._publisher.publish(self._tensors(checkpoint_name), version)
            except Exception as e:
                error = error_text(e)
            self._version = version  # on every rank: a version number is used once
            handles = self._rendezvous.gather("update handles", {"handle": handle, "error": error})
            agreed([h["error"] for h in handles], what + f" (version {version})")
            error = self._maybe_init_process_group()
            if error is None and (not ranks or self._rank in ranks):
                error = self._call(req_func, list(zip(uuids, (h["handle"] for h in handles))), seconds)
            # Workers report to the rank whose handle they took, which need not be the one that
            # called req_func: every listener stays open until every req_func returned.
            errors = self._rendezvous.gather("update req_func", error, seconds + _SETTLE_SECONDS)
            reports = self._rendezvous.gather("update reports", listener.failures())
            workers = [f"worker {w['worker']}: {w['error']}" for failures in reports for w in failures]
            agreed(errors, what + f" (version {version})", workers)
        finally:
            if listener is not None:
                listener.close()
            if self._auto_pg and self._world_size > 1:
                torch = torch_module()
                if torch.distributed.is_initialized():
                    torch.distributed.destroy_process_group()
        producer = self._publisher.producer if self._publisher and self._remote is None else None
        return producer.report(version) if producer is not None else None

    def _not_ready(self, checkpoint_name):
        """Why this rank cannot take part in updating `checkpoint_name` (None: it can)."""
        if self._remote is not None:
            if checkpoint_name != self._remote["checkpoint"]:
                return f"the loaded metas are of checkpoint '{self._remote['checkpoint']}', not '{checkpoint_name}'"
            return None
        if self._publisher is None:
            return "no rank holds tensors of a gathered checkpoint; call register_checkpoint and gather_metas first"
        tensors = self._tensors(checkpoint_name) or {}
        if _host_tensors.metas_of(tensors) != self._gathered:
            return f"its tensors of '{checkpoint_name}' are not the ones gathered last; call gather_metas first"
        return None

    def _listener(self):
        """Where workers report: on the advertised address when it is one of this host's (workers
        reach it, nobody else needs to), else where every socket listens."""
        nonce = secrets.token_hex(8)
        if self._options.listen_host != "127.0.0.1":
            try:
                return ReplyListener(self._options.advertise_host, nonce)
            except OSError:  # advertised through a NAT or a name: not an address of this host
                pass
        return ReplyListener(self._options.listen_host, nonce)

    def _handle(self, checkpoint_name, version, listener):
        reply = f"{self._options.advertise_host}:{listener.port}"
        if self._remote is not None:  # the other world's group: whatever it has published
            return Handle(self._remote["coordinator"], checkpoint_name, 0, reply, listener.nonce,
                          self._remote["group"])
        return Handle(self._publisher.coordinator, checkpoint_name, version, reply, listener.nonce,
                      self._publisher.group)

    def _call(self, req_func, socket_paths, seconds):
        """req_func(socket_paths) on a thread of its own; None, or why it failed."""
        failure = []

        def run():
            try:
                req_func(socket_paths)
            except BaseException as e:  # handed to every rank in the outcome
                failure.append(error_text(e))
                log.debug("req_func failed:\n%s", traceback.format_exc())

        thread = threading.Thread(target=run, name="deltacast-req-func", daemon=True)
        thread.start()
        thread.join(seconds)
        if thread.is_alive():
            return f"req_func did not return within {seconds:.0f} s"
        return failure[0] if failure else None

    def close(self):
        """Stops this rank's engine (deltacast's addition; checkpoint-engine has no close)."""
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
