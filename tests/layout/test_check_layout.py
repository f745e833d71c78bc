"""The layout checker finds each kind of breach in a small tree made for it, and none in the
repository itself."""
import pathlib
import subprocess
import sys

CHECKER = pathlib.Path(__file__).with_name("check_layout.py")
REPO = CHECKER.resolve().parents[2]


def run_checker(root):
    done = subprocess.run([sys.executable, str(CHECKER), str(root)], capture_output=True, text=True)
    return done.returncode, done.stdout


def write(root, path, text):
    f = root / path
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)


def test_the_repository_keeps_its_layout():
    code, out = run_checker(REPO)
    assert code == 0, out


def test_a_clean_tree_passes(tmp_path):
    write(tmp_path, "core/status.h", "#pragma once\n")
    write(tmp_path, "sparse/codec.h", '#include "core/status.h"\n#include <vector>\n')
    write(tmp_path, "broadcast/engine/producer.cc", '#include "sparse/codec.h"\n')
    code, out = run_checker(tmp_path)
    assert code == 0, out


def test_each_breach_is_named(tmp_path):
    write(tmp_path, "core/status.h", '#include "sparse/codec.h"\n')  # upward
    write(tmp_path, "sparse/codec.h", "#pragma once\n")
    write(tmp_path, "broadcast/transport/tcp/wire.h", "#pragma once\n")
    write(tmp_path, "broadcast/transport/transport.h", '#include "sparse/codec.h"\n')  # sideways
    write(tmp_path, "broadcast/engine/producer.cc", '#include "broadcast/transport/tcp/wire.h"\n')  # a backend's file
    write(tmp_path, "tests/support/helpers.h", "#pragma once\n")
    write(tmp_path, "sparse/uses_tests.cc", '#include "tests/support/helpers.h"\n')
    write(tmp_path, "benchmarks/wire/wire_util.h", "#pragma once\n")
    write(tmp_path, "benchmarks/sync/sync_bench.cc", '#include "wire/wire_util.h"\n')  # another room's header
    write(tmp_path, "python/deltacast/engine.py", "from .inference import receiver\n")  # core on a layer above
    write(tmp_path, "python/deltacast/inference/__init__.py", "from ..integrations import vllm\n")
    write(tmp_path, "python/deltacast/integrations/__init__.py", "")
    write(tmp_path, "python/deltacast/integrations/sglang.py", "from ..compat._devices import host_ip\n")
    write(tmp_path, "core/big.cc", "int x;\n" * 4001)
    for i in range(45):
        write(tmp_path, f"sparse/many/h{i}.h", "#pragma once\n")
    code, out = run_checker(tmp_path)
    assert code == 1
    expected = [
        "core/status.h:1: includes sparse/codec.h: core may not depend on sparse",
        "broadcast/transport/transport.h:1: includes sparse/codec.h: broadcast/transport may not depend on sparse",
        "broadcast/engine/producer.cc:1: includes broadcast/transport/tcp/wire.h: a transport backend's files are its own",
        "sparse/uses_tests.cc:1: includes tests/support/helpers.h: product code includes the tests",
        "benchmarks/sync/sync_bench.cc:1: includes wire/wire_util.h: benchmarks/wire does not export this header",
        "python/deltacast/engine.py:1: imports deltacast.inference: deltacast may not import deltacast.inference",
        "python/deltacast/inference/__init__.py:1: imports deltacast.integrations: deltacast.inference may not import",
        "python/deltacast/integrations/sglang.py:1: imports deltacast.compat._devices: deltacast.integrations may not import deltacast.compat",
        "python/deltacast/integrations/sglang.py:1: imports deltacast.compat._devices: _devices is private to deltacast.compat",
        "core/: 4002 lines of its own",
        "sparse/many/: 45 headers",
    ]
    for line in expected:
        assert line in out, f"missing {line!r} in:\n{out}"
