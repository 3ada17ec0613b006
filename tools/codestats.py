"""How big the largest pieces of the product are, and which blocks of code repeat.

Run `python tools/codestats.py` (or `make codestats`) from the repository root. It reads the
product's sources (`kstream/`, `store_backends/`, `cmd/`) with `ast` and prints:

- the largest functions and classes, by their lines of code (docstrings, comments and blank
  lines not counted);
- the repeated blocks: runs of at least `--window` consecutive lines of code that appear,
  after stripping indentation (docstrings, `def` headers, blank and comment lines skipped), in
  more than one place.

Why: "one implementation per concept" is a claim about the code that a reviewer should be able
to check with one command, before and after a change, instead of trusting a description.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOTS = ("kstream", "store_backends", "cmd")


def sources(root: Path) -> Iterator[Path]:
    """Every Python source of the product, in a stable order."""
    for top in ROOTS:
        for path in sorted((root / top).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path
    for path in sorted((root / "cmd").rglob("*")):
        if path.is_file() and path.suffix == "" and path.read_bytes()[:2] == b"#!":
            yield path


def _code_lines(text: str, tree: ast.AST) -> list[bool]:
    """Per line (1-based; index 0 unused): whether it carries code, i.e. is neither blank, a
    comment, nor part of a docstring (docstrings grow with runnable examples, code does not)."""
    lines = text.splitlines()
    code = [False] + [bool(t.strip()) and not t.strip().startswith("#") for t in lines]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list) or not body:
            continue
        first = body[0]
        docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        if docstring and isinstance(first.value.value, str):  # type: ignore[attr-defined]
            for n in range(first.lineno, (first.end_lineno or first.lineno) + 1):
                code[n] = False
    return code


def sizes(path: Path, rel: str) -> Iterator[tuple[int, str, str]]:
    """(code lines, kind, qualified name) of each function and class of one file: the lines
    from its `def`/`class` line to its last that carry code (no docstring, comment or blank)."""
    text = path.read_text()
    tree = ast.parse(text, filename=str(path))
    code = _code_lines(text, tree)

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[int, str, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                name = f"{prefix}{child.name}"
                lines = sum(code[child.lineno : (child.end_lineno or child.lineno) + 1])
                yield lines, kind, f"{rel}:{child.lineno} {name}"
                yield from walk(child, name + ".")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def _normalised(path: Path) -> list[tuple[int, str]]:
    """(line number, stripped text) of the lines that carry code (not docstrings)."""
    text = path.read_text()
    tree = ast.parse(text, filename=str(path))
    code = _code_lines(text, tree)
    # a signature repeated is an API kept parallel (reduce of time and session windows), not
    # logic written twice: the lines of `def` headers do not count either
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for n in range(node.lineno, node.body[0].lineno):
                code[n] = False
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if code[n]]


def repeats(root: Path, window: int) -> list[list[str]]:
    """Groups of places (file:line) where the same `window` code lines occur, the longest
    first. Overlapping windows of one repeated run are reported once, at its first line."""
    seen: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for path in sources(root):
        rel = str(path.relative_to(root))
        lines = _normalised(path)
        for i in range(len(lines) - window + 1):
            block = tuple(text for _, text in lines[i : i + window])
            if sum(len(t) for t in block) < 20 * window:
                continue  # short lines (closing brackets, `return`, `else:`) repeat by nature
            seen[block].append(f"{rel}:{lines[i][0]}")
    groups = [places for places in seen.values() if len(places) > 1]
    # keep one window per run: drop a group whose every place follows a kept group's place
    kept: list[list[str]] = []
    covered: set[str] = set()
    for places in sorted(groups, key=lambda p: p[0]):
        if all(_previous(p) in covered for p in places):
            covered.update(places)
            continue
        covered.update(places)
        kept.append(places)
    return kept


def _previous(place: str) -> str:
    """The place one code line earlier is not known from the text alone; approximate with
    the line number minus one, which holds inside runs without blank or comment lines."""
    rel, n = place.rsplit(":", 1)
    return f"{rel}:{int(n) - 1}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=10, help="how many functions and classes")
    parser.add_argument("--window", type=int, default=8, help="code lines in a repeated block")
    args = parser.parse_args(argv)
    root = Path.cwd()
    found = [s for path in sources(root) for s in sizes(path, str(path.relative_to(root)))]
    for kind in ("function", "class"):
        print(f"largest {kind}{'es' if kind == 'class' else 's'} (lines of code):")
        for lines, _, name in sorted((s for s in found if s[1] == kind), reverse=True)[: args.top]:
            print(f"  {lines:5d}  {name}")
    groups = repeats(root, args.window)
    print(f"repeated blocks of {args.window}+ code lines: {len(groups)}")
    for places in groups:
        print("  " + "  =  ".join(places))
    return 0


if __name__ == "__main__":
    sys.exit(main())
