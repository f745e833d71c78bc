"""deltacast.compat in one process (a world of one rank): register, gather,
update through the worker functions, the handle and the workers' reports, the
layout of a vLLM-style model, and misuse."""
import json
import os
import socket
import subprocess
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import UnixStreamServer

import numpy as np
import pytest
import torch

import deltacast
from deltacast import compat, safetensors_io
from deltacast.compat import _handle
from deltacast.inference import layout as vllm_layout, reports as _replies
from deltacast.compat.api import InferenceRequestError, request_inference_to_update

from conftest import raw_bytes

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fakes"))
from tiny_llama import CONFIG, TinyLlama, checkpoint_tensors  # noqa: E402


def whole_worker():
    """A req_func that runs checkpoint-engine's worker function on the handle of each device,
    and what it received."""
    received = {}

    def run(weights):
        received.clear()
        received.update({n: t.clone() for n, t in weights})

    def req_func(socket_paths):
        for _, handle in socket_paths:
            compat.update_weights_from_ipc(None, handle, 0, run=run)

    return req_func, received


def test_files_and_named_tensors_snapshot_then_deltas_under_new_names(tmp_path):
    rng = np.random.default_rng(3)
    embed = rng.integers(0, 2 ** 16, (128, 64), dtype=np.uint16)
    safetensors_io.save(tmp_path / "a.safetensors", {"embed.weight": (embed, "bf16")})
    live = {"norm.weight": torch.randn(64), "step": torch.tensor(7), "tiny": torch.zeros(0)}
    req_func, received = whole_worker()
    with compat.ParameterServer() as ps:
        ps.register_checkpoint("step-7", files=[str(tmp_path / "a.safetensors")], named_tensors=live)
        live["norm.weight"][0] = 99.0  # registered means copied: this change is not in step-7
        metas = ps.gather_metas("step-7")
        assert [t["name"] for t in metas[0]["tensors"]] == ["embed.weight", "norm.weight", "step", "tiny"]
        first = ps.update("step-7", req_func)
        assert first["full"] and first["version"] == 1
        assert raw_bytes(received["embed.weight"]) == embed.tobytes()
        assert received["norm.weight"][0] != 99.0 and received["step"].reshape(()) == 7
        assert "tiny" not in received  # an empty tensor carries nothing
        ps.register_checkpoint("step-8", named_tensors={"embed.weight": (embed, "bf16"), **live})
        ps.gather_metas("step-8")
        second = ps.update("step-8", req_func)
        assert not second["full"] and second["changed"] == 1 and second["wire_bytes"] < first["wire_bytes"] / 10
        assert received["norm.weight"][0] == 99.0
        again = ps.update("step-8", req_func)  # the same checkpoint again: an empty delta, still exact
        assert again["version"] == 3 and again["changed"] == 0
        assert raw_bytes(received["norm.weight"]) == raw_bytes(live["norm.weight"])
        ps.unregister_checkpoint("step-7")
        ps.unregister_checkpoint("step-8")


def test_registration_misuse_names_the_checkpoint_or_tensor(tmp_path, caplog):
    with compat.ParameterServer() as ps:
        ps.register_checkpoint("a", named_tensors={"x": np.zeros(4, np.float32)})
        with pytest.raises(deltacast.InvalidArgumentError, match="'a' is already registered"):
            ps.register_checkpoint("a", named_tensors={"x": np.zeros(4, np.float32)})
        safetensors_io.save(tmp_path / "x.safetensors", {"x": np.zeros(2, np.float32)})
        with pytest.raises(deltacast.InvalidArgumentError, match="tensor 'x' is both in .*x.safetensors and in named"):
            ps.register_checkpoint("b", files=[str(tmp_path / "x.safetensors")], named_tensors={"x": np.zeros(1)})
        with pytest.raises(deltacast.DTypeError, match="tensor 'c'"):
            ps.register_checkpoint("b", named_tensors={"c": np.zeros(2, np.complex64)})
        with pytest.raises(compat.UpdateError, match="rank 0: .*call register_checkpoint and gather_metas"):
            ps.update("a", lambda paths: None)
        ps.gather_metas("a")
        ps.register_checkpoint("other", named_tensors={"y": np.zeros(4, np.float32)})
        with pytest.raises(compat.UpdateError, match=r"'other' are not the ones gathered last; call gather_metas"):
            ps.update("other", lambda paths: None)
        with pytest.raises(deltacast.InvalidArgumentError, match="req_func is required"):
            ps.update("a", None)
        with pytest.raises(deltacast.InvalidArgumentError, match="timeout: give a timedelta"):
            ps.update("a", lambda paths: None, timeout=None)
        with caplog.at_level("WARNING", logger="deltacast.compat"):
            ps.unregister_checkpoint("never-registered")
        assert "never-registered not found" in caplog.text


def test_a_world_that_cannot_meet_is_refused_at_once_naming_the_argument(monkeypatch):
    """A port no store can have, or a timeout that is not a number, is refused by the constructor
    before any connection is tried, naming the argument or variable."""
    world = dict(rank=1, world_size=2, master_addr="127.0.0.1")
    started = time.monotonic()
    with pytest.raises(deltacast.InvalidArgumentError, match=r"master_port=70000: .*\[1, 65535\]"):
        compat.ParameterServer(**world, master_port=70000)
    with pytest.raises(deltacast.InvalidArgumentError, match="master_port='store' is not an integer"):
        compat.ParameterServer(**world, master_port="store")
    monkeypatch.setenv("MASTER_PORT", "65535")
    with pytest.raises(deltacast.InvalidArgumentError, match=r"MASTER_PORT \+ 1 = 65536: "):
        compat.ParameterServer(**world)
    monkeypatch.setenv("DELTACAST_RENDEZVOUS_TIMEOUT", "soon")
    with pytest.raises(deltacast.InvalidArgumentError, match="DELTACAST_RENDEZVOUS_TIMEOUT='soon' is not a number"):
        compat.ParameterServer(**world, master_port=free_port())
    assert time.monotonic() - started < 30


def test_shared_memory_pool_has_one_user_and_a_fixed_shape():
    with compat.ParameterServer() as ps:
        ps.register_checkpoint("a", named_tensors={"x": np.ones(4, np.float32)}, use_shared_memory_pool=True)
        with pytest.raises(deltacast.InvalidArgumentError, match="'a' is using it"):
            ps.register_checkpoint("b", named_tensors={"x": np.ones(4, np.float32)}, use_shared_memory_pool=True)
        ps.unregister_checkpoint("a")  # keeps the pool
        ps.register_checkpoint("b", named_tensors={"x": np.full(4, 2, np.float32)}, use_shared_memory_pool=True)
        assert ps.gather_metas("b")[0]["tensors"] == [{"name": "x", "dtype": "f32", "shape": [4]}]
        ps.unregister_checkpoint("b")
        with pytest.raises(deltacast.InvalidArgumentError, match="holds other tensors"):
            ps.register_checkpoint("c", named_tensors={"x": np.ones(5, np.float32)}, use_shared_memory_pool=True)
        ps.register_checkpoint("b2", named_tensors={"x": np.ones(4, np.float32)}, use_shared_memory_pool=True)
        ps.unregister_checkpoint("b2", force=True)  # frees the pool: the next user sets its shape
        ps.register_checkpoint("c", named_tensors={"x": np.ones(5, np.float32)}, use_shared_memory_pool=True)


def test_a_failing_req_func_and_a_failing_worker_are_named():
    req_func, _ = whole_worker()
    with compat.ParameterServer() as ps:
        ps.register_checkpoint("a", named_tensors={"x": np.ones(4, np.float32)})
        ps.gather_metas("a")

        def broken(paths):
            raise OSError("the inference server is down")

        with pytest.raises(compat.UpdateError, match="rank 0: OSError: the inference server is down"):
            ps.update("a", broken)

        def failing_worker(paths):
            compat.update_weights_from_ipc(None, paths[0][1], 0, run=lambda w: 1 / 0)

        # The worker's report, named as a worker (no rank's), beside rank 0's req_func that raised.
        with pytest.raises(compat.UpdateError, match=r"failed: rank 0: ZeroDivisionError[^;]*; worker [^;]*: "
                                                     r"ZeroDivisionError") as failed:
            ps.update("a", failing_worker)
        assert "rank 1" not in str(failed.value)

        def slow(paths):
            threading.Event().wait(5)

        with pytest.raises(compat.UpdateError, match="req_func did not return within 1 s"):
            ps.update("a", slow, timeout=1)
        report = ps.update("a", req_func)  # and the next update goes through
        assert report["version"] == 4


def test_handles_round_trip_and_refuse_what_is_not_one():
    h = _handle.Handle("10.0.0.1:29601", "step 1/a", 7, "10.0.0.1:4100", "ab12", "5e1f")
    assert _handle.parse(str(h)) == h
    for bad in ("ipc://@checkpoint-engine-GPU-1.sock", "deltacast://", "deltacast://h:1/c?version=x", 5,
                "deltacast://h:1/c?version=3&version=9", "deltacast://h:1/c?version=3&colour=red"):
        with pytest.raises(deltacast.InvalidArgumentError, match="handle"):
            _handle.parse(bad)


def test_reports_that_are_not_this_updates_are_dropped():
    listener = _replies.ReplyListener("127.0.0.1", "n0nce")
    address = f"127.0.0.1:{listener.port}"
    try:
        def raw(data):
            with socket.create_connection(("127.0.0.1", listener.port), timeout=5) as s:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                return s.recv(16)

        assert raw(b"\xff\x00 not json\n") == b""
        assert raw(b"[1, 2]\n") == b""
        assert raw(b"x" * (_replies._MAX_LINE + 10) + b"\n") == b""
        assert not _replies.send_report(address, "other", "w", "boom")
        assert raw(json.dumps({"nonce": "n0nce", "worker": 5, "error": None}).encode() + b"\n") == b""
        assert _replies.send_report(address, "n0nce", "good worker", None)
        assert _replies.send_report(address, "n0nce", "bad worker", "RuntimeError: x")
        assert [(r["worker"], r["error"]) for r in listener.failures()] == [("bad worker", "RuntimeError: x")]
        # A worker's place among the engine's workers must be one; then the listener knows who is missing.
        assert not _replies.send_report(address, "n0nce", "w", None, index=2, of=2)
        assert not _replies.send_report(address, "n0nce", "w", None, index=True, of=2)
        assert raw(json.dumps({"nonce": "n0nce", "worker": "w", "error": None, "result": [1]}).encode() + b"\n") == b""
        assert _replies.send_report(address, "n0nce", "worker 0", None, index=0, of=2, result={"version": 3})
        assert listener.wait_all(time.monotonic() + 0.2) == [1]
        assert _replies.send_report(address, "n0nce", "worker 1", None, index=1, of=2)
        assert listener.wait_all(time.monotonic() + 5) == []
        assert [r["result"] for r in listener.reports if r["index"] == 0] == [{"version": 3}]
    finally:
        listener.close()
    assert not _replies.send_report(address, "n0nce", "late", None)  # nobody listens: no raise


def test_vllm_layout_writes_fused_and_sharded_parameters_in_place():
    logical = {n: ("bf16", tuple(t.shape)) for n, t in checkpoint_tensors().items()}
    model = TinyLlama(1, 2)
    plan = vllm_layout.plan(dict(model.named_parameters()), logical, model.packed_modules_mapping, 1, 2)
    qkv = plan.in_place["model.layers.0.self_attn.qkv_proj.weight"]
    assert [(p.tensor, p.dim, p.start, p.stop) for p in qkv.pieces] == [
        ("model.layers.0.self_attn.q_proj.weight", 0, 32, 64), ("model.layers.0.self_attn.k_proj.weight", 0, 16, 32),
        ("model.layers.0.self_attn.v_proj.weight", 0, 16, 32)]
    down = plan.in_place["model.layers.1.mlp.down_proj.weight"]
    assert (down.tensor, down.dim, down.start, down.stop) == ("model.layers.1.mlp.down_proj.weight", 1, 64, 128)
    norm = plan.in_place["model.norm.weight"]
    assert (norm.dim, norm.start, norm.stop) == (0, 0, CONFIG["hidden"])
    # The vocabulary is padded per partition (100 -> 2 x 64 rows): those go through load_weights.
    assert plan.fallback == ["model.embed_tokens.weight", "lm_head.weight"]
    # Another dtype (a quantized or upcast parameter) is not written in place either.
    logical["model.norm.weight"] = ("f32", logical["model.norm.weight"][1])
    assert "model.norm.weight" in vllm_layout.plan(dict(model.named_parameters()), logical,
                                                   model.packed_modules_mapping, 1, 2).fallback


def test_request_inference_to_update_posts_vllms_body_over_http_and_unix_sockets(tmp_path):
    bodies = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            failing = bodies[-1][1]["args"][0].get("fail")
            self.send_response(500 if failing else 200)
            self.send_header("Content-Length", "21" if failing else "0")
            self.end_headers()
            if failing:
                self.wfile.write(b"Internal Server Error")

        def log_message(self, *args):
            pass

    class UnixHTTPServer(UnixStreamServer):
        def get_request(self):
            request, _ = super().get_request()
            return request, ("local", 0)

    tcp = HTTPServer(("127.0.0.1", 0), Handler)
    unix = UnixHTTPServer(str(tmp_path / "s.sock"), Handler)
    for server in (tcp, unix):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        request_inference_to_update(f"http://127.0.0.1:{tcp.server_address[1]}/collective_rpc", {"GPU-0": "h"},
                                    timeout=5)
        request_inference_to_update("http://localhost/collective_rpc", {"GPU-1": "h"}, uds=str(tmp_path / "s.sock"))
        assert bodies == [("/collective_rpc", {"method": "update_weights_from_ipc", "args": [{"GPU-0": "h"}],
                                               "timeout": 5}),
                          ("/collective_rpc", {"method": "update_weights_from_ipc", "args": [{"GPU-1": "h"}],
                                               "timeout": 300.0})]
        with pytest.raises(InferenceRequestError, match="answered 500 .*Internal Server Error"):
            request_inference_to_update(f"http://127.0.0.1:{tcp.server_address[1]}/collective_rpc", {"fail": "1"})
        with pytest.raises(deltacast.InvalidArgumentError, match="socket_paths"):
            request_inference_to_update("http://127.0.0.1:1/collective_rpc", [("GPU-0", "h")])
    finally:
        tcp.shutdown()
        unix.shutdown()


def test_load_metas_hands_another_worlds_group_to_this_worlds_workers():
    """checkpoint-engine's join case: a new ParameterServer world loads the trainers' metas and
    updates its own workers from the trainers' group; it sends nothing itself."""
    tensors = {"w": torch.randn(32, 8), "b": torch.randn(8)}
    req_func, received = whole_worker()
    with compat.ParameterServer() as trainer, compat.ParameterServer() as joiner:
        trainer.register_checkpoint("ckpt", named_tensors=tensors)
        trainer.gather_metas("ckpt")
        trainer.update("ckpt", lambda paths: None)  # nobody asked yet: version 1 is published
        joiner.gather_metas("ckpt")  # holds nothing of it
        joiner.load_metas(trainer.get_metas())
        assert joiner.update("ckpt", req_func) is None  # this world sent nothing
        assert all(raw_bytes(received[n]) == raw_bytes(t) for n, t in tensors.items())
        # The trainers go on publishing on their own; the joiner's next update brings the newest.
        for step in (2, 3):
            tensors["b"][step] += 1
            trainer.register_checkpoint(f"ckpt-{step}", named_tensors=tensors)
            trainer.gather_metas(f"ckpt-{step}")
            trainer.update(f"ckpt-{step}", lambda paths: None)
        joiner.update("ckpt", req_func)
        assert all(raw_bytes(received[n]) == raw_bytes(t) for n, t in tensors.items())
        with pytest.raises(compat.UpdateError, match="loaded metas are of checkpoint 'ckpt'"):
            joiner.update("other", req_func)
        with pytest.raises(deltacast.InvalidArgumentError, match="another ParameterServer's get_metas"):
            joiner.load_metas({})


def test_a_rank_failing_alone_fails_the_update_on_every_rank_and_the_next_one_goes_through():
    """Two ranks (threads of this process, a real TCPStore between them). Rank 1's checkpoint
    is not what was gathered: both ranks raise naming rank 1, stay in step, and the next update
    (after gathering again) works on both; ranks=[0]: only rank 0 calls req_func."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    outcomes = [None, None]
    where = {}  # rank: the traceback of what it raised
    received = {}

    # Rank 1 connects once rank 0 serves the store: in torch 1.x a TCPStore client retries its
    # connection holding the GIL, so a rank-1 thread that came first would keep rank 0's thread from
    # ever starting the server (ranks that are processes, as in use, have a GIL each).
    store_served = threading.Event()

    def rank_main(r):
        if r == 1:
            store_served.wait(60)
        ps = None
        try:
            try:
                ps = compat.ParameterServer(rank=r, world_size=2, master_addr="127.0.0.1", master_port=port,
                                            auto_pg=False, timeout=30)
            finally:
                store_served.set()
            mine = {f"t{r}": np.full(8, r, np.float32)}
            ps.register_checkpoint("a", named_tensors=mine)
            ps.gather_metas("a")
            called = []
            first = ps.update("a", called.append)
            ps.register_checkpoint("b", named_tensors={"t1": np.zeros(9, np.float32)} if r == 1 else mine)
            try:
                ps.update("b", called.append)
                failure = None
            except compat.UpdateError as e:
                failure = str(e)
            ps.unregister_checkpoint("b")
            ps.register_checkpoint("b", named_tensors={f"t{r}": np.full(8, 10 + r, np.float32)})
            ps.gather_metas("b")

            def take(paths):
                compat.update_weights_from_ipc(None, paths[0][1], 0,
                                               run=lambda weights: received.update((n, t.clone()) for n, t in weights))
                called.append(paths)

            last = ps.update("b", take, ranks=[0], timeout=30)
            outcomes[r] = (first["version"], failure, last["version"], len(called))
        except BaseException as e:
            outcomes[r] = e
            where[r] = traceback.format_exc()
        finally:
            if ps is not None:
                ps.close()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    # Both ranks' outcomes in the message: when one rank's error left the other waiting, the
    # waiting rank's timeout alone does not say why.
    assert not any(isinstance(o, BaseException) for o in outcomes), "\n".join(where.values())
    for r in range(2):
        first, failure, last, calls = outcomes[r]
        assert (first, last) == (1, 2), outcomes[r]  # the failed update used no version number
        assert failure is not None and "rank 1: its tensors of 'b' are not the ones gathered last" in failure
        assert "rank 0" not in failure
        assert calls == (2 if r == 0 else 1)  # rank 1 called req_func for 'a' only
    assert received["t0"].tolist() == [10.0] * 8 and received["t1"].tolist() == [11.0] * 8


RANK_SCRIPT = """
import os, sys, time
import numpy as np
from deltacast import compat
ps = compat.ParameterServer(auto_pg=False)
print("joined", flush=True)
if len(sys.argv) > 1:
    time.sleep(float(sys.argv[1]))  # rank 0 serving the store but not coming to the exchange
ps.register_checkpoint("c", named_tensors={"t" + os.environ["RANK"]: np.zeros(4, np.float32)})
ps.gather_metas("c")  # an exchange under the rendezvous timeout
print("met", flush=True)
ps.close()
"""


def start_rank(rank, port, env, *args):
    full = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", **env)
    return subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, *map(str, args)],
                            env=dict(full, MASTER_PORT=str(port - 1)),  # the store listens at MASTER_PORT + 1
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_rank_waits_for_rank_0_to_start_longer_than_an_exchange_waits():
    """Ranks start apart (rank 0 importing torch or reading its checkpoint): rank 1, with a 2 s
    rendezvous timeout, still meets a rank 0 that starts 6 s after it. A rank 0 that never
    starts is named once the start timeout (here 3 s) runs out; and after the start, an
    exchange gives up after the 2 s timeout, naming the rank that did not come."""
    port = free_port()
    early = start_rank(1, port, {"DELTACAST_RENDEZVOUS_TIMEOUT": "2"})
    time.sleep(6)
    assert early.poll() is None, early.communicate()[0]
    late = start_rank(0, port, {"DELTACAST_RENDEZVOUS_TIMEOUT": "2"})
    for proc in (early, late):
        out = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0 and "met" in out, out

    alone = start_rank(1, free_port(), {"DELTACAST_RENDEZVOUS_TIMEOUT": "1", "DELTACAST_RENDEZVOUS_START_TIMEOUT": "3"})
    started = time.monotonic()
    out = alone.communicate(timeout=120)[0]
    assert alone.returncode != 0 and "no rendezvous with rank 0" in out and "within 3 s" in out, out
    assert time.monotonic() - started >= 3, out

    port = free_port()
    absent = start_rank(0, port, {"DELTACAST_RENDEZVOUS_TIMEOUT": "2"}, 60)  # serves the store, skips the barrier
    waiting = start_rank(1, port, {"DELTACAST_RENDEZVOUS_TIMEOUT": "2"})
    try:
        out = waiting.communicate(timeout=120)[0]
        assert waiting.returncode != 0 and "joined" in out and "rank(s) 0 of 2 did not take part within 2 s" in out, out
    finally:
        absent.kill()
        absent.communicate()
