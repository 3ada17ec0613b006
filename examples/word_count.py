"""Word count: the "hello world" of stream processing.

Reads lines from `lines`, splits them into words and writes the running count of every word to
`word-counts` (key: the word as a string, value: the count as a Java long). Grouping by word
changes the key, so the counts are computed after a repartition topic and survive restarts in
the `counts` store.

Run it with `kstreamd run examples.word_count:topology`, or print it with
`kstreamd describe examples.word_count:topology --format mermaid`.
"""

from __future__ import annotations

import re

from kstream.dsl import StreamBuilder
from kstream.topology import Topology

_WORD = re.compile(r"\w+")


def words(line: str) -> list[str]:
    return _WORD.findall(line.lower())


def count_words(builder: StreamBuilder, input_topic: str, output_topic: str) -> None:
    """Add the word count to `builder` (beside whatever else it builds)."""
    (
        builder.stream(input_topic, key_serde="string", value_serde="string")
        .flat_map_values(words)
        .group_by(lambda _key, word: word, key_serde="string")
        .count(store="counts")
        .to_stream()
        .to(output_topic, key_serde="string", value_serde="long")
    )


def build_topology(input_topic: str = "lines", output_topic: str = "word-counts") -> Topology:
    builder = StreamBuilder()
    count_words(builder, input_topic, output_topic)
    return builder.build()


topology = build_topology()
