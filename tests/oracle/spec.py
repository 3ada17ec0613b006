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

- sources: `stream {topic}`, `table {topic[, store]}`, `globalTable {topic, store}`; a table
  (or `toTable`) without `store` is unnamed: Kafka materializes it only on demand (a join's
  value getter, an operator needing old values), which decides what a filter below forwards
- stream -> stream: `filter`, `filterNot`, `mapValues`, `map`, `selectKey`, `flatMap`,
  `flatMapValues`, `processValues` (a processor mapping values with a value mapper) (each
  `{fn}`), `merge` (two inputs), `repartition`, `branch {index}` of a
  `split {named, branches: [{fn, name?, map?}], default: null | {name?, map?}}` (a branch's
  `map`: `Branched.with_function` chaining a `mapValues`; `index` counts the branches in
  order, the default last); table -> table: `filter`, `filterNot`, `mapValues`; `mapValues`
  and (of a stream) `flatMapValues` with `with_key: true` take their `fn` from the library's
  `*_WITH_KEY` mappers (Kafka's `ValueMapperWithKey`)
- `toTable {[store]}`, `toStream {windowed, fn?}` (a windowed key becomes "key@start/end"; `fn`,
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
- `to {topic}`, or `to {chooser, topics}`: a topic chooser of the library's
  `TOPIC_CHOOSERS` picking one of `topics` (Kafka's `to(TopicNameExtractor)`); every topic it
  may pick is an output

The operators of ported applications (issue 37):
- a source may set `extractor` (the library's `TIMESTAMP_EXTRACTORS`; Kafka's
  `Consumed.withTimestampExtractor`); a table `versioned` (its history retention: a
  versioned store, KIP-889), and a stream-table join `grace` (KIP-923)
- `name` on a node names it (Kafka's `Named.as`, `Consumed.as`, `Produced.as`,
  `Suppressed.withName`, `TableJoined.as` for a foreign-key join); `grouped` on `groupBy` /
  `groupByKey` names the grouping (`Grouped.as`)
- table `filter`, `filterNot`, `mapValues`, `transformValues` and table-table joins may keep
  their result in a store named `materialized` (`Materialized.as`), which the answer lists
- `transformValues {transformer[, store][, materialized]}` of a table: the library's
  `VALUE_TRANSFORMERS` (`KTable.transformValues`), with its KV store of longs
- a table-table `join` / `leftJoin` with `fk` (the library's `FK_EXTRACTORS`) joins on a
  foreign key (KIP-213)
- `cogroup {fn}` with `in: [grouped]` starts a cogroup (KIP-150) and `in: [cogroup, grouped]`
  adds an input, each with its aggregator (`fn`, of `AGGREGATIONS`); `windowedBy {windows}`
  of a cogroup; `aggregate {init[, merger], store, store_kind}` of a cogroup
- `suppress {until: windowCloses | timeLimit, time_limit, name?, buffer: {max_records?,
  max_bytes?, full: emit | shutdown}}` of a table: its buffer store is no answer (Kafka's is
  not queryable); a buffer that shuts down when full answers `{"error": "buffer_full",
  "failed_at": row}`. Both sides run with the application id "oracle", as `max_bytes` counts
  the topic names of the records' context (repartition topics are named after it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kstream import stores
from kstream.dsl import Branched, KTable, StreamBuilder
from kstream.dsl.cogroup import (
    CogroupedKStream,
    SessionWindowedCogroupedKStream,
    TimeWindowedCogroupedKStream,
)
from kstream.dsl.grouped_table import KGroupedTable
from kstream.dsl.joined import Joined
from kstream.dsl.suppress import BufferConfig, BufferFullError, Suppressed
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


def _window_store(name: str, node: Node, windows: dict[str, Any]) -> str | StoreSpec:
    """A windowed aggregation's store: a name, or a spec when the node sets a retention."""
    if "retention" not in node:
        return name
    if windows["type"] == "session":
        return stores.session(name, retention=node["retention"])
    return stores.window(name, retention=node["retention"], window_size=windows["size"])


class _WindowedCogroup:
    """`windowedBy` of a cogroup on kstream's side: the windowed cogroup and its windows."""

    def __init__(self, cogroup: Any, windows: dict[str, Any]) -> None:
        self.cogroup = cogroup
        self.windows = windows


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
        return _window_store(name, node, self.windows)


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
        op, vt = node["op"], node["vt"]
        name = node.get("name")
        if op in ("stream", "table", "globalTable"):
            return self._source(node)
        if op == "to":
            topic: Any = node.get("topic")
            if "chooser" in node:
                topic = _Chooser(node)
            self._in(node).to(topic, key_serde="string", value_serde=vt, name=name)
            return None
        if op == "cogroup":
            agg = lib.AGGREGATIONS[node["fn"]].add
            if len(node["in"]) > 1:
                return self._in(node).cogroup(self._in(node, 1), agg)
            return self._in(node).cogroup(agg)
        if op == "suppress":
            return self._in(node).suppress(_suppressed(node))
        if op == "transformValues":
            return self._transform_values(node)
        if op == "split":
            return self._split(node)
        if op == "branch":
            return self._in(node)[node["index"]]
        if op == "merge":
            return self._in(node).merge(self._in(node, 1), name=name)
        if op == "repartition":
            return self._in(node).repartition(key_serde="string", value_serde=vt)
        if op == "toTable":
            return self._in(node).to_table(store=node.get("store"))
        if op == "toStream":
            if node.get("windowed"):
                return self._in(node).to_stream(lambda k, v: lib.windowed_text(k), name=name)
            if "fn" in node:
                return self._in(node).to_stream(lib.KEY_SELECTORS[node["fn"]].fn, name=name)
            return self._in(node).to_stream(name=name)
        grouped = node.get("grouped")
        if op == "groupByKey":
            return self._in(node).group_by_key(key_serde="string", value_serde=vt, name=grouped)
        if op == "groupBy":
            fns = lib.KV_MAPPERS if isinstance(self._in(node), KTable) else lib.KEY_SELECTORS
            return self._in(node).group_by(
                fns[node["fn"]].fn, key_serde="string", value_serde=vt, name=grouped
            )
        if op == "windowedBy" and isinstance(self._in(node), CogroupedKStream):
            cogroup = self._in(node).windowed_by(_windows(node["windows"]))
            return _WindowedCogroup(cogroup, node["windows"])
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

    def _source(self, node: Node) -> Any:
        """A stream, table or global table, named, with a timestamp extractor, versioned
        (a table) as the node says."""
        op, b = node["op"], self.builder
        kw: dict[str, Any] = {"name": node.get("name")}
        if "extractor" in node:
            kw["timestamp_extractor"] = lib.TIMESTAMP_EXTRACTORS[node["extractor"]].fn
        if op == "stream":
            return b.stream(node["topic"], "string", node["vt"], **kw)
        if op == "globalTable":
            return b.global_table(node["topic"], "string", node["vt"], store=node["store"], **kw)
        if "versioned" in node:
            kw["versioned"] = node["versioned"]
        return b.table(node["topic"], "string", node["vt"], store=node.get("store"), **kw)

    def _transform_values(self, node: Node) -> Any:
        """`KTable.transform_values` with a library transformer, its store (longs) and
        its result store."""
        t = lib.VALUE_TRANSFORMERS[node["transformer"]]
        store = node.get("store", "")
        specs = [stores.key_value(store, key_serde="string", value_serde="long")] if store else []
        return self._in(node).transform_values(
            t.factory(store),
            stores=specs,
            name=node.get("name"),
            materialized=_result_store(node),
        )

    def _stateless(self, node: Node, op: str) -> Any:
        h, fn = self._in(node), node["fn"]
        kw: dict[str, Any] = {"name": node.get("name")}
        if isinstance(h, KTable) and "materialized" in node:
            kw["materialized"] = _result_store(node)
        if node.get("with_key"):  # a ValueMapperWithKey
            if op == "mapValues":
                return h.map_values(lib.VALUE_MAPPERS_WITH_KEY[fn].fn, with_key=True, **kw)
            return h.flat_map_values(lib.FLAT_VALUE_MAPPERS_WITH_KEY[fn].fn, with_key=True, **kw)
        if op == "filter":
            return h.filter(lib.PREDICATES[fn].fn, **kw)
        if op == "filterNot":
            return h.filter_not(lib.PREDICATES[fn].fn, **kw)
        if op == "mapValues":
            return h.map_values(lib.VALUE_MAPPERS[fn].fn, **kw)
        if op == "map":
            return h.map(lib.KV_MAPPERS[fn].fn, **kw)
        if op == "selectKey":
            return h.select_key(lib.KEY_SELECTORS[fn].fn, **kw)
        if op == "flatMap":
            return h.flat_map(lib.FLAT_MAPPERS[fn].fn, **kw)
        if op == "flatMapValues":
            return h.flat_map_values(lib.FLAT_VALUE_MAPPERS[fn].fn, **kw)
        if op == "processValues":
            return h.process_values(lib.map_values_processor(lib.VALUE_MAPPERS[fn].fn), **kw)
        raise ValueError(f"unknown operator {op!r}")

    def _aggregation(self, node: Node, op: str) -> Any:
        g, store, vt = self._in(node), node["store"], node["vt"]
        fn: str = node.get("fn", "")
        name = node.get("name")
        if isinstance(g, CogroupedKStream | _WindowedCogroup):
            return _cogroup_aggregate(g, node)
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
            return g.count(store=store, name=name)
        if isinstance(g, KGroupedTable):
            if op == "reduce":
                subtractor = lib.REDUCERS[node["subtractor"]].fn
                return g.reduce(lib.REDUCERS[fn].fn, subtractor, store, name=name)
            agg = lib.AGGREGATIONS[fn]
            sub = lib.TABLE_SUBTRACTORS[fn][1]
            return g.aggregate(agg.init, agg.add, sub, store=store, value_serde=vt, name=name)
        if op == "reduce":
            return g.reduce(lib.REDUCERS[fn].fn, store=store, name=name)
        agg = lib.AGGREGATIONS[fn]
        return g.aggregate(agg.init, agg.add, store=store, value_serde=vt, name=name)

    def _join(self, node: Node, op: str) -> Any:
        left, right = self._in(node), self._in(node, 1)
        method = {"join": "join", "leftJoin": "left_join", "outerJoin": "outer_join"}[op]
        kw: dict[str, Any] = {}
        joiners = lib.JOINERS
        if node.get("with_key"):  # a ValueJoinerWithKey
            joiners = lib.JOINERS_WITH_KEY
            kw["with_key"] = True
        joiner: Callable[..., Any] = joiners[node["fn"]].fn
        if isinstance(left, KTable):
            kw.update(name=node.get("name"), materialized=_result_store(node))
            if "fk" in node:  # a foreign-key join
                fk = lib.FK_EXTRACTORS[node["fk"]].fn
                return getattr(left, method)(right, fk, joiner, **kw)
            return getattr(left, method)(right, joiner, **kw)
        if "grace" in node:  # a versioned table's grace period
            kw["joined"] = Joined.with_grace_period(node["grace"])
        if "window" in node:
            w = node["window"]
            kw["window"] = JoinWindows.of(w["before"], w["after"], grace=w["grace"])
            return getattr(left, method)(right, joiner, **kw)
        if "selector" in node:
            selector = lib.KEY_SELECTORS[node["selector"]].fn
            return getattr(left, method)(right, selector, joiner, **kw)
        return getattr(left, method)(right, joiner, **kw)


def _result_store(node: Node) -> str | None:
    """The store a table operator's result is kept in (Kafka's `Materialized.as`), if any."""
    name: str | None = node.get("materialized")
    return name


class _Chooser:
    """A `to` node's topic chooser: the library's index into the node's `topics`. describe()
    prints a chooser as text: "chooser <name>", as SpecBuilder.java's twin."""

    def __init__(self, node: Node) -> None:
        self.name = node["chooser"]
        self.choose = lib.TOPIC_CHOOSERS[self.name].fn
        self.topics = node["topics"]

    def __call__(self, key: Any, value: Any, ctx: Any) -> str:
        return str(self.topics[self.choose(key, value, ctx)])

    def __repr__(self) -> str:
        return f"chooser {self.name}"


def _suppressed(node: Node) -> Suppressed:
    """A `suppress` node's `Suppressed` (see SpecBuilder.java's twin, NewOperators.java)."""
    b = node["buffer"]
    buffer = BufferConfig.unbounded()
    if "max_records" in b or "max_bytes" in b:
        if "max_records" in b:
            buffer = BufferConfig.max_records(b["max_records"])
            if "max_bytes" in b:
                buffer = buffer.with_max_bytes(b["max_bytes"])
        else:
            buffer = BufferConfig.max_bytes(b["max_bytes"])
        if node["until"] == "windowCloses" or b.get("full") == "shutdown":
            buffer = buffer.shut_down_when_full()
    if node["until"] == "windowCloses":
        suppressed = Suppressed.until_window_closes(buffer)
    else:
        suppressed = Suppressed.until_time_limit(node["time_limit"], buffer)
    return suppressed.with_name(node["name"]) if node.get("name") else suppressed


def _cogroup_aggregate(g: Any, node: Node) -> Any:
    """`aggregate {init, merger?}` of a cogroup, windowed or not."""
    init = lib.AGGREGATIONS[node["init"]].init
    kw: dict[str, Any] = {"value_serde": node["vt"], "name": node.get("name")}
    if isinstance(g, CogroupedKStream):
        return g.aggregate(init, store=node["store"], **kw)
    kw["store"] = _window_store(node["store"], node, g.windows)
    if isinstance(g.cogroup, SessionWindowedCogroupedKStream):
        return g.cogroup.aggregate(init, lib.MERGERS[node["merger"]].fn, **kw)
    assert isinstance(g.cogroup, TimeWindowedCogroupedKStream)
    return g.cogroup.aggregate(init, **kw)


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
    sinks = {
        t: n["vt"] for n in case.nodes if n["op"] == "to" for t in n.get("topics", [n.get("topic")])
    }
    answer: Answer = {}
    # the harness's application id: a suppress buffer's max_bytes counts topic names
    with TopologyTestDriver(builder, initial_wall_clock=0, app_id="oracle") as driver:
        inputs = {t: driver.input_topic(t, "string", vt) for t, vt in sources.items()}
        at = [-1]  # the row being piped
        try:
            _pipe(case, driver, inputs, at)
        except Exception as e:  # a failure a case may expect is answered by its kind
            kind = expected_failure(e)
            if kind is None:
                raise
            answer.update(error=kind, failed_at=at[0])
        outputs = {}
        for topic, vt in sinks.items():
            records = driver.output_topic(topic, "string", vt).read_records()
            outputs[topic] = [[r.key, r.value, r.timestamp, _headers(r.headers)] for r in records]
        stores = {
            name: _store_rows(driver.get_store(name), kind) for name, kind in answer_stores(case)
        }
    return {**answer, "outputs": outputs, "stores": stores}


def answer_stores(case: Case) -> list[tuple[str, str]]:
    """The stores an answer lists, with their kinds: the nodes' stores (not a deduplicate
    node's ids, which have no `store_kind`, nor a versioned table's, which has no iterator)
    and the result stores of `materialized` table operators."""
    out = [
        (n["store"], n["store_kind"])
        for n in case.nodes
        if "store" in n and "store_kind" in n and "versioned" not in n
    ]
    return out + [(n["materialized"], "kv") for n in case.nodes if "materialized" in n]


def _pipe(case: Case, driver: TopologyTestDriver, inputs: dict[str, Any], at: list[int]) -> None:
    for row in case.records:
        at[0] += 1
        if row[0] is None:  # [None, ms]: the wall clock moves ms forward
            driver.advance_wall_clock(row[1])
            continue
        topic, key, value, ts = row[:4]
        inputs[topic].pipe(key, value, ts, _input_headers(row[4] if len(row) > 4 else []))


def expected_failure(e: BaseException) -> str | None:
    """The kind of a failure a case may expect ("buffer_full": a suppress buffer that shuts
    down when full), or None for any other; the cause chain is searched."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, BufferFullError):
            return "buffer_full"
        seen = seen.__cause__ or seen.__context__
    return None
