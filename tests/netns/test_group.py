"""A sharded trainer across network namespaces: four trainer-rank processes
(each a producer of its row, column and flat shards of one model, in a
namespace of its own) and three rollout processes of their own layouts (TP2
rank 0, TP2 rank 1, TP1 with fused qkv_proj), joined by two switched planes.
The ranks register with the group's coordinator (hosted by rank 0, or run on
its own) and the rollout processes know only its address. Twenty versions at
mixed densities and a full one, every rollout process's tensors checked after
every commit against its view of the logical model; a rank SIGKILLed
mid-version leaves every process at a whole version, and after it restarts on
another port (replaying the trace's steps, then a full version of its shards)
everyone finds it and goes on. A rollout process built for another model is
refused, naming the tensor, by the coordinator and by the ranks."""
import os
import signal
import subprocess
import time

import pytest

from test_engine import Events, log_sink
from testbed import binary

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

PORT = 7400
COORDINATOR_PORT = 7300
TOKEN = 515151
RANKS = 4
TRAINERS = [f"t{k}" for k in range(RANKS)]
LAYOUTS = {"r0": "tp2:0", "r1": "tp2:1", "r2": "tp1:0"}
ELEMENTS = 1 << 22  # 8 MiB of bf16


class Group:
    def __init__(self, tb, elements=ELEMENTS):
        self.tb = tb
        self.elements = elements
        self.ranks = {}
        self.rollouts = {}
        self.lrs = []  # the learning rate of every step so far: a restarted rank replays them
        self.standalone = None  # a coordinator of its own, when the test runs one

    def rails(self, host):
        return [a for plane in range(len(self.tb.planes)) for a in ("--rail", self.tb.plane_address(plane, host))]

    def address(self, k):
        return f"{self.tb.plane_address(0, TRAINERS[k])}:{PORT}"

    def coordinator(self):
        """The group coordinator's address: rank 0's host, on the first plane."""
        return f"{self.tb.plane_address(0, TRAINERS[0])}:{COORDINATOR_PORT}"

    def start_coordinator(self):
        """The coordinator on its own (rank 0 then registers with it like every rank)."""
        argv = [binary("deltacast-bench"), "coordinator", "--world", str(RANKS), "--listen",
                f"0.0.0.0:{COORDINATOR_PORT}", "--token", str(TOKEN)]
        proc = self.tb.spawn(TRAINERS[0], argv, stdout=subprocess.PIPE, stderr=log_sink("coordinator"), text=True)
        self.standalone = Events(proc, "coordinator")
        self.standalone.next("listening")
        return self.standalone

    def start_rank(self, k, port=PORT, elsewhere=False):
        argv = [binary("deltacast-bench"), "sync", "--role", "group-producer", "--commands", "--rank", str(k),
                "--producers", str(RANKS), "--elements", str(self.elements), "--listen", f"0.0.0.0:{port}",
                "--coordinator", self.coordinator() if k or elsewhere else f"0.0.0.0:{COORDINATOR_PORT}",
                *(["--coordinator-elsewhere"] if elsewhere else []),
                "--token", str(TOKEN), "--threads", "1", *self.rails(TRAINERS[k])]
        proc = self.tb.spawn(TRAINERS[k], argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=log_sink(TRAINERS[k]), text=True, bufsize=1)
        self.ranks[k] = Events(proc, TRAINERS[k])
        self.ranks[k].next("listening")

    def start_rollout(self, host, layout, elements=None, direct=False):
        """A rollout process that asks the coordinator for the group (`direct`: is given every rank's address)."""
        find = [a for k in range(RANKS) for a in ("--ranks", self.address(k))] if direct else \
            ["--coordinator", self.coordinator()]
        argv = [binary("deltacast-bench"), "sync", "--role", "group-consumer", "--name", host, "--layout", layout,
                "--producers", str(RANKS), "--elements", str(elements or self.elements), "--token", str(TOKEN),
                "--threads", "1", *find, *self.rails(host)]
        proc = self.tb.spawn(host, argv, stdout=subprocess.PIPE, stderr=log_sink(host), text=True)
        self.rollouts[host] = Events(proc, host)
        return self.rollouts[host]

    def command(self, k, text, answer, timeout=120):
        events = self.ranks[k]
        events.proc.stdin.write(text + "\n")
        events.proc.stdin.flush()
        e = events.next(answer, timeout)
        return e

    def step_all(self, lr):
        self.lrs.append(lr)
        for k in self.ranks:
            self.command(k, f"step {lr}", "stepped")

    def publish_all(self, version, full=False, ranks=None):
        for k in ranks if ranks is not None else list(self.ranks):
            e = self.command(k, f"publish {version}{' full' if full else ''}", "published")
            assert e["version"] == version, e

    def wait_all(self, version):
        reports = {}
        for k in self.ranks:
            e = self.command(k, f"wait {version} 120", "waited", 150)
            assert e["ok"], e
            reports[k] = e
        return reports

    def expected(self):
        """The hash each rollout layout must hold now (rank 0 runs the same trace as the model)."""
        return {host: self.command(0, f"view-hash {layout}", "view_hash")["hash"] for host, layout in LAYOUTS.items()}

    def committed(self, host, version, timeout=120):
        """The rollout's next committed event, which must be `version`."""
        e = self.rollouts[host].next("committed", timeout)
        assert e["version"] == version, (host, e)
        return e

    def close(self):
        others = [self.standalone] if self.standalone else []
        for events in list(self.rollouts.values()) + list(self.ranks.values()) + others:
            if events.proc.poll() is None:
                events.proc.kill()
            events.proc.wait()


@pytest.fixture
def group(make_testbed):
    made = []

    def make():
        tb = make_testbed([*TRAINERS, *LAYOUTS], planes=["1gbit", "1gbit"])
        g = Group(tb)
        made.append(g)
        return g

    yield make
    for g in made:
        g.close()


def test_four_trainer_ranks_to_three_layouts_through_a_rank_killed_mid_version(group):
    g = group()
    for k in range(RANKS):
        g.start_rank(k)
    for host, layout in LAYOUTS.items():
        g.start_rollout(host, layout)
    for host in LAYOUTS:
        joined = g.rollouts[host].next("joined", 60)
        assert joined["ranks"] == list(range(RANKS)), joined  # norms are spread over every rank
    for k in range(RANKS):
        assert g.command(k, f"members {len(LAYOUTS)} 60", "members")["ok"]

    # Learning rates from a trickle to a flood of changes; one full version in the middle.
    plan = [None, "1e-7", "3e-7", "1e-6", "3e-6", "1e-5", "3e-8", "3e-7", "full", "3e-7", "1e-4", "3e-7", "1e-6",
            "3e-7", "1e-8", "3e-7", "3e-6", "3e-7", "1e-6", "3e-7"]
    densities, shares = [], []
    for version, lr in enumerate(plan, start=1):
        full = lr is None or lr == "full"
        if lr is not None:
            g.step_all("3e-7" if lr == "full" else lr)
        g.publish_all(version, full)
        reports = g.wait_all(version)
        expected = g.expected()
        for host in LAYOUTS:
            assert g.committed(host, version)["hash"] == expected[host], f"{host} at version {version}"
        densities.append(reports[0]["density"])
        if not full:
            # Routing by need: TP2 rank 0 holds all of ranks 0 and 1's rows and little of the others':
            # it is sent about half of the version; TP1 holds everything and is sent all of it.
            shares.append(sum(r["bytes_to"][f"r0.r{k}"] for k, r in reports.items()) /
                          sum(r["wire_bytes"] for r in reports.values()))
            for k, r in reports.items():
                assert r["bytes_to"][f"r2.r{k}"] == r["wire_bytes"], r
    print("densities:", [round(d, 5) for d in densities])
    print("TP2 rank 0's part of each sparse version:", round(min(shares), 3), "to", round(max(shares), 3))
    assert max(densities) > 10 * min(d for d in densities if d > 0), "the densities were not mixed"
    assert 0.4 < min(shares) and max(shares) < 0.65, "a TP2 rank was not sent about half of each version"

    # Rank 2 is SIGKILLed while a full version (ports slowed to 30 Mbit: its 2 MiB take about a
    # second to reach everyone down the chains) is on the wire.
    for plane in range(2):
        for host in [*TRAINERS, *LAYOUTS]:
            g.tb.plane_rate(plane, host, "30mbit")
    before = g.expected()
    version = len(plan) + 1
    g.step_all("3e-7")
    g.publish_all(version, full=True)
    time.sleep(0.2)
    victim = g.ranks[2]
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    after = g.expected()
    time.sleep(3)
    # Each process holds a whole version: the previous one, or (if rank 2's part got everywhere
    # before it died) the new one; never a mix. Whatever they committed must hash right.
    reached = []
    for host in LAYOUTS:
        _drain(g.rollouts[host])
        for e in g.rollouts[host].seen:
            if e.get("event") == "committed" and e["version"] == version:
                assert e["hash"] == after[host], f"{host} exposed a mix at version {version}"
                reached.append(host)
    assert before != after
    print(f"after the kill: {sorted(reached) or 'nobody'} committed version {version}")
    assert len(reached) < len(LAYOUTS), "the kill did not land mid-version: everyone had the whole version"


    # Rank 2 comes back on another port (the rollout processes ask the coordinator where it went),
    # replays the trace's steps, and publishes its shards of the version it died in, in full;
    # everyone reaches it, then the next one.
    for plane in range(2):
        for host in [*TRAINERS, *LAYOUTS]:
            g.tb.plane_rate(plane, host, "1gbit")
    g.start_rank(2, port=PORT + 1)
    for lr in g.lrs:
        g.command(2, f"step {lr}", "stepped")
    assert g.command(2, f"members {len(LAYOUTS)} 60", "members")["ok"]
    g.publish_all(version, full=True, ranks=[2])
    g.wait_all(version)
    for host in LAYOUTS:
        assert _committed_at_least(g, host, version)["hash"] == after[host], host
    version += 1
    g.step_all("1e-6")
    g.publish_all(version)
    g.wait_all(version)
    expected = g.expected()
    for host in LAYOUTS:
        assert g.committed(host, version)["hash"] == expected[host], host


def _drain(events):
    """Moves the events read but not yet looked at into `seen`."""
    while not events.lines.empty():
        e = events.lines.get_nowait()
        if e is not None:
            events.seen.append(e)


def _committed_at_least(g, host, version):
    """The committed event for `version`: already seen (before the restart) or the next one."""
    for e in reversed(g.rollouts[host].seen):
        if e.get("event") == "committed" and e["version"] == version:
            return e
    e = g.rollouts[host].next("committed", 120)
    assert e["version"] == version, (host, e)
    return e


def test_a_rollout_process_of_another_model_is_refused_naming_the_tensor(group):
    """With the coordinator on its own: it forms the group from the ranks' registrations, and a
    rollout process of another model is told so by it (asking for the group) and by the ranks
    (joining them directly)."""
    g = group()
    coordinator = g.start_coordinator()
    for k in range(RANKS):
        g.start_rank(k, elsewhere=True)
        g.ranks[k].next("registered", 60)
    formed = coordinator.next("formed", 30)
    assert [r["rank"] for r in formed["ranks"]] == list(range(RANKS)), formed
    wrong = g.start_rollout("r0", "tp2:0", elements=2 * ELEMENTS)
    e = wrong.next("error", 60)
    assert "the group's tensors are not the ones given" in e["error"] and "'" in e["error"], e
    wrong = g.start_rollout("r1", "tp2:1", elements=2 * ELEMENTS, direct=True)
    e = wrong.next("error", 60)
    assert "manifest mismatch" in e["error"] and "'" in e["error"], e
    # The right model, through the coordinator on its own: it joins every rank it takes from.
    right = g.start_rollout("r2", "tp1:0")
    assert right.next("joined", 60)["ranks"] == list(range(RANKS))
