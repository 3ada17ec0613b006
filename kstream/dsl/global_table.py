"""`GlobalKTable`: a table replicated in full on every instance (from
`StreamBuilder.global_table`), which streams join by a key derived from the record."""

from __future__ import annotations

from kstream.dsl.processors.getter import ValueGetter
from kstream.serde import Serde


class GlobalKTable:
    """A table replicated in full on every instance: joined by a key derived from the record.

    It has no operators of its own: streams join it with
    `stream.join(global_table, key_selector(k, v), joiner(v, gv))` (or `left_join`), with no
    repartition and no co-partitioning; `store_name` names its store for queries.

    Example:
        >>> from kstream.testing import TopologyTestDriver
        >>> b = StreamBuilder()
        >>> countries = b.global_table("countries", "str", "str")
        >>> orders = b.stream("orders", "str", "json")
        >>> named = orders.join(countries, lambda k, o: o["country"], lambda o, c: c)
        >>> named.to("out", "str", "str")
        >>> with TopologyTestDriver(b) as d:
        ...     d.input_topic("countries", "str", "str").pipe("no", "Norway")
        ...     d.input_topic("orders", "str", "json").pipe("o1", {"country": "no"})
        ...     d.output_topic("out", "str", "str").read_key_values()
        [('o1', 'Norway')]
    """

    def __init__(
        self, store: str, topic: str, key_serde: Serde | None, value_serde: Serde | None
    ) -> None:
        self.store_name = store
        self.topic = topic
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._getter = ValueGetter(store)

    def __repr__(self) -> str:
        return f"GlobalKTable({self.store_name!r} <- {self.topic!r})"
