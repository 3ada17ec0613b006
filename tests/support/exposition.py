"""`lint_exposition`: the checks a /metrics page must pass (names, units, label cardinality).

A test tool, not part of the library: the metric tests run it over every page kstream serves.
"""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from kstream.metrics import APP_STATES, DROP_REASONS, ERROR_KINDS, STANDARD_PREFIXES

__all__ = ["lint_exposition"]


_BOUNDED_LABELS: dict[str, set[str]] = {
    "reason": {*DROP_REASONS, *ERROR_KINDS, "other"},
    "state": set(APP_STATES) | {"other"},
}


def lint_exposition(text: str, max_series_per_family: int = 200) -> list[str]:
    """Problems in a /metrics page: names, units, counter suffixes, label cardinality."""
    problems: list[str] = []
    families = list(text_string_to_metric_families(text))
    if not families:
        return ["no metrics at all"]
    for fam in families:
        name = fam.name
        if name.startswith(STANDARD_PREFIXES):
            continue  # prometheus_client's own collectors, named by their convention
        if not name.startswith("kstream_"):
            problems.append(f"{name}: missing the kstream_ prefix")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            problems.append(f"{name}: not snake_case")
        for bad in ("_ms", "_millis", "_milliseconds", "_kb", "_mb", "_percent"):
            if name.endswith(bad) or f"{bad}_" in name:
                problems.append(f"{name}: use base units (seconds, bytes, ratios)")
        if fam.type == "counter":
            for s in fam.samples:
                if not s.name.endswith("_total"):
                    problems.append(f"{s.name}: a counter sample must end in _total")
        elif name.endswith("_total"):
            problems.append(f"{name}: only counters end in _total")
        if fam.type == "summary":
            problems.append(f"{name}: use histograms, not summaries")
        if fam.type == "histogram" and "duration" in name and not name.endswith("_seconds"):
            problems.append(f"{name}: durations are in seconds")
        if len(fam.samples) > max_series_per_family:
            problems.append(f"{name}: {len(fam.samples)} series (unbounded labels?)")
        for s in fam.samples:
            for label, value in s.labels.items():
                allowed = _BOUNDED_LABELS.get(label)
                if allowed is not None and value not in allowed:
                    problems.append(f"{s.name}: label {label}={value!r} is not in the fixed set")
                if label == "partition" and not value.isdigit():
                    problems.append(f"{s.name}: partition label {value!r} is not a number")
    return problems
