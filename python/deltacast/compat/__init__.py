"""checkpoint-engine's API over deltacast: change the imports of a script
written for checkpoint-engine 0.4 and it runs on deltacast.

    from deltacast.compat import ParameterServer, request_inference_to_update   # trainer ranks
    vllm serve ... --worker-extension-cls deltacast.compat.worker.VllmColocateWorkerExtension

docs/python.md has every checkpoint-engine name beside deltacast's and what differs."""
from .. import __version__
from ._devices import host_ip as get_ip
from .api import request_inference_to_update
from .direct import Worker, receive_into
from ._rendezvous import UpdateError
from .ps import ParameterServer
from .worker import VllmColocateWorkerExtension, update_weights_from_ipc

__all__ = ["ParameterServer", "UpdateError", "VllmColocateWorkerExtension", "request_inference_to_update",
           "update_weights_from_ipc", "get_ip", "__version__", "receive_into", "Worker"]
