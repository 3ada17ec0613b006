"""Config validation: unknown keys, bad values, durations, kafka pass-through."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from kstream import Config, ConfigError
from kstream.guarantee import parse_guarantee


def test_defaults() -> None:
    c = Config()
    assert (c.batch_max_records, c.batch_max_wait, c.commit_interval) == (10_000, 100, 100)
    assert c.on_deserialization_error == c.on_processing_error == "fail"
    assert c.kafka == {}
    assert c.connect_timeout == 10_000


def test_unknown_key_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as e:
        Config.from_mapping({"batch_size": 5, "commit_intervall": 1})
    msg = str(e.value)
    assert msg.startswith(
        "unknown config key(s) 'batch_size', 'commit_intervall'; valid keys are: "
    )
    assert msg.endswith(", ".join(Config.keys()))
    for key in ("batch_max_records", "batch_max_wait", "commit_interval", "state_dir", "kafka"):
        assert key in msg


def test_durations_in_every_form_are_normalised() -> None:
    c = Config.from_mapping(
        {
            "batch_max_wait": "250ms",
            "commit_interval": (2, "seconds"),
            "broker_compat_marks_retention": dt.timedelta(hours=1),
            "connect_timeout": "5s",
        },
        shutdown_timeout=1500,
    )
    assert c.batch_max_wait == 250
    assert c.commit_interval == 2_000
    assert c.broker_compat_marks_retention == 3_600_000
    assert c.connect_timeout == 5_000
    assert c.shutdown_timeout == 1_500


def test_internal_topic_durations_default_to_kafka_streams_and_take_every_form() -> None:
    c = Config()
    # windowstore.changelog.additional.retention.ms and repartition.purge.interval.ms
    assert c.windowstore_changelog_additional_retention == 86_400_000
    assert c.repartition_purge_interval == 30_000
    c = Config.from_mapping(
        {
            "windowstore_changelog_additional_retention": dt.timedelta(hours=2),
            "repartition_purge_interval": "1m30s",
        }
    )
    assert c.windowstore_changelog_additional_retention == 7_200_000
    assert c.repartition_purge_interval == 90_000
    # zero: no extra retention; a purge after every commit
    c = Config(windowstore_changelog_additional_retention=0, repartition_purge_interval="0ms")
    assert (c.windowstore_changelog_additional_retention, c.repartition_purge_interval) == (0, 0)


def test_internal_topic_durations_come_from_kstreamd_settings_too() -> None:
    from kstream.service.settings import load_settings

    env = {
        "KSTREAM_REPARTITION_PURGE_INTERVAL": "5s",
        "KSTREAM_WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION": "3600000",
    }
    c = load_settings(env=env).engine_config()
    assert (c.repartition_purge_interval, c.windowstore_changelog_additional_retention) == (
        5_000,
        3_600_000,
    )


def test_kafka_settings_pass_through_as_a_copy() -> None:
    kafka = {"compression.type": "lz4", "fetch.min.bytes": 1}
    c = Config.from_mapping({"kafka": kafka})
    assert c.kafka == kafka
    kafka["compression.type"] = "zstd"
    assert c.kafka["compression.type"] == "lz4"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"batch_max_records": 0}, "batch_max_records: expected a positive int, got 0"),
        ({"batch_max_records": "10"}, "batch_max_records: expected a positive int, got '10'"),
        ({"batch_max_records": True}, "batch_max_records: expected a positive int, got True"),
        ({"batch_max_wait": "fast"}, "batch_max_wait: cannot parse duration 'fast'"),
        ({"commit_interval": -5}, "commit_interval: duration must not be negative, got -5"),
        (
            {"repartition_purge_interval": "soon"},
            "repartition_purge_interval: cannot parse duration 'soon'",
        ),
        (
            {"windowstore_changelog_additional_retention": -1},
            "windowstore_changelog_additional_retention: duration must not be negative, got -1",
        ),
        (
            {"dedup_retention": 0},
            "dedup_retention: expected a duration greater than zero such as 100 (ms) or '5s', "
            "got 0",
        ),
        (
            {"connect_timeout": "0s"},
            "connect_timeout: expected a duration greater than zero such as 100 (ms) or '5s', "
            "got '0s'",
        ),
        ({"state_dir": ""}, "state_dir: expected a directory path, got ''"),
        ({"default_backend": ""}, "default_backend: expected a backend name or URL such as"),
        (
            {"on_processing_error": "ignore"},
            "on_processing_error: expected one of fail, skip, dlq (or a handler: (context, "
            "record, exception) -> Response), got 'ignore'",
        ),
        (
            {"on_deserialization_error": "dlq"},
            "dlq_topic: required when an error policy is 'dlq'",
        ),
        (
            {"dlq_topic": "bad topic!"},
            "dlq_topic: expected a topic name (1 to 249 letters, digits, '.', '_' or '-'), "
            "got 'bad topic!'",
        ),
        (
            {"http": "8080"},
            "http: expected 'HOST:PORT' such as '127.0.0.1:8080', got '8080'",
        ),
        ({"http": "localhost:99999"}, "http: expected 'HOST:PORT'"),
        ({"http_token": ""}, "http_token: expected a non-empty string"),
        (
            {"replication_factor": 0},
            "replication_factor: expected a positive int or -1 (broker default), got 0",
        ),
        ({"kafka": "acks=all"}, "kafka: expected a dict of librdkafka settings, got 'acks=all'"),
        ({"kafka": {1: "x"}}, "kafka: setting names must be strings, got [1]"),
    ],
)
def test_bad_values_name_the_key_and_the_expected_form(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as e:
        Config.from_mapping(settings)
    assert str(e.value).startswith(message)


def test_valid_error_policies_and_http() -> None:
    c = Config(
        on_processing_error="dlq", dlq_topic="app.dlq", http="0.0.0.0:8080", http_token="s3cret"
    )
    assert (c.on_processing_error, c.dlq_topic, c.http) == ("dlq", "app.dlq", "0.0.0.0:8080")
    assert Config(http="[::1]:9000").http == "[::1]:9000"


def test_state_dir_accepts_paths(tmp_path: Path) -> None:
    assert Config(state_dir=tmp_path).state_dir == str(tmp_path)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kafka", "message"),
    [
        (
            {"security.protocol": "TLS"},
            "kafka['security.protocol'] = 'TLS' is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, "
            "SASL_SSL",
        ),
        (
            {"security.protocol": "SSL", "ssl.ca.location": "/no/such/ca.pem"},
            "kafka['ssl.ca.location']: file not found: '/no/such/ca.pem'",
        ),
        (
            {"security.protocol": "SSL", "ssl.key.location": "/no/such/key.pem"},
            "kafka['ssl.key.location']: file not found: '/no/such/key.pem'",
        ),
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "MAGIC"},
            "kafka['sasl.mechanism'] = 'MAGIC' is not one of PLAIN, SCRAM-SHA-256",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "u",
            },
            "kafka['sasl.password'] is required with security.protocol=SASL_PLAINTEXT and "
            "sasl.mechanism=SCRAM-SHA-512",
        ),
        (
            {"sasl.username": "u", "sasl.password": "p"},
            "kafka: sasl.password, sasl.username set but security.protocol=PLAINTEXT does not "
            "use SASL; use SASL_PLAINTEXT or SASL_SSL",
        ),
    ],
)
def test_security_settings_are_checked_at_construction(kafka: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        Config(kafka=kafka)
    assert str(e.value).startswith(message)


def test_valid_security_settings(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    c = Config(kafka={"security.protocol": "ssl", "ssl.ca.location": str(ca)})
    assert c.kafka["ssl.ca.location"] == str(ca)
    sasl = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "p",
    }
    assert Config(kafka=sasl).kafka == sasl


def test_processing_guarantee() -> None:
    assert parse_guarantee("exactly_once") == "exactly_once"
    assert parse_guarantee("exactly_once_v2") == "exactly_once_v2"
    with pytest.raises(ConfigError) as e:
        parse_guarantee("exactly-once")
    assert str(e.value) == (
        "processing_guarantee: expected one of exactly_once, exactly_once_v2, at_least_once, "
        "got 'exactly-once'"
    )


def test_gc_pause_must_be_a_bool() -> None:
    assert Config().gc_pause is True
    assert Config.from_mapping({"gc_pause": False}).gc_pause is False
    with pytest.raises(ConfigError, match=r"gc_pause: expected true or false, got 'no'"):
        Config.from_mapping({"gc_pause": "no"})


def test_metrics_recording_level_is_kafka_streams_info_debug_or_trace() -> None:
    assert Config().metrics_recording_level == "info"
    assert Config.from_mapping({"metrics_recording_level": "DEBUG"}).metrics_recording_level == (
        "debug"
    )
    assert Config.from_mapping({"metrics_recording_level": "TRACE"}).metrics_recording_level == (
        "trace"
    )
    for bad in ("verbose", "", 1):
        with pytest.raises(
            ConfigError,
            match=rf"metrics_recording_level: expected one of info, debug, trace .*got {bad!r}",
        ):
            Config.from_mapping({"metrics_recording_level": bad})


@pytest.mark.parametrize(
    "key",
    [
        "commit_interval",
        "batch_max_wait",
        "shutdown_timeout",
        "repartition_purge_interval",
        "windowstore_changelog_additional_retention",
    ],
)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_durations_must_be_finite(key: str, value: float) -> None:
    with pytest.raises(ConfigError) as e:
        Config.from_mapping({key: value})
    assert str(e.value).startswith(f"{key}: expected a finite duration")


def test_unknown_librdkafka_setting_names_the_key() -> None:
    with pytest.raises(ConfigError) as e:
        Config(kafka={"linger.ms": 5, "lingr.ms": 5})
    assert str(e.value).startswith("kafka['lingr.ms'] is not a librdkafka setting")


def test_bad_librdkafka_value_is_reported_under_the_key_the_user_wrote() -> None:
    # librdkafka itself names the canonical property (queue.buffering.max.ms)
    with pytest.raises(ConfigError) as e:
        Config(kafka={"client.id": "x", "linger.ms": "soon"})
    msg = str(e.value)
    assert msg.startswith("kafka['linger.ms'] = 'soon' is invalid"), msg


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("enable.partition.eof", False, "partition-EOF events"),
        ("enable.partition.eof", "false", "partition-EOF events"),
        ("enable.auto.commit", True, "committed with the outputs"),
        ("enable.auto.commit", "true", "committed with the outputs"),
    ],
)
def test_settings_the_engine_relies_on_are_refused_at_start_up(
    key: str, value: object, reason: str
) -> None:
    """With partition EOF off, a task's restore waited for an EOF that never came and failed
    after 60 s; auto-commit would commit input offsets outside the transaction."""
    with pytest.raises(ConfigError) as e:
        Config(kafka={key: value})
    msg = str(e.value)
    assert msg.startswith(f"kafka[{key!r}] = {value!r}: kstream sets {key} to "), msg
    assert reason in msg


def test_the_values_the_engine_uses_anyway_are_accepted() -> None:
    kafka = {"enable.partition.eof": "true", "enable.auto.commit": False}
    assert Config(kafka=kafka).kafka == kafka


def test_consumer_and_producer_settings_are_accepted() -> None:
    kafka = {"session.timeout.ms": 2000, "linger.ms": 5, "isolation.level": "read_committed"}
    assert dict(Config(kafka=kafka).kafka) == kafka


@pytest.mark.parametrize(
    ("app_id", "problem"),
    [
        (None, "required"),
        ("", "required"),
        (".", "is not allowed"),
        ("..", "is not allowed"),
        ("a/b", "contains '/'"),
        ("../escape", "contains '/'"),
        ("my app", "contains ' '"),
        ("x" * 300, "300 characters is too long"),
    ],
)
def test_bad_app_ids_are_rejected_by_name(app_id: object, problem: str) -> None:
    from kstream.config import validate_app_id

    with pytest.raises(ConfigError) as e:
        validate_app_id(app_id)
    msg = str(e.value)
    assert msg.startswith("app_id:") and problem in msg, msg
    assert "letters, digits, '.', '_' or '-'" in msg


@pytest.mark.parametrize("app_id", [None, "", "..", "a/b", "../escape", "my app", "x" * 300])
def test_app_rejects_a_bad_app_id_before_touching_anything(app_id: object, tmp_path: Path) -> None:
    from kstream.dsl import StreamBuilder
    from kstream.runtime import App

    b = StreamBuilder()
    b.stream("in").to("out")
    state = tmp_path / "state"
    with pytest.raises(ConfigError, match=r"^app_id:"):
        App(b.build(), app_id, "127.0.0.1:1", config={"state_dir": str(state)})  # type: ignore[arg-type]
    assert not state.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_app_rejects_derived_topic_names_over_kafkas_limit(tmp_path: Path) -> None:
    from kstream.dsl import StreamBuilder
    from kstream.runtime import App

    b = StreamBuilder()
    b.stream("in", key_serde="string").group_by_key().count(store="s" * 40).to_stream().to("out")
    with pytest.raises(ConfigError) as e:
        App(b.build(), "a" * 200, "127.0.0.1:1", config={"state_dir": str(tmp_path)})
    assert "over Kafka's 249" in str(e.value)


def test_app_rejects_a_state_dir_that_is_a_file(tmp_path: Path) -> None:
    from kstream.dsl import StreamBuilder
    from kstream.runtime import App

    b = StreamBuilder()
    b.stream("in").to("out")
    afile = tmp_path / "file"
    afile.write_text("")
    with pytest.raises(ConfigError, match=r"^state_dir: .* is a file; expected a writable"):
        App(b.build(), "app", "127.0.0.1:1", config={"state_dir": str(afile)})
    with pytest.raises(ConfigError, match=r"^state_dir: cannot create or write"):
        App(b.build(), "app", "127.0.0.1:1", config={"state_dir": str(afile / "below")})


def test_on_restore_error_is_fail_or_skip() -> None:
    """What a restore does with a changelog record kstream did not write (no dead-letter
    topic: a changelog record is not an input the app could be re-fed)."""
    assert Config().on_restore_error == "fail"
    assert Config.from_mapping({"on_restore_error": "skip"}).on_restore_error == "skip"
    for bad in ("dlq", "ignore", None):
        with pytest.raises(ConfigError) as e:
            Config.from_mapping({"on_restore_error": bad})
        assert str(e.value).startswith("on_restore_error: expected one of fail, skip "), e.value
        assert str(e.value).endswith(f"got {bad!r}")


def test_broker_compat_marks_retention_is_a_positive_duration() -> None:
    assert Config().broker_compat_marks_retention == 7 * 24 * 3_600_000
    assert Config(broker_compat_marks_retention="1h").broker_compat_marks_retention == 3_600_000
    with pytest.raises(ConfigError, match="broker_compat_marks_retention: expected a duration"):
        Config(broker_compat_marks_retention=0)


def test_dedup_retention_is_the_deprecated_name_of_broker_compat_marks_retention() -> None:
    """`dedup_retention` only ever set how long broker_compat's provenance high marks are kept:
    it still does, with a warning naming the new key."""
    assert Config().dedup_retention is None
    with pytest.warns(FutureWarning, match="'dedup_retention' is deprecated.*high marks.*"):
        c = Config.from_mapping({"dedup_retention": "2h"})
    assert c.broker_compat_marks_retention == 7_200_000
    with pytest.warns(FutureWarning):
        same = Config(dedup_retention="2h", broker_compat_marks_retention=7_200_000)
    assert same.broker_compat_marks_retention == 7_200_000
    with pytest.raises(ConfigError, match="dedup_retention: deprecated name of broker_compat_"):
        Config(dedup_retention="2h", broker_compat_marks_retention="3h")
