import json
import os
import queue
import subprocess
import sys
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def raw_bytes(tensor):
    """The bits of a torch tensor or numpy array, for exact comparisons."""
    import numpy as np
    if isinstance(tensor, np.ndarray):
        return tensor.tobytes()
    import torch
    t = tensor.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


class ConsumerProcess:
    """tests/python/consumer_proc.py (or `script`, which takes the same arguments and speaks the
    same JSON lines) in a process of its own, talking JSON lines."""

    def __init__(self, address, token, spec, mode="pull", name="worker", out=None, script=None, extra=()):
        args = [sys.executable, script or os.path.join(HERE, "consumer_proc.py"), "--address", address,
                "--token", token, "--spec", json.dumps(spec), "--mode", mode, "--name", name, *extra]
        if out:
            args += ["--out", out]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        # A thread reads the lines: select() on a buffered pipe misses lines already buffered.
        self.lines = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def read(self, timeout=60):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("consumer process said nothing in time") from None
        if line is None:
            raise AssertionError(f"consumer process ended: {self.proc.wait()} {self.proc.stderr.read()}")
        return json.loads(line)

    def expect(self, event, timeout=60):
        while True:
            message = self.read(timeout)
            if message["event"] == event:
                return message
            if message["event"] == "error":
                raise AssertionError(f"consumer failed: {message}")

    def send(self, command):
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def finish(self, timeout=60):
        self.send({"cmd": "stop"})
        message = self.expect("stopped", timeout)
        assert self.proc.wait(timeout) == 0
        return message


@pytest.fixture
def consumers():
    made = []

    def make(*args, **kwargs):
        c = ConsumerProcess(*args, **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        if c.proc.poll() is None:
            c.kill()
