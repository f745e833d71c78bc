"""The server side of the ``deltacast`` backend: vLLM's WeightTransferEngine.

``init_transfer_engine`` joins the trainer ranks' group; from then on every version the trainer
publishes is received and verified in the background while vLLM serves. The update phase
(``update_weights``, between ``start_weight_update`` and ``finish_weight_update``) only applies a
verified version: in place where a parameter holds the checkpoint's bytes, through vLLM's
layerwise reload where post-load processing transforms them; atomically (a failure leaves every
parameter as it was, the server serving the previous version). Each worker reports its outcome
to the trainer, which names every failing worker."""
import os
import socket
import time
from dataclasses import dataclass

from vllm.distributed.weight_transfer.base import (WeightTransferEngine, WeightTransferInitInfo,
                                                   WeightTransferUpdateInfo)
from vllm.logger import init_logger

from ...environment import rails_or_env, token_or_env
from ...errors import InvalidArgumentError, UpdateError
from ...inference import ModelReceiver, receiver_for
from ...inference.receiver import apply_together
from ...inference.reports import send_report
from .loading import loader_for, raise_where_vllm_reads_it, tensor_parallel, worker_place, workers_agree

logger = init_logger("vllm.deltacast")


@dataclass
class DeltacastWorkerInitInfo(WeightTransferInitInfo):
    """What a worker needs to join the trainer's group (sent by the trainer engine)."""

    coordinator: str                  # host:port of the group coordinator (trainer rank 0)
    group: str = ""                   # the group's id: a later trainer at the same address is another group
    token: str | None = None          # the group's token (None: DELTACAST_TOKEN)
    rails: list[str] | None = None    # this worker's NIC addresses (None: DELTACAST_RAILS, else one)
    timeout: float = 300.0            # seconds one join or one update may take
    in_place: bool = True             # False: every tensor through vLLM's reload
    rollback: bool = True             # False: no copy of what a reload overwrites (a failed update may leave a mix)
    encrypt: bool = False             # True: connections encrypted (AES-256-GCM), not only authenticated
    reply: str = ""                   # host:port of the trainer's report listener: each worker says it joined
    nonce: str = ""


@dataclass
class DeltacastUpdateInfo(WeightTransferUpdateInfo):
    """One update: the version to apply, and where to report how it went."""

    version: int
    reply: str = ""                   # host:port of the trainer's report listener ("": none)
    nonce: str = ""

    def __post_init__(self):
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 0:
            raise ValueError(f"version: {self.version!r} is not a version number")


class DeltacastWeightTransferEngine(WeightTransferEngine[DeltacastWorkerInitInfo, DeltacastUpdateInfo]):
    init_info_cls = DeltacastWorkerInitInfo
    update_info_cls = DeltacastUpdateInfo
    supports_draft_weight_update = False

    def __init__(self, config, vllm_config, device, model):
        super().__init__(config, vllm_config, device, model)
        self._init = None
        self._receivers = {}
        tp_rank, self._tp_size = tensor_parallel()
        self._tp_rank = tp_rank
        self._place = worker_place()
        self.name = (f"{socket.gethostname()} worker {self._place[0]} of {self._place[1]} "
                     f"(tp rank {tp_rank}, pid {os.getpid()})")

    def init_transfer_engine(self, init_info):
        if not init_info.coordinator:
            raise InvalidArgumentError("init_info.coordinator: give the trainer group's coordinator (host:port)")
        self._init = init_info
        try:
            self._receiver(time.monotonic() + float(init_info.timeout))  # joins now: versions flow from here on
        except BaseException as e:
            self._report(init_info, f"{type(e).__name__}: {e}")
            raise
        self._report(init_info, None)

    def _receiver(self, deadline):
        info = self._init
        if info is None:
            raise RuntimeError(f"{self.name}: init_weight_transfer_engine has not been called")

        def make():
            return ModelReceiver(self.model, info.coordinator, token=token_or_env(info.token),
                                 rails=rails_or_env(info.rails) or None, name=self.name,
                                 join_timeout=max(0.0, deadline - time.monotonic()), tp_rank=self._tp_rank,
                                 tp_size=self._tp_size, in_place=info.in_place, group_id=info.group,
                                 rollback=info.rollback, encrypt=info.encrypt)

        return receiver_for(self._receivers, "model", self.model, info.coordinator, info.group, make,
                            (info.in_place, info.rollback, info.encrypt))

    def start_weight_update(self):
        if self._init is None:
            raise RuntimeError(f"{self.name}: init_weight_transfer_engine has not been called")

    def receive_weights(self, update_info):
        deadline = time.monotonic() + float(self._init.timeout if self._init else 0)
        try:
            result = apply_together(lambda: self._receiver(deadline), update_info.version, deadline,
                                    loader_for(self.model, self.model_config, self.device), workers_agree(),
                                    self.name)
        except UpdateError as e:
            logger.error("deltacast: %s", e)
            self._report(update_info, f"{type(e).__name__}: {e}")
            raise_where_vllm_reads_it(e, self._place)
            return
        logger.info("deltacast: version %d applied in %.3f s (%d parameters in place, %d tensors reloaded, "
                    "%d bytes received)", result["version"], result["seconds"], result["in_place"],
                    result["loaded"], result["received_bytes"])
        self._report(update_info, None, result)
        self.last_update = result

    def _report(self, update_info, error, result=None):
        send_report(update_info.reply, update_info.nonce, self.name, error, index=self._place[0], of=self._place[1],
                    result=result)

    def finish_weight_update(self):
        pass  # the update phase applied the version whole, or left the model as it was

    def shutdown(self):
        for receiver in self._receivers.values():
            if receiver is not None:
                receiver.close()
        self._receivers.clear()
