"""The README and docs/ stay true to the tree (issue 36, item 5).

- The README's code map names every package of `kstream/` (and `store_backends/`, `cmd/`), and
  every path it names exists.
- docs/architecture.md's code map names every package and top-level module of `kstream/` and
  every module of `store_backends/`; every `*.py` it names exists in the package it is under.
- docs/api.md's export table is each package's `__all__`, read with `ast` (no imports).
- Every `kstream/...py` or `tests/...py` path and every dotted `kstream.x.y` module the README
  and docs/*.md name exists; every test docs/faults.md names exists.

A failure names what is missing and where.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def _packages() -> list[str]:
    """`kstream/<name>/` for every directory of the package (links included), sorted."""
    return sorted(
        p.name for p in (ROOT / "kstream").iterdir() if p.is_dir() and p.name != "__pycache__"
    )


def _code_map_rows() -> list[str]:
    text = README.read_text()
    section = text.split("## Code map", 1)[1].split("\n## ", 1)[0]
    firsts = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return [p for cell in firsts for p in re.findall(r"`([^`]+)`", cell)]


def test_readme_code_map_names_every_package_and_only_what_exists() -> None:
    named = _code_map_rows()
    missing = [f"kstream/{p}/" for p in _packages() if f"kstream/{p}/" not in named] + [
        p for p in ("store_backends/", "cmd/kstreamd/") if p not in named
    ]
    gone = [p for p in named if not (ROOT / p).exists()]
    assert not missing, f"README.md 'Code map' does not name: {missing}"
    assert not gone, f"README.md 'Code map' names what does not exist: {gone}"


def _architecture_map() -> list[str]:
    text = (DOCS / "architecture.md").read_text()
    section = text.split("## Code map", 1)[1]
    return section.split("```", 2)[1].splitlines()[1:]


def test_architecture_code_map_names_every_package_and_module() -> None:
    block = "\n".join(_architecture_map())
    words = set(re.findall(r"[\w./]+", block))
    wanted = [f"{p}/" for p in _packages()]
    wanted += [p.name for p in sorted((ROOT / "kstream").glob("*.py"))]
    missing = [w for w in wanted if w not in words]
    stems = {w.removesuffix(".py") for w in re.findall(r"\w+(?:\.py)?", block)}
    missing += [
        f"store_backends/{p.name}"
        for p in sorted((ROOT / "store_backends").glob("*.py"))
        if p.stem not in stems and p.name != "__init__.py"
    ]
    assert not missing, f"docs/architecture.md's code map does not name: {missing}"


def test_architecture_code_map_names_nothing_that_is_gone() -> None:
    gone = []
    top: Path = ROOT
    sub: Path | None = None
    for line in _architecture_map():
        indent = len(line) - len(line.lstrip())
        first = line.split()[0] if line.strip() else ""
        if indent == 0 and first.endswith("/"):
            top, sub = ROOT / first, None
            if not top.exists():
                gone.append(first)
        elif indent == 2 and first.endswith("/"):
            sub = top / first
            if not sub.exists():
                gone.append(str(sub.relative_to(ROOT)))
        elif indent == 2:
            sub = None
        for name in re.findall(r"\b([\w/]+\.py)\b", line):
            base = sub if sub is not None else top
            if not (base / name).exists():
                gone.append(str((base / name).relative_to(ROOT)))
    assert not gone, f"docs/architecture.md's code map names what does not exist: {gone}"


def _all(path: Path) -> list[str]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "__all__":
            return list(ast.literal_eval(node.value))
    return []


def _module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.exists():
            return candidate
    return None


def test_api_export_table_is_what_the_packages_export() -> None:
    text = (DOCS / "api.md").read_text()
    section = text.split("## Exports", 1)[1].split("\n## ", 1)[0]
    items = re.split(r"\n(?=- `)", section)
    documented: dict[str, list[str]] = {}
    for item in items:
        found = re.match(r"- `([\w.]+)`:(.*)", item.strip(), re.S)
        if found:
            documented[found.group(1)] = re.findall(r"`([\w.]+)`", found.group(2))
    exporting = {
        name: _all(path)
        for name in ["kstream", "kstream.stores", "store_backends"]
        + [f"kstream.{p}" for p in _packages()]
        if (path := _module_file(name)) is not None and _all(path)
    }
    problems = [f"{m}: not in docs/api.md 'Exports'" for m in exporting if m not in documented]
    problems += [
        f"{m}: in docs/api.md 'Exports' but exports nothing"
        for m in documented
        if m not in exporting
    ]
    for m in set(exporting) & set(documented):
        lacking = sorted(set(exporting[m]) - set(documented[m]))
        extra = sorted(set(documented[m]) - set(exporting[m]))
        if lacking:
            problems.append(f"{m}: exports {lacking}, not listed in docs/api.md")
        if extra:
            problems.append(f"{m}: docs/api.md lists {extra}, not exported")
    assert not problems, "\n".join(problems)


def _doc_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


#: dotted names in the docs that are not modules: record headers and the entry-point group
NOT_MODULES = {"kstream.error", "kstream.src", "kstream.store_backends"}


def test_paths_and_modules_named_in_the_docs_exist() -> None:
    gone = []
    for doc in _doc_files():
        text = doc.read_text()
        for path in set(
            re.findall(r"\b((?:kstream|store_backends|tests|bench|tools)/[\w/.-]*\.py)", text)
        ):
            if not (ROOT / path).exists():
                gone.append(f"{doc.relative_to(ROOT)}: {path}")
        for dotted in set(re.findall(r"`(kstream(?:\.\w+)+)", text)):
            if dotted in NOT_MODULES:
                continue
            parts = dotted.split(".")
            # the longest prefix that is a module, then at most one name defined in it
            for n in range(len(parts), 0, -1):
                found = _module_file(".".join(parts[:n]))
                if found is not None:
                    break
            rest = parts[n:]
            if (
                found is None
                or len(rest) > 1
                or (rest and not re.search(rf"\b{re.escape(rest[0])}\b", found.read_text()))
            ):
                gone.append(f"{doc.relative_to(ROOT)}: {dotted}")
    assert not gone, f"named in the docs but not in the tree: {sorted(gone)}"


def test_every_test_the_fault_table_names_exists() -> None:
    text = (DOCS / "faults.md").read_text()
    gone = []
    for path, name in re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?", text):
        file = ROOT / path
        if not file.exists():
            gone.append(path)
        elif name and not re.search(rf"def {name}\b", file.read_text()):
            gone.append(f"{path}::{name}")
    assert not gone, f"docs/faults.md names tests that do not exist: {gone}"
