"""The checks `Config` applies to its keys, as tables: one row per key, one per combination.

A row names the key, the check its value must pass (which also returns the value as stored:
a duration in milliseconds, a lower-cased choice) and the form the error names. Keeping the
rules in rows, not in a chain of ifs, makes each key's rule readable in one line and makes an
error's wording the same for every key: `<key>: expected <form>, got <value>`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kstream.duration import duration
from kstream.errors import ConfigError
from kstream.security import validate_security


class Keys(Protocol):
    """The keys a combination rule reads (a `Config` once every key passed its row)."""

    @property
    def on_deserialization_error(self) -> Any: ...
    @property
    def on_processing_error(self) -> Any: ...
    @property
    def on_production_error(self) -> Any: ...
    @property
    def dlq_topic(self) -> str | None: ...
    @property
    def num_standby_replicas(self) -> int: ...
    @property
    def broker_compat(self) -> str: ...
    @property
    def rebalance_protocol(self) -> str: ...
    @property
    def kafka(self) -> Mapping[str, Any]: ...


ERROR_POLICIES = ("fail", "skip", "dlq")
RESTORE_POLICIES = ("fail", "skip")
"""`on_restore_error`: what a restore does with a changelog record that fails its checks
(kstream.state.restore_check): stop naming it (default), or leave it out."""
RECORDING_LEVELS = ("info", "debug", "trace")
REBALANCE_PROTOCOLS = ("auto", "cooperative", "eager", "consumer", "streams")
"""`rebalance_protocol`: "auto" (the default) is "streams" where the broker offers Streams
groups and "cooperative" elsewhere, and an existing group's own protocol while instances run in
it (kstream.runtime.streams_protocol); "cooperative" (Kafka Streams' classic default since 2.4)
revokes only the partitions that move, so tasks that stay keep running; "eager" closes every
task on every rebalance; "consumer" is Kafka's consumer group protocol (KIP-848, Apache Kafka
4.0+), whose broker-side assignment is incremental for topologies that read several topics
too; "streams" is Kafka Streams' own group protocol (KIP-1071, Apache Kafka 4.2+): the broker
assigns tasks (kstream.runtime.rebalance)."""
BROKER_COMPAT = ("none", "tansu")
"""`broker_compat`: "none" for Apache Kafka and brokers that behave like it; "tansu" turns on
the compensations for the embedded Tansu broker (kstream.broker_compat)."""
DURATION_KEYS = (
    "batch_max_wait",
    "commit_interval",
    "broker_compat_marks_retention",
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
_POSITIVE_DURATION_KEYS = ("broker_compat_marks_retention", "dedup_retention", "connect_timeout")
DEPRECATED_KEYS: dict[str, tuple[str, str]] = {
    "dedup_retention": (
        "broker_compat_marks_retention",
        "it sets how long broker_compat's provenance high marks are kept "
        "(kstream.broker_compat.HighMarks), not a dedup store's retention",
    ),
}
"""Deprecated key -> (the key that replaced it, why). A deprecated key given sets its
replacement, with a warning (`replaced_keys`); None means not given."""
_GROUP_INSTANCE_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")
_HOSTPORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.\-]*):(\d{1,5})$")
_TOPIC = re.compile(r"[A-Za-z0-9._\-]{1,249}")


class Refused(Exception):
    """A check's answer that the value is not of the form its row names."""


Check = Callable[[str, Any], Any]
"""`check(key, value)`: the value as the config stores it; `Refused` if it is not accepted
(or a ConfigError of its own, worded by the check, as durations do)."""


def int_at_least(low: int) -> Check:
    def check(_key: str, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise Refused
        return value

    return check


def flag(_key: str, value: Any) -> Any:
    if not isinstance(value, bool):
        raise Refused
    return value


def choice(options: tuple[str, ...]) -> Check:
    """One of `options`, compared without case or surrounding blanks; stored lower-cased."""

    def check(_key: str, value: Any) -> Any:
        if not isinstance(value, str) or value.strip().lower() not in options:
            raise Refused
        return value.strip().lower()

    return check


def exact_choice(options: tuple[Any, ...]) -> Check:
    def check(_key: str, value: Any) -> Any:
        if value not in options:
            raise Refused
        return value

    return check


def milliseconds(key: str, value: Any) -> Any:
    """A duration (`100`, `'5s'`) as int milliseconds; None or 0 turns an optional one off."""
    if value is None and key in OPTIONAL_DURATION_KEYS:
        return 0
    if value is None and key in DEPRECATED_KEYS:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        raise Refused
    ms = duration(value, name=key)
    if ms <= 0 and key in _POSITIVE_DURATION_KEYS:
        raise Refused
    return ms


def directory(_key: str, value: Any) -> Any:
    if not isinstance(value, str | os.PathLike) or not str(value):
        raise Refused
    return os.fspath(value)


def nonempty_text(_key: str, value: Any) -> Any:
    if not isinstance(value, str) or not value:
        raise Refused
    return value


def optional(check: Check) -> Check:
    def optional_check(key: str, value: Any) -> Any:
        return None if value is None else check(key, value)

    return optional_check


def policy(key: str, value: Any) -> Any:
    """An error policy by name, or a handler; on_production_error may be left None (it then
    follows on_processing_error)."""
    if callable(value) or (value is None and key == "on_production_error"):
        return value
    return exact_choice(ERROR_POLICIES)(key, value)


def topic_name(_key: str, value: Any) -> Any:
    if not isinstance(value, str) or not _TOPIC.fullmatch(value):
        raise Refused
    return value


def host_port(_key: str, value: Any) -> Any:
    m = _HOSTPORT.match(value) if isinstance(value, str) else None
    if m is None or int(m.group(2)) > 65535:
        raise Refused
    return value


def replication(_key: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or (value < 1 and value != -1):
        raise Refused
    return value


def group_instance(_key: str, value: Any) -> Any:
    if not isinstance(value, str) or not _GROUP_INSTANCE_ID.fullmatch(value):
        raise Refused
    if value in (".", ".."):
        raise Refused
    return value


def kafka_settings(_key: str, value: Any) -> Any:
    """A dict of librdkafka settings, checked by librdkafka itself; stored as a copy."""
    if not isinstance(value, Mapping):
        raise Refused
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"kafka: setting names must be strings, got {bad!r}")
    validate_security(value)
    validate_librdkafka(value)
    validate_engine_owned(value)
    return dict(value)


_POLICY_FORM = f"one of {', '.join(ERROR_POLICIES)}"
_HANDLER = " (or a handler: (context, record, exception) -> Response)"
KEY_RULES: tuple[tuple[str, Check, str], ...] = (
    ("batch_max_records", int_at_least(1), "a positive int"),
    *(
        (
            key,
            milliseconds,
            "a duration greater than zero such as 100 (ms) or '5s'"
            if key in _POSITIVE_DURATION_KEYS
            else "a finite duration such as 100 (ms) or '5s'",
        )
        for key in DURATION_KEYS
    ),
    (
        "max_task_idle_ms",
        int_at_least(-1),
        "milliseconds (an int >= 0), or -1 to turn task idling off",
    ),
    (
        "num_standby_replicas",
        int_at_least(0),
        "an int >= 0 (Kafka's num.standby.replicas)",
    ),
    (
        "acceptable_recovery_lag",
        int_at_least(-1),
        "a number of changelog records (an int >= 0, Kafka's acceptable.recovery.lag), or -1 "
        "to join without warming up",
    ),
    ("enable_stale_stores", flag, "true or false"),
    (
        "cache_max_bytes",
        int_at_least(0),
        "a number of bytes (an int >= 0; 0 turns the record cache off)",
    ),
    ("gc_pause", flag, "true or false"),
    (
        "metrics_recording_level",
        choice(RECORDING_LEVELS),
        f"one of {', '.join(RECORDING_LEVELS)} (Kafka Streams' INFO, DEBUG and TRACE)",
    ),
    ("state_dir", directory, "a directory path"),
    (
        "default_backend",
        nonempty_text,
        "a backend name or URL such as 'memory', 'lmdb' or 'redis://127.0.0.1:6379/0'",
    ),
    ("on_deserialization_error", policy, _POLICY_FORM + _HANDLER),
    ("on_processing_error", policy, _POLICY_FORM + _HANDLER),
    ("on_production_error", policy, _POLICY_FORM + _HANDLER),
    (
        "on_restore_error",
        exact_choice(RESTORE_POLICIES),
        f"one of {', '.join(RESTORE_POLICIES)} (a changelog record cannot go to a dead-letter "
        "topic)",
    ),
    (
        "dlq_topic",
        optional(topic_name),
        "a topic name (1 to 249 letters, digits, '.', '_' or '-')",
    ),
    ("http", optional(host_port), "'HOST:PORT' such as '127.0.0.1:8080'"),
    ("http_token", optional(nonempty_text), "a non-empty string"),
    (
        "replication_factor",
        replication,
        "a positive int or -1 (broker default)",
    ),
    (
        "broker_compat",
        choice(BROKER_COMPAT),
        f"one of {', '.join(BROKER_COMPAT)} ('none' for Apache Kafka, 'tansu' for the embedded "
        "Tansu broker)",
    ),
    ("kafka", kafka_settings, "a dict of librdkafka settings"),
    ("rebalance_protocol", choice(REBALANCE_PROTOCOLS), f"one of {', '.join(REBALANCE_PROTOCOLS)}"),
    (
        "group_instance_id",
        optional(group_instance),
        "1 to 200 letters, digits, '.', '_' or '-' (Kafka's rules for group.instance.id)",
    ),
)
"""(key, check, the form its error names), applied in this order: a later row's combination
rules may rely on an earlier row's stored form."""


def replaced_keys(config: Any) -> dict[str, Any]:
    """The values the deprecated keys given in `config` (a dataclass whose keys passed their
    rows) set their replacements to, each with a FutureWarning naming the new key. A
    deprecated key and its replacement both set, to different values, is a ConfigError."""
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    out: dict[str, Any] = {}
    for old, (new, why) in DEPRECATED_KEYS.items():
        value = getattr(config, old)
        if value is None:
            continue
        current = getattr(config, new)
        if current != defaults[new] and current != value:
            raise ConfigError(
                f"{old}: deprecated name of {new}, and both are set ({old}={value!r} ms, "
                f"{new}={current!r} ms); set only {new}"
            )
        warnings.warn(
            f"config key {old!r} is deprecated: {why}; it now sets {new!r}, use that name",
            FutureWarning,
            stacklevel=2,
        )
        out[new] = value
    return out


def checked_value(key: str, check: Check, form: str, value: Any) -> Any:
    """`value` as `check` stores it, or a ConfigError naming `key`, the form and the value."""
    try:
        return check(key, value)
    except Refused:
        raise ConfigError(f"{key}: expected {form}, got {value!r}") from None


def _uses_dlq(c: Keys) -> bool:
    return "dlq" in (c.on_deserialization_error, c.on_processing_error, c.on_production_error)


COMBINATION_RULES: tuple[tuple[Callable[[Keys], bool], str], ...] = (
    (
        lambda c: _uses_dlq(c) and not c.dlq_topic,
        "dlq_topic: required when an error policy is 'dlq'",
    ),
    (
        lambda c: bool(c.num_standby_replicas) and c.broker_compat == "tansu",
        "num_standby_replicas: standby replicas need a broker whose read_committed readers see "
        "committed records only (Apache Kafka); broker_compat='tansu' admits changelog records "
        "by the owner's committed offsets, which a standby does not know",
    ),
    (
        lambda c: c.rebalance_protocol == "streams" and c.broker_compat == "tansu",
        "rebalance_protocol: 'streams' (KIP-1071) needs Apache Kafka 4.2 or later; "
        "broker_compat='tansu' names a broker without it (use 'cooperative')",
    ),
    (
        lambda c: c.rebalance_protocol == "consumer" and c.broker_compat == "tansu",
        "rebalance_protocol: 'consumer' (KIP-848) needs Apache Kafka 4.0 or later; "
        "broker_compat='tansu' names a broker without it (use 'cooperative')",
    ),
)
"""(when the keys contradict each other, the error): checked once every key passed its row."""

BROKER_SIDE_GROUP_KEYS = {
    "session.timeout.ms": "group.consumer.session.timeout.ms",
    "heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms",
}
"""librdkafka settings the consumer protocol takes from the broker: the broker's setting (or
the group's config without the `group.` prefix) instead."""
ENGINE_SET_KAFKA_KEYS = {
    "partition.assignment.strategy": "rebalance_protocol",
    "group.protocol": "rebalance_protocol",
    "group.remote.assignor": "rebalance_protocol",
    "group.instance.id": "group_instance_id",
}
"""librdkafka settings an engine key sets: it applies them to the stream thread's group
consumer only, and per worker process (in `kafka` they would reach every client)."""


def check_kafka_keys_against_engine(c: Keys) -> None:
    """No `kafka` setting that contradicts `rebalance_protocol` or `group_instance_id`."""
    if c.rebalance_protocol == "consumer":
        for key, broker_key in BROKER_SIDE_GROUP_KEYS.items():
            if key in c.kafka:
                raise ConfigError(
                    f"kafka[{key!r}]: not a client setting under rebalance_protocol="
                    f"'consumer' (librdkafka refuses it): the broker's {broker_key!r}, or "
                    f"the group's {broker_key.removeprefix('group.')!r}, sets it"
                )
    for key, instead in ENGINE_SET_KAFKA_KEYS.items():
        if key in c.kafka:
            raise ConfigError(
                f"kafka[{key!r}]: set the engine's {instead!r} instead (it applies to the "
                "stream thread's group consumer, and per worker process)"
            )


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
