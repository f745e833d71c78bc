"""The trainer's Producer and the inference worker's Consumer."""
import json
import time

from . import _core
from ._tensors import capsules, named_items, parse_protection, parse_stream, parse_token
from .errors import ClosedError, InvalidArgumentError, TimeoutError
from .group import Group, layout_json, ordered_like

_FOREVER = 365 * 24 * 3600.0


def _default_name():
    import os
    import socket
    return f"{socket.gethostname()}-{os.getpid()}"


def _timeout(timeout):
    return _FOREVER if timeout is None else float(timeout)


_TRANSPORTS = ("tcp", "rdma", "auto")


def _transport(value):
    if value not in _TRANSPORTS:
        raise InvalidArgumentError(f"transport: {value!r} is not one of {', '.join(_TRANSPORTS)}")
    return value


def _metrics(port, host):
    """``metrics_port``/``metrics_host`` as the engine's ``HOST:PORT`` ("" for no metrics)."""
    if port is None:
        return ""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidArgumentError(f"metrics_port: {port!r} is not a port number (0..65535; 0: any free port)")
    return f"{host}:{port}"


def _label(value, what, meaning):
    """A node's or site's name (None: the default, empty)."""
    if value is None:
        return ""
    if not isinstance(value, str) or not value or len(value.encode()) > 255:
        raise InvalidArgumentError(f"{what}: {value!r} is not {meaning} (a non-empty string of at most 255 bytes)")
    return value


def _node(value):
    return _label(value, "node", "a host name")


def _site(value):
    return _label(value, "site", "a site name")


def _addresses(value, what):
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    try:
        return [str(v) for v in value]
    except TypeError:
        raise InvalidArgumentError(f"{what}: give an address string or a list of them") from None


class EngineHandle:
    """What Producer, Consumer and Coordinator share: closing (idempotent, also on garbage
    collection and leaving a with-block) and refusing calls once closed."""

    _role = "engine"
    _engine = None

    def close(self):
        """Stops the engine's work and releases the tensors (a consumer's keep
        the last committed version). Idempotent."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
        self._keep = None

    def _live(self):
        if self._engine is None:
            raise ClosedError(f"this {self._role} is closed")
        return self._engine

    @property
    def metrics_address(self):
        """``host:port`` where Prometheus metrics are served (``GET /metrics``), or None where
        none are (no ``metrics_port``; a resharded consumer; a coordinator). Names and labels:
        docs/metrics.md."""
        return getattr(self._live(), "metrics_address", "") or None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


class Producer(EngineHandle):
    """The trainer's end: publishes its tensors as versions.

    ``named_tensors`` (a dict or ``model.named_parameters()``-style pairs) are
    read in place at each ``publish()``; keep them contiguous, all in host
    memory or all on one CUDA GPU (torch CUDA tensors, CuPy arrays: anything
    with ``__dlpack__``). On a GPU, publish() diffs them against the last
    published version kept in GPU memory and encodes the changes there; only
    the encoded changes cross to the host. ``stream``: the CUDA stream that
    work runs on (a torch.cuda.Stream, a CuPy stream or a raw handle; None:
    the default stream); publish() returns once it is done, so give the
    stream the optimizer step ran on, or synchronize before publishing.
    ``shadow`` (GPU tensors): where that last published version is kept,
    ``"device"`` (GPU memory: one more copy of the model in HBM, the fastest
    diff) or ``"host"`` (pinned host memory that the diff reads and writes
    over PCIe: no HBM for it, a slower publish).
    ``listen`` is the control address consumers connect to (port 0: any
    free port; see ``address``). ``rails``: the local address of each NIC
    to send over (None: one rail on any address). ``value_codec``: ``"ulp"``
    (changed values as steps from the old value, smallest) or ``"raw"``.
    ``transport``: the data transport, ``"tcp"``, ``"rdma"`` (RDMA verbs) or
    ``"auto"`` (RDMA where this machine has a device, TCP otherwise); asking
    for RDMA where there is none falls back to TCP with a warning (see
    ``transport`` for what is in use). Every consumer must use the same one.
    ``token``: the group's secret (see the README: 32 bytes, a path, hex:/file:/env:/pass: text,
    a passphrase, or a legacy int); every connection proves it without sending it.
    ``encrypt=True`` encrypts payloads and control with AES-256-GCM (default: authenticated,
    everything tagged, payloads in clear); ``insecure=True`` drops the tags, for benchmarks only,
    and every member must choose it too.
    ``shape``: how versions go out to the consumers: ``"auto"`` (default: chains or pipelined
    trees, whichever the planner's model finds fastest for each version), ``"chains"``, or
    ``"trees:2"``, ``"trees:4"``, ``"trees:8"`` (trees that wide).
    ``site``: the site (datacenter, region) the producer runs in (default: none named). Consumers
    naming another site (``Consumer(site=...)``) take each version once per site over the WAN
    link into it, and fan it out inside the site. ``wan_zstd``: the zstd level (1 by default; 0:
    never) a delta version gets on top of the codec when that makes it cross the slowest WAN link
    sooner, judged per version from that link's measured rate and zstd's ratio and speed on the
    version's own bytes (a report's ``zstd_level`` says which versions got it).

    A trainer rank of a sharded group (``group``, a deltacast.Group of the
    logical tensors) publishes only its shards: ``shards`` maps each of its
    tensor names to the piece of a logical tensor it is (deltacast.rows,
    columns, piece, flat), ``rank`` and ``world_size`` place it. Every rank
    publishes each training step as the same version number
    (``publish(version=step)``). ``coordinator`` (``"host:port"``, e.g. the
    trainer's MASTER_ADDR with a port of its own) is where the group meets:
    rank 0 runs the group's coordinator there (``host_coordinator``: None,
    rank 0 does; False when a deltacast.Coordinator runs elsewhere), every
    rank registers its shards and address with it (the constructor waits up
    to ``register_timeout`` seconds; overlapping shards are refused naming
    the tensor), and rollout processes need only that address
    (``Consumer(layout=..., connect=coordinator)``). ``advertise``: the
    address(es) rollout processes reach this rank at (default: ``listen``,
    or each rail's address when listening on 0.0.0.0). Without
    ``coordinator``, rollout processes take ``group_entry`` of every rank
    (gather them, e.g. with torch.distributed.all_gather_object).
    """

    _role = "producer"

    def __init__(self, named_tensors, listen="127.0.0.1:0", token=None, rails=None, value_codec="ulp",
                 threads=0, transport="tcp", group=None, rank=None, world_size=None, shards=None,
                 coordinator=None, host_coordinator=None, advertise=None, register_timeout=60.0,
                 metrics_port=None, metrics_host="0.0.0.0", stream=None, shadow="device", encrypt=False,
                 insecure=False, shape="auto", site=None, wan_zstd=1):
        items = named_items(named_tensors)
        self._group_entry = None
        self._coordinator = None
        seat = None
        if group is not None or shards is not None:
            items = self._check_shards(items, group, rank, world_size, shards)
            seat = self._seat(group, rank, world_size, shards, coordinator, host_coordinator, advertise,
                              register_timeout)
        elif coordinator is not None:
            raise InvalidArgumentError("coordinator: only a trainer rank of a sharded group (group=, shards=) "
                                       "registers with a group coordinator")
        names, caps, dtypes, self._keep = capsules(items)
        self._engine = _core.Producer(names, caps, dtypes, listen=str(listen), token=parse_token(token),
                                      protection=parse_protection(encrypt, insecure),
                                      rails=_addresses(rails, "rails"), value_codec=str(value_codec),
                                      threads=int(threads), transport=_transport(transport), group=seat,
                                      metrics=_metrics(metrics_port, metrics_host),
                                      cuda_stream=parse_stream(stream), shadow=str(shadow), shape=str(shape),
                                      site=_site(site), wan_zstd=int(wan_zstd))
        if seat is not None:
            self._coordinator = self._engine.group_coordinator or seat["coordinator"][0]
        self._address = self._engine.address
        if self._group_entry is not None:
            self._group_entry["address"] = self._address
            self._check_tensors(self._resolved)

    def _check_shards(self, items, group, rank, world_size, shards):
        if not isinstance(group, Group):
            raise InvalidArgumentError("group: give a deltacast.Group of the logical tensors")
        if shards is None:
            raise InvalidArgumentError("shards: give {tensor name: the piece of a logical tensor it is}")
        if not isinstance(world_size, int) or world_size < 1:
            raise InvalidArgumentError(f"world_size: {world_size!r} is not a positive int")
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise InvalidArgumentError(f"rank: {rank!r} is not in [0, {world_size})")
        items = ordered_like(shards, items, "shards")
        self._resolved = group.resolve(shards)
        self._group_entry = {"rank": rank, "world_size": world_size, "address": None,
                             "shards": json.loads(layout_json(shards))}
        return items

    @staticmethod
    def _seat(group, rank, world_size, shards, coordinator, host_coordinator, advertise, register_timeout):
        """What the engine needs to keep this rank registered with the group's coordinator (None: no coordinator)."""
        if coordinator is None:
            return None
        where = _addresses(coordinator, "coordinator")
        if not where:
            raise InvalidArgumentError("coordinator: give the group coordinator's address, host:port")
        if register_timeout is None or float(register_timeout) < 0:
            raise InvalidArgumentError(f"register_timeout: {register_timeout!r} is not a number of seconds")
        host = rank == 0 if host_coordinator is None else bool(host_coordinator)
        return {"logical": group._json(), "shards": layout_json(shards), "rank": rank, "world": world_size,
                "coordinator": where, "host": host, "advertise": _addresses(advertise, "advertise"),
                "register_timeout": float(register_timeout)}

    def _check_tensors(self, resolved):
        for t in json.loads(self._engine.manifest()):
            dtype, shape = resolved[t["name"]]
            if t["dtype"] != dtype or tuple(t["shape"]) != shape:
                self.close()
                raise InvalidArgumentError(
                    f"tensor '{t['name']}' is {t['dtype']} {tuple(t['shape'])}, its shard of the group is {dtype} {shape}")

    @property
    def group_entry(self):
        """What rollout processes need of this rank (``Consumer(ranks=[...])``):
        rank, world size, address and shards. None outside a group."""
        return None if self._group_entry is None else dict(self._group_entry)

    @property
    def address(self):
        """``host:port`` of the control port, for ``Consumer(connect=...)``."""
        return self._address

    @property
    def coordinator(self):
        """The group coordinator's address this rank registered with (the one it
        runs, when it hosts it: port 0 resolved), for rollout processes'
        ``Consumer(layout=..., connect=...)``; None without a coordinator."""
        return self._coordinator

    @property
    def transport(self):
        """The data transport in use: ``"tcp"`` or ``"rdma"``."""
        return self._live().transport

    def publish(self, full=False, version=None):
        """Diffs the tensors against the last published version and encodes the
        delta (the only step that reads them), queues it and returns its version
        number; the broadcast goes on in the background. The first version, and
        any with ``full=True``, is sent whole. ``version``: its number, above
        every published one (a group's ranks number versions by step; a rank
        that restarts goes on with ``full=True`` at the group's step); None:
        the next."""
        if version is not None and (not isinstance(version, int) or version < 1):
            raise InvalidArgumentError(f"version: {version!r} is not a positive int")
        return self._live().publish(bool(full), int(version or 0))

    def wait(self, version, timeout=None, progress=None, every=0.5):
        """Until every live consumer committed ``version`` (or newer). Raises
        deltacast.TimeoutError after ``timeout`` seconds (None: no limit).
        ``progress``: called about every ``every`` seconds while waiting with
        ``self.progress()`` of the version's round (bytes at the consumers, rate,
        time to go), for a long full sync."""
        if progress is None:
            self._live().wait(int(version), _timeout(timeout))
            return
        if not callable(progress):
            raise InvalidArgumentError("progress must be callable")
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        while True:
            left = _FOREVER if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                self._live().wait(int(version), min(left, float(every)))
                return
            except TimeoutError:
                if left <= every:
                    raise
            now = self.progress()
            if now is not None and now["version"] == int(version):
                progress(now)

    def progress(self):
        """The round in flight (a version, or a catch-up full sync), or None between rounds:
        ``version``, ``full``, ``bytes`` (each consumer's share), ``targets``, ``staged``,
        ``committed``, ``received_bytes`` (all consumers together), ``fraction``,
        ``seconds``, ``bytes_per_second``, ``eta_seconds`` (-1 before any byte)."""
        text = self._live().progress()
        return json.loads(text) if text else None

    def wait_for_consumers(self, count, timeout=None):
        """Until at least ``count`` consumers joined."""
        self._live().wait_members(int(count), _timeout(timeout))

    def check(self, version, timeout=30.0):
        """Asks every consumer for the hash of its tensors and compares it with
        ``version``'s (the newest published); returns a dict with ``all_exact``."""
        return json.loads(self._live().check(int(version), _timeout(timeout)))

    def report(self, version):
        """What version ``version`` took: density, wire bytes, seconds per stage,
        consumers committed... (None for an unknown version)."""
        return json.loads(self._live().report(int(version)))

    def stats(self):
        """Newest version, queued versions, full syncs, wire bytes, versions ended
        (``versions_done``) and over them commits, failures and lost consumers, members
        and the report of the newest version (``last``)."""
        engine = self._live()
        stats = json.loads(engine.stats())
        stats["last"] = json.loads(engine.report(stats["version"])) if stats["version"] else None
        return stats

    def manifest(self):
        """The tensors as consumers must match them: name, dtype, shape."""
        return json.loads(self._live().manifest())


    def __repr__(self):
        state = "closed" if self._engine is None else f"listening on {self._address}"
        return f"<deltacast.Producer {state}>"


class Consumer(EngineHandle):
    """An inference worker's end: receives versions into ``named_tensors`` in place.

    Joins the producer at ``connect`` (an address or a list tried in turn)
    before returning; a wrong token or tensors that do not match the
    producer's raise at once. ``rails``: this worker's local address per NIC
    (None: one rail on 127.0.0.1). Versions are staged and verified in the
    background; they reach the tensors only in ``pull()`` or, after
    ``start()``, as soon as each one is verified. Every commit writes all
    tensors under one lock, so a version is never seen half-applied.
    Tensors may live all in host memory or all on one CUDA GPU: there each
    version is verified whole on the GPU, then applied in place (a version
    that does not verify never touches them), on ``stream`` (a
    torch.cuda.Stream, a CuPy stream or a raw handle; None: the default
    stream). A commit ends when its work on the stream completed: once
    ``pull()`` returns or ``on_commit(v)`` runs, work queued on that stream
    sees version v whole.
    ``transport``: as the producer's (``"tcp"``, ``"rdma"`` or ``"auto"``); a
    consumer on another transport than the producer's is refused at join
    (deltacast.MismatchError naming both).
    ``node``: the host this consumer runs on (default: the host name).
    Consumers of one node take each version over the node's rails once: the
    planner chains them one after another, and all but the first take each
    stripe from a neighbour on the same host.
    ``site``: the site (datacenter, region) it runs in (default: the producer's). Each version
    crosses into a site once, over its WAN link, and fans out inside it.

    A rollout process of a sharded group gives ``layout`` (each of its tensor
    names -> the piece of a logical tensor, or fused pieces, it holds) and
    ``connect``: the group coordinator's address (``Producer.coordinator``);
    it waits up to ``join_timeout`` for the group to form there, and follows
    a rank that restarts elsewhere. ``group`` (the deltacast.Group) is then
    optional: given, it must be the group's tensors. Without a coordinator,
    give ``group`` and ``ranks`` (every trainer rank's
    ``Producer.group_entry``) instead. It takes from each rank only what it
    holds, and commits version v in the background once every rank's part
    of v is here (``wait`` for it); a rank that dies mid-version leaves the
    tensors at the previous version. ``commit``: ``"background"`` (versions land as they
    arrive) or ``"on_request"`` (none lands until ``commit(version)`` asks for it: an inference
    engine that must see new weights only between its own steps).
    """

    _role = "consumer"

    def __init__(self, named_tensors, connect=None, token=None, rails=None, name=None, threads=0,
                 join_timeout=30.0, transport="tcp", node=None, layout=None, group=None, ranks=None,
                 metrics_port=None, metrics_host="0.0.0.0", stream=None, commit="background", encrypt=False,
                 insecure=False, site=None):
        items = named_items(named_tensors)
        self._grouped = layout is not None
        if commit not in ("background", "on_request"):
            raise InvalidArgumentError(f"commit: {commit!r} is not 'background' or 'on_request'")
        if commit != "background" and not self._grouped:
            raise InvalidArgumentError("commit='on_request': for a consumer with a layout; a plain consumer "
                                       "commits in pull() unless start() is called")
        if self._grouped and metrics_port is not None:
            raise InvalidArgumentError("metrics_port: a resharded consumer (layout=) runs one consumer per trainer "
                                       "rank; metrics are served by plain consumers and producers")
        if self._grouped:
            self._join_group(items, layout, group, ranks, connect, token, rails, name, threads, join_timeout,
                             transport, node, 0 if commit == "on_request" else 2 ** 64 - 1,
                             parse_protection(encrypt, insecure), site)
            return
        addresses = _addresses(connect, "connect")
        if not addresses:
            raise InvalidArgumentError("connect: give the producer's address (Producer.address)")
        names, caps, dtypes, self._keep = capsules(items)
        self._engine = _core.Consumer(names, caps, dtypes, connect=addresses, token=parse_token(token),
                                      protection=parse_protection(encrypt, insecure),
                                      rails=_addresses(rails, "rails"), name=name or _default_name(),
                                      threads=int(threads), join_timeout=float(join_timeout),
                                      transport=_transport(transport), node=_node(node),
                                      metrics=_metrics(metrics_port, metrics_host),
                                      cuda_stream=parse_stream(stream), site=_site(site))
        self._background = False
        self._pulled = False  # whether pull() was ever called (wait()'s error says what commits)

    def _join_group(self, items, layout, group, ranks, connect, token, rails, name, threads, join_timeout,
                    transport, node, commit_limit, protection, site):
        if group is not None and not isinstance(group, Group):
            raise InvalidArgumentError("group: give a deltacast.Group of the logical tensors")
        if ranks is None:
            # Through the group's coordinator.
            coordinator = _addresses(connect, "connect")
            if not coordinator:
                raise InvalidArgumentError("connect: give the group coordinator's address (Producer.coordinator), "
                                           "or group= and ranks= (every rank's Producer.group_entry)")
            ranks_json, logical = "", group._json() if group is not None else ""
        else:
            if connect is not None:
                raise InvalidArgumentError("give connect (the group coordinator) or ranks (every rank's "
                                           "group_entry), not both")
            if group is None:
                raise InvalidArgumentError("group: a consumer given ranks= needs the deltacast.Group")
            entries = _group_entries(ranks)
            ranks_json = json.dumps([{"pieces": e["shards"], "connect": [e["address"]]} for e in entries])
            coordinator, logical = [], group._json()
        items = ordered_like(layout, items, "layout")
        names, caps, dtypes, self._keep = capsules(items)
        self._engine = _core.GroupConsumer(names, caps, dtypes, logical=logical, layout=layout_json(layout),
                                           ranks=ranks_json, connect=coordinator, token=parse_token(token),
                                           protection=protection,
                                           rails=_addresses(rails, "rails"),
                                           name=name or _default_name(), threads=int(threads),
                                           join_timeout=float(join_timeout), transport=_transport(transport),
                                           node=_node(node), site=_site(site), commit_limit=commit_limit)
        self._background = True

    @property
    def version(self):
        """The version the tensors hold (0: nothing yet)."""
        return self._live().version

    @property
    def transport(self):
        """The data transport in use: ``"tcp"`` or ``"rdma"``."""
        return self._live().transport

    def pull(self, timeout=None):
        """Commits the newest verified version into the tensors and returns it,
        waiting up to ``timeout`` seconds (None: no limit) for one newer than
        the version held. Raises deltacast.TimeoutError when none came."""
        if self._grouped:
            raise InvalidArgumentError("a consumer with a layout commits each version once every rank's part is "
                                       "here; use wait(version)")
        engine = self._live()
        held = engine.version
        self._pulled = True
        version = engine.pull(_timeout(timeout))
        if version <= held:
            state = json.loads(engine.state())
            why = f"; last error: {state['last_error']}" if state["last_error"] else ""
            raise TimeoutError(f"no version newer than {held} within {timeout} s{why}")
        return version

    def start(self, on_commit=None):
        """Background mode: each version is committed as soon as it is verified,
        then ``on_commit(version)`` is called (on an engine thread). Readers keep
        using the tensors meanwhile; a commit is atomic."""
        if on_commit is not None and not callable(on_commit):
            raise InvalidArgumentError("on_commit must be callable")
        if self._grouped:
            if on_commit is not None:
                raise InvalidArgumentError("a consumer with a layout commits in the background already; "
                                           "on_commit is not supported for it")
            return self
        self._live().start(on_commit)
        self._background = True
        return self

    def commit(self, version, timeout=None):
        """A consumer with a layout and ``commit="on_request"``: lets ``version`` land (no newer
        one) once every rank's part of it is here, and waits for it. Raises
        deltacast.TimeoutError when it did not within ``timeout`` seconds."""
        if not self._grouped:
            raise InvalidArgumentError("commit(version): for a consumer with a layout; a plain consumer pulls")
        if not isinstance(version, int) or version < 1:
            raise InvalidArgumentError(f"version: {version!r} is not a positive int")
        engine = self._live()
        if engine.version < version:
            engine.set_commit_limit(version)
        engine.wait_version(version, _timeout(timeout))
        return engine.version

    def wait(self, version, timeout=None):
        """Until ``version`` (or newer) is committed (background mode, or another thread pulling)."""
        try:
            self._live().wait_version(int(version), _timeout(timeout))
        except TimeoutError as e:
            if self._grouped or self._background or self._pulled:
                raise
            # Nothing commits a plain consumer that was neither started nor pulled from: say so.
            raise TimeoutError(f"{e}; this consumer commits only in pull() or after start(), and neither "
                               "was called") from None

    def state(self):
        """id, epoch (of the producer joined), version, held_epoch (of the producer that sent it),
        connected, refused, transport, last_error; since start: staged,
        commits, failures, received_bytes; last_receive_seconds, last_apply_seconds. A consumer
        with a layout: version, ranks (the trainer ranks it takes pieces from), rank_versions,
        transport, last_error, received_bytes (over all those ranks)."""
        return json.loads(self._live().state())

    def model_hash(self):
        """The hash of the tensors as they are now (equal to the producer's for the same bits)."""
        if self._grouped:
            raise InvalidArgumentError("a consumer with a layout holds no producer's tensors whole: no hash to compare")
        return self._live().model_hash()


    def __repr__(self):
        if self._engine is None:
            return "<deltacast.Consumer closed>"
        return f"<deltacast.Consumer version {self._engine.version}>"


def _group_entries(ranks):
    """Every rank's group_entry, checked (one per rank of one world size) and sorted by rank."""
    try:
        entries = [dict(e) for e in ranks]
    except (TypeError, ValueError):
        raise InvalidArgumentError("ranks: give every trainer rank's Producer.group_entry") from None
    if not entries:
        raise InvalidArgumentError("ranks: give every trainer rank's Producer.group_entry")
    for e in entries:
        if not {"rank", "world_size", "address", "shards"} <= e.keys():
            raise InvalidArgumentError(f"ranks: {e!r} is not a Producer.group_entry")
    world = entries[0]["world_size"]
    got = sorted(e["rank"] for e in entries)
    if any(e["world_size"] != world for e in entries) or got != list(range(world)):
        raise InvalidArgumentError(f"ranks: entries for ranks {got} of world size {world}; every rank once is needed")
    return sorted(entries, key=lambda e: e["rank"])
