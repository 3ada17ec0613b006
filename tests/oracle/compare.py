"""Comparing kstream's answer to a case with Kafka Streams' answer.

Outputs must be equal record for record, in order, per output topic (each test driver has one
partition per topic, so a topic's order is its partition's order). Stores must hold the same
rows; the order a store iterates in is not compared (Kafka's in-memory stores order by key
bytes, kstream's by its own key encoding), so rows are sorted first.

A window or session store is compared only when its node sets a `retention` (longer than the
case's timestamps): which expired windows a store still lists is each implementation's own
(Kafka's in-memory window store drops a window at exactly `stream time - retention`, its
RocksDB stores keep whole segments, kstream's keeps it), so with the default retention the
contents are not a semantic answer. Outputs are compared in every case.
"""

from __future__ import annotations

from typing import Any

from oracle.spec import Answer, Case


def _order(row: list[Any]) -> tuple[Any, ...]:
    """A sort key for rows holding None, strings and ints."""
    return tuple((v is None, type(v).__name__, v if v is not None else 0) for v in row)


def compared_stores(case: Case) -> set[str]:
    """The stores whose contents `differences` compares (see the module docstring)."""
    return {
        n["store"]
        for n in case.nodes
        if "store_kind" in n and (n["store_kind"] == "kv" or "retention" in n)
    }


def differences(case: Case, mine: Answer, theirs: Answer) -> list[str]:
    """What differs, one entry per topic or store; empty when the answers agree."""
    if "error" in theirs or "error" in mine:
        return [f"kstream: {mine.get('error', 'ran')}\nKafka Streams: {theirs.get('error', 'ran')}"]
    out = []
    for topic in sorted(set(mine["outputs"]) | set(theirs["outputs"])):
        a, b = mine["outputs"].get(topic), theirs["outputs"].get(topic)
        if a != b:
            out.append(f"topic {topic}:\n  kstream:       {a}\n  Kafka Streams: {b}")
    for name in sorted(compared_stores(case)):
        a = sorted(mine["stores"].get(name, []), key=_order)
        b = sorted(theirs["stores"].get(name, []), key=_order)
        if a != b:
            out.append(f"store {name}:\n  kstream:       {a}\n  Kafka Streams: {b}")
    return out
