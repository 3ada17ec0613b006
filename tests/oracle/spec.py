"""One spec, two builders: the spec format, and its builder and runner on kstream's side.

A case is a JSON object: `nodes`, a topology as a list of operators in build order (each names
its inputs by id), and `records`, the input as `[topic, key, value, timestamp]` rows piped in
that order; a row may carry a fifth element, its headers `[[key, value or null], ...]` (values
are text, bytes as ISO-8859-1 on both sides), and a row `[null, ms]` advances the test driver's
wall clock by `ms` instead (firing wall-clock punctuations). The Java harness
(`tools/kafka-streams-oracle`, `SpecBuilder.java`) builds the same nodes with Kafka Streams'
DSL; `build` here builds them with kstream's, operator for operator, and `run` drives them
through kstream's `TopologyTestDriver`. Both answer in one shape:

    {"outputs": {topic: [[key, value, timestamp, headers], ...]},
     "stores": {store: [[key, value], ...] or [[key, start, end, value], ...]}}

A node is `{"id", "op", "in": [ids], "vt", ...}` where `vt` is the type of the values it
gives ("string" or "long"; keys are always strings). The operators and their fields:

- sources: `stream {topic}`, `table {topic, store}`, `globalTable {topic, store}`
- stream -> stream: `filter`, `filterNot`, `mapValues`, `map`, `selectKey`, `flatMap`,
  `flatMapValues`, `processValues` (a processor mapping values with a value mapper) (each
  `{fn}`), `merge` (two inputs), `repartition`, `branch {index}` of a
  `split {named, branches: [{fn, name?, map?}], default: null | {name?, map?}}` (a branch's
  `map`: `Branched.with_function` chaining a `mapValues`; `index` counts the branches in
  order, the default last); table -> table: `filter`, `filterNot`, `mapValues`; `mapValues`
  and (of a stream) `flatMapValues` with `with_key: true` take their `fn` from the library's
  `*_WITH_KEY` mappers (Kafka's `ValueMapperWithKey`)
- `toTable {store}`, `toStream {windowed, fn?}` (a windowed key becomes "key@start/end"; `fn`,
  a key selector: `toStream(KeyValueMapper)`)
- `groupByKey`, `groupBy {fn}` (of a stream: a key selector; of a table: a (k, v) mapper)
- `windowedBy {windows: {type: time|sliding|session, size, advance, gap, grace}, emit}`
- `count`, `reduce {fn[, subtractor]}`, `aggregate {fn[, subtractor | merger]}`, each
  `{store, store_kind: kv|window|session}`; a windowed one may set its store's `retention`
- `join`, `leftJoin`, `outerJoin` `{fn[, window: {before, after, grace}][, selector]}`: the
  kind follows from the inputs (stream-stream, stream-table, stream-globalTable, table-table);
  a stream's join with `with_key: true` takes a `JOINERS_WITH_KEY` fn (`ValueJoinerWithKey`)
- `process {processor[, store, store_kind: kv][, interval]}`: a user processor of the
  library's `PROCESSORS` (`KStream.process`; Processors.java on the Java side): a per-key
  counter with a KV store, buffers that a stream-time or wall-clock punctuation every
  `interval` ms empties downstream, and processors that add or read headers
- `deduplicate {fn, within, store}`: kstream's `KStream.deduplicate` with a key selector of
  the library giving each record's id; Kafka Streams has no such operator, so the harness
  builds what a Kafka user writes (a processor with a window store, Processors.java)
- `to {topic}`
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kstream import stores
from kstream.dsl import Branched, KTable, StreamBuilder
from kstream.dsl.grouped_table import KGroupedTable
from kstream.dsl.windows import JoinWindows, SessionWindows, SlidingWindows, TimeWindows
from kstream.state.spec import StoreSpec
from kstream.testing.driver import TopologyTestDriver
from oracle import library as lib

Node = dict[str, Any]
Row = list[Any]
Answer = dict[str, Any]


@dataclass
class Case:
    """A topology spec and the records to pipe through it."""

    nodes: list[Node]
    records: list[Row] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"nodes": self.nodes, "records": self.records}, separators=(",", ":"))

    def pretty(self) -> str:
        """The case as a reader wants it in a failure report: a node or a record per line."""
        lines = ["nodes:"]
        lines += ["  " + json.dumps(n, separators=(",", ":")) for n in self.nodes]
        lines.append("records:")
        lines += ["  " + json.dumps(r) for r in self.records]
        return "\n".join(lines)

    def __repr__(self) -> str:  # hypothesis prints the falsifying example with repr
        return "Case(\n" + self.pretty() + "\n)"


# --- kstream's builder -----------------------------------------------------------------------


class _Windowed:
    """`windowedBy` on kstream's side: the windowed stream and the emit strategy its
    aggregation takes (kstream passes `emit` to count/reduce/aggregate; Kafka sets it on the
    windowed stream)."""

    def __init__(self, stream: Any, emit: str, windows: dict[str, Any]) -> None:
        self.stream = stream
        self.emit = emit
        self.windows = windows
        self.session = windows["type"] == "session"

    def store(self, name: str, node: Node) -> str | StoreSpec:
        """The aggregation's store: a name, or a spec when the node sets a retention."""
        if "retention" not in node:
            return name
        if self.session:
            return stores.session(name, retention=node["retention"])
        return stores.window(name, retention=node["retention"], window_size=self.windows["size"])


def _branched(br: dict[str, Any]) -> Branched:
    """A spec branch's `Branched`: a name or none, and a value mapper chained inline."""
    if "map" in br:
        fn = lib.VALUE_MAPPERS[br["map"]].fn
        return Branched.with_function(lambda s: s.map_values(fn), br.get("name"))
    return Branched(name=br.get("name"))


def _windows(w: dict[str, Any]) -> TimeWindows | SlidingWindows | SessionWindows:
    if w["type"] == "time":
        return TimeWindows.of(w["size"], advance=w["advance"], grace=w["grace"])
    if w["type"] == "sliding":
        return SlidingWindows.of(w["size"], grace=w["grace"])
    return SessionWindows.with_gap(w["gap"], grace=w["grace"])


class KstreamBuilder:
    """Builds a spec's nodes with kstream's DSL, as SpecBuilder.java does with Kafka's."""

    def __init__(self) -> None:
        self.builder = StreamBuilder()
        self.handles: dict[int, Any] = {}

    def build(self, case: Case) -> StreamBuilder:
        for node in case.nodes:
            self.handles[node["id"]] = self._add(node)
        return self.builder

    def _in(self, node: Node, i: int = 0) -> Any:
        return self.handles[node["in"][i]]

    def _add(self, node: Node) -> Any:
        op, vt, b = node["op"], node["vt"], self.builder
        if op == "stream":
            return b.stream(node["topic"], "string", vt)
        if op == "table":
            return b.table(node["topic"], "string", vt, store=node["store"])
        if op == "globalTable":
            return b.global_table(node["topic"], "string", vt, store=node["store"])
        if op == "to":
            self._in(node).to(node["topic"], key_serde="string", value_serde=vt)
            return None
        if op == "split":
            return self._split(node)
        if op == "branch":
            return self._in(node)[node["index"]]
        if op == "merge":
            return self._in(node).merge(self._in(node, 1))
        if op == "repartition":
            return self._in(node).repartition(key_serde="string", value_serde=vt)
        if op == "toTable":
            return self._in(node).to_table(store=node["store"])
        if op == "toStream":
            if node.get("windowed"):
                return self._in(node).to_stream(lambda k, v: lib.windowed_text(k))
            if "fn" in node:
                return self._in(node).to_stream(lib.KEY_SELECTORS[node["fn"]].fn)
            return self._in(node).to_stream()
        if op == "groupByKey":
            return self._in(node).group_by_key(key_serde="string", value_serde=vt)
        if op == "groupBy":
            fns = lib.KV_MAPPERS if isinstance(self._in(node), KTable) else lib.KEY_SELECTORS
            return self._in(node).group_by(fns[node["fn"]].fn, key_serde="string", value_serde=vt)
        if op == "windowedBy":
            w = node["windows"]
            stream = self._in(node).windowed_by(_windows(w))
            return _Windowed(stream, node["emit"], w)
        if op in ("count", "reduce", "aggregate"):
            return self._aggregation(node, op)
        if op in ("join", "leftJoin", "outerJoin"):
            return self._join(node, op)
        if op == "process":
            return self._process(node)
        if op == "deduplicate":
            ids = lib.KEY_SELECTORS[node["fn"]].fn
            return self._in(node).deduplicate(ids, within=node["within"], store=node["store"])
        return self._stateless(node, op)

    def _process(self, node: Node) -> Any:
        """A library user processor (`KStream.process`), with its KV store if it keeps one:
        the store's values are of the node's type."""
        proc = lib.PROCESSORS[node["processor"]]
        store = node.get("store", "")
        factory = proc.factory(store, node.get("interval", 0))
        if not store:
            return self._in(node).process(factory)
        spec = stores.key_value(store, key_serde="string", value_serde=node["vt"])
        return self._in(node).process(factory, stores=[spec])

    def _split(self, node: Node) -> list[Any]:
        """`split`, as SpecBuilder.java builds it: the branches' streams in the spec's order."""
        name = f"split-{node['id']}-" if node.get("named", True) else None
        splitter = self._in(node).split(name)
        for br in node["branches"]:
            splitter = splitter.branch(lib.PREDICATES[br["fn"]].fn, _branched(br))
        dflt = node["default"]
        if dflt is not None:
            out = splitter.default_branch(_branched(dflt))
        else:
            out = splitter.no_default_branch()
        return [out[k] for k in lib.branch_keys(node, out)]

    def _stateless(self, node: Node, op: str) -> Any:
        h, fn = self._in(node), node["fn"]
        if node.get("with_key"):  # a ValueMapperWithKey
            if op == "mapValues":
                return h.map_values(lib.VALUE_MAPPERS_WITH_KEY[fn].fn, with_key=True)
            return h.flat_map_values(lib.FLAT_VALUE_MAPPERS_WITH_KEY[fn].fn, with_key=True)
        if op == "filter":
            return h.filter(lib.PREDICATES[fn].fn)
        if op == "filterNot":
            return h.filter_not(lib.PREDICATES[fn].fn)
        if op == "mapValues":
            return h.map_values(lib.VALUE_MAPPERS[fn].fn)
        if op == "map":
            return h.map(lib.KV_MAPPERS[fn].fn)
        if op == "selectKey":
            return h.select_key(lib.KEY_SELECTORS[fn].fn)
        if op == "flatMap":
            return h.flat_map(lib.FLAT_MAPPERS[fn].fn)
        if op == "flatMapValues":
            return h.flat_map_values(lib.FLAT_VALUE_MAPPERS[fn].fn)
        if op == "processValues":
            return h.process_values(lib.map_values_processor(lib.VALUE_MAPPERS[fn].fn))
        raise ValueError(f"unknown operator {op!r}")

    def _aggregation(self, node: Node, op: str) -> Any:
        g, store, vt = self._in(node), node["store"], node["vt"]
        fn: str = node.get("fn", "")
        if isinstance(g, _Windowed):
            kw: dict[str, Any] = {"store": g.store(store, node), "emit": g.emit, "idle_close": None}
            if op == "count":
                return g.stream.count(**kw)
            if op == "reduce":
                return g.stream.reduce(lib.REDUCERS[fn].fn, **kw)
            agg = lib.AGGREGATIONS[fn]
            if g.session:
                merger = lib.MERGERS[node["merger"]].fn
                return g.stream.aggregate(agg.init, agg.add, merger, value_serde=vt, **kw)
            return g.stream.aggregate(agg.init, agg.add, value_serde=vt, **kw)
        if op == "count":
            return g.count(store=store)
        if isinstance(g, KGroupedTable):
            if op == "reduce":
                return g.reduce(lib.REDUCERS[fn].fn, lib.REDUCERS[node["subtractor"]].fn, store)
            agg = lib.AGGREGATIONS[fn]
            sub = lib.TABLE_SUBTRACTORS[fn][1]
            return g.aggregate(agg.init, agg.add, sub, store=store, value_serde=vt)
        if op == "reduce":
            return g.reduce(lib.REDUCERS[fn].fn, store=store)
        agg = lib.AGGREGATIONS[fn]
        return g.aggregate(agg.init, agg.add, store=store, value_serde=vt)

    def _join(self, node: Node, op: str) -> Any:
        left, right = self._in(node), self._in(node, 1)
        method = {"join": "join", "leftJoin": "left_join", "outerJoin": "outer_join"}[op]
        kw: dict[str, Any] = {}
        joiners = lib.JOINERS
        if node.get("with_key"):  # a ValueJoinerWithKey
            joiners = lib.JOINERS_WITH_KEY
            kw["with_key"] = True
        joiner: Callable[..., Any] = joiners[node["fn"]].fn
        if "window" in node:
            w = node["window"]
            kw["window"] = JoinWindows.of(w["before"], w["after"], grace=w["grace"])
            return getattr(left, method)(right, joiner, **kw)
        if "selector" in node:
            selector = lib.KEY_SELECTORS[node["selector"]].fn
            return getattr(left, method)(right, selector, joiner, **kw)
        return getattr(left, method)(right, joiner, **kw)


# --- running ---------------------------------------------------------------------------------


def _input_headers(rows: list[list[Any]]) -> list[tuple[str, bytes | None]]:
    return [(k, None if v is None else str(v).encode("latin-1")) for k, v in rows]


def _headers(headers: Any) -> list[list[Any]]:
    return [[k, None if v is None else bytes(v).decode("latin-1")] for k, v in headers]


def _store_rows(store: Any, kind: str) -> list[Row]:
    with store.all() as cursor:
        if kind == "kv":
            return [[k, v] for k, v in cursor]
        return [[w.key, w.start, w.end, v] for w, v in cursor]


def run(case: Case) -> Answer:
    """Build `case` with kstream, pipe its records through kstream's TopologyTestDriver, and
    answer in the harness's shape (stores' rows in the order the store iterates them)."""
    builder = KstreamBuilder().build(case)
    sources = {n["topic"]: n["vt"] for n in case.nodes if "topic" in n and n["op"] != "to"}
    sinks = {n["topic"]: n["vt"] for n in case.nodes if n["op"] == "to"}
    with TopologyTestDriver(builder, initial_wall_clock=0) as driver:
        inputs = {t: driver.input_topic(t, "string", vt) for t, vt in sources.items()}
        for row in case.records:
            if row[0] is None:  # [None, ms]: the wall clock moves ms forward
                driver.advance_wall_clock(row[1])
                continue
            topic, key, value, ts = row[:4]
            inputs[topic].pipe(key, value, ts, _input_headers(row[4] if len(row) > 4 else []))
        outputs = {}
        for topic, vt in sinks.items():
            records = driver.output_topic(topic, "string", vt).read_records()
            outputs[topic] = [[r.key, r.value, r.timestamp, _headers(r.headers)] for r in records]
        stores = {
            n["store"]: _store_rows(driver.get_store(n["store"]), n["store_kind"])
            for n in case.nodes
            if "store" in n and "store_kind" in n  # a deduplicate node's ids are no answer
        }
    return {"outputs": outputs, "stores": stores}
