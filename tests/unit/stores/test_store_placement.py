"""The rule that places a store piece (kstream.state's docstring), as imports a test can read.

`store_backends` knows bytes only: it imports nothing of kstream but its errors. The factories
of `kstream.stores` describe a store and open nothing: from `kstream.state` they import the
spec alone. Imports are read with `ast`, lazy ones and those under TYPE_CHECKING included.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_backends_import_nothing_of_kstream_but_its_errors() -> None:
    wrong = {
        f"{p.relative_to(ROOT)}: {m}"
        for p in sorted((ROOT / "store_backends").glob("*.py"))
        for m in _imports(p)
        if m.split(".")[0] == "kstream" and m != "kstream.errors"
    }
    assert not wrong, f"store_backends must know bytes only, but imports {sorted(wrong)}"


def test_the_store_factories_import_the_spec_and_nothing_else_of_the_engine() -> None:
    engine = {
        m
        for m in _imports(ROOT / "kstream" / "stores.py")
        if m.startswith(("kstream.state", "store_backends"))
    }
    assert engine == {"kstream.state.spec"}
