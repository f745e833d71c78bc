"""Every error a user can meet, raised as its deltacast exception with a
message that says what is wrong (in one process: the engines still talk
over real sockets)."""
import numpy as np
import pytest
import torch

import deltacast

TOKEN = "errors-test"


def weights():
    torch.manual_seed(0)
    return {"layer.weight": torch.randn(64, 32).to(torch.bfloat16), "layer.bias": torch.randn(64),
            "steps": torch.zeros(4, dtype=torch.int64)}


def test_version_is_reported():
    assert deltacast.__version__ == "0.1.0"


def test_a_non_contiguous_tensor_is_refused_by_name():
    w = weights()
    w["layer.weight"] = w["layer.weight"].t()
    with pytest.raises(deltacast.NotContiguousError, match="'layer.weight' is not contiguous"):
        deltacast.Producer(w, token=TOKEN)


def test_an_unsupported_dtype_is_refused_by_name():
    with pytest.raises(deltacast.DTypeError, match="'z'"):
        deltacast.Producer({"z": np.zeros(8, dtype=np.complex64)}, token=TOKEN)
    with pytest.raises(deltacast.DTypeError, match="needs 16-bit elements"):
        deltacast.Producer({"w": (np.zeros(8, dtype=np.uint8), "bf16")}, token=TOKEN)


def test_bad_arguments_are_refused():
    with pytest.raises(deltacast.InvalidArgumentError):
        deltacast.Producer({"a": np.zeros(4)}, listen="not-an-address", token=TOKEN)
    with pytest.raises(deltacast.InvalidArgumentError, match="value codec|codec"):
        deltacast.Producer({"a": np.zeros(4)}, token=TOKEN, value_codec="gzip")
    with pytest.raises(deltacast.InvalidArgumentError, match="DLPack"):
        deltacast.Producer({"a": [1, 2, 3]}, token=TOKEN)
    with pytest.raises(deltacast.InvalidArgumentError, match="twice"):
        deltacast.Producer([("a", np.zeros(4)), ("a", np.zeros(4))], token=TOKEN)
    with pytest.raises(deltacast.InvalidArgumentError, match="shape 'star': give auto, chains, trees:2"):
        deltacast.Producer({"a": np.zeros(4)}, token=TOKEN, shape="star")
    with pytest.raises(deltacast.InvalidArgumentError, match="shadow 'hbm'"):
        deltacast.Producer({"a": np.zeros(4)}, token=TOKEN, shadow="hbm")
    with pytest.raises(deltacast.InvalidArgumentError, match=r"wan_zstd.* 30 outside \[-7, 22\]"):
        deltacast.Producer({"a": np.zeros(4)}, token=TOKEN, wan_zstd=30)
    with pytest.raises(deltacast.InvalidArgumentError, match="stream: give a CUDA stream"):
        deltacast.Producer({"a": np.zeros(4)}, token=TOKEN, stream="default")
    with pytest.raises(deltacast.InvalidArgumentError, match="stream: give a CUDA stream"):
        deltacast.Consumer({"a": np.zeros(4)}, connect="127.0.0.1:1", token=TOKEN, stream=1.5)


def test_a_wrong_token_is_refused():
    with deltacast.Producer(weights(), token=TOKEN) as p:
        with pytest.raises(deltacast.TokenError, match="wrong secret"):
            deltacast.Consumer(weights(), connect=p.address, token="another", join_timeout=10)


def test_a_manifest_mismatch_names_the_first_differing_tensor():
    with deltacast.Producer(weights(), token=TOKEN) as p:
        w = weights()
        w["layer.bias"] = torch.zeros(65)
        with pytest.raises(deltacast.ManifestMismatchError, match="layer.bias"):
            deltacast.Consumer(w, connect=p.address, token=TOKEN, join_timeout=10)


def test_a_dtype_mismatch_is_a_manifest_mismatch_naming_the_dtypes():
    with deltacast.Producer(weights(), token=TOKEN) as p:
        w = weights()
        w["steps"] = torch.zeros(4, dtype=torch.int32)
        with pytest.raises(deltacast.ManifestMismatchError, match=r"steps.*i32|steps.*i64") as e:
            deltacast.Consumer(w, connect=p.address, token=TOKEN, join_timeout=10)
        assert "i32" in str(e.value) and "i64" in str(e.value)


def test_timeouts_raise_timeout_errors():
    with deltacast.Producer(weights(), token=TOKEN) as p:
        with deltacast.Consumer(weights(), connect=p.address, token=TOKEN) as c:
            with pytest.raises(deltacast.TimeoutError, match="no version newer than 0"):
                c.pull(timeout=0.3)
            v = p.publish()
            # The consumer only commits in pull(): the producer's wait cannot end.
            with pytest.raises(TimeoutError, match=f"version {v}|{v}"):
                p.wait(v, timeout=0.5)
            assert c.pull(timeout=10) == v
            p.wait(v, timeout=10)
        with pytest.raises(deltacast.ConnectionError):
            deltacast.Consumer(weights(), connect="127.0.0.1:1", token=TOKEN, join_timeout=0.5)


def test_waiting_on_a_consumer_nothing_commits_says_what_would():
    with deltacast.Producer(weights(), token=TOKEN) as p:
        with deltacast.Consumer(weights(), connect=p.address, token=TOKEN) as c:
            v = p.publish()
            with pytest.raises(deltacast.TimeoutError, match=r"commits only in pull\(\) or after start\(\)"):
                c.wait(v, timeout=0.5)
            c.start()
            c.wait(v, timeout=10)
            assert c.version == v
        with deltacast.Consumer(weights(), connect=p.address, token=TOKEN) as c:
            assert c.pull(timeout=10) == v
            with pytest.raises(deltacast.TimeoutError) as raised:  # pulled once: a plain timeout
                c.wait(v + 1, timeout=0.3)
            assert "neither was called" not in str(raised.value)


def test_closed_engines_raise_closed_errors():
    p = deltacast.Producer(weights(), token=TOKEN)
    c = deltacast.Consumer(weights(), connect=p.address, token=TOKEN)
    c.close()
    with pytest.raises(deltacast.ClosedError, match="consumer is closed"):
        c.pull(timeout=1)
    p.close()
    p.close()  # idempotent
    with pytest.raises(deltacast.ClosedError, match="producer is closed"):
        p.publish()


def test_numpy_arrays_sync_in_place_including_bf16_bits():
    rng = np.random.default_rng(1)
    src = {"f32": rng.standard_normal(1000).astype(np.float32),
           "bf16": (rng.integers(0, 2 ** 16, 5000, dtype=np.uint16), "bf16"),
           "i8": rng.integers(-128, 128, 77, dtype=np.int8)}
    src["f32"][:3] = [np.nan, -0.0, np.float32(1e-45)]  # NaN, negative zero, a denormal
    dst = {"f32": np.zeros(1000, np.float32), "bf16": (np.zeros(5000, np.uint16), "bf16"), "i8": np.zeros(77, np.int8)}
    with deltacast.Producer(src, token=TOKEN) as p, deltacast.Consumer(dst, connect=p.address, token=TOKEN) as c:
        for step in range(3):
            v = p.publish()
            assert c.pull(timeout=10) == v
            for name in src:
                a = src[name][0] if isinstance(src[name], tuple) else src[name]
                b = dst[name][0] if isinstance(dst[name], tuple) else dst[name]
                assert a.tobytes() == b.tobytes(), (step, name)
            src["f32"][rng.integers(0, 1000, 10)] += 1
            src["bf16"][0][rng.integers(0, 5000, 50)] ^= 1
        report = p.report(v)
        assert not report["full"] and 0 < report["changed"] <= 60 and report["wire_bytes"] < report["dense_bytes"]


def has_rdma_device():
    import os
    return os.path.isdir("/sys/class/infiniband") and bool(os.listdir("/sys/class/infiniband"))


def test_the_transport_is_chosen_and_reported():
    with deltacast.Producer(weights(), token=TOKEN) as p, \
            deltacast.Consumer(weights(), connect=p.address, token=TOKEN) as c:
        assert p.transport == "tcp" and c.transport == "tcp" and c.state()["transport"] == "tcp"
        v = p.publish()
        assert c.pull(timeout=10) == v
    with pytest.raises(deltacast.InvalidArgumentError, match="transport: 'udp'"):
        deltacast.Producer(weights(), token=TOKEN, transport="udp")
    with pytest.raises(deltacast.InvalidArgumentError, match="transport"):
        deltacast.Consumer(weights(), connect="127.0.0.1:1", token=TOKEN, transport=None)


def test_consumers_of_one_node_sync_and_a_bad_node_is_refused():
    with deltacast.Producer(weights(), token=TOKEN) as p, \
            deltacast.Consumer(weights(), connect=p.address, token=TOKEN, node="rack1-gpu3") as a, \
            deltacast.Consumer(weights(), connect=p.address, token=TOKEN, node="rack1-gpu3") as b:
        v = p.publish()
        assert a.pull(timeout=10) == v and b.pull(timeout=10) == v
    for bad in ["", 7, "x" * 256]:
        with pytest.raises(deltacast.InvalidArgumentError, match="node"):
            deltacast.Consumer(weights(), connect="127.0.0.1:1", token=TOKEN, node=bad)


def test_consumers_in_sites_sync_and_a_bad_site_is_refused():
    with deltacast.Producer(weights(), token=TOKEN, site="west", shape="trees:2") as p, \
            deltacast.Consumer(weights(), connect=p.address, token=TOKEN, node="w1", site="west") as w, \
            deltacast.Consumer(weights(), connect=p.address, token=TOKEN, node="e1", site="east") as e1, \
            deltacast.Consumer(weights(), connect=p.address, token=TOKEN, node="e2", site="east") as e2:
        for _ in range(2):
            v = p.publish()
            assert all(c.pull(timeout=10) == v for c in (w, e1, e2))
            assert p.check(v, timeout=10)["all_exact"]
    for bad in ["", 7, "x" * 256]:
        with pytest.raises(deltacast.InvalidArgumentError, match="site"):
            deltacast.Consumer(weights(), connect="127.0.0.1:1", token=TOKEN, site=bad)
        with pytest.raises(deltacast.InvalidArgumentError, match="site"):
            deltacast.Producer(weights(), token=TOKEN, site=bad)


@pytest.mark.skipif(has_rdma_device(), reason="this machine has an RDMA device: there is no fallback to see")
def test_rdma_without_a_device_falls_back_to_tcp_on_both_ends():
    with deltacast.Producer(weights(), token=TOKEN, transport="rdma") as p, \
            deltacast.Consumer(weights(), connect=p.address, token=TOKEN, transport="auto") as c:
        assert p.transport == "tcp" and c.transport == "tcp"
        v = p.publish()
        assert c.pull(timeout=10) == v
