"""The join operators of `KStream` (`join`, `left_join`, `outer_join`): their arguments and
null-key rules; `kstream.dsl.joins` builds the joins. `KStream` inherits them from `StreamJoins`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

from kstream.dsl.global_table import GlobalKTable
from kstream.dsl.handles import StreamHandle, TableHandle, TableT
from kstream.dsl.joins import join_stream

if TYPE_CHECKING:
    from kstream.dsl.joined import Joined
    from kstream.dsl.windows import JoinWindows


class StreamJoins(StreamHandle[TableT]):
    """The join operators of `KStream`, which is the only class to inherit them."""

    def join(
        self,
        other: StreamHandle[Any] | TableHandle[Any] | GlobalKTable,
        *args: Callable[..., Any],
        window: JoinWindows | None = None,
        name: str | None = None,
        with_key: bool = False,
        joined: Joined | None = None,
        **kwargs: Callable[..., Any] | None,
    ) -> Self:
        """Inner join with a stream (windowed), a table or a global table: matches only.

        - `join(other_stream, joiner(v, ov), window=JoinWindows.of(...))`: a record joins every
          record of the other stream with the same key within the window; the result carries the
          larger of the two timestamps. Out-of-order records still join what the other side keeps.
        - `join(table, joiner(v, tv))`: a stream record looks up the table's current value; the
          result keeps the stream record's timestamp; table updates alone emit nothing.
        - `join(global_table, key_selector(k, v), joiner(v, gv))`: looked up by the selected key,
          without repartitioning (every instance holds the whole table).

        None keys and values are dropped (counted). A stream whose key changed is repartitioned
        first; the two sides of a stream or table join must be co-partitioned.

        With `with_key=True` the joiner is `joiner(key, v, ov)` (Kafka's `ValueJoinerWithKey`),
        in every join here (and left and outer ones); the key is the stream record's, also
        in a global-table join (not the selected lookup key), as in Kafka.

        A versioned table (`StreamBuilder.table(..., versioned=...)`) is read as of each
        stream record's timestamp (KIP-914). `joined=Joined.with_grace_period(grace)`
        (kstream.dsl.joined, versioned tables only, grace <= history retention) holds stream
        records back until stream time passes their timestamp + grace, then joins them in
        timestamp order (KIP-923), so a table update that arrives late is still seen.

        Example:
            enriched = orders.join(customers, lambda order, customer: {**order, "c": customer})
            keyed = orders.join(customers, lambda k, o, c: {**o, "id": k, "c": c}, with_key=True)
            pairs = clicks.join(views, lambda c, v: (c, v), window=JoinWindows.of("5s"))
        """
        return self._join("inner", other, args, window, name, kwargs, with_key, joined)

    def left_join(
        self,
        other: StreamHandle[Any] | TableHandle[Any] | GlobalKTable,
        *args: Callable[..., Any],
        window: JoinWindows | None = None,
        name: str | None = None,
        with_key: bool = False,
        joined: Joined | None = None,
        **kwargs: Callable[..., Any] | None,
    ) -> Self:
        """Left join (see `join`): every record of this stream produces a result.

        Without a match the joiner gets None for the other side: `joiner(v, None)`. For a
        stream-stream join that result is held until the window has closed in stream time
        (after + grace), so no spurious unmatched result precedes a late match (Kafka 3.1+). A
        None key is not dropped: it produces `joiner(v, None)` at its own timestamp (Kafka
        3.7+, KIP-962), and repartition topics above keep None keys.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> customers = b.table("customers", "str", "str")
            >>> orders = b.stream("orders", "str", "str")
            >>> orders.left_join(customers, lambda o, c: f"{o} for {c}").to("out", "str", "str")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("customers", "str", "str").pipe("c1", "ann")
            ...     d.input_topic("orders", "str", "str").pipe_many([("c1", "tea"), ("c2", "jam")])
            ...     d.output_topic("out", "str", "str").read_values()
            ['tea for ann', 'jam for None']
        """
        return self._join("left", other, args, window, name, kwargs, with_key, joined)

    def outer_join(
        self,
        other: StreamHandle[Any] | TableHandle[Any] | GlobalKTable,
        *args: Callable[..., Any],
        window: JoinWindows | None = None,
        name: str | None = None,
        with_key: bool = False,
        **kwargs: Callable[..., Any] | None,
    ) -> Self:
        """Outer join of two streams (windowed): records of either side without a match are emitted
        with None for the other side once their window has closed, `joiner(v, None)` or
        `joiner(None, ov)`; see `join` and `left_join` for timestamps and None keys.

        Example:
            >>> from kstream.dsl.windows import JoinWindows
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> left, right = b.stream("left", "str", "str"), b.stream("right", "str", "str")
            >>> both = left.outer_join(right, lambda x, y: f"{x}+{y}", window=JoinWindows.of(10))
            >>> both.to("out", "str", "str")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("left", "str", "str").pipe_many([("k", "a", 0), ("j", "b", 0)])
            ...     d.input_topic("right", "str", "str").pipe("k", "x", timestamp=5)
            ...     d.input_topic("left", "str", "str").pipe("k", "c", timestamp=50)  # closes 0..10
            ...     d.output_topic("out", "str", "str").read_values()
            ['a+x', 'b+None']
        """
        return self._join("outer", other, args, window, name, kwargs, with_key)

    def _join(
        self,
        kind: str,
        other: StreamHandle[Any] | TableHandle[Any] | GlobalKTable,
        args: tuple[Callable[..., Any], ...],
        window: JoinWindows | None,
        name: str | None,
        kwargs: dict[str, Callable[..., Any] | None],
        with_key: bool = False,
        joined: Joined | None = None,
    ) -> Self:
        # join(stream|table, joiner) or join(global_table, key_selector, joiner)
        key_selector = kwargs.pop("key_selector", None)
        joiner = kwargs.pop("joiner", None)
        if kwargs:
            raise TypeError(f"{kind} join: unexpected arguments {sorted(kwargs)}")
        if len(args) == 2:
            key_selector, joiner = args
        elif len(args) == 1:
            joiner = args[0]
        elif args:
            raise TypeError(
                f"{kind} join: expected (other, joiner) or (other, key_selector, joiner)"
            )
        if kind != "inner":
            self._builder.keep_null_keys_upstream(self._node)
            if isinstance(other, StreamHandle):
                self._builder.keep_null_keys_upstream(other._node)
        return join_stream(
            self,
            other,
            joiner,
            kind=kind,
            window=window,
            key_selector=key_selector,
            name=name,
            with_key=with_key,
            joined=joined,
        )
