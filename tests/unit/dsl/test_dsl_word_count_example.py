"""The word-count example, end to end through the test driver (repartition hop included)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

from kstream.testing.driver import TopologyTestDriver

ROOT = pathlib.Path(__file__).resolve().parents[3]


def load_example() -> ModuleType:
    path = ROOT / "examples" / "word_count.py"
    spec = importlib.util.spec_from_file_location("example_word_count", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_word_count_example() -> None:
    wc = load_example()
    with TopologyTestDriver(wc.build_topology(), app_id="wc") as d:
        lines = d.input_topic("lines", "string", "string")
        lines.pipe(None, "The quick fox")
        lines.pipe("k", "the lazy dog, the end")
        out = d.output_topic("word-counts", "string", "long")
        assert out.read_key_values() == [
            ("the", 1),
            ("quick", 1),
            ("fox", 1),
            ("the", 2),
            ("lazy", 1),
            ("dog", 1),
            ("the", 3),
            ("end", 1),
        ]
        store = d.get_store("counts")
        assert store.get("the") == 3
        with store.all() as cursor:
            assert list(cursor) == [
                ("dog", 1),
                ("end", 1),
                ("fox", 1),
                ("lazy", 1),
                ("quick", 1),
                ("the", 3),
            ]
    assert "wc-counts-repartition" in d.compiled.repartition_topics
    assert "wc-counts-changelog" in d.compiled.changelog_topics


def test_word_count_module_level_topology() -> None:
    wc = load_example()
    assert str(wc.topology.describe()) == str(wc.build_topology().describe())
