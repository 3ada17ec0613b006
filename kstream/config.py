"""Application configuration, validated when it is built.

An unknown key is an error that lists the valid ones; a bad value names the key and the form
expected. Nothing here is checked lazily on the first record.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from kstream.duration import duration
from kstream.errors import ConfigError
from kstream.internal_topics import WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION
from kstream.security import validate_security

ERROR_POLICIES = ("fail", "skip", "dlq")
RESTORE_POLICIES = ("fail", "skip")
"""`on_restore_error`: what a restore does with a changelog record that fails its checks
(kstream.state.restore_check): stop naming it (default), or leave it out."""
RECORDING_LEVELS = ("info", "debug", "trace")
GUARANTEES = ("exactly_once", "exactly_once_v2", "at_least_once")
DEFAULT_GUARANTEE = "exactly_once_v2"
"""Kafka Streams' default exactly-once mode since 4.0 (which removed per-task exactly_once;
kstream keeps it as a choice)."""
REBALANCE_PROTOCOLS = ("auto", "cooperative", "eager", "consumer", "streams")
"""`rebalance_protocol`: "auto" (the default) is "streams" where the broker offers Streams
groups and "cooperative" elsewhere, and an existing group's own protocol while instances run in
it (kstream.runtime.streams_protocol); "cooperative" (Kafka Streams' classic default since 2.4)
revokes only the partitions that move, so tasks that stay keep running; "eager" closes every
task on every rebalance; "consumer" is Kafka's consumer group protocol (KIP-848, Apache Kafka
4.0+), whose broker-side assignment is incremental for topologies that read several topics
too; "streams" is Kafka Streams' own group protocol (KIP-1071, Apache Kafka 4.2+): the broker
assigns tasks (kstream.runtime.rebalance)."""
_BROKER_SIDE_GROUP_KEYS = {
    "session.timeout.ms": "group.consumer.session.timeout.ms",
    "heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms",
}
"""librdkafka settings the consumer protocol takes from the broker: the broker's setting (or
the group's config without the `group.` prefix) instead."""
BROKER_COMPAT = ("none", "tansu")
"""`broker_compat`: "none" for Apache Kafka and brokers that behave like it; "tansu" turns on
the compensations for the embedded Tansu broker (kstream.broker_compat)."""
_HOSTPORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.\-]*):(\d{1,5})$")
DURATION_KEYS = (
    "batch_max_wait",
    "commit_interval",
    "dedup_retention",
    "connect_timeout",
    "shutdown_timeout",
    "windowstore_changelog_additional_retention",
    "repartition_purge_interval",
    "future_timestamp_warning",
    "slow_rebalance_warning",
)
OPTIONAL_DURATION_KEYS = ("future_timestamp_warning", "slow_rebalance_warning")
"""Duration keys that None (or 0) turns off: a warning nobody wants is disabled, not tuned."""
MAX_TOPIC_NAME = 249
APP_ID_MAX_LEN = 200
"""An app id names topics (`<app_id>-<store>-changelog`, `<app_id>-instances`, ...) and a
directory under `state_dir`; 200 characters leave room for the suffixes within Kafka's 249."""
_APP_ID = re.compile(r"[A-Za-z0-9._-]+")


def _default_state_dir() -> str:
    import tempfile  # only for the default: tempfile's import costs every process start

    return os.path.join(tempfile.gettempdir(), "kstream-state")


@dataclass(frozen=True)
class Config:
    """Engine settings. Durations are stored as int milliseconds."""

    batch_max_records: int = 10_000
    batch_max_wait: int = 100
    commit_interval: int = 100
    state_dir: str = field(default_factory=_default_state_dir)
    default_backend: str = "memory"
    dedup_retention: int = 7 * 24 * 3_600_000
    # a policy ("fail", "skip", "dlq") or a handler `(context, record, exception) -> Response`
    # (kstream.runtime.policies); production errors follow on_processing_error unless
    # on_production_error is set
    on_deserialization_error: Any = "fail"
    on_processing_error: Any = "fail"
    on_production_error: Any = None
    # a changelog record a restore refuses (kstream.state.restore_check): "fail" or "skip"
    on_restore_error: str = "fail"
    dlq_topic: str | None = None
    http: str | None = None
    http_token: str | None = None
    connect_timeout: int = 10_000
    shutdown_timeout: int = 30_000
    # internal topics' replication factor; -1 takes the broker's default.replication.factor
    replication_factor: int = -1
    # Kafka Streams' windowstore.changelog.additional.retention.ms: a window, session or dedup
    # store's changelog keeps records for the store's retention plus this (clock drift)
    windowstore_changelog_additional_retention: int = WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION
    # Kafka Streams' repartition.purge.interval.ms: at most this often, after a commit, the
    # records of repartition topics below the committed offsets are deleted (kstream.runtime.purge)
    repartition_purge_interval: int = 30_000
    kafka: Mapping[str, Any] = field(default_factory=dict)
    # compensations for a broker that is not Apache Kafka ("tansu"); the default, "none", is
    # Kafka's behaviour. The default comes from KSTREAM_BROKER_COMPAT when that is set.
    broker_compat: str = field(
        default_factory=lambda: os.environ.get("KSTREAM_BROKER_COMPAT", "none")
    )
    # Pause Python's cyclic garbage collector while a batch is processed (see thread.py)
    gc_pause: bool = True
    # Kafka Streams' metrics.recording.level: state-store operation metrics (counts, latency)
    # are recorded at "debug" (and "trace", which adds nothing more here); "info" keeps the rest
    metrics_recording_level: str = "info"
    # warn (at most once a minute per task) and count kstream_records_future_timestamp_total
    # when a record moves a task's stream time more than this ahead of the wall clock: every
    # record with an earlier timestamp is then late for windows and joins, as in Kafka Streams
    # (kstream.runtime.future_timestamps); 0 or None: off
    future_timestamp_warning: int = 86_400_000
    # warn, again every such interval, while a rebalance lasts longer than this (a member that
    # does not poll, a broker that lost track of members; kstream.runtime.slow_rebalance);
    # 0 or None: off
    slow_rebalance_warning: int = 60_000
    # "auto", "cooperative", "eager", "consumer" or "streams" (kstream.runtime.rebalance):
    # which partitions a rebalance takes from the stream thread, only those that move or all
    # of them, and whether the broker assigns them (consumer: KIP-848, Apache Kafka 4.0+;
    # streams: KIP-1071, 4.2+); auto: streams where the broker offers it, else cooperative
    # (kstream.runtime.streams_protocol)
    rebalance_protocol: str = "auto"
    # Kafka's group.instance.id (static membership): a restart within session.timeout.ms
    # moves no task; worker processes get "<id>-<worker index>"; None: a dynamic member
    group_instance_id: str | None = None
    # Kafka's max.task.idle.ms (KIP-353): how long a task reading several partitions waits
    # for an empty one that is caught up before processing the others; 0 (Kafka's default)
    # waits only while an empty partition is known to have data at the broker, -1 never waits
    # (kstream.runtime.idling)
    max_task_idle_ms: int = 0
    # Kafka's statestore.cache.max.bytes: the record cache (kstream.state.caching) that
    # coalesces a key's table updates between commits before they are forwarded; bytes of the
    # instance, divided among its worker processes (one stream thread each); 0 (the default
    # here, 10 MB in Kafka) turns it off
    cache_max_bytes: int = 0
    # Kafka's num.standby.replicas: how many other instances keep a standby copy of each
    # task's stores, following its changelogs, so a failover restores only the tail
    # (kstream.runtime.standby); 0 (Kafka's default) keeps none
    num_standby_replicas: int = 0
    # Kafka's acceptable.recovery.lag (KIP-441): with standby replicas, an instance that
    # joins while others run the app first warms up the standbys placed on it and joins the
    # group once each is within this many changelog records of its end
    # (kstream.runtime.standby); -1: join at once
    acceptable_recovery_lag: int = 10_000
    # Kafka's StoreQueryParameters.enableStaleStores() as the default of the HTTP store
    # queries: also answer from standby copies (possibly behind the active task)
    enable_stale_stores: bool = False

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None = None, **overrides: Any) -> Config:
        """Build and validate a Config from a dict (plus keyword overrides)."""
        merged: dict[str, Any] = dict(mapping or {})
        merged.update(overrides)
        valid = cls.keys()
        unknown = sorted(k for k in merged if k not in valid)
        if unknown:
            raise ConfigError(
                f"unknown config key(s) {', '.join(map(repr, unknown))}; "
                f"valid keys are: {', '.join(valid)}"
            )
        return cls(**merged)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if isinstance(self.batch_max_records, bool) or not isinstance(self.batch_max_records, int):
            raise ConfigError(
                f"batch_max_records: expected a positive int, got {self.batch_max_records!r}"
            )
        if self.batch_max_records <= 0:
            raise ConfigError(
                f"batch_max_records: expected a positive int, got {self.batch_max_records}"
            )
        for key in OPTIONAL_DURATION_KEYS:
            if getattr(self, key) is None:
                set_(self, key, 0)
        for key in DURATION_KEYS:
            value = getattr(self, key)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(
                    f"{key}: expected a finite duration such as 100 (ms) or '5s', got {value!r}"
                )
            set_(self, key, duration(value, name=key))
        idle = self.max_task_idle_ms
        if isinstance(idle, bool) or not isinstance(idle, int) or idle < -1:
            raise ConfigError(
                "max_task_idle_ms: expected milliseconds (an int >= 0), or -1 to turn task "
                f"idling off, got {idle!r}"
            )
        standbys = self.num_standby_replicas
        if isinstance(standbys, bool) or not isinstance(standbys, int) or standbys < 0:
            raise ConfigError(
                f"num_standby_replicas: expected an int >= 0 (Kafka's num.standby.replicas), "
                f"got {standbys!r}"
            )
        lag = self.acceptable_recovery_lag
        if isinstance(lag, bool) or not isinstance(lag, int) or lag < -1:
            raise ConfigError(
                "acceptable_recovery_lag: expected a number of changelog records (an int >= 0, "
                f"Kafka's acceptable.recovery.lag), or -1 to join without warming up, got {lag!r}"
            )
        if not isinstance(self.enable_stale_stores, bool):
            raise ConfigError(
                f"enable_stale_stores: expected true or false, got {self.enable_stale_stores!r}"
            )
        cmb = self.cache_max_bytes
        if isinstance(cmb, bool) or not isinstance(cmb, int) or cmb < 0:
            raise ConfigError(
                "cache_max_bytes: expected a number of bytes (an int >= 0; 0 turns the record "
                f"cache off), got {cmb!r}"
            )
        if not isinstance(self.gc_pause, bool):
            raise ConfigError(f"gc_pause: expected true or false, got {self.gc_pause!r}")
        level = self.metrics_recording_level
        if not isinstance(level, str) or level.lower() not in RECORDING_LEVELS:
            raise ConfigError(
                f"metrics_recording_level: expected one of {', '.join(RECORDING_LEVELS)} "
                f"(Kafka Streams' INFO, DEBUG and TRACE), got {level!r}"
            )
        set_(self, "metrics_recording_level", level.lower())
        if self.dedup_retention <= 0:
            raise ConfigError("dedup_retention: must be greater than zero")
        if self.connect_timeout <= 0:
            raise ConfigError("connect_timeout: must be greater than zero")
        if not isinstance(self.state_dir, str | os.PathLike) or not str(self.state_dir):
            raise ConfigError(f"state_dir: expected a directory path, got {self.state_dir!r}")
        set_(self, "state_dir", os.fspath(self.state_dir))
        if not isinstance(self.default_backend, str) or not self.default_backend:
            raise ConfigError(
                "default_backend: expected a backend name or URL such as 'memory', 'lmdb' or "
                f"'redis://127.0.0.1:6379/0', got {self.default_backend!r}"
            )
        for key in ("on_deserialization_error", "on_processing_error", "on_production_error"):
            val = getattr(self, key)
            if (val is None and key == "on_production_error") or callable(val):
                continue
            if val not in ERROR_POLICIES:
                raise ConfigError(
                    f"{key}: expected one of {', '.join(ERROR_POLICIES)}, got {val!r} (or a "
                    "handler: (context, record, exception) -> Response)"
                )
        if self.on_restore_error not in RESTORE_POLICIES:
            raise ConfigError(
                f"on_restore_error: expected one of {', '.join(RESTORE_POLICIES)} (a changelog "
                f"record cannot go to a dead-letter topic), got {self.on_restore_error!r}"
            )
        uses_dlq = "dlq" in (
            self.on_deserialization_error,
            self.on_processing_error,
            self.on_production_error,
        )
        if uses_dlq and not self.dlq_topic:
            raise ConfigError("dlq_topic: required when an error policy is 'dlq'")
        if self.dlq_topic is not None and not _valid_topic(self.dlq_topic):
            raise ConfigError(f"dlq_topic: {self.dlq_topic!r} is not a valid topic name")
        if self.http is not None and not (
            isinstance(self.http, str) and _valid_hostport(self.http)
        ):
            raise ConfigError(
                f"http: expected 'HOST:PORT' such as '127.0.0.1:8080', got {self.http!r}"
            )
        if self.http_token is not None and (
            not isinstance(self.http_token, str) or not self.http_token
        ):
            raise ConfigError("http_token: expected a non-empty string")
        rf = self.replication_factor
        if isinstance(rf, bool) or not isinstance(rf, int) or (rf < 1 and rf != -1):
            raise ConfigError(
                f"replication_factor: expected a positive int or -1 (broker default), "
                f"got {self.replication_factor!r}"
            )
        compat = self.broker_compat
        if not isinstance(compat, str) or compat.strip().lower() not in BROKER_COMPAT:
            raise ConfigError(
                f"broker_compat: expected one of {', '.join(BROKER_COMPAT)} ('none' for Apache "
                f"Kafka, 'tansu' for the embedded Tansu broker), got {compat!r}"
            )
        set_(self, "broker_compat", compat.strip().lower())
        if self.num_standby_replicas and self.broker_compat == "tansu":
            raise ConfigError(
                "num_standby_replicas: standby replicas need a broker whose read_committed "
                "readers see committed records only (Apache Kafka); broker_compat='tansu' "
                "admits changelog records by the owner's committed offsets, which a standby "
                "does not know"
            )
        if not isinstance(self.kafka, Mapping):
            raise ConfigError(f"kafka: expected a dict of librdkafka settings, got {self.kafka!r}")
        bad = [k for k in self.kafka if not isinstance(k, str)]
        if bad:
            raise ConfigError(f"kafka: setting names must be strings, got {bad!r}")
        validate_security(self.kafka)
        validate_librdkafka(self.kafka)
        validate_engine_owned(self.kafka)
        set_(self, "kafka", dict(self.kafka))
        self._validate_group_keys()

    def _validate_group_keys(self) -> None:
        """`rebalance_protocol` and `group_instance_id`, and no librdkafka setting that would
        contradict them (they apply to the stream thread's group consumer only: in `kafka`,
        a `group.instance.id` would also reach the restore and global consumers)."""
        protocol = self.rebalance_protocol
        if not isinstance(protocol, str) or protocol.strip().lower() not in REBALANCE_PROTOCOLS:
            raise ConfigError(
                f"rebalance_protocol: expected one of {', '.join(REBALANCE_PROTOCOLS)}, got "
                f"{protocol!r}"
            )
        object.__setattr__(self, "rebalance_protocol", protocol.strip().lower())
        gid = self.group_instance_id
        if gid is not None and (
            not isinstance(gid, str) or not _GROUP_INSTANCE_ID.fullmatch(gid) or gid in (".", "..")
        ):
            raise ConfigError(
                "group_instance_id: expected 1 to 200 letters, digits, '.', '_' or '-' (Kafka's "
                f"rules for group.instance.id), got {gid!r}"
            )
        if self.rebalance_protocol == "streams" and self.broker_compat == "tansu":
            raise ConfigError(
                "rebalance_protocol: 'streams' (KIP-1071) needs Apache Kafka 4.2 or later; "
                "broker_compat='tansu' names a broker without it (use 'cooperative')"
            )
        if self.rebalance_protocol == "consumer":
            if self.broker_compat == "tansu":
                raise ConfigError(
                    "rebalance_protocol: 'consumer' (KIP-848) needs Apache Kafka 4.0 or later; "
                    "broker_compat='tansu' names a broker without it (use 'cooperative')"
                )
            for key, broker_key in _BROKER_SIDE_GROUP_KEYS.items():
                if key in self.kafka:
                    raise ConfigError(
                        f"kafka[{key!r}]: not a client setting under rebalance_protocol="
                        f"'consumer' (librdkafka refuses it): the broker's {broker_key!r}, or "
                        f"the group's {broker_key.removeprefix('group.')!r}, sets it"
                    )
        for key, instead in (
            ("partition.assignment.strategy", "rebalance_protocol"),
            ("group.protocol", "rebalance_protocol"),
            ("group.remote.assignor", "rebalance_protocol"),
            ("group.instance.id", "group_instance_id"),
        ):
            if key in self.kafka:
                raise ConfigError(
                    f"kafka[{key!r}]: set the engine's {instead!r} instead (it applies to the "
                    "stream thread's group consumer, and per worker process)"
                )


_GROUP_INSTANCE_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")

# librdkafka settings kstream's own consumers depend on: (the value they need, why)
_ENGINE_OWNED: dict[str, tuple[bool, str]] = {
    "enable.partition.eof": (
        True,
        "its consumers need partition-EOF events to finish restoring stores and bootstrapping "
        "global tables, and to measure lag (with it off a restore waits until it times out)",
    ),
    "enable.auto.commit": (
        False,
        "input offsets are committed with the outputs they produced (inside the transaction "
        "under exactly_once), never in the background",
    ),
}


def validate_engine_owned(kafka: Mapping[str, Any]) -> None:
    """Refuse a `kafka` value that would break what kstream's own clients rely on (Kafka
    Streams overrides such consumer settings with a warning; here they are an error at
    start-up, naming the key, rather than a restore that hangs or offsets committed early)."""
    for key, (needed, why) in _ENGINE_OWNED.items():
        if key not in kafka:
            continue
        value = kafka[key]
        text = str(value).strip().lower()
        flag = {"true": True, "1": True, "false": False, "0": False}.get(text)
        if flag is not needed:
            raise ConfigError(
                f"kafka[{key!r}] = {value!r}: kstream sets {key} to {str(needed).lower()} "
                f"itself because {why}; leave it out of `kafka`"
            )


_SILENT = logging.getLogger("kstream.config.librdkafka-check")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False
_checked: set[tuple[tuple[str, str], ...]] = set()


def validate_librdkafka(kafka: Mapping[str, Any]) -> None:
    """Build a client configuration from `kafka` so librdkafka rejects what it does not know.

    librdkafka names the canonical property in its message (`queue.buffering.max.ms` for a bad
    `linger.ms`), so a failure is retried key by key to name the key the user wrote.
    Consumer-only keys pass: librdkafka only warns about them on a producer. The check is
    cached per distinct settings: it costs a client handle (a few milliseconds).
    """
    if not kafka:
        return
    from confluent_kafka import KafkaException, Producer

    try:
        signature = tuple(sorted((k, repr(v)) for k, v in kafka.items()))
    except TypeError:
        signature = None
    if signature is not None and signature in _checked:
        return

    def attempt(conf: Mapping[str, Any]) -> str | None:
        try:
            Producer({**conf, "logger": _SILENT})
        except KafkaException as e:
            err = e.args[0] if e.args else e
            return str(getattr(err, "str", lambda: str(err))())
        except (TypeError, ValueError) as e:
            return str(e)
        return None

    # Without security.protocol (checked by validate_security) librdkafka does not load
    # certificates or keys here: their files are read when the clients connect.
    plain = {k: v for k, v in kafka.items() if k != "security.protocol"}
    problem = attempt(plain)
    if problem is not None:
        for key, value in plain.items():
            alone = attempt({key: value})
            if alone is not None:
                hint = "" if "No such configuration property" in alone else f" ({alone})"
                what = "is not a librdkafka setting" if not hint else f"= {value!r} is invalid"
                raise ConfigError(
                    f"kafka[{key!r}] {what}{hint}; see librdkafka's CONFIGURATION.md for "
                    "the settings and their forms"
                )
        raise ConfigError(f"kafka: librdkafka rejects these settings together: {problem}")
    if signature is not None:
        _checked.add(signature)


def validate_app_id(app_id: object, key: str = "app_id") -> str:
    """`app_id` if Kafka can name topics after it and it is a safe directory name.

    The rules are Kafka's for topic names (`[a-zA-Z0-9._-]`, not `.` or `..`), with a length
    that leaves room for the suffixes of the topics derived from it.
    """
    form = (
        f"1 to {APP_ID_MAX_LEN} letters, digits, '.', '_' or '-' (not '.' or '..'), e.g. "
        "'word-count'"
    )
    if not isinstance(app_id, str) or not app_id:
        raise ConfigError(f"{key}: required, {form}; got {app_id!r}")
    bad = sorted(set(_APP_ID.sub("", app_id)))
    if bad:
        raise ConfigError(f"{key}: {app_id!r} contains {''.join(bad)!r}; expected {form}")
    if app_id in (".", ".."):
        raise ConfigError(f"{key}: {app_id!r} is not allowed; expected {form}")
    if len(app_id) > APP_ID_MAX_LEN:
        raise ConfigError(
            f"{key}: {len(app_id)} characters is too long; expected {form} (topics named "
            f"after it must fit Kafka's {MAX_TOPIC_NAME})"
        )
    return app_id


_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_HOSTNAME = re.compile(r"[A-Za-z0-9._-]+")
_IPV6 = re.compile(r"\[[0-9A-Fa-f:.]+(%[A-Za-z0-9._-]+)?\]")
_PORT = re.compile(r"[0-9]{1,5}")


def validate_bootstrap_servers(value: object, key: str = "bootstrap_servers") -> str:
    """`value` if it is a comma-separated list of `HOST:PORT` that librdkafka can use.

    A host is a name, an IPv4 address or a bracketed IPv6 address (`[::1]:9092`); an entry may
    start with a security protocol as a listener name (`SASL_SSL://host:9093`), as librdkafka
    allows. The port is required (librdkafka would quietly use 9092, and Kafka's Java clients
    refuse an entry without one) and lies in 1-65535. Checked before anything connects: a
    typo here would otherwise cost the whole connect_timeout and surface as an unreachable
    broker (librdkafka reads `127.0.0.1:notaport` as port 0).
    """
    form = "HOST:PORT[,HOST:PORT...] such as '127.0.0.1:9092' or '[::1]:9092,kafka-2:9092'"
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}: expected {form}, got {value!r}")
    entries = value.split(",")
    for n, entry in enumerate(entries, 1):
        problem = _broker_problem(entry.strip())
        if problem is not None:
            where = f"entry {n} of {value!r}: " if len(entries) > 1 else ""
            raise ConfigError(f"{key}: {where}{problem}; expected {form}")
    return value


def _broker_problem(entry: str) -> str | None:
    """What is wrong with one entry of a bootstrap list, or None."""
    if not entry:
        return "an empty entry"
    rest = entry
    if "://" in rest:
        proto, _, rest = rest.partition("://")
        if proto.upper() not in _SECURITY_PROTOCOLS:
            return (
                f"{entry!r} starts with {proto + '://'!r}; a listener name must be one of "
                f"{', '.join(_SECURITY_PROTOCOLS)}"
            )
    if rest.startswith("["):
        host, sep, port = rest.rpartition("]:")
        host += "]"
        if not sep or not _IPV6.fullmatch(host):
            return f"{entry!r} is not '[IPV6]:PORT'"
    else:
        host, sep, port = rest.rpartition(":")
        if not sep:
            return f"{entry!r} has no port"
        if ":" in host:
            return f"{entry!r}: write an IPv6 address in brackets, e.g. '[::1]:9092'"
        if not _HOSTNAME.fullmatch(host):
            return f"{entry!r} has no valid host name before ':{port}'"
    if not _PORT.fullmatch(port) or not 1 <= int(port) <= 65535:
        return f"{entry!r} has port {port!r}, not a number 1-65535"
    return None


def validate_topic_names(app_id: str, names: list[str], key: str = "app_id") -> None:
    """Every topic derived from `app_id` fits Kafka's limit (checked before any is created)."""
    too_long = sorted((n for n in names if len(n) > MAX_TOPIC_NAME), key=len)
    if too_long:
        raise ConfigError(
            f"{key}: {app_id!r} makes topic {too_long[-1]!r} {len(too_long[-1])} characters "
            f"long, over Kafka's {MAX_TOPIC_NAME}; use a shorter app_id or store name"
        )


def app_state_dir(state_dir: str, app_id: str) -> str:
    """`<state_dir>/<app_id>`, refusing any app id that would leave `state_dir`."""
    validate_app_id(app_id)
    base = os.path.abspath(state_dir)
    path = os.path.join(base, app_id)
    if os.path.dirname(path) != base:
        raise ConfigError(f"app_id: {app_id!r} leads outside state_dir {state_dir!r}")
    return path


def prepare_state_dir(state_dir: str, app_id: str) -> str:
    """Create `<state_dir>/<app_id>` and check that it can be written; ConfigError if not."""
    path = app_state_dir(state_dir, app_id)
    if os.path.exists(state_dir) and not os.path.isdir(state_dir):
        raise ConfigError(f"state_dir: {state_dir!r} is a file; expected a writable directory")
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".write-check-{os.getpid()}")
        with open(probe, "w", encoding="ascii") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as e:
        raise ConfigError(
            f"state_dir: cannot create or write {path!r} ({e.strerror or e}); expected a "
            "writable directory"
        ) from None
    return path


def _valid_topic(name: object) -> bool:
    return isinstance(name, str) and bool(re.fullmatch(r"[A-Za-z0-9._\-]{1,249}", name))


def _valid_hostport(text: str) -> bool:
    m = _HOSTPORT.match(text)
    return bool(m) and 0 <= int(m.group(2)) <= 65535  # type: ignore[union-attr]


def validate_guarantee(value: str) -> str:
    if value not in GUARANTEES:
        raise ConfigError(
            f"processing_guarantee: expected one of {', '.join(GUARANTEES)}, got {value!r}"
        )
    return value
