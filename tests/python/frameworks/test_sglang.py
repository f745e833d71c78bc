"""deltacast as SGLang's custom weight loader, against SGLang's own model class: SGLang 0.5's
LlamaForCausalLM built and loaded on this CPU as SGLang's model runner does (sglang_parts), with
the loader called as SGLang calls a custom loader. SGLang's server needs CUDA kernels and does not
run here; everything below it that the loader touches does."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_part(name, timeout=600):
    """One scenario of sglang_parts in a process of its own; what it saw."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, os.path.join(HERE, "sglang_parts.py"), name], capture_output=True,
                          text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"sglang_parts {name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sglang_loader_applies_every_version_exact_in_place():
    seen = run_part("syncs")
    rows, dense = seen["rows"], seen["dense"]
    for row in rows:
        print(f"SGLang sync {row['version']}: {row['received_bytes']} B received ({row['received_bytes'] / dense:.4f} "
              f"of {dense} B), {row['in_place']} parameters in place, {row['loaded']} through load_weights, "
              f"{row['seconds']:.3f} s", flush=True)
        assert row["wrong"] == [], f"version {row['version']}: not what SGLang loads from that step: {row['wrong']}"
        assert row["held"] == row["version"], row
    # Every parameter of SGLang's Llama holds the checkpoint's bytes on this CPU, the fused
    # qkv_proj and gate_up_proj rows included: all written in place, none reloaded.
    assert seen["in_place_names"] == seen["parameters"], seen["in_place_names"]
    assert any(n.endswith("qkv_proj.weight") for n in seen["in_place_names"])
    assert all(row["loaded"] == 0 for row in rows), rows
    # The first version comes whole; every later one is the change (about 1% of the elements).
    assert rows[0]["received_bytes"] >= dense
    assert all(row["received_bytes"] < dense / 20 for row in rows[1:]), rows


def test_sglang_loader_failures_leave_the_model_as_it_was():
    seen = run_part("failures")
    # A version never published: a timeout that wrote nothing.
    assert "version 7 not applied, nothing written anywhere" in seen["unpublished"], seen["unpublished"]
    assert "did not arrive whole and verified in time" in seen["unpublished"]
    assert seen["unpublished_wrote"] == []
    # load_weights failing half way through: every parameter put back, the error names the worker.
    assert "every worker put back what it wrote" in seen["failed_load"], seen["failed_load"]
    assert "sglang tp rank 0 of 1" in seen["failed_load"] and "injected" in seen["failed_load"]
    assert seen["failed_load_wrote"] == [] and seen["after_failed_load"] == []
    assert seen["retry_wrong"] == [], "the version after a failed one did not apply exact"
    # Requests that are not deltacast's are refused, naming what is wrong.
    assert "no '__deltacast__' tensor" in seen["no_spec"], seen["no_spec"]
    assert "is not a deltacast request" in seen["garbage"], seen["garbage"]
    assert "weights sent along" in seen["weights_along"] and "lm_head.weight" in seen["weights_along"]
    assert seen["last_wrong"] == []
