"""A user annotates every public DSL handle bare, and `mypy --strict` accepts the program.

The handles are concrete classes (`kstream.dsl.api`), not generic ones: a user writes
`g: KGroupedStream = s.group_by_key()` as with Kafka Streams' Java types, without a type
argument. While the grouped, windowed, cogrouped and branched handles were generic in the
class they make, `mypy --strict` refused each bare annotation with "Missing type arguments for
generic type". The snippet below chains real operator calls from a source to every handle,
with each step annotated by its public name, imported from each place users import it from;
mypy runs as a user runs it (a subprocess, `python -m mypy --strict <file>`). A control
snippet with a wrong annotation must be refused, so a pass means mypy read the annotations.
The same snippet then runs, and every handle it made is an instance of its public class.
"""

from __future__ import annotations

import runpy
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import kstream
import kstream.dsl
import kstream.dsl.api
import kstream.dsl.branched
import kstream.dsl.cogroup
import kstream.dsl.grouped
import kstream.dsl.grouped_table
import kstream.dsl.windowed
from kstream.dsl import StreamBuilder

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parents[3]
# `make lint`'s strict cache: the package is checked already, mypy re-checks the snippet only
CACHE = ROOT / ".mypy_cache" / "strict"

#: the import lines of the snippet: each public handle from where docs/api.md says it lives
PUBLIC_PATHS = """
from kstream import KGroupedStream, KGroupedTable, KStream, KTable, StreamBuilder
from kstream.dsl.branched import BranchedKStream
from kstream.dsl.cogroup import (
    CogroupedKStream,
    SessionWindowedCogroupedKStream,
    TimeWindowedCogroupedKStream,
)
from kstream.dsl.windowed import SessionWindowedKStream, TimeWindowedKStream
"""

#: the same names from the module that defines them
API_PATH = """
from kstream.dsl import StreamBuilder
from kstream.dsl.api import (
    BranchedKStream,
    CogroupedKStream,
    KGroupedStream,
    KGroupedTable,
    KStream,
    KTable,
    SessionWindowedCogroupedKStream,
    SessionWindowedKStream,
    TimeWindowedCogroupedKStream,
    TimeWindowedKStream,
)
"""

PIPELINE = """
from typing import Any

from kstream.dsl.windows import SessionWindows, SlidingWindows, TimeWindows


def pipeline(b: StreamBuilder) -> dict[str, Any]:
    clicks: KStream = b.stream("clicks", "str", "long")
    views: KStream = b.stream("views", "str", "long")
    by_user: KGroupedStream = clicks.group_by_key()
    named: KGroupedStream = views.group_by(lambda k, v: k, "str", name="views-by-user")
    by_viewer: KGroupedStream = views.group_by_key()
    counts: KTable = by_user.count()
    totals: KTable = named.reduce(lambda total, v: total + v)
    sums: KTable = by_user.aggregate(lambda: 0, lambda k, v, agg: agg + v)
    tumbling: TimeWindowedKStream = by_user.windowed_by(TimeWindows.of("1m"))
    sliding: TimeWindowedKStream = by_user.windowed_by(SlidingWindows.of("1m"))
    sessions: SessionWindowedKStream = by_viewer.windowed_by(SessionWindows.with_gap("5m"))
    per_minute: KTable = tumbling.count()
    per_slide: KTable = sliding.reduce(lambda total, v: total + v)
    per_session: KTable = sessions.aggregate(
        lambda: 0, lambda k, v, agg: agg + v, lambda k, a1, a2: a1 + a2
    )
    both: CogroupedKStream = by_user.cogroup(lambda k, v, agg: agg + v)
    both = both.cogroup(by_viewer, lambda k, v, agg: agg - v)
    net: KTable = both.aggregate(lambda: 0)
    both_per_minute: TimeWindowedCogroupedKStream = both.windowed_by(TimeWindows.of("1m"))
    both_per_session: SessionWindowedCogroupedKStream = both.windowed_by(
        SessionWindows.with_gap("5m")
    )
    net_per_minute: KTable = both_per_minute.aggregate(lambda: 0)
    net_per_session: KTable = both_per_session.aggregate(lambda: 0, lambda k, a1, a2: a1 + a2)
    regrouped: KGroupedTable = counts.group_by(lambda k, n: (n, k), "long", "str")
    users_per_count: KTable = regrouped.count()
    splitter: BranchedKStream = clicks.split("clicks-")
    branches: dict[str, KStream] = splitter.branch(lambda k, v: v > 0).default_branch()
    changes: KStream = net.to_stream()
    return dict(locals())
"""

#: the public class each local of `pipeline` must be an instance of
EXPECTED = {
    "clicks": "KStream",
    "views": "KStream",
    "by_user": "KGroupedStream",
    "named": "KGroupedStream",
    "by_viewer": "KGroupedStream",
    "counts": "KTable",
    "totals": "KTable",
    "sums": "KTable",
    "tumbling": "TimeWindowedKStream",
    "sliding": "TimeWindowedKStream",
    "sessions": "SessionWindowedKStream",
    "per_minute": "KTable",
    "per_slide": "KTable",
    "per_session": "KTable",
    "both": "CogroupedKStream",
    "net": "KTable",
    "both_per_minute": "TimeWindowedCogroupedKStream",
    "both_per_session": "SessionWindowedCogroupedKStream",
    "net_per_minute": "KTable",
    "net_per_session": "KTable",
    "regrouped": "KGroupedTable",
    "users_per_count": "KTable",
    "splitter": "BranchedKStream",
    "changes": "KStream",
}

#: every module a public handle is importable from today, with the names it offers
PATHS: dict[Any, tuple[str, ...]] = {
    kstream: ("KStream", "KTable", "KGroupedStream", "KGroupedTable"),
    kstream.dsl: ("KStream", "KTable", "KGroupedStream", "BranchedKStream"),
    kstream.dsl.grouped: ("KGroupedStream",),
    kstream.dsl.grouped_table: ("KGroupedTable",),
    kstream.dsl.windowed: ("TimeWindowedKStream", "SessionWindowedKStream"),
    kstream.dsl.branched: ("BranchedKStream",),
    kstream.dsl.cogroup: (
        "CogroupedKStream",
        "TimeWindowedCogroupedKStream",
        "SessionWindowedCogroupedKStream",
    ),
}


def _mypy(program: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(CACHE), str(program)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _write(tmp_path: Path, name: str, imports: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(imports) + textwrap.dedent(body))
    return path


@pytest.mark.parametrize("imports", [PUBLIC_PATHS, API_PATH], ids=["public-paths", "api"])
def test_bare_annotations_of_every_handle_pass_mypy_strict(tmp_path: Path, imports: str) -> None:
    result = _mypy(_write(tmp_path, "user_program.py", imports, PIPELINE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found in 1 source file" in result.stdout


def test_a_wrong_bare_annotation_is_refused(tmp_path: Path) -> None:
    """The control: mypy reads the snippet's annotations, so a wrong one fails the check."""
    body = """
    def wrong(b: StreamBuilder) -> None:
        g: KGroupedTable = b.stream("in").group_by_key()
        w: SessionWindowedKStream = g.windowed_by(TimeWindows.of("1m"))
    """
    imports = PUBLIC_PATHS + "from kstream.dsl.windows import TimeWindows\n"
    result = _mypy(_write(tmp_path, "wrong_program.py", imports, body))
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert 'expression has type "KGroupedStream", variable has type "KGroupedTable"' in out
    assert "Missing type arguments" not in out


def test_every_handle_is_an_instance_of_its_public_class(tmp_path: Path) -> None:
    program = _write(tmp_path, "user_program.py", PUBLIC_PATHS, PIPELINE)
    handles = runpy.run_path(str(program))["pipeline"](StreamBuilder())
    for local, cls_name in EXPECTED.items():
        cls = getattr(kstream.dsl.api, cls_name)
        assert isinstance(handles[local], cls), (local, type(handles[local]), cls)
        assert type(handles[local]) is cls, (local, type(handles[local]))
    branches = handles["branches"]
    assert sorted(branches) == ["clicks-0", "clicks-1"]
    assert all(type(s) is kstream.dsl.api.KStream for s in branches.values())


@pytest.mark.parametrize("module", list(PATHS), ids=lambda m: m.__name__)
def test_every_import_path_names_the_one_public_class(module: Any) -> None:
    for name in PATHS[module]:
        assert getattr(module, name) is getattr(kstream.dsl.api, name), (module.__name__, name)


def test_a_named_grouping_is_a_kgroupedstream_and_names_its_topic() -> None:
    b = StreamBuilder()
    grouped = b.stream("in", "str", "str").select_key(lambda k, v: v).group_by_key(name="by-v")
    assert isinstance(grouped, kstream.KGroupedStream)
    grouped.count(store="n")
    topics = b.build().describe()
    assert "by-v-repartition" in str(topics)
