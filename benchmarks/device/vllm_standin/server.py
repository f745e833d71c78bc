#!/usr/bin/env python3
"""For the GPU machine only, where vLLM cannot be installed (benchmarks/device/compat_bench.py runs
checkpoint-engine's worker extension and deltacast's side by side in it); everywhere else the tests
run the real vLLM (tests/python/vllm/).

A stand-in for a vLLM server started with ``VLLM_SERVER_DEV_MODE=1 vllm serve
... --tensor-parallel-size N --worker-extension-cls <qualname>``, for machines
without a GPU. As vLLM (0.10.2 - 0.11) does:

- each tensor-parallel rank is a worker process (vLLM's multiprocess
  executor) holding its shard of the model (tiny_llama.TinyLlama, vLLM's
  parameter names and loaders);
- the extension class is appended to the worker class's bases after checking
  that none of its names clashes (WorkerWrapperBase.init_worker);
- POST /collective_rpc {"method", "args", "kwargs", "timeout"} runs the method
  on every worker and answers {"results": [...]} (None, dicts and lists as
  they are, anything else as str); a bad body is a 400 with vLLM's error
  object; a worker that raises makes the whole call a 500 whose body is
  "Internal Server Error" (vLLM's answer: the detail stays in its log);
- GET /health answers 200.

For tests it also answers GET /standin/log: after every update_weights_from_ipc
call, each worker's parameter digests and the call's outcome.

    python3 server.py --tp 2 --extension deltacast.compat.worker.VllmColocateWorkerExtension --port-file F
"""
import argparse
import importlib
import json
import multiprocessing
import os
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
# The model it holds: the layout fake the unit tests use (vLLM's names, sharding and loaders).
FAKES = os.path.join(HERE, "..", "..", "..", "tests", "python", "fakes")


class WorkerBase:
    """vllm.v1.worker.worker_base.WorkerBase's attributes an extension may use."""

    def __init__(self, local_rank, rank):
        self.local_rank, self.rank = local_rank, rank
        self.device = None
        self.model_runner = None
        self.model_config = None


class ModelRunner:
    def __init__(self, model):
        self.model = model

    def get_model(self):
        return self.model


def resolve(qualname):
    module, _, name = qualname.rpartition(".")
    return getattr(importlib.import_module(module), name)


def worker_class(extension_qualname):
    class Worker(WorkerBase):
        def init_device(self, tp_size, config, device):
            import torch
            from vllm.distributed import set_tensor_model_parallel
            from tiny_llama import CONFIG, TinyLlama
            set_tensor_model_parallel(self.rank, tp_size)
            # vLLM: cuda:<local rank>; here every worker shares the GPUs there are.
            self.device = torch.device(f"cuda:{self.local_rank % torch.cuda.device_count()}") \
                if device == "cuda" else torch.device("cpu")
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            self.model_runner = ModelRunner(TinyLlama(self.rank, tp_size, dict(CONFIG, **config), self.device))

        def standin_digests(self):
            return self.model_runner.model.digests()

        def standin_processed_after_loading(self):
            return self.model_runner.model.processed_after_loading

        def standin_fail_next_load(self, message, rank):
            if self.rank == rank:  # collective_rpc reaches every worker; one of them is to fail
                self.model_runner.model.fail_next_load = message

    if extension_qualname:
        extension = resolve(extension_qualname)
        for attr in dir(extension):
            if attr.startswith("__"):
                continue
            assert not hasattr(Worker, attr), (
                f"Worker class {Worker} already has an attribute {attr}, which conflicts with the worker "
                f"extension class {extension}.")
        Worker.__bases__ = Worker.__bases__ + (extension,)
    return Worker


def worker_main(rank, tp_size, extension, config, device, connection):
    sys.path[:0] = [HERE, FAKES]
    worker = worker_class(extension)(local_rank=rank, rank=rank)
    worker.init_device(tp_size, config, device)
    connection.send(("ready", None))
    while True:
        try:
            message = connection.recv()
        except EOFError:  # the server went away (SIGTERM at the end of a run)
            return
        if message is None:
            return
        method, args, kwargs = message
        try:
            connection.send(("ok", getattr(worker, method)(*args, **kwargs)))
        except BaseException as e:  # vLLM's worker loop answers FAILURE with str(e) and logs the trace
            traceback.print_exc()
            connection.send(("error", f"{type(e).__name__}: {e}"))


class Server:
    def __init__(self, tp_size, extension, config, device):
        context = multiprocessing.get_context("spawn")
        self.connections, self.processes = [], []
        for rank in range(tp_size):
            mine, theirs = context.Pipe()
            process = context.Process(target=worker_main, args=(rank, tp_size, extension, config, device, theirs), daemon=True)
            process.start()
            self.connections.append(mine)
            self.processes.append(process)
        for connection in self.connections:
            assert connection.recv()[0] == "ready"
        self.lock = threading.Lock()  # one collective_rpc at a time, as the engine core runs them
        self.log = []

    def collective_rpc(self, method, args, kwargs):
        with self.lock:
            start = time.monotonic()
            for connection in self.connections:
                connection.send((method, args, kwargs))
            outcomes = [connection.recv() for connection in self.connections]
            rpc_seconds = time.monotonic() - start  # the workers' part of an update, for compat_bench.py
            if method == "update_weights_from_ipc":
                # Hashing every parameter is the stand-in's own check, not part of either engine's
                # update, but the caller's timer runs on until the answer: its seconds are logged
                # so that compat_bench.py can take them out of both engines' figures alike.
                digests = []
                for connection in self.connections:
                    connection.send(("standin_digests", (), {}))
                    digests.append(connection.recv()[1])
                check_seconds = time.monotonic() - start - rpc_seconds
                self.log.append({"outcomes": outcomes, "digests": digests, "rpc_seconds": rpc_seconds,
                                 "check_seconds": check_seconds})
            return outcomes


def serve(server, port_file, host):
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status, body, content_type="application/json"):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _bad_request(self, message):
            self._answer(400, {"error": {"message": message, "type": "Bad Request", "param": None, "code": 400}})

        def do_GET(self):
            if self.path == "/health":
                self._answer(200, b"", "text/plain")
            elif self.path == "/standin/log":
                self._answer(200, server.log)
            else:
                self._answer(404, {"detail": "Not Found"})

        def do_POST(self):
            if self.path != "/collective_rpc":
                self._answer(404, {"detail": "Not Found"})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            except json.JSONDecodeError as e:
                self._bad_request(f"JSON decode error: {e}")
                return
            if not isinstance(body, dict):
                self._answer(500, b"Internal Server Error", "text/plain")
                return
            method = body.get("method")
            if method is None:
                self._bad_request("Missing 'method' in request body")
                return
            outcomes = server.collective_rpc(method, tuple(body.get("args", [])), body.get("kwargs", {}))
            if any(status == "error" for status, _ in outcomes):
                self._answer(500, b"Internal Server Error", "text/plain")
                return
            results = [r if r is None or isinstance(r, (dict, list)) else str(r) for _, r in outcomes]
            self._answer(200, {"results": results})

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer((host, 0), Handler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(httpd.server_address[1]))
    os.replace(port_file + ".tmp", port_file)
    httpd.serve_forever()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--extension", default="deltacast.compat.worker.VllmColocateWorkerExtension")
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--host", default="127.0.0.1", help="address to serve HTTP on")
    parser.add_argument("--config", default="{}", help="JSON: the model's sizes over tiny_llama.CONFIG")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the workers hold the model")
    args = parser.parse_args()
    sys.path[:0] = [HERE, FAKES]
    serve(Server(args.tp, args.extension, json.loads(args.config), args.device), args.port_file, args.host)


if __name__ == "__main__":
    main()
