#!/usr/bin/env python3
"""The layout's rules, checked on every include and import of the product code:

- dependencies point one way: core <- sparse <- engine, core <- transport <- engine, and the
  engine <- python, benchmarks, examples; nothing in the product includes the tests;
- nothing reaches into a sibling's private files: a transport backend's folder is seen only by
  itself, by the backend selection and by the benchmarks that measure a backend; a benchmark room
  sees the CLI's shared helpers and what another room exports; a Python package imports no
  underscored module of a sibling package, and the core package imports none of the packages
  built on it;
- no folder of product code holds more than 4,000 lines or 44 headers or 44 sources of its own.

Prints every breach with the line that makes it and exits 1; exits 0 when there is none.
Run: python3 tests/layout/check_layout.py [repository root]"""
import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])

CPP_SUFFIXES = {".h", ".cc", ".cu", ".cuh"}
PRODUCT_DIRS = ["core", "sparse", "broadcast", "python/src", "python/deltacast", "benchmarks", "testbed", "examples"]
MAX_LINES = 4000
MAX_FILES_OF_A_KIND = 44

# Rooms of C++ code (the longest prefix names a file's room) and the rooms each may include.
ROOMS = {
    "core": {"core"},
    "sparse": {"core", "sparse"},
    "broadcast/transport": {"core", "broadcast/transport"},
    "broadcast/engine": {"core", "sparse", "broadcast/transport", "broadcast/engine"},
    "broadcast/testing": {"core", "sparse", "broadcast/transport", "broadcast/engine", "broadcast/testing"},
    "testbed": {"core", "broadcast/transport", "testbed"},
    "python/src": {"core", "sparse", "broadcast/transport", "broadcast/engine", "python/src"},
    "benchmarks": {"core", "sparse", "broadcast/transport", "broadcast/engine", "testbed", "benchmarks"},
}
BACKENDS = ("broadcast/transport/tcp/", "broadcast/transport/rdma/", "broadcast/transport/sim/")
# Who besides a backend itself may include its files: the selection of a backend by name, and
# the benchmarks that measure one backend's wire or simulate a cluster over the simulated one.
BACKEND_VIEWERS = ("broadcast/transport/transport_select.cc", "benchmarks/")
# A benchmark room's headers other rooms may include; the CLI's folder is everyone's.
BENCH_SHARED_ROOM = "cli"
BENCH_EXPORTS = {"sync/sync_roles.h"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def room_of(path):
    best = None
    for room in ROOMS:
        if path == room or path.startswith(room + "/"):
            if best is None or len(room) > len(best):
                best = room
    return best


def resolve(includer, target):
    """The repository path an include names: relative to the root, or to benchmarks/ for the
    benchmark rooms (their include directory), or to the includer's folder."""
    for base in ("", "benchmarks/"):
        if (ROOT / base / target).is_file():
            return base + target
    local = (ROOT / includer).parent / target
    if local.is_file():
        return str(local.resolve().relative_to(ROOT.resolve()))
    return None


def cpp_breaches(path, line_no, target):
    resolved = resolve(path, target)
    if resolved is None:
        return []  # a system or third-party header
    where = f"{path}:{line_no}: includes {target}"
    if resolved.startswith("tests/"):
        return [f"{where}: product code includes the tests"]
    source, dest = room_of(path), room_of(resolved)
    if source is None or dest is None:
        return []
    breaches = []
    if dest not in ROOMS[source]:
        breaches.append(f"{where}: {source} may not depend on {dest} (allowed: {', '.join(sorted(ROOMS[source]))})")
    backend = next((b for b in BACKENDS if resolved.startswith(b)), None)
    if backend and not path.startswith(backend) and not path.startswith(BACKEND_VIEWERS):
        breaches.append(f"{where}: a transport backend's files are its own; reach it through broadcast/transport/transport.h")
    if source == "benchmarks" and resolved.startswith("benchmarks/"):
        mine = path.split("/")[1]
        theirs = resolved.split("/")[1]
        exported = resolved[len("benchmarks/"):] in BENCH_EXPORTS
        if mine != theirs and theirs != BENCH_SHARED_ROOM and not exported:
            breaches.append(f"{where}: benchmarks/{theirs} does not export this header to benchmarks/{mine}")
    return breaches


def python_package_of(path):
    """'deltacast', 'deltacast.inference', 'deltacast.integrations.vllm', ... for a module's file."""
    parts = pathlib.PurePosixPath(path).relative_to("python").parts[:-1]
    return ".".join(parts)


def absolute_module(package, node):
    if node.level == 0:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


# Packages built on the core package (deltacast's own modules import none of them), and which
# of them each may import.
PY_LAYERS = {
    "deltacast": set(),
    "deltacast.inference": set(),
    # checkpoint-engine's API: its vLLM worker extension loads weights as the vLLM backend does.
    "deltacast.compat": {"deltacast.inference", "deltacast.integrations"},
    "deltacast.integrations": {"deltacast.inference", "deltacast.integrations"},
}


def python_breaches(path, tree):
    package = python_package_of(path)
    own_layer = max((p for p in PY_LAYERS if package == p or package.startswith(p + ".")), key=len)
    breaches = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names = [absolute_module(package, node)]
            names += [f"{names[0]}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        reasons = set()  # once per import and reason, not once per imported name
        for name in names:
            if not name.startswith("deltacast."):
                continue
            layer = max((p for p in PY_LAYERS if name == p or name.startswith(p + ".")), key=len)
            if layer != "deltacast" and layer != own_layer and layer not in PY_LAYERS[own_layer]:
                reasons.add(f"{own_layer} may not import {layer}")
            parts = name.split(".")
            private = next((i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")), None)
            if private is not None and private >= 2:
                owner = ".".join(parts[:private])
                if not (package == owner or package.startswith(owner + ".")):
                    reasons.add(f"{parts[private]} is private to {owner}")
        breaches += [f"{path}:{node.lineno}: imports {names[0]}: {r}" for r in sorted(reasons)]
    return breaches


def folder_breaches():
    breaches = []
    for top in PRODUCT_DIRS:
        for folder in [ROOT / top, *sorted(p for p in (ROOT / top).rglob("*") if p.is_dir())]:
            if "__pycache__" in folder.parts or not folder.is_dir():
                continue
            files = [f for f in folder.iterdir() if f.is_file() and f.suffix in CPP_SUFFIXES | {".py"}]
            headers = [f for f in files if f.suffix in (".h", ".cuh")]
            sources = [f for f in files if f not in headers]
            lines = sum(len(f.read_text(errors="replace").splitlines()) for f in files)
            rel = folder.relative_to(ROOT)
            if lines > MAX_LINES:
                breaches.append(f"{rel}/: {lines} lines of its own (at most {MAX_LINES}); give its jobs subfolders")
            for kind, group in (("headers", headers), ("sources", sources)):
                if len(group) > MAX_FILES_OF_A_KIND:
                    breaches.append(f"{rel}/: {len(group)} {kind} (at most {MAX_FILES_OF_A_KIND}); give its jobs subfolders")
    return breaches


def main():
    breaches = []
    checked = 0
    for top in PRODUCT_DIRS:
        for f in sorted((ROOT / top).rglob("*")):
            rel = str(f.relative_to(ROOT))
            if f.suffix in CPP_SUFFIXES:
                for no, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                    m = INCLUDE.match(line)
                    if m:
                        checked += 1
                        breaches += cpp_breaches(rel, no, m.group(1))
            elif f.suffix == ".py" and rel.startswith("python/deltacast/"):
                tree = ast.parse(f.read_text(), rel)
                checked += 1
                breaches += python_breaches(rel, tree)
    breaches += folder_breaches()
    for b in breaches:
        print(b)
    print(f"{checked} includes and modules checked, {len(breaches)} breaches")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
