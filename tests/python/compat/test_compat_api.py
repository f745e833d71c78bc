"""deltacast.compat against checkpoint-engine 0.4.2's public API, read from
the real package's source (the wheel from PyPI, which scripts/install-deps.sh
downloads; parsed with ast, never imported): every public name, every
argument, its kind and its default, unless ALLOWED says why not."""
import ast
import glob
import importlib
import inspect
import os
import zipfile
from datetime import timedelta

import pytest
import torch.distributed as torch_dist

VERSION = "0.4.2"
CACHE = os.environ.get("DELTACAST_PYPI_CACHE", os.path.expanduser("~/.cache/deltacast/pypi"))

# checkpoint-engine names deltacast.compat leaves out, and why.
ALLOWED = {
    "checkpoint_engine.BucketRange": "bucket metadata of checkpoint-engine's H2D broadcast; deltacast sends no such buckets",
    "checkpoint_engine.H2DBucket": "as BucketRange",
    "checkpoint_engine.DataToGather": "gather_metas' wire type; get_metas/load_metas take deltacast's plain dicts",
    "checkpoint_engine.MemoryBuffer": "its pinned-memory pool entry; deltacast's copies are numpy arrays",
    "checkpoint_engine.MemoryBufferMetas": "as DataToGather",
    "checkpoint_engine.MemoryBufferMetaList": "as DataToGather",
    "checkpoint_engine.ParameterMeta": "as DataToGather: metas are {name, dtype, shape} dicts",
    "checkpoint_engine.FlattenedTensorMetadata": "layout of its CUDA IPC buffer; deltacast workers receive over the "
                                                 "network into the parameters",
    "checkpoint_engine.DeviceManager": "CUDA/NPU plumbing; deltacast finds devices through torch",
    "checkpoint_engine.npu_generate_uuid": "Ascend NPUs are not supported",
    "checkpoint_engine.P2PStore": "its Mooncake transfer-engine wrapper; deltacast's own transports replace it",
    "checkpoint_engine.distributed.Distributed": "the base class of its custom communicators (use_backend)",
    "checkpoint_engine.distributed.DistributedProcessGroup": "as Distributed",
}

# checkpoint-engine module -> the deltacast module that mirrors it.
MODULES = {"checkpoint_engine/__init__.py": "deltacast.compat", "checkpoint_engine/ps.py": "deltacast.compat.ps",
           "checkpoint_engine/api.py": "deltacast.compat.api", "checkpoint_engine/worker.py": "deltacast.compat.worker",
           "checkpoint_engine/distributed/__init__.py": "deltacast.compat.distributed",
           "checkpoint_engine/distributed/base.py": "deltacast.compat.distributed"}
PUBLIC_DEFS = {"checkpoint_engine/ps.py": ["ParameterServer"], "checkpoint_engine/api.py": ["request_inference_to_update"],
               "checkpoint_engine/worker.py": ["update_weights_from_ipc", "VllmColocateWorkerExtension"],
               "checkpoint_engine/distributed/base.py": ["use_backend", "init_process_group", "destroy_process_group",
                                                         "is_initialized", "all_gather_object", "all_reduce",
                                                         "broadcast", "barrier", "new_group"]}


@pytest.fixture(scope="module")
def sources():
    wheels = glob.glob(os.path.join(CACHE, f"checkpoint_engine-{VERSION}-*.whl"))
    assert wheels, (f"checkpoint-engine {VERSION}'s wheel is not in {CACHE}: run scripts/install-deps.sh (it runs "
                    f"pip download --no-deps checkpoint-engine=={VERSION})")
    with zipfile.ZipFile(wheels[0]) as wheel:
        return {path: ast.parse(wheel.read(path).decode()) for path in MODULES}


def all_names(tree):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return [ast.literal_eval(e) for e in node.value.elts]
    return []


def find(tree, name):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return node
    raise AssertionError(f"{name} is not defined at the top of the module")


def their_parameters(function):
    """[(name, kind, default source or None)] of an ast function, self left out."""
    a = function.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + a.defaults
    out = [(p.arg, inspect.Parameter.POSITIONAL_ONLY if p in a.posonlyargs else inspect.Parameter.POSITIONAL_OR_KEYWORD,
            d) for p, d in zip(positional, defaults)]
    if a.vararg:
        out.append((a.vararg.arg, inspect.Parameter.VAR_POSITIONAL, None))
    out += [(p.arg, inspect.Parameter.KEYWORD_ONLY, d) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append((a.kwarg.arg, inspect.Parameter.VAR_KEYWORD, None))
    return [(n, k, d) for n, k, d in out if n not in ("self", "cls")]


def compare(where, function, ours):
    """Differences between checkpoint-engine's `function` (ast) and our callable."""
    problems = []
    mine = [p for p in inspect.signature(ours).parameters.values() if p.name not in ("self", "cls")]
    by_name = {p.name: p for p in mine}
    theirs = their_parameters(function)
    for index, (name, kind, default) in enumerate(theirs):
        p = by_name.get(name)
        if p is None:
            problems.append(f"{where}: no argument '{name}'")
            continue
        if p.kind != kind:
            problems.append(f"{where}: '{name}' is {p.kind.description}, checkpoint-engine's is {kind.description}")
        if kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) and \
                mine.index(p) != index:
            problems.append(f"{where}: '{name}' is positional argument {mine.index(p)}, not {index}")
        if default is None:
            if p.default is not inspect.Parameter.empty and kind not in (inspect.Parameter.VAR_POSITIONAL,
                                                                         inspect.Parameter.VAR_KEYWORD):
                problems.append(f"{where}: '{name}' has a default ({p.default!r}); checkpoint-engine's has none")
            continue
        expected = eval(compile(ast.Expression(default), where, "eval"),  # noqa: S307 - the package's own literals
                        {"timedelta": timedelta, "torch_dist": torch_dist})
        if p.default is inspect.Parameter.empty or p.default != expected:
            problems.append(f"{where}: '{name}' defaults to {p.default!r}, checkpoint-engine's to {expected!r}")
    known = {n for n, _, _ in theirs}
    for p in mine:
        if p.name not in known and p.default is inspect.Parameter.empty and p.kind not in (
                inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            problems.append(f"{where}: our extra argument '{p.name}' has no default: checkpoint-engine's calls "
                            "would fail")
    return problems


def test_every_public_name_is_there(sources):
    problems = []
    for path in ("checkpoint_engine/__init__.py", "checkpoint_engine/distributed/__init__.py"):
        module = importlib.import_module(MODULES[path])
        package = path.rsplit("/", 1)[0].replace("/", ".")
        for name in all_names(sources[path]):
            if f"{package}.{name}" in ALLOWED:
                continue
            if not hasattr(module, name):
                problems.append(f"{MODULES[path]} lacks {name}")
    assert not problems, "\n".join(problems)
    assert len(all_names(sources["checkpoint_engine/__init__.py"])) == 17  # the package we read is the one we mean


def test_every_signature_matches(sources):
    problems = []
    for path, names in PUBLIC_DEFS.items():
        module = importlib.import_module(MODULES[path])
        for name in names:
            node = find(sources[path], name)
            ours = getattr(module, name, None)
            if ours is None:
                problems.append(f"{MODULES[path]} lacks {name}")
                continue
            if isinstance(node, ast.FunctionDef):
                problems += compare(f"{name}()", node, ours)
                continue
            for member in node.body:
                if isinstance(member, ast.FunctionDef) and (not member.name.startswith("_") or
                                                            member.name == "__init__"):
                    if not hasattr(ours, member.name):
                        problems.append(f"{name} lacks {member.name}()")
                    else:
                        problems += compare(f"{name}.{member.name}()", member, getattr(ours, member.name))
                elif isinstance(member, ast.Assign):
                    for target in member.targets:
                        if getattr(target, "id", "_").startswith("_"):
                            continue
                        if getattr(ours, target.id, None) != ast.literal_eval(member.value):
                            problems.append(f"{name}.{target.id} differs")
    assert not problems, "\n".join(problems)


def test_the_comparison_catches_a_difference(sources):
    """The check above fails where it should: a changed default, a missing and an extra argument."""
    node = find(sources["checkpoint_engine/ps.py"], "ParameterServer")
    update = next(m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == "update")

    def wrong_default(checkpoint_name, req_func, *, timeout=timedelta(minutes=5), ranks=None):
        pass

    def missing(checkpoint_name, req_func, *, timeout=timedelta(minutes=10)):
        pass

    def extra_required(checkpoint_name, req_func, must, *, timeout=timedelta(minutes=10), ranks=None):
        pass

    assert compare("update", update, wrong_default) == [
        "update: 'timeout' defaults to datetime.timedelta(seconds=300), checkpoint-engine's to "
        "datetime.timedelta(seconds=600)"]
    assert compare("update", update, missing) == ["update: no argument 'ranks'"]
    assert any("extra argument 'must'" in p for p in compare("update", update, extra_required))
