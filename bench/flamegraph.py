"""Collapsed stacks (py-spy's `raw` format, what `BENCH_PYSPY` in bench/kstream_pipe.py writes)
to a flame graph (SVG) and a table of the top costs.

Why here: the profiles in docs/profiles/ are made from the raw files, which also give the top
costs table in docs/performance.md; py-spy's own SVG output cannot give that table, and the
usual converters (flamegraph.pl, inferno) are not Python packages.

    python bench/flamegraph.py STACKS.txt [--svg OUT.svg] [--title T] [--top 15]

`--top N` prints the N functions with the most samples of their own (the frame on top) and
the N with the most samples under them (inclusive), each as a share of all samples.
"""

from __future__ import annotations

import argparse
import html
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field

WIDTH = 1200
ROW = 16
MIN_WIDTH = 0.3  # frames narrower than this (pixels) are left out
_FRAME = re.compile(r"^(?P<fn>.*) \((?P<file>.*?):(?P<line>\d+)\)$")


def load(path: str) -> list[tuple[list[str], int]]:
    """The stacks of a collapsed-stacks file, outermost frame first, with their samples."""
    out = []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, n = line.rsplit(" ", 1)
            out.append((stack.split(";"), int(n)))
    return out


def function(frame: str) -> str:
    """A frame without its line number: `fn (path)`, the path from the package on."""
    m = _FRAME.match(frame)
    if m is None:
        return frame or "(unknown)"
    path = m["file"].split("site-packages/")[-1]
    for root in ("/kstream/", "/bench/", "/store_backends/"):
        if root in path:
            path = root[1:] + path.split(root, 1)[1]
    return f"{m['fn']} ({path})"


@dataclass
class Node:
    samples: int = 0
    children: dict[str, Node] = field(default_factory=dict)


def tree(stacks: list[tuple[list[str], int]]) -> Node:
    root = Node()
    for frames, n in stacks:
        root.samples += n
        node = root
        for frame in frames:
            node = node.children.setdefault(function(frame), Node())
            node.samples += n
    return root


def top(stacks: list[tuple[list[str], int]], n: int) -> tuple[list[tuple[str, float]], ...]:
    """The `n` functions with the largest self and inclusive shares of all samples."""
    total = sum(c for _, c in stacks) or 1
    own: Counter[str] = Counter()
    under: Counter[str] = Counter()
    for frames, c in stacks:
        own[function(frames[-1])] += c
        for name in {function(f) for f in frames}:
            under[name] += c
    return tuple([(k, v / total) for k, v in ctr.most_common(n)] for ctr in (own, under))


def _color(name: str) -> str:
    h = zlib.crc32(name.encode())
    if "(kstream/" in name:
        return f"rgb({205 + h % 50},{80 + h % 90},{40 + (h >> 8) % 50})"
    return f"rgb({90 + h % 60},{150 + (h >> 8) % 70},{200 + (h >> 16) % 55})"


def svg(root: Node, title: str) -> str:
    """An icicle-free flame graph: the root at the bottom, each frame as wide as its samples,
    children in name order; hover a frame for its name and share."""
    rows: list[str] = []
    depth = 0

    def draw(name: str, node: Node, x: float, level: int) -> None:
        nonlocal depth
        w = node.samples / root.samples * WIDTH
        if w < MIN_WIDTH:
            return
        depth = max(depth, level)
        pct = 100 * node.samples / root.samples
        label = html.escape(name)
        text = name if w > 40 else ""
        if text and len(text) * 6.5 > w:
            text = text[: max(0, int(w / 6.5) - 2)] + ".."
        text = html.escape(text)
        rows.append(
            f"<g><title>{label} ({node.samples} samples, {pct:.1f}%)</title>"
            f'<rect x="{x:.1f}" y="L{level}" width="{w:.1f}" height="{ROW - 1}" '
            f'fill="{_color(name)}"/>'
            f'<text x="{x + 3:.1f}" y="T{level}">{text}</text></g>'
        )
        cx = x
        for child_name in sorted(node.children):
            child = node.children[child_name]
            draw(child_name, child, cx, level + 1)
            cx += child.samples / root.samples * WIDTH

    draw("all", root, 0.0, 0)
    height = (depth + 1) * ROW + 40

    def place(m: re.Match[str]) -> str:
        level = int(m[2])
        y = height - (level + 1) * ROW - 10
        return f'y="{y if m[1] == "L" else y + ROW - 4}"'

    body = re.sub(r'y="([LT])(\d+)"', place, "\n".join(rows))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'font-family="monospace" font-size="11">\n'
        f'<rect width="100%" height="100%" fill="#fff"/>\n'
        f'<text x="4" y="16" font-size="14">{html.escape(title)} '
        f"({root.samples} samples)</text>\n{body}\n</svg>\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stacks")
    ap.add_argument("--svg", default="")
    ap.add_argument("--title", default="")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args(argv)
    stacks = load(args.stacks)
    if args.svg:
        with open(args.svg, "w") as f:
            f.write(svg(tree(stacks), args.title or args.stacks))
    own, under = top(stacks, args.top)
    print(f"{sum(c for _, c in stacks)} samples: self")
    for name, share in own:
        print(f"  {100 * share:5.1f}%  {name}")
    print("inclusive")
    for name, share in under:
        print(f"  {100 * share:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
