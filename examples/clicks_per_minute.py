"""Clicks per user per minute: tumbling one-minute windows, one final result per window.

Reads click events from `clicks` (key: user id as a string, value: JSON) and writes, once a
minute has closed, how many clicks each user made in it to `clicks-per-minute` (key: Kafka's
time-windowed string key, i.e. the user id followed by the window start as an 8-byte long;
value: the count as a Java long). Clicks up to 10 seconds late still count; later ones are
dropped. A minute also closes when clicks stop coming: after about a second of wall-clock
silence, stream time follows the wall clock (see `kstream.dsl.processors.windowed`).

Run it with `kstreamd run examples.clicks_per_minute:topology`.
"""

from __future__ import annotations

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import TimeWindows
from kstream.topology import Topology


def count_clicks(builder: StreamBuilder, input_topic: str, output_topic: str) -> None:
    """Add the clicks-per-minute count to `builder` (beside whatever else it builds)."""
    (
        builder.stream(input_topic, key_serde="string", value_serde="json")
        .group_by_key()
        .windowed_by(TimeWindows.of("1m", grace="10s"))
        .count(store="clicks-per-minute", emit="final")
        .to_stream()
        .to(output_topic)  # the table's serdes: time-windowed string keys, long counts
    )


def build_topology(
    input_topic: str = "clicks", output_topic: str = "clicks-per-minute"
) -> Topology:
    builder = StreamBuilder()
    count_clicks(builder, input_topic, output_topic)
    return builder.build()


topology = build_topology()
