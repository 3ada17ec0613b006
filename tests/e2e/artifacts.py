"""What a failing process-level test leaves behind for its post-mortem (the chaos lane,
docs/testing.md "Chaos lane").

A crash test that fails one run in ten cannot be run again to the same end: the evidence is
what that run wrote. With `KSTREAM_TEST_ARTIFACTS=<dir>` set, a test of tests/e2e that fails
(setup or call) copies into `<dir>/<test id>/`, before its fixtures are torn down (a
three-node cluster of a failover test is gone after its fixture's teardown):

- its worker logs: every file of its `tmp_path` but the LMDB files of the state directories
  (`*.mdb`), under `tmp/`;
- the logs of the brokers it ran on, under `brokers/`;
- a dump of every topic whose name carries the test's name (its inputs, outputs,
  repartition topics and changelogs, all named through `unique_name`), under `topics/`:
  per topic, each partition's log start, high watermark and last stable offset
  (`<topic>.json`), and every record as a `read_uncommitted` and as a `read_committed`
  reader sees it (`<topic>.read_uncommitted.jsonl`, `<topic>.read_committed.jsonl`), with
  offset, timestamp, key, value and headers; the offsets a read_committed reader skips are
  the records of aborted (or still open) transactions.

The dump reads with a plain confluent-kafka consumer (no kstream code), as the tests' own
independent reader does. Nothing here runs unless the variable is set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import traceback
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

ENV = "KSTREAM_TEST_ARTIFACTS"
_READ_S = 60.0  # the most one topic's dump may take per isolation level


def _slug(text: str, limit: int = 80) -> str:
    """As tests/conftest.py's `unique_name` puts a test's name into its topic names (80
    characters at most)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:limit]


def keep(item: Any, when: str, longrepr: str) -> Path | None:
    """Keep the artifacts of `item` (a pytest item that failed in phase `when`) when
    `KSTREAM_TEST_ARTIFACTS` names a directory; returns where they went. Never raises: a
    failure to keep something is written down beside what was kept."""
    root = os.environ.get(ENV)
    if not root:
        return None
    # the whole id, parameters included: two parameters of one test keep apart
    dest = Path(root) / _slug(item.nodeid.split("/")[-1].replace("::", "__"), 200)
    dest.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    (dest / "failure.txt").write_text(f"{item.nodeid} failed in {when}\n\n{longrepr}\n")
    funcargs: dict[str, Any] = getattr(item, "funcargs", {})
    tmp = funcargs.get("tmp_path")
    if isinstance(tmp, Path) and tmp.exists():
        try:
            _copy_logs(tmp, dest / "tmp")
        except Exception:
            problems.append(f"copying {tmp}:\n{traceback.format_exc()}")
    brokers = _brokers(funcargs)
    for n, log in enumerate(_broker_logs(funcargs)):
        try:
            (dest / "brokers").mkdir(exist_ok=True)
            shutil.copy(log, dest / "brokers" / f"{n}-{Path(log).name}")
        except Exception:
            problems.append(f"copying {log}:\n{traceback.format_exc()}")
    marker = f"-{_slug(item.name)}-"
    for bootstrap in brokers:
        try:
            dump_topics(bootstrap, lambda t, m=marker: m in t, dest / "topics")
        except Exception:
            problems.append(f"dumping the topics of {bootstrap}:\n{traceback.format_exc()}")
    if problems:
        (dest / "problems.txt").write_text("\n".join(problems))
    return dest


def _brokers(funcargs: dict[str, Any]) -> list[str]:
    """The bootstrap addresses of the brokers the test ran on (its fixtures)."""
    out: list[str] = []
    for name in ("kafka_cluster3", "kafka_broker", "tansu_broker"):
        bs = getattr(funcargs.get(name), "bootstrap_servers", None)
        if isinstance(bs, str) and bs not in out:
            out.append(bs)
    bs = funcargs.get("bootstrap_servers")
    if isinstance(bs, str) and bs not in out:
        out.append(bs)
    return out


def _broker_logs(funcargs: dict[str, Any]) -> list[str]:
    logs: list[str] = []
    shared = os.environ.get("KSTREAM_TEST_BROKER_LOG")
    if shared and Path(shared).exists():
        logs.append(shared)
    cluster = funcargs.get("kafka_cluster3")
    for node in getattr(cluster, "nodes", ()):
        path = getattr(node, "log_path", None)
        if path is not None and Path(path).exists():
            logs.append(str(path))
    return logs


def _copy_logs(src: Path, dest: Path) -> None:
    """Every file under `src` but LMDB data and lock files (state, not evidence: restored
    from the changelogs the dump holds)."""
    for path in src.rglob("*"):
        if path.is_file() and path.suffix != ".mdb":
            target = dest / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)


def dump_topics(bootstrap: str, wanted: Any, dest: Path) -> list[str]:
    """Dump every topic of `bootstrap` for which `wanted(name)` is true into `dest`; returns
    the topics dumped."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=15)
    topics = sorted(t for t in meta.topics if not t.startswith("__") and wanted(t))
    dest.mkdir(parents=True, exist_ok=True)
    for topic in topics:
        parts = sorted(meta.topics[topic].partitions)
        dump_topic(bootstrap, topic, parts, dest)
    return topics


def dump_topic(bootstrap: str, topic: str, partitions: Iterable[int], dest: Path) -> None:
    """`<topic>.json` (each partition's log start, high watermark, last stable offset) and
    its records as each isolation level reads them."""
    parts = list(partitions)
    ends: dict[str, dict[int, tuple[int, int]]] = {}
    for iso in ("read_uncommitted", "read_committed"):
        c = _consumer(bootstrap, iso)
        try:
            ends[iso] = {
                p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                for p in parts
            }
        finally:
            c.close()
    summary = {
        "topic": topic,
        "partitions": [
            {
                "partition": p,
                "log_start": ends["read_uncommitted"][p][0],
                "high_watermark": ends["read_uncommitted"][p][1],
                "last_stable_offset": ends["read_committed"][p][1],
            }
            for p in parts
        ],
    }
    (dest / f"{topic}.json").write_text(json.dumps(summary, indent=1) + "\n")
    for iso in ("read_uncommitted", "read_committed"):
        upto = {p: ends[iso][p][1] for p in parts}
        with open(dest / f"{topic}.{iso}.jsonl", "w") as out:
            for row in _read(bootstrap, topic, upto, iso):
                out.write(json.dumps(row) + "\n")


def _consumer(bootstrap: str, isolation: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"artifacts-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )


def _read(bootstrap: str, topic: str, upto: dict[int, int], isolation: str) -> Iterable[dict]:
    """Every record of `topic` from the beginning to `upto` per partition (the end as the
    isolation level sees it when the dump started), in partition then offset order."""
    todo = {p for p, end in upto.items() if end > 0}
    if not todo:
        return []
    c = _consumer(bootstrap, isolation)
    rows: list[dict] = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(todo)])
        deadline = time.monotonic() + _READ_S
        while todo and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                err = m.error()
                p = m.partition() or 0
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        todo.discard(p)
                    else:
                        rows.append({"partition": p, "error": str(err)})
                    continue
                rows.append(_row(m))
                if (m.offset() or 0) + 1 >= upto[p]:
                    todo.discard(p)
        if todo:
            rows.append({"incomplete": sorted(todo), "after_s": _READ_S})
    finally:
        c.close()
    rows.sort(key=lambda r: (r.get("partition", -1), r.get("offset", -1)))
    return rows


def _row(m: Any) -> dict:
    _, ts = m.timestamp()
    return {
        "partition": m.partition(),
        "offset": m.offset(),
        "timestamp": ts,
        "key": _bytes(m.key()),
        "value": _bytes(m.value()),
        "headers": [[k, _bytes(v)] for k, v in (m.headers() or [])],
    }


def _bytes(b: bytes | None) -> Any:
    """Text when the bytes are printable UTF-8, else hex (`{"hex": ...}`); None stays None
    (a tombstone)."""
    if b is None:
        return None
    try:
        text = b.decode()
    except UnicodeDecodeError:
        return {"hex": b.hex()}
    if text.isprintable():
        return text
    return {"hex": b.hex()}
