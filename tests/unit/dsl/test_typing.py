"""The DSL is typed end to end: mypy sees the handle type of every step of a chain.

A snippet chaining the public operators is type-checked with mypy's API; each `reveal_type`
must name a DSL class, so an operator that regresses to returning `Any` (which would silently
switch off type checking for everything after it in a user's program) fails here.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

# The same options and cache as `make lint`'s `mypy --strict` run over kstream/dsl: whichever
# of the two runs second re-checks only what is new to it (here, the snippet).
ROOT = Path(__file__).resolve().parents[3]
CACHE = ROOT / ".mypy_cache" / "strict"

SNIPPET = """
from kstream.dsl import StreamBuilder
from kstream.dsl.windows import JoinWindows, SessionWindows, TimeWindows

b = StreamBuilder()
s = b.stream("clicks", key_serde="str", value_serde="json")
reveal_type(s)
f = s.filter(lambda k, v: v is not None)
reveal_type(f)
mv = f.map_values(lambda v: v["page"])
reveal_type(mv)
sk = mv.select_key(lambda k, v: v)
reveal_type(sk)
g = sk.group_by_key()
reveal_type(g)
w = g.windowed_by(TimeWindows.of("1m"))
reveal_type(w)
c = w.count(emit="final")
reveal_type(c)
ts = c.to_stream()
reveal_type(ts)
m = ts.map(lambda k, v: (k.key, v))
reveal_type(m)
reveal_type(m.to("clicks-per-minute"))

t = b.table("users")
reveal_type(t)
gt = t.group_by(lambda k, v: (v, k))
reveal_type(gt)
reveal_type(gt.count())
reveal_type(t.join(t.filter(lambda k, v: True), lambda a, b: (a, b)))
reveal_type(s.join(t, lambda v, tv: (v, tv)))
reveal_type(s.join(s, lambda a, b: (a, b), window=JoinWindows.of("5s")))
gl = b.global_table("countries")
reveal_type(gl)
reveal_type(s.left_join(gl, lambda k, v: k, lambda v, gv: (v, gv)))
reveal_type(s.group_by(lambda k, v: v).windowed_by(SessionWindows.with_gap("5m")))
reveal_type(s.group_by_key().aggregate(list, lambda k, v, agg: agg + [v]))
reveal_type(s.branch(lambda k, v: True, default=True))
reveal_type(s.deduplicate(within="10m"))
reveal_type(s.to_table())
reveal_type(b.build())
"""

EXPECTED = [
    "kstream.dsl.api.KStream",  # stream
    "kstream.dsl.api.KStream",  # filter
    "kstream.dsl.api.KStream",  # map_values
    "kstream.dsl.api.KStream",  # select_key
    "kstream.dsl.api.KGroupedStream",  # group_by_key
    "kstream.dsl.api.TimeWindowedKStream",  # windowed_by(TimeWindows)
    "kstream.dsl.api.KTable",  # count
    "kstream.dsl.api.KStream",  # to_stream
    "kstream.dsl.api.KStream",  # map
    "None",  # to
    "kstream.dsl.api.KTable",  # table
    "kstream.dsl.api.KGroupedTable",  # KTable.group_by
    "kstream.dsl.api.KTable",  # KGroupedTable.count
    "kstream.dsl.api.KTable",  # table-table join
    "kstream.dsl.api.KStream",  # stream-table join
    "kstream.dsl.api.KStream",  # stream-stream join
    "kstream.dsl.global_table.GlobalKTable",  # global_table
    "kstream.dsl.api.KStream",  # stream-global-table left join
    # windowed_by(SessionWindows)
    "kstream.dsl.api.SessionWindowedKStream",
    "kstream.dsl.api.KTable",  # aggregate
    "list[kstream.dsl.api.KStream]",  # branch
    "kstream.dsl.api.KStream",  # deduplicate
    "kstream.dsl.api.KTable",  # to_table
    "kstream.topology.topology.Topology",  # build
]


def test_every_step_of_a_chain_has_a_dsl_type(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(textwrap.dedent(SNIPPET))
    stdout, stderr, _status = mypy_api.run(
        [
            "--strict",
            "--no-error-summary",
            f"--config-file={ROOT / 'pyproject.toml'}",
            f"--cache-dir={CACHE}",
            str(program),
        ]
    )
    revealed = re.findall(r'Revealed type is "([^"]+)"', stdout)
    assert revealed == EXPECTED, stdout + stderr
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    assert not errors, "\n".join(errors)
