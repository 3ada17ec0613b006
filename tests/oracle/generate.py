"""Hypothesis strategies for oracle cases: random topologies and the records to pipe in.

A topology grows from one or two sources by up to `MAX_OPS` steps; each step applies an
operator to one of the open handles (a stream, a table, a grouped stream, ...), so the result
is a chain, a tree (split, or a handle used twice) or a graph with two-input operators (merge,
joins), which bring a new source when no fitting second input exists. Then every grouped
handle is aggregated and every open stream or table is written to an output topic.

Sources and `toTable` keep their table in a named store or, half the time, in none (Kafka
then materializes it on demand: a join reading it first changes what a filter made after
forwards). Inputs use a small key alphabet with None, None values and empty texts (no bytes
once serialized), headers on some records, and
timestamps that mostly move forward but also step back, by more than the grace of the windows
at times, so late records and out-of-order joins happen often; topologies with a wall-clock
punctuation also get wall-clock advances between records. Everything drawn shrinks towards
fewer operators, fewer records, and the first choice of each list.

The operators of ported applications (issue 37) are drawn among the others: cogroups of one
to three grouped streams (windowed when the first grouping drew windows), suppress of tables
and windowed tables, foreign-key joins, `transformValues`, sinks with a topic chooser, sources
with a timestamp extractor, and, one time in four, a user's name on a nameable operator, a
grouping's name, and a `materialized` store of a table operator's result. A foreign-key join
and a suppress only take tables whose serdes Kafka knows (it has no default serde here); a join
of a table that comes through a repartition topic often takes a second such table (a new
stream grouped by a key selector and counted), so both sides' sub-topologies read each
other's subscription topics. Versioned tables get out-of-order updates like any other topic.

Where kstream differs from Kafka Streams on purpose or by a known divergence, the generator
avoids the shape, with a comment naming the divergence (and the README lists it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import strategies as st

from oracle import library as lib
from oracle.spec import Case, KstreamBuilder, Node

MAX_OPS = 6
KEYS = ("a", "b", "c", None)
# "" serializes to no bytes, which Kafka reads as null in places (a foreign-key join's answer)
STRING_VALUES = ("x", "ab", "y", "ba", "q", None, "")
MAX_RECORDS = 20
LONG_RETENTION = 1000  # longer than any case's timestamps (at most 15 * MAX_RECORDS)
T = TypeVar("T")
STREAM_OPS = {
    "stateless": (
        "filter", "mapValues", "map", "selectKey", "flatMapValues", "filterNot", "flatMap",
        "repartition",
    ),
    "group": ("groupByKey", "groupBy"),
    "join": ("join", "leftJoin", "outerJoin"),
    "route": ("split", "merge"),
    "toTable": ("toTable",),
    # the operators ported apps use (issue 37): a kind of their own, so they are drawn often
    "ported": ("processValues", "mapValuesWithKey", "flatMapValuesWithKey"),
    # user processors of the Processor API: stores, punctuations, headers
    "processor": ("process",),
}  # fmt: skip

STREAM, TABLE, GLOBAL = "stream", "table", "global"
GROUPED, GROUPED_TABLE, WINDOWED = "grouped", "grouped_table", "windowed"
COGROUPED, WINDOWED_COGROUP = "cogrouped", "windowed_cogroup"
# operators a user may name (Kafka's `Named.as`, `Produced.as`, `Consumed.as`): the node's
# processors then keep that name (issue 37); a grouping is named by `grouped`
NAMEABLE = {
    "stream", "table", "filter", "filterNot", "mapValues", "map", "selectKey", "flatMap",
    "flatMapValues", "processValues", "merge", "toStream", "to", "transformValues", "suppress",
}  # fmt: skip
# table operators whose result a user may keep in a store of its own (`Materialized.as`)
MATERIALIZABLE = {
    "filter",
    "filterNot",
    "mapValues",
    "transformValues",
    "join",
    "leftJoin",
    "outerJoin",
}


@dataclass
class Handle:
    """What a node gives to the operators after it."""

    id: int
    kind: str
    vt: str
    windowed: bool = False  # a table keyed by windows: only toStream applies
    windows: dict[str, Any] | None = None  # a grouped stream's windows, drawn when grouped


@dataclass
class _Graph:
    draw: Any
    nodes: list[Node] = field(default_factory=list)
    open: list[Handle] = field(default_factory=list)
    tables: list[Handle] = field(default_factory=list)
    globals: list[Handle] = field(default_factory=list)
    streams: list[Handle] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # input topic -> value type
    table_join: bool = False
    wall_clock: bool = False  # a processor punctuates on the wall clock: inputs advance it
    headers: bool = False  # a processor adds headers
    sessions: bool = False  # session windows are drawn
    multi: set[int] = field(default_factory=set)  # nodes that may give several records for one

    def pick(self, options: Sequence[T]) -> T:
        return self.draw(st.sampled_from(options))

    def add(self, op: str, inputs: Sequence[Handle], vt: str, kind: str, **fields: Any) -> Handle:
        nid = len(self.nodes)
        node: Node = {"id": nid, "op": op, "vt": vt, **fields}
        if inputs:
            node["in"] = [h.id for h in inputs]
        self.names(node, inputs, kind)
        # (a punctuating processor emits its whole buffer at once)
        many = op in ("flatMap", "flatMapValues", "windowedBy") or "window" in fields
        many = many or "interval" in fields
        if many or (op == "groupBy" and kind == GROUPED_TABLE):
            self.multi.add(nid)
        self.nodes.append(node)
        handle = Handle(nid, kind, vt)
        if kind == STREAM:
            self.streams.append(handle)
        elif kind == TABLE:
            self.tables.append(handle)
        elif kind == GLOBAL:
            self.globals.append(handle)
        return handle

    def names(self, node: Node, inputs: Sequence[Handle], kind: str) -> None:
        """Names and result stores a user may give (issue 37), drawn now and then: a name on
        the nameable operators and on the aggregations of a grouped stream or table (not
        windowed), a grouping's name, and a table operator's `materialized` store."""
        op, nid = node["op"], node["id"]
        grouped = inputs and inputs[0].kind in (GROUPED, GROUPED_TABLE, COGROUPED)
        aggregation = op in ("count", "reduce", "aggregate") and grouped
        tables = kind == TABLE and all(h.kind == TABLE for h in inputs)
        if (op in NAMEABLE or aggregation or (tables and op in MATERIALIZABLE)) and self.odds():
            node["name"] = f"n{nid}"
        if op in ("groupBy", "groupByKey") and self.odds():
            node["grouped"] = f"g{nid}"
        if tables and op in MATERIALIZABLE and self.odds():
            node["materialized"] = f"m{nid}"

    def odds(self) -> bool:
        """One time in four."""
        return bool(self.pick((False, False, False, True)))

    # --- sources --------------------------------------------------------------------------

    def source(self, kind: str) -> Handle:
        vt = self.pick((lib.STRING, lib.LONG))
        topic = f"in{len(self.nodes)}"
        self.sources[topic] = vt
        fields: dict[str, Any] = {"topic": topic}
        extractors = self.fns(lib.TIMESTAMP_EXTRACTORS, vt)
        if kind == GLOBAL:
            # Known difference (docs/differences.md, "Dropped records"): a global table loads
            # a record its extractor makes negative in Kafka, not in kstream
            extractors = [e for e in extractors if e.name == "value_time"]
        if extractors and self.odds():  # Consumed.withTimestampExtractor
            fields["extractor"] = self.pick(extractors).name
        if kind == STREAM:
            return self.add("stream", [], vt, STREAM, **fields)
        named = {"store": f"s{len(self.nodes)}", "store_kind": "kv"}
        if kind == GLOBAL:
            return self.add("globalTable", [], vt, kind, **named, **fields)
        if self.odds():  # a versioned table (KIP-889): its history retention
            fields["versioned"] = self.pick((10, 30, LONG_RETENTION))
            return self.add("table", [], vt, kind, **named, **fields)
        return self.add("table", [], vt, kind, **self.table_store(), **fields)

    def table_store(self) -> dict[str, Any]:
        """A table source's or `toTable`'s store: named, or, one time in two, none (Kafka then
        materializes the table only when a join reads it or an operator needs its old
        values, and a filter made after that drops updates invisible before and after: an
        unnamed table joined, then filtered, is the shape of issue 47)."""
        if self.draw(st.booleans()):
            return {}
        return {"store": f"s{len(self.nodes)}", "store_kind": "kv"}

    # --- steps ----------------------------------------------------------------------------

    def step(self) -> None:
        h = self.pick(self.open)
        keep = self.draw(st.booleans()) and h.kind in (STREAM, TABLE) and not h.windowed
        made = self.apply(h)
        if not keep:
            self.open.remove(h)
        self.open.extend(made)

    def apply(self, h: Handle) -> list[Handle]:
        if h.kind == STREAM:
            return self.stream_op(h)
        if h.kind == TABLE:
            return self.table_op(h)
        return [self.aggregation(h)]

    def fns(self, table: dict[str, lib.Fn], vt: str) -> list[lib.Fn]:
        return [f for f in table.values() if f.accepts in (None, vt)]

    def stream_op(self, h: Handle) -> list[Handle]:
        # a kind of operator first, so that stateful ones are as likely as stateless ones
        kind = self.pick(("stateless", "group", "join", "route", "toTable", "ported", "processor"))
        op = self.pick(STREAM_OPS[kind])
        vt = h.vt
        if op in ("filter", "filterNot"):
            fn = self.pick(self.fns(lib.PREDICATES, vt))
            return [self.add(op, [h], vt, STREAM, fn=fn.name)]
        if op in ("mapValues", "map", "flatMap", "flatMapValues", "selectKey", "processValues"):
            table = {
                "mapValues": lib.VALUE_MAPPERS,
                "processValues": lib.VALUE_MAPPERS,
                "map": lib.KV_MAPPERS,
                "flatMap": lib.FLAT_MAPPERS,
                "flatMapValues": lib.FLAT_VALUE_MAPPERS,
                "selectKey": lib.KEY_SELECTORS,
            }[op]
            fn = self.pick(self.fns(table, vt))
            return [self.add(op, [h], fn.output(vt), STREAM, fn=fn.name)]
        if op == "split":
            return self.split(h)
        if op in ("mapValuesWithKey", "flatMapValuesWithKey"):
            return [self.with_key(h, op.removesuffix("WithKey"), STREAM)]
        if op == "merge":
            other = self.other(h, STREAM, vt)
            return [self.add("merge", [h, other], vt, STREAM)]
        if op == "repartition":
            return [self.add("repartition", [h], vt, STREAM)]
        if op == "toTable":
            return [self.add("toTable", [h], vt, TABLE, **self.table_store())]
        if op in ("groupByKey", "groupBy"):
            return [self.group(h, op)]
        if op == "process":
            return [self.process(h)]
        return [self.stream_join(h, op)]

    def process(self, h: Handle) -> Handle:
        """A user processor of the library, with its store and punctuation interval."""
        # Known difference (docs/differences.md, "Output and emission"): three or more
        # punctuations due at once fire in another order than Kafka's; two at most
        punctuating = sum(1 for n in self.nodes if "interval" in n)
        procs = [
            p
            for p in lib.PROCESSORS.values()
            if not (self.sessions and p.name == "add_header")
            and not (punctuating >= 2 and p.punctuation is not None)
        ]
        proc = self.pick(procs)
        if proc.name == "add_header":
            self.headers = True
        fields: dict[str, Any] = {"processor": proc.name}
        if proc.store:
            fields.update(store=f"s{len(self.nodes)}", store_kind="kv")
        if proc.punctuation is not None:
            fields["interval"] = self.pick((5, 10))
        if proc.punctuation == "wall_clock":
            self.wall_clock = True
        return self.add("process", [h], proc.output(h.vt), STREAM, **fields)

    def split(self, h: Handle) -> list[Handle]:
        """`split()` with `Branched` branches: named or not, some with a `mapValues` chained
        inline (`Branched.with_function`), with or without a default branch."""
        preds = self.fns(lib.PREDICATES, h.vt)
        mappers = self.fns(lib.VALUE_MAPPERS, h.vt)
        n = self.draw(st.integers(1, 2))
        specs: list[dict[str, Any]] = []
        for i in range(n + 1):
            br: dict[str, Any] = {} if i < n else {"default": True}
            if i < n:
                br["fn"] = self.pick(preds).name
            if self.draw(st.booleans()):
                br["name"] = self.pick((f"b{i}", f"{i}{i}"))
            if self.draw(st.booleans()):
                br["map"] = self.pick(mappers).name
            specs.append(br)
        dflt = specs.pop()
        default = (
            None if self.draw(st.booleans()) else {k: v for k, v in dflt.items() if k != "default"}
        )
        named = self.draw(st.booleans())
        split = self.add("split", [h], h.vt, "split", named=named, branches=specs, default=default)
        out = [*specs, *([default] if default is not None else [])]
        return [
            self.add(
                "branch",
                [split],
                lib.VALUE_MAPPERS[br["map"]].output(h.vt) if "map" in br else h.vt,
                STREAM,
                index=i,
            )
            for i, br in enumerate(out)
        ]

    def with_key(self, h: Handle, op: str, kind: str) -> Handle:
        """`mapValues` / `flatMapValues` with a ValueMapperWithKey."""
        table = lib.VALUE_MAPPERS_WITH_KEY if op == "mapValues" else lib.FLAT_VALUE_MAPPERS_WITH_KEY
        fn = self.pick(self.fns(table, h.vt))
        return self.add(op, [h], fn.output(h.vt), kind, fn=fn.name, with_key=True)

    def group(self, h: Handle, op: str) -> Handle:
        """A grouped stream, and the windows (if any) its aggregation will use."""
        windows = self.windows() if self.pick((True, False, True)) else None
        if windows is not None and windows["type"] != "sliding":
            # Known difference (README, "Dropped records"): kstream's time and session
            # windows drop None values, Kafka's aggregate them; only sliding windows agree.
            h = self.add("filter", [h], h.vt, STREAM, fn="value_not_null")
        fields = {}
        if op == "groupBy":
            fields["fn"] = self.pick(self.fns(lib.KEY_SELECTORS, h.vt)).name
        grouped = self.add(op, [h], h.vt, GROUPED, **fields)
        grouped.windows = windows
        return grouped

    def other(self, h: Handle, kind: str, vt: str | None = None) -> Handle:
        """A second input of `kind` for a two-input operator: an existing one, or a new
        source."""
        if kind == STREAM:
            pool = self.streams
        elif kind == TABLE:
            pool = self.tables
        else:
            pool = self.globals
        fits = [
            o
            for o in pool
            if o.id != h.id and not o.windowed and vt in (None, o.vt) and not self.rejoins(h, o)
        ]
        if fits and self.draw(st.booleans()):
            return self.pick(fits)
        if vt is not None:
            new = self.source(kind)
            if new.vt != vt:  # the source's type was drawn: convert (a stream only)
                fn = "len" if new.vt == lib.STRING else "str"
                return self.add("mapValues", [new], vt, STREAM, fn=fn)
            return new
        return self.source(kind)

    def ancestors(self, nid: int) -> set[int]:
        """`nid` and every node above it."""
        seen, todo = set(), [nid]
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(self.nodes[n].get("in", ()))
        return seen

    def rejoins(self, h: Handle, o: Handle) -> bool:
        """Known divergence: kstream forwards a batch through one child, then the next, where
        Kafka forwards each record through all children first; when a node that gives several
        records for one input feeds both inputs of a merge or join, the two paths' records
        meet in another order. Two inputs with such a node above both are not joined.

        Known difference of the test drivers (docs/differences.md, "Test driver"): when both
        inputs come through repartition topics from one upstream record, Kafka's driver picks
        among the task's partitions by head timestamp, equal ones in its priority queue's
        order; kstream's takes records in the order they were written. Two re-keyed inputs
        with a common node above both are not joined either."""
        common = self.ancestors(h.id) & self.ancestors(o.id)
        return bool(common & self.multi) or bool(
            common and self.rekeyed(h.id) and self.rekeyed(o.id)
        )

    def meets(self, grouped: list[int], stream: int, repartitioned: bool) -> bool:
        """Whether `stream`, grouped (through a repartition topic if `repartitioned`), meets
        one of the `grouped` inputs of a cogroup as `rejoins` says two join inputs do: a
        common node above both that gives several records for one, or one above both that
        are repartitioned."""
        for g in grouped:
            common = self.ancestors(g) & self.ancestors(stream)
            node = self.nodes[g]
            other_repartitioned = node["op"] == "groupBy" or self.rekeyed(node["in"][0])
            if common & self.multi or (common and repartitioned and other_repartitioned):
                return True
        return False

    def rekeyed(self, nid: int) -> bool:
        """Whether the stream `nid` gives needs a repartition before a join (Kafka's
        `repartitionRequired`): its key may have changed since the last repartition."""
        node = self.nodes[nid]
        op = node["op"]
        if op in ("map", "selectKey", "flatMap", "process") or (op == "toStream" and "fn" in node):
            return True
        if op in ("stream", "repartition", "toStream", "join", "leftJoin", "outerJoin"):
            return False
        return any(self.rekeyed(i) for i in node.get("in", ()))

    def stream_join(self, h: Handle, op: str) -> Handle:
        # outer joins are of two streams only
        right_kind = STREAM if op == "outerJoin" else self.pick((STREAM, TABLE, GLOBAL))
        other = self.other(h, right_kind)
        fields: dict[str, Any] = {"fn": "pair"}
        if self.draw(st.booleans()):  # a ValueJoinerWithKey
            fields.update(fn="key_pair", with_key=True)
        if right_kind == STREAM:
            fields["window"] = {
                "before": self.pick((0, 3, 10)),
                "after": self.pick((0, 3, 10)),
                "grace": self.pick((0, 5, 20)),
            }
        elif right_kind == GLOBAL:
            fields["selector"] = self.pick(self.fns(lib.KEY_SELECTORS, h.vt)).name
        else:
            retention = self.history_retention(other.id)
            if retention is not None and self.draw(st.booleans()):  # a grace period (KIP-923)
                fields["grace"] = min(retention, self.pick((0, 3, 10)))
                if op == "leftJoin":
                    # Kafka 4.1.1 fails on a None key here (its grace buffer refuses it, a
                    # NullPointerException in KStreamKTableJoinProcessor): none reach it
                    h = self.add("filter", [h], h.vt, STREAM, fn="key_not_null")
        joined = self.add(op, [h, other], lib.STRING, STREAM, **fields)
        self.reopen(other)
        return joined

    def repartitioned(self, nid: int) -> bool:
        """Whether node `nid` reads through a repartition topic (a grouping or a repartition
        above it)."""
        ops = ("groupBy", "groupByKey", "repartition", "cogroup")
        return any(self.nodes[a]["op"] in ops for a in self.ancestors(nid))

    def below_versioned(self, nid: int) -> bool:
        """Whether the table `nid` is a versioned table or derives from one through operators
        that keep no store of their own."""
        node = self.nodes[nid]
        if node["op"] == "table":
            return "versioned" in node
        passing = ("filter", "filterNot", "mapValues", "transformValues")
        if node["op"] in passing and "materialized" not in node:
            return self.below_versioned(node["in"][0])
        return False

    def history_retention(self, nid: int) -> int | None:
        """The history retention of the versioned table `nid` reads (through filters and
        mapValues that keep no store of their own), or None when it reads none."""
        node = self.nodes[nid]
        if node["op"] == "table":
            retention: int | None = node.get("versioned")
            return retention
        if node["op"] in ("filter", "filterNot", "mapValues") and "materialized" not in node:
            return self.history_retention(node["in"][0])
        return None

    def table_op(self, h: Handle) -> list[Handle]:
        if h.windowed:
            if self.serdes_known(h.id) and self.pick((False, True)):
                return [self.suppress(h)]
            return [self.to_stream(h)]
        op = self.pick(
            ("filter", "mapValues", "toStream", "groupBy", "join", "filterNot", "leftJoin",
             "outerJoin", "transformValues", "suppress")
        )  # fmt: skip
        vt = h.vt
        # Kafka refuses to suppress a versioned table when the topology is built, and so does
        # kstream (tests/oracle/test_ported_operators.py checks both refuse): not drawn
        versioned = self.below_versioned(h.id)
        if op == "suppress" and self.serdes_known(h.id) and not versioned:  # buffer needs serdes
            return [self.suppress(h)]
        if op == "suppress":
            return [self.to_stream(h)]
        if op == "transformValues":
            return [self.transform_values(h)]
        if op in ("filter", "filterNot"):
            fn = self.pick(self.fns(lib.PREDICATES, vt))
            return [self.add(op, [h], vt, TABLE, fn=fn.name)]
        if op == "mapValues" and self.draw(st.booleans()):
            return [self.with_key(h, op, TABLE)]
        if op == "mapValues":
            fn = self.pick(self.fns(lib.VALUE_MAPPERS, vt))
            return [self.add(op, [h], fn.output(vt), TABLE, fn=fn.name)]
        if op == "toStream":
            return [self.to_stream(h, rekey=self.draw(st.booleans()))]
        if op == "groupBy":
            fn = self.pick(self.fns(lib.KV_MAPPERS, vt))
            return [self.add("groupBy", [h], fn.output(vt), GROUPED_TABLE, fn=fn.name)]
        if op != "outerJoin" and self.repartitioned(h.id) and self.draw(st.booleans()):
            # the other table through a repartition topic too: in a foreign-key join each
            # side's sub-topology then reads the subscription topic the other writes
            other = self.regrouped_table()
        else:
            other = self.other(h, TABLE)
        self.table_join = True
        fields: dict[str, Any] = {"fn": "pair"}
        fks = self.fns(lib.FK_EXTRACTORS, vt)
        # a foreign-key join (KIP-213) of tables whose serdes Kafka knows (it has no default
        # serde to fall back on here: it hashes the left values and keys the subscriptions)
        fk_join = op != "outerJoin" and self.serdes_known(h.id) and self.serdes_known(other.id)
        if fk_join and self.pick((False, True)):
            fields["fk"] = self.pick(fks).name
        joined = self.add(op, [h, other], lib.STRING, TABLE, **fields)
        self.reopen(other)
        return [joined]

    def reopen(self, table: Handle) -> None:
        """A join's other table goes on, one time in four, to later operators too, half of
        those times through a filter made right after the join (issue 47's shape when the
        table has no store name: the join materialized it, so the filter gets old values)."""
        if table.kind != TABLE or table in self.open or not self.odds():
            return
        if self.draw(st.booleans()):
            op = self.pick(("filter", "filterNot"))
            fn = self.pick(self.fns(lib.PREDICATES, table.vt))
            table = self.add(op, [table], table.vt, TABLE, fn=fn.name)
        self.open.append(table)

    def regrouped_table(self) -> Handle:
        """A new table that comes through a repartition topic: a new stream grouped by a key
        selector and counted."""
        src = self.source(STREAM)
        fn = self.pick(self.fns(lib.KEY_SELECTORS, src.vt)).name
        grouped = self.add("groupBy", [src], src.vt, GROUPED, fn=fn)
        grouped.windows = None
        return self.add(
            "count", [grouped], lib.LONG, TABLE, store=f"s{len(self.nodes)}", store_kind="kv"
        )

    def serdes_known(self, nid: int) -> bool:
        """Whether Kafka knows the serdes of the table `nid` gives: a source's, a store's, or
        a filter's or suppress's of such a table (a mapValues or join gives none)."""
        node = self.nodes[nid]
        if node["op"] in ("table", "toTable", "count", "reduce", "aggregate"):
            return True
        if "materialized" in node:
            return True
        if node["op"] in ("filter", "filterNot", "suppress"):
            return self.serdes_known(node["in"][0])
        return False

    def suppress(self, h: Handle) -> Handle:
        """`suppress`: a windowed table's final results, or any table's updates held for a
        time limit, in a buffer unbounded or bounded by records or bytes (the byte bound
        counts Kafka's estimate of a record, topic name and headers included)."""
        fields: dict[str, Any] = {"buffer": {}}
        if self.pick((False, True)):
            # Known difference (docs/differences.md, "Output and emission"): the old value of
            # a new window is None in kstream, the initializer's or a neighbour's in Kafka,
            # and a buffered update's size counts its old value: no byte bound on windows
            bounds = ("max_records",) if h.windowed else ("max_records", "max_bytes", "both")
            bound = self.pick(bounds)
            if bound in ("max_records", "both"):
                fields["buffer"]["max_records"] = self.pick((1, 2, 4))
            if bound in ("max_bytes", "both"):
                fields["buffer"]["max_bytes"] = self.pick((60, 120, 300))
            fields["buffer"]["full"] = self.pick(("emit", "shutdown"))
        if h.windowed and self.pick((True, True, False)):
            fields["until"] = "windowCloses"
            if fields["buffer"]:
                fields["buffer"]["full"] = "shutdown"  # a strict buffer
        else:
            fields.update(until="timeLimit", time_limit=self.pick((0, 3, 10)))
        handle = self.add("suppress", [h], h.vt, TABLE, **fields)
        handle.windowed = h.windowed
        return handle

    def transform_values(self, h: Handle) -> Handle:
        """`KTable.transformValues` with a library transformer and its store."""
        t = self.pick([t for t in lib.VALUE_TRANSFORMERS.values() if t.accepts in (None, h.vt)])
        fields: dict[str, Any] = {"transformer": t.name}
        if t.store:
            # Known difference: a join or a suppress below reads an unmaterialized result
            # through the transformer, which Kafka refuses at start when the transformer has
            # a store ("has no access to StateStore"); kstream runs it. Such a result is kept.
            nid = len(self.nodes)
            fields.update(store=f"s{nid}", store_kind="kv", materialized=f"m{nid}")
        return self.add("transformValues", [h], t.output(h.vt), TABLE, **fields)

    def to_stream(self, h: Handle, rekey: bool = False) -> Handle:
        fields: dict[str, Any] = {"windowed": True} if h.windowed else {}
        if rekey and not h.windowed:  # toStream(KeyValueMapper)
            fields["fn"] = self.pick(self.fns(lib.KEY_SELECTORS, h.vt)).name
        return self.add("toStream", [h], h.vt, STREAM, **fields)

    # --- aggregations ---------------------------------------------------------------------

    def aggregation(self, h: Handle) -> Handle:
        if h.kind == GROUPED and self.pick((False, False, True)):
            return self.cogroup(h)
        fields: dict[str, Any] = {}
        if h.kind == GROUPED and h.windows is not None:
            h, fields = self.windowed_by(h, h.windows)
        session = h.windows is not None and h.windows["type"] == "session"
        op = self.pick(("count", "reduce", "aggregate"))
        kind = ("session" if session else "window") if h.kind == WINDOWED else "kv"
        fields.update(store=f"s{len(self.nodes)}", store_kind=kind)
        vt = h.vt
        if op == "count":
            vt = lib.LONG
        elif op == "reduce" and h.kind == GROUPED_TABLE:
            adders = [a for a, s in lib.TABLE_REDUCERS.items() if lib.REDUCERS[a].accepts == vt]
            fields["fn"] = self.pick(adders)
            fields["subtractor"] = lib.TABLE_REDUCERS[fields["fn"]]
        elif op == "reduce":
            fields["fn"] = self.pick(
                [f for f in ("concat", "sum", "max") if lib.REDUCERS[f].accepts == vt]
            )
        else:
            names = lib.TABLE_SUBTRACTORS if h.kind == GROUPED_TABLE else lib.AGGREGATIONS
            aggs = [lib.AGGREGATIONS[n] for n in names]
            agg = self.pick([a for a in aggs if a.accepts in (None, vt)])
            fields["fn"] = agg.name
            vt = agg.gives
            if h.kind == GROUPED_TABLE:
                fields["subtractor"] = lib.TABLE_SUBTRACTORS[agg.name][0]
            if session:
                fields["merger"] = lib.MERGER_FOR[vt]
        handle = self.add(op, [h], vt, TABLE, **fields)
        handle.windowed = h.kind == WINDOWED
        return handle

    def cogroup(self, h: Handle) -> Handle:
        """`cogroup` (KIP-150): the grouped stream and up to two more, each with an aggregator
        of its values into one aggregate type, windowed as the first grouping drew, then
        `aggregate` into one store."""
        agg_vt = lib.LONG if h.vt == lib.LONG else self.pick((lib.STRING, lib.LONG))

        def aggregator(vt: str) -> str:
            fits = [
                a.name
                for a in lib.AGGREGATIONS.values()
                if a.accepts in (None, vt) and a.gives == agg_vt
            ]
            return str(self.pick(fits))

        windows = h.windows
        c = self.add("cogroup", [h], agg_vt, COGROUPED, fn=aggregator(h.vt))
        inputs = [h.id]
        fields: dict[str, Any] = {}
        for _ in range(self.draw(st.integers(0, 2))):
            other = self.other(h, STREAM, lib.STRING if agg_vt == lib.STRING else None)
            if windows is not None and windows["type"] != "sliding":  # as `group` does
                other = self.add("filter", [other], other.vt, STREAM, fn="value_not_null")
            op = self.pick(("groupByKey", "groupBy"))
            repartitioned = op == "groupBy" or self.rekeyed(other.id)
            if self.meets(inputs, other.id, repartitioned):
                break  # as `rejoins`: no such input
            fields.clear()
            if op == "groupBy":
                fields["fn"] = self.pick(self.fns(lib.KEY_SELECTORS, other.vt)).name
            if repartitioned:
                # Kafka names every unnamed input's repartition topic after the store, and so
                # refuses two (`... is already added`): a re-keyed added input is named
                fields["grouped"] = f"g{len(self.nodes)}"
            g = self.add(op, [other], other.vt, GROUPED, **fields)
            inputs.append(g.id)
            c = self.add("cogroup", [c, g], agg_vt, COGROUPED, fn=aggregator(other.vt))
        fields.clear()
        kind = "kv"
        if windows is not None:
            c = self.add("windowedBy", [c], agg_vt, WINDOWED_COGROUP, windows=windows)
            kind = "session" if windows["type"] == "session" else "window"
            if kind == "session":
                fields["merger"] = lib.MERGER_FOR[agg_vt]
            # Each input's processor has a stream time of its own but the store is one: Kafka's
            # in-memory window store (the oracle's, not a Kafka user's default RocksDB one)
            # expires windows by the latest input's time, so a window one input still takes
            # is gone from it. A retention longer than the case keeps the store whole.
            if len(inputs) > 1 or self.draw(st.booleans()):
                fields["retention"] = LONG_RETENTION
        inits = [a.name for a in lib.AGGREGATIONS.values() if a.gives == agg_vt]
        fields.update(init=self.pick(inits), store=f"s{len(self.nodes)}", store_kind=kind)
        handle = self.add("aggregate", [c], agg_vt, TABLE, **fields)
        handle.windowed = windows is not None
        return handle

    def windows(self) -> dict[str, Any]:
        # Known difference (docs/differences.md, "Output and emission"): Kafka's session
        # aggregations forward results without the input's headers, kstream's keep them; a
        # topology that adds headers gets no session windows (and one with session windows,
        # see `process` and `cases`, no headers at all)
        wtype = self.pick(("time", "sliding") if self.headers else ("time", "session", "sliding"))
        if wtype == "session":
            self.sessions = True
        grace = self.pick((0, 3, 10))
        if wtype == "time":
            size = self.pick((5, 10, 20))
            advance = min(self.pick((size, 2, 5)), size)
            return {"type": "time", "size": size, "advance": advance, "grace": grace}
        if wtype == "sliding":
            return {"type": "sliding", "size": self.pick((5, 10)), "grace": grace}
        return {"type": "session", "gap": self.pick((3, 10)), "grace": grace}

    def windowed_by(self, h: Handle, windows: dict[str, Any]) -> tuple[Handle, dict[str, Any]]:
        """The windowed stream, and the fields its aggregation's node needs."""
        emit = self.pick(("update", "final"))
        handle = self.add("windowedBy", [h], h.vt, WINDOWED, windows=windows, emit=emit)
        handle.windows = windows
        # Known difference (docs/differences.md, "Output and emission"): Kafka reads the
        # windows a record closes after aggregating it, from a store that may have expired
        # them by then (a window starting before the latest start written - retention, a
        # session in a dropped segment), and loses their final results; kstream emits them.
        # A retention longer than any case's timestamps keeps both stores from expiring
        # anything (test_oracle.py pins the difference's cases).
        if emit == "final" or self.draw(st.booleans()):
            return handle, {"retention": LONG_RETENTION}
        return handle, {}

    # --- the end --------------------------------------------------------------------------

    def single_task_stream_time(self) -> None:
        """Known difference of the test drivers (docs/differences.md, "Test driver"): Kafka's
        TopologyTestDriver runs every sub-topology in one task with one stream time, so a
        record of one sub-topology fires the stream-time punctuations of another; kstream's
        driver, like both runtimes, has a task and a stream time per sub-topology. A
        stream-time punctuation in a topology of several sub-topologies punctuates on the
        wall clock instead."""
        buffers = [n for n in self.nodes if n.get("processor") == "buffer_stream_time"]
        if not buffers:
            return
        built = KstreamBuilder().build(Case(self.nodes)).build()
        if len(built.compile("oracle").subtopologies) > 1:
            for n in buffers:
                n["processor"] = "buffer_wall_clock"
            self.wall_clock = True

    def finish(self) -> None:
        for h in list(self.open):
            while h.kind not in (STREAM, TABLE):
                h = self.aggregation(h)
            if h.kind == TABLE:
                h = self.to_stream(h)
            nid = len(self.nodes)
            if self.odds():  # a topic chooser (Kafka's TopicNameExtractor)
                chooser = self.pick(list(lib.TOPIC_CHOOSERS))
                topics = [f"out{nid}a", f"out{nid}b"]
                self.add("to", [h], h.vt, "sink", chooser=chooser, topics=topics)
            else:
                self.add("to", [h], h.vt, "sink", topic=f"out{nid}")
        self.open = []


def _value(vt: str) -> st.SearchStrategy[Any]:
    if vt == lib.STRING:
        return st.sampled_from(STRING_VALUES)
    return st.one_of(st.integers(0, 9), st.none())


# a record's headers: mostly none; values are text or None
HEADERS: tuple[list[list[Any]], ...] = ([], [], [["h", "1"]], [["h", "2"], ["g", None]])
WALL_CLOCK_STEPS = (1, 4, 12)


@st.composite
def records(
    draw: Any,
    sources: dict[str, str],
    in_order: bool = False,
    wall_clock: bool = False,
    headers: bool = True,
) -> list[list[Any]]:
    """Records for the input topics `sources` (topic -> value type), timestamps mostly rising
    (never falling with `in_order`), some with headers; with
    `wall_clock`, rows `[None, ms]` that advance the wall clock come between them and after
    the last."""
    topics = sorted(sources)
    n = draw(st.sampled_from(range(1, MAX_RECORDS + 1)))  # uniform: integers() favours few
    out: list[list[Any]] = []
    ts = 0
    for _ in range(n):
        if wall_clock and draw(st.booleans()):
            out.append([None, draw(st.sampled_from(WALL_CLOCK_STEPS))])
        topic = draw(st.sampled_from(topics))
        ts = max(0, ts + draw(st.integers(0 if in_order else -12, 15)))
        row = [topic, draw(st.sampled_from(KEYS)), draw(_value(sources[topic])), ts]
        drawn = draw(st.sampled_from(HEADERS)) if headers else []
        out.append([*row, drawn] if drawn else row)
    if wall_clock:  # the last punctuations too
        out.append([None, draw(st.sampled_from(WALL_CLOCK_STEPS[::-1]))])
    return out


@st.composite
def cases(draw: Any, max_ops: int = MAX_OPS) -> Case:
    """A random topology of up to `max_ops` operators (plus the aggregations and sinks that
    complete it) and its input records."""
    g = _Graph(draw)
    g.open.append(g.source(g.pick((STREAM, TABLE, STREAM))))
    for _ in range(draw(st.integers(1, max_ops))):
        if not g.open:
            break
        g.step()
    g.finish()
    # Known divergence (README, "State"): kstream's table-table joins stamp a result from
    # timestamps they keep themselves, not from the tables' stores. When one update reaches
    # both sides of a join (`t.filter(...).join(t)`, or a join of a join with one of its
    # tables) and is older than the key's previous update, the side processed first still
    # sees the other side's previous (newer) timestamp in kstream, the updated one in Kafka.
    # Cases with a table-table join get timestamps that never fall.
    # A timestamp taken from the value falls as often as it rises: not with such a join.
    for n in g.nodes:
        if n.get("extractor") == "value_time" and g.table_join:
            del n["extractor"]
    g.single_task_stream_time()
    rows = records(g.sources, g.table_join, g.wall_clock, headers=not g.sessions)
    return Case(g.nodes, draw(rows))
