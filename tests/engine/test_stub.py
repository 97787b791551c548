"""The typed interface (``src/shardgrid/_engine.pyi``) is the module's: every name the module
has is in it and nothing else, and each method takes the arguments, in the places, that the stub
says (a change to the bindings without the stub fails here)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import shardgrid._engine as engine

STUB = ast.parse((Path(engine.__file__).parent / "_engine.pyi").read_text())


def stub_methods() -> dict[str, tuple[list[str], list[str]]]:
    (record_store,) = [n for n in STUB.body if isinstance(n, ast.ClassDef) and n.name == "RecordStore"]
    return {
        f.name: ([a.arg for a in f.args.args[1:]], [a.arg for a in f.args.kwonlyargs])
        for f in record_store.body
        if isinstance(f, ast.FunctionDef)
    }


def test_the_stub_names_what_the_module_has() -> None:
    stubbed = {n.target.id for n in STUB.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    stubbed |= {n.name for n in STUB.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}
    assert stubbed == {name for name in dir(engine) if not name.startswith("_")}
    methods = {name for name in dir(engine.RecordStore) if not name.startswith("_")}
    assert methods == set(stub_methods()) - {"__init__"}


def test_each_method_takes_the_stubs_arguments() -> None:
    for name, (positional, keyword_only) in stub_methods().items():
        target = engine.RecordStore if name == "__init__" else getattr(engine.RecordStore, name)
        parameters = [p for p in inspect.signature(target).parameters.values() if p.name != "self"]
        assert [p.name for p in parameters if p.kind is not p.KEYWORD_ONLY] == positional, name
        assert [p.name for p in parameters if p.kind is p.KEYWORD_ONLY] == keyword_only, name


def test_each_function_takes_the_stubs_arguments() -> None:
    for function in (n for n in STUB.body if isinstance(n, ast.FunctionDef)):
        parameters = inspect.signature(getattr(engine, function.name)).parameters.values()
        assert [p.name for p in parameters if p.kind is not p.KEYWORD_ONLY] == [a.arg for a in function.args.args]
        assert [p.name for p in parameters if p.kind is p.KEYWORD_ONLY] == [a.arg for a in function.args.kwonlyargs]
