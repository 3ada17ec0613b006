"""The README's Kafka Streams comparison is a copy of rows of `bench/results/fair.json`.

Every figure the README publishes must trace to a row of the fair run's results; a README
edited by hand after a new run, or a run committed without restating the README, fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HEADER = "| pipeline (kstream row / Kafka Streams row) |"

# the README's first column -> (kstream row, Kafka Streams row) of fair.json
ROWS = {
    "P1": ("kstream P1", "kafka-streams P1"),
    "P2, caches on, in memory": ("kstream P2 memory cache on", "kafka-streams P2 memory cache on"),
    "P2, caches on, lmdb / RocksDB": (
        "kstream P2 lmdb cache on",
        "kafka-streams P2 rocksdb cache on",
    ),
    "P3, caches on, in memory": ("kstream P3 memory cache on", "kafka-streams P3 memory cache on"),
    "P3, caches on, lmdb / RocksDB": (
        "kstream P3 lmdb cache on",
        "kafka-streams P3 rocksdb cache on",
    ),
}


def readme_table() -> dict[str, list[str]]:
    lines = (ROOT / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
    table: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        label = re.sub(r"\s*\(.*\)$", "", cells[0])
        table[label] = cells[1:]
    return table


def test_every_readme_figure_is_a_row_of_the_fair_run() -> None:
    fair = json.loads((ROOT / "bench" / "results" / "fair.json").read_text())
    rows = {r["row"]: r for r in fair["rows"]}
    ratios = {r["row"]: r for r in fair["ratios"]}
    table = readme_table()
    assert set(table) == set(ROWS), f"README rows {sorted(table)}, expected {sorted(ROWS)}"
    for label, (ours, theirs) in ROWS.items():
        shown = table[label]
        expected = [
            f"{rows[ours]['records_per_s']['median']:,.0f}",
            f"{rows[theirs]['records_per_s']['median']:,.0f}",
            f"{ratios[ours]['vs_kafka_streams_records_per_s']:.2f}x",
            f"{ratios[ours]['vs_kafka_streams_cpu_per_record']:.2f}x",
        ]
        assert shown == expected, f"README row {label!r}: {shown}, fair.json gives {expected}"
