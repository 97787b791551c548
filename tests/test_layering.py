"""The pure core stays pure (no I/O, clocks, threads, processes or global randomness), and each
layer imports only the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

import shardgrid.core

PACKAGE = Path(shardgrid.core.__file__).parent.parent
CORE = PACKAGE / "core"
FORBIDDEN_MODULES = {"asyncio", "socket", "threading", "time", "subprocess", "os", "selectors", "multiprocessing"}
GLOBAL_RANDOM_CALLS = {
    "random",
    "randint",
    "randrange",
    "choice",
    "choices",
    "shuffle",
    "sample",
    "uniform",
    "getrandbits",
    "seed",
}
LAYERS = ["core", "sim", "runtime", "client", "spark", "cli"]


def forbidden_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        found += [n for n in names if n.split(".")[0] in FORBIDDEN_MODULES]
    return found


def global_random_uses(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "random":
            found += [f"from random import {alias.name}" for alias in node.names]
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "random"
            and node.attr in GLOBAL_RANDOM_CALLS
        ):
            found.append(f"line {node.lineno}: random.{node.attr}")
    return found


def imported_layers(source: str) -> set[str]:
    layers = set()
    for node in ast.walk(ast.parse(source)):
        modules = []
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        layers |= {m.split(".")[1] for m in modules if m.startswith("shardgrid.") and m.split(".")[1] in LAYERS}
    return layers


def core_modules() -> list[Path]:
    files = sorted(CORE.rglob("*.py"))
    assert len(files) >= 10, "the core modules were not found"
    return files


def test_the_checks_catch_what_they_look_for() -> None:
    assert forbidden_imports("import time\nfrom os.path import join\nimport random\n") == ["time", "os.path"]
    assert global_random_uses("import random\nrandom.shuffle(x)\nrandom.Random(1).shuffle(x)\n") == [
        "line 2: random.shuffle"
    ]
    assert global_random_uses("from random import choice\n") == ["from random import choice"]
    assert imported_layers("from shardgrid.runtime.x import y\nimport shardgrid.core.table\n") == {"runtime", "core"}


def test_core_imports_no_io_clock_thread_or_process_module() -> None:
    offenders = {p.name: forbidden_imports(p.read_text()) for p in core_modules()}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_core_never_uses_the_global_random_generator() -> None:
    offenders = {p.name: global_random_uses(p.read_text()) for p in core_modules()}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_each_layer_imports_only_the_layers_below_it() -> None:
    offenders = []
    for position, layer in enumerate(LAYERS):
        allowed = set(LAYERS[: position + 1])
        folder = PACKAGE / layer
        for path in sorted(folder.rglob("*.py")) if folder.exists() else []:
            wrong = imported_layers(path.read_text()) - allowed
            offenders += [f"{layer}/{path.name} imports shardgrid.{w}" for w in sorted(wrong)]
    assert offenders == []
