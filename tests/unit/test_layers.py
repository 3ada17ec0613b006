"""The package's layers: a module imports only from its own layer or the layers below it.

Why: a layer that imports upward cannot be understood, tested or changed without the layers
above it, and an import cycle between packages ties them into one. The imports are read with
`ast` from the source (every `import`, including those inside functions and under
TYPE_CHECKING: a lazy import is still a dependency), so the test needs no import of the code.
The units are the packages and top-level modules of `kstream` (`kstream.runtime`,
`kstream.config`, ...) and `store_backends`.

There are no known exceptions between units today. The lists of them stay (`KNOWN_UPWARD`,
`KNOWN_CYCLES`) so that one can only come back named, with why; the test fails on any new one,
and on a listed one that is gone (so the lists only shrink).

Inside `kstream.runtime` and `kstream.dsl` the files themselves must not import each other in
a circle (`KNOWN_FILE_CIRCLES`, the same rule: named with why, and only shrinking; empty).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: lowest first; a unit may import from its own layer and every layer below
LAYERS: list[set[str]] = [
    # what every layer uses: errors, durations, records, small helpers, the version
    {
        "kstream.errors",
        "kstream.duration",
        "kstream.records",
        "kstream.ratelimit",
        "kstream.internal_topics",
        "kstream._lazy",
        "kstream.assets",
        "kstream.auto_codec",
        "kstream.version",
        "kstream.guarantee",
    },
    # settings and bytes. One way within the layer: config checks its `kafka` table with the
    # security rules (security, which the Kafka clients use too); serde (the built-ins and
    # serde() resolution) builds the registry formats (schema_registry), and both build on what
    # a serde is (serde_base)
    {
        "kstream.config",
        "kstream.config_checks",
        "kstream.security",
        "kstream.serde",
        "kstream.serde_base",
        "kstream.schema_registry",
    },
    # the Kafka clients
    {"kstream.kafka"},
    # state stores and what measures them. The state package holds the provenance header and
    # the restore's checks of it; the user-facing store factories (stores) import its specs only
    {"store_backends", "kstream.state", "kstream.stores", "kstream.metrics"},
    # the broker-compatibility component: the switches and the high marks, over the state's
    # provenance header and a store spec; the runtime turns the restore's checks on by what it
    # passes to the restore (ctx.compat), so nothing below imports it
    {"kstream.broker_compat"},
    # the processor graph
    {"kstream.topology"},
    # the DSL that builds it, and the test driver that runs it
    {"kstream.dsl", "kstream.testing"},
    # one process's runtime
    {"kstream.runtime"},
    # the fronts, one way: the package's own exports (kstream) -> the multi-process front
    # (processes) -> the service and supervisor (service, which imports the DSL, the runtime
    # and kstream.version directly, never the package) -> the Spark engine (spark); examples.
    # The deterministic simulator (kstream.testing.sim) runs the runtime, so it is a unit of
    # its own up here, though it ships inside the testing package
    {
        "kstream.spark",
        "kstream.service",
        "kstream.processes",
        "kstream",
        "kstream.examples",
        "kstream.testing.sim",
    },
]

#: (importer, imported): upward imports that exist, each with why it is left. Empty: a new one
#: fails test_no_upward_import; one may be listed here only with a reason
KNOWN_UPWARD: dict[tuple[str, str], str] = {}

#: the groups of units tied by import cycles, and why they are left. Empty: a new one fails
#: test_no_new_import_cycle; one may be listed here only with a reason
KNOWN_CYCLES: dict[frozenset[str], str] = {}


#: sub-packages that are units of their own (the layer they sit in is not their parent's)
SUB_UNITS = ("kstream.testing.sim",)


def _unit(module: str) -> str:
    for sub in SUB_UNITS:
        if module == sub or module.startswith(f"{sub}."):
            return sub
    parts = module.split(".")
    return parts[0] if parts[0] != "kstream" else ".".join(parts[:2])


def _module_name(path: Path, root: Path = ROOT) -> tuple[str, str]:
    """The module's dotted name and the package its relative imports start from."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def _from_kstream(name: str) -> str:
    """What `from kstream import name` imports: a submodule, or a name of the package."""
    sub = ROOT / "kstream" / name
    return f"kstream.{name}" if sub.is_dir() or sub.with_suffix(".py").exists() else "kstream"


@functools.cache
def _imports() -> tuple[tuple[str, str, str], ...]:
    """(importer unit, imported unit, "file:line") for every import between two units."""
    return tuple(_scan())


def _scan() -> Iterator[tuple[str, str, str]]:
    for top in ("kstream", "store_backends"):
        for path in sorted((ROOT / top).rglob("*.py")):
            module, package = _module_name(path)
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    targets = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = package.split(".")[: len(package.split(".")) - node.level + 1]
                        targets = [".".join([*base, *([node.module] if node.module else [])])]
                    else:
                        targets = [node.module or ""]
                    if targets == ["kstream"]:  # `from kstream import serde`: a submodule
                        targets = [_from_kstream(alias.name) for alias in node.names]
                else:
                    continue
                for target in targets:
                    if target.split(".")[0] not in ("kstream", "store_backends"):
                        continue
                    a, b = _unit(module), _unit(target)
                    if a != b:
                        where = f"{path.relative_to(ROOT)}:{node.lineno}"
                        yield a, b, where


def _layer(unit: str) -> int:
    for i, layer in enumerate(LAYERS):
        if unit in layer:
            return i
    raise AssertionError(f"{unit} has no layer: add it to LAYERS in {__file__}")


def _upward() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for a, b, where in _imports():
        if _layer(b) > _layer(a):
            found.setdefault((a, b), []).append(where)
    return found


def _cycles() -> set[frozenset[str]]:
    """The groups of units that import each other, directly or through others."""
    edges: dict[str, set[str]] = {}
    for a, b, _ in _imports():
        edges.setdefault(a, set()).add(b)
        edges.setdefault(b, set())
    reach: dict[str, set[str]] = {}
    for start in edges:
        seen: set[str] = set()
        todo = list(edges[start])
        while todo:
            unit = todo.pop()
            if unit not in seen:
                seen.add(unit)
                todo.extend(edges[unit])
        reach[start] = seen
    return {
        frozenset({a} | {b for b in reach[a] if a in reach[b]})
        for a in edges
        if any(a in reach[b] for b in reach[a])
    }


def test_no_upward_import() -> None:
    new = {pair: where for pair, where in _upward().items() if pair not in KNOWN_UPWARD}
    assert not new, "imports above the importer's layer:\n" + "\n".join(
        f"  {a} (layer {_layer(a)}) imports {b} (layer {_layer(b)}) at {', '.join(where)}"
        for (a, b), where in sorted(new.items())
    )


def test_no_new_import_cycle() -> None:
    new = {c for c in _cycles() if not any(c <= known for known in KNOWN_CYCLES)}
    assert not new, "import cycles between units: " + "; ".join(
        " <-> ".join(sorted(c)) for c in sorted(new, key=sorted)
    )


def test_the_known_exceptions_still_exist() -> None:
    """A fixed exception leaves the list, so that it cannot come back unnoticed."""
    assert set(KNOWN_UPWARD) <= set(_upward()), set(KNOWN_UPWARD) - set(_upward())
    assert set(KNOWN_CYCLES) <= _cycles(), f"shrunk or gone: {set(KNOWN_CYCLES) - _cycles()}"


def test_the_test_sees_an_upward_import() -> None:
    """The parser finds what it must: runtime imports kafka (down), dsl imports topology."""
    pairs = {(a, b) for a, b, _ in _imports()}
    assert ("kstream.runtime", "kstream.kafka") in pairs
    assert ("kstream.dsl", "kstream.topology") in pairs
    assert ("kstream.state", "store_backends") in pairs


# --- inside a package: no file-level import circles ----------------------------------------

#: the packages whose files must not import each other in a circle (every import counted, at
#: call time and under TYPE_CHECKING too, as above): a circle of files is one file split in
#: pieces, each of which needs the others to be read
CIRCLE_FREE_PACKAGES = ("kstream.runtime", "kstream.dsl")

#: file circles that exist, each with why it is left; the test fails on a new one and on a
#: listed one that is gone or has shrunk (so the list only shrinks). Empty: the DSL's API
#: classes import one way since kstream.dsl.api names KStream and KTable for the modules
#: below it (docs/architecture.md, "Where a DSL operator goes")
KNOWN_FILE_CIRCLES: dict[frozenset[str], str] = {}


def _package_modules(package: str, root: Path = ROOT) -> set[str]:
    base = root.joinpath(*package.split("."))
    return {_module_name(path, root)[0] for path in base.rglob("*.py")} - {package}


def _file_edges(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports (the package's own __init__,
    which only re-exports, left out)."""
    modules = _package_modules(package, root)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    base = root.joinpath(*package.split("."))
    for path in sorted(base.rglob("*.py")):
        module, pkg = _module_name(path, root)
        if module not in modules:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    origin = ".".join([*parts, *([node.module] if node.module else [])])
                else:
                    origin = node.module or ""
                targets = [
                    f"{origin}.{a.name}" if f"{origin}.{a.name}" in modules else origin
                    for a in node.names
                ]
            for target in targets:
                if target in modules and target != module:
                    edges[module].add(target)
    return edges


def _file_circles(package: str, root: Path = ROOT) -> set[frozenset[str]]:
    edges = _file_edges(package, root)
    reach: dict[str, set[str]] = {}
    for start in edges:
        seen: set[str] = set()
        todo = list(edges[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(edges.get(m, ()))
        reach[start] = seen
    return {frozenset({a} | {b for b in reach[a] if a in reach[b]}) for a in edges if a in reach[a]}


def test_no_new_file_circle_inside_runtime_and_dsl() -> None:
    found = set().union(*(_file_circles(p) for p in CIRCLE_FREE_PACKAGES))
    new = found - set(KNOWN_FILE_CIRCLES)
    assert not new, "files that import each other in a circle: " + "; ".join(
        " <-> ".join(sorted(c)) for c in sorted(new, key=sorted)
    )
    gone = set(KNOWN_FILE_CIRCLES) - found
    assert not gone, f"a known circle is gone or changed: update KNOWN_FILE_CIRCLES: {gone}"


def test_the_file_circle_test_sees_a_circle(tmp_path: Path) -> None:
    """The scan finds a circle held by a call-time import one way and a TYPE_CHECKING import
    the other (the two forms that once held the DSL's), and none in a package importing one
    way; and it reads the DSL: the API module imports the stream operators."""
    pkg = tmp_path / "demo"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from demo.b import g\n    return g\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from demo import a\n"
    )
    (pkg / "c.py").write_text("from demo.b import TYPE_CHECKING\n")
    assert _file_circles("demo", tmp_path) == {frozenset({"demo.a", "demo.b"})}
    (pkg / "b.py").write_text("")
    assert _file_circles("demo", tmp_path) == set()
    assert "kstream.dsl.stream" in _file_edges("kstream.dsl")["kstream.dsl.api"]


#: what the DSL's processors may import from the DSL outside their package: the option classes
#: users pass to operators (docs/architecture.md, "Where a DSL operator goes")
DSL_OPTIONS = {
    "kstream.dsl.windows",
    "kstream.dsl.joined",
    "kstream.dsl.suppressed",
    "kstream.dsl.transform_values",
}

#: processor modules still outside the package, with why (they may import it and the options
#: only); empty: the list only shrinks
PROCESSORS_OUTSIDE: dict[str, str] = {}


def test_dsl_processors_import_no_handles_or_operators() -> None:
    """A processor module imports its own package and the DSL's option classes only, so it
    runs (in the runtime, the test driver or the Spark engine) without the handles that add
    it to a topology."""
    edges = _file_edges("kstream.dsl")
    inside = "kstream.dsl.processors"
    wrong = {
        f"{m} imports {t}"
        for m, targets in edges.items()
        if m == inside or m.startswith(inside + ".")
        for t in targets
        if not (
            t == inside
            or t.startswith(inside + ".")
            or t in DSL_OPTIONS | PROCESSORS_OUTSIDE.keys()
        )
    }
    assert not wrong, sorted(wrong)
    for outside in PROCESSORS_OUTSIDE:
        assert all(t.startswith(inside) or t in DSL_OPTIONS for t in edges[outside]), outside
    # and the option modules import nothing of the DSL
    assert not {t for o in DSL_OPTIONS for t in edges[o]}
