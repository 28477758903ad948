"""The product imports the standard library's public modules only: no ``_ssl``, no ``_socket``.

The launcher carries a service-account token in every training pod: its TLS
goes through ``ssl`` and its sockets through ``socket``
(:mod:`ranktable.launch.kubeapi`), whose API is documented and kept across
Python releases. This walks the syntax tree of every Python file of the
product packages and ``cmd/`` for an import of either private module
(``import``, ``from ... import``, ``importlib.import_module``, ``__import__``);
the checker is itself checked on a planted import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("ringcontroller", "agent", "model", "ranktable", "cmd")
PRIVATE = frozenset({"_ssl", "_socket"})


def private_imports(source: str, name: str) -> list[str]:
    """``file:line module`` for each import of a :data:`PRIVATE` module in ``source``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, name)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                modules = [node.args[0].value]
        found += [f"{name}:{node.lineno} {m}" for m in modules if m.split(".")[0] in PRIVATE]
    return found


def product_files() -> list[Path]:
    files: list[Path] = []
    for top in PRODUCT:
        path = ROOT / top
        if top == "cmd":  # scripts without a .py suffix
            files += [
                f for f in sorted(path.iterdir()) if f.is_file() and f.read_bytes().startswith(b"#!/usr/bin/env python")
            ]
        else:
            files += sorted(path.rglob("*.py"))
    return files


def test_the_product_imports_no_private_tls_or_socket_module() -> None:
    files = product_files()
    assert any(f.name == "kubeapi.py" for f in files) and any(f.parent.name == "cmd" for f in files)
    found = [hit for f in files for hit in private_imports(f.read_text(encoding="utf-8"), str(f.relative_to(ROOT)))]
    assert found == []


@pytest.mark.parametrize(
    "planted",
    [
        "import _ssl",
        "import os, _socket as s",
        "from _ssl import _SSLContext",
        "import importlib\nimportlib.import_module('_ssl')",
        "def f():\n    return __import__('_socket')",
    ],
)
def test_the_check_finds_a_planted_import(planted: str) -> None:
    assert private_imports(f"import json\n{planted}\n", "planted.py") != []


def test_the_check_leaves_public_modules_alone() -> None:
    assert private_imports("import ssl, socket\nfrom http import client\nimport _thread\n", "ok.py") == []
