"""One `/metrics` page from the pages of several worker processes of one app.

The supervisor of `kstreamd run --processes N` scrapes every worker's own `/metrics` and
serves the union. Every series of a worker already carries `app_id` and `instance_id` (see
`kstream.metrics`), and every worker has its own instance id, so the union keeps every series
distinct without renaming anything; the worker's labels are still added to any sample that
lacks them (or has them empty), and a series seen twice is kept once, so the page stays valid
whatever a worker serves. Families are merged by name: one HELP and TYPE line, then the
samples of every worker.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

log = logging.getLogger("kstream.service")

__all__ = ["Scrape", "merge_expositions"]


@dataclass(frozen=True)
class Scrape:
    """One worker's exposition text and the labels that identify it."""

    labels: Mapping[str, str]
    text: str


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def merge_expositions(scrapes: Iterable[Scrape], extra: Iterable[Metric] = ()) -> bytes:
    """The Prometheus text exposition of every scrape's families plus `extra`.

    A scrape that does not parse is left out (and logged), not allowed to break the page.
    """
    merged: dict[str, Metric] = {}
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()

    def add(fam: Metric, labels: Mapping[str, str]) -> None:
        into = merged.get(fam.name)
        if into is None:
            into = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            merged[fam.name] = into
        elif into.type != fam.type:
            log.warning(
                "metrics: %s is a %s and a %s; kept the first", fam.name, into.type, fam.type
            )
            return
        for s in fam.samples:
            # an empty label is no label to Prometheus: the worker's value fills it
            full = {**labels, **{k: v for k, v in s.labels.items() if v or k not in labels}}
            key = (s.name, tuple(sorted(full.items())))
            if key in seen:
                continue
            seen.add(key)
            into.samples.append(s._replace(labels=full))

    for scrape in scrapes:
        try:
            families = list(text_string_to_metric_families(scrape.text))
        except Exception as e:  # a half-written page from a worker that is going away
            log.warning("metrics of %s do not parse: %s", dict(scrape.labels), e)
            continue
        for fam in families:
            add(fam, scrape.labels)
    for fam in extra:
        add(fam, {})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(list(merged.values())))
    return generate_latest(registry)
