"""deltacast as TRL's weight transfer: ``AsyncGRPOTrainer(..., weight_transfer=DeltacastWeightTransfer(url))``.

It implements TRL's WeightTransferProtocol (``init_weight_transfer``, ``pause``, ``send_weights``,
``resume``, ``destroy``) over deltacast's vLLM weight-transfer backend: the vLLM server runs with
``--weight-transfer-config '{"backend": "deltacast"}'`` (and ``VLLM_SERVER_DEV_MODE=1`` for the
pause and resume routes TRL uses). The first sync sends the model whole; every later one only
what changed since the previous, and vLLM applies each atomically on all its workers.

TRL hands ``send_weights`` a fresh iterator of ``(name, tensor)`` each sync; the tensors of the
first one fix the set the server is sent (a later sync with another set is refused naming the
tensor)."""
import time
import urllib.request

from vllm.distributed.weight_transfer import HTTPVLLMWeightSyncClient, WeightTransferTrainerFactory
from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

from ..errors import InvalidArgumentError, TimeoutError
from .vllm import DeltacastTrainerInitInfo


class _StreamSource(WeightSource):
    """A WeightSource over the iterator of the sync under way (TRL's _streaming_iter)."""

    def __init__(self, pairs):
        self._metas = [ParamMeta(name, tensor.dtype, tuple(tensor.shape)) for name, tensor in pairs]
        self._shapes = {m.name: (m.dtype, m.shape) for m in self._metas}
        self._round = pairs

    def metadata(self):
        return self._metas

    def feed(self, pairs):
        self._round = pairs

    def __iter__(self):
        pairs, self._round = self._round, None
        if pairs is None:
            raise InvalidArgumentError("deltacast: no weights fed for this sync")
        seen = 0
        for name, tensor in pairs:
            if self._shapes.get(name) != (tensor.dtype, tuple(tensor.shape)):
                raise InvalidArgumentError(f"send_weights: tensor '{name}' is {tensor.dtype} {tuple(tensor.shape)}, "
                                           f"at the first sync it was {self._shapes.get(name)}")
            seen += 1
            yield name, tensor
        if seen != len(self._metas):
            raise InvalidArgumentError(f"send_weights: {seen} tensors, the first sync sent {len(self._metas)}")


class DeltacastWeightTransfer:
    """TRL's weight transfer over deltacast, to the vLLM server at ``server_url``.

    ``coordinator``: host:port the trainer hosts the deltacast group on, reachable from the
    server's workers (port 0: any free port); ``token``: the shared secret the server's workers
    must present; ``timeout``: seconds one sync may take; other keywords go to
    deltacast.integrations.vllm.DeltacastTrainerInitInfo (rails, transport, device...).
    ``history``: one record per sync (version, pause_seconds, send_seconds, received_bytes: the
    most any vLLM worker received)."""

    def __init__(self, server_url, coordinator="127.0.0.1:0", token=None, timeout=300.0, **init_kwargs):
        self.server_url = server_url.rstrip("/")
        self.timeout = float(timeout)
        self._info = DeltacastTrainerInitInfo(rank=0, world_size=1, coordinator=coordinator, token=token,
                                              timeout=self.timeout, **init_kwargs)
        self._engine, self._source = None, None
        self._paused_at = None
        self.history = []

    def init_weight_transfer(self):
        """Waits for the server (the group starts at the first send_weights, which knows the tensors)."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.server_url}/health", timeout=5):
                    return
            except OSError as e:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the vLLM server at {self.server_url} did not answer in "
                                       f"{self.timeout} s: {e}") from None
                time.sleep(1)

    def pause(self):
        self._paused_at = time.monotonic()
        self._post("pause?mode=keep")

    def resume(self):
        self._post("resume")
        if self.history and self._paused_at is not None:
            self.history[-1]["pause_seconds"] = time.monotonic() - self._paused_at
        self._paused_at = None

    def send_weights(self, iterator):
        start = time.monotonic()
        pairs = list(iterator)  # TRL's tensors are the model's own (views); nothing is copied here
        if self._engine is None:
            self._source = _StreamSource(pairs)
            self._engine = WeightTransferTrainerFactory.trainer_init(
                self._info, client=HTTPVLLMWeightSyncClient(self.server_url, timeout=self.timeout),
                source=self._source)
        else:
            self._source.feed(pairs)
        version = self._engine.send_weights()
        done = [r["result"] for r in self._engine.last_reports if r.get("result")]
        self.history.append({"version": version, "send_seconds": time.monotonic() - start,
                             "received_bytes": max((r["received_bytes"] for r in done), default=0),
                             "pause_seconds": None})
        return version

    def destroy(self):
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None

    def _post(self, route):
        request = urllib.request.Request(f"{self.server_url}/{route}", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout) as answer:
            answer.read()
