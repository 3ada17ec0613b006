"""Comparing kstream's answer to a case with Kafka Streams' answer.

Outputs must be equal record for record, in order, per output topic (each test driver has one
partition per topic, so a topic's order is its partition's order). Stores must hold the same
rows; the order a store iterates in is not compared (Kafka's in-memory stores order by key
bytes, kstream's by its own key encoding), so rows are sorted first.

A window or session store is compared only when its node sets a `retention` (longer than the
case's timestamps): which expired windows a store still lists is each implementation's own
(Kafka's in-memory window store drops a window at exactly `stream time - retention`, its
RocksDB stores keep whole segments, kstream's keeps it), so with the default retention the
contents are not a semantic answer. Outputs are compared in every case. A table operator's
`materialized` result store is a key-value store, compared always; a versioned table's store
(no iterator in Kafka) and a suppress buffer (not queryable in Kafka) are never.

An answer's `error` is a whole-case failure (a stack trace), which always differs, or the kind
of a failure a case expects (`EXPECTED_FAILURES`: a suppress buffer that shuts down when
full): then both sides must fail so, on the same input record, and nothing else is compared
(which records of that input's fan-out reached other operators before the failure is each
one's own order, and a failed task's output is aborted under exactly-once anyway).
"""

from __future__ import annotations

from typing import Any

from oracle.spec import Answer, Case, answer_stores

EXPECTED_FAILURES = ("buffer_full",)


def _order(row: list[Any]) -> tuple[Any, ...]:
    """A sort key for rows holding None, strings and ints."""
    return tuple((v is None, type(v).__name__, v if v is not None else 0) for v in row)


def compared_stores(case: Case) -> set[str]:
    """The stores whose contents `differences` compares (see the module docstring)."""
    retained = {n["store"] for n in case.nodes if "retention" in n}
    return {name for name, kind in answer_stores(case) if kind == "kv" or name in retained}


def differences(case: Case, mine: Answer, theirs: Answer) -> list[str]:
    """What differs, one entry per topic or store; empty when the answers agree."""
    failed = {mine.get("error"), theirs.get("error")}
    if failed != {None}:
        expected = len(failed) == 1 and failed <= set(EXPECTED_FAILURES)
        if expected and mine.get("failed_at") == theirs.get("failed_at"):
            return []
        at = f" at record {mine.get('failed_at')} / {theirs.get('failed_at')}" if expected else ""
        return [
            f"kstream: {mine.get('error', 'ran')}\nKafka Streams: {theirs.get('error', 'ran')}{at}"
        ]
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
