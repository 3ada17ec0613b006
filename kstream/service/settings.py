"""Settings of `kstreamd run`: a TOML file, then `KSTREAM_*` environment variables, then flags.

The file holds the service keys (`app_id`, `bootstrap_servers`, `processing_guarantee`, ...)
and every engine key of `kstream.config.Config` at the top level, with librdkafka settings in a
`[kafka]` table. The environment uses the same names upper-cased (`KSTREAM_APP_ID`,
`KSTREAM_BATCH_MAX_RECORDS`, `KSTREAM_HTTP_TOKEN`); `KSTREAM_KAFKA__SECURITY_PROTOCOL` sets
`kafka["security.protocol"]` (double underscore, then dots written as underscores). A value
is read by its key's type: `true`/`false`/`1`/`0` for flags, a whole number for counts, a
number of milliseconds or a duration string (`5s`) for durations, and text as it is for the
rest (`KSTREAM_APP_ID=2024` is the string "2024"). Any other `KSTREAM_*` variable is warned
about (a misspelled key would otherwise be ignored in silence), except the few that kstream's
tools read themselves (`OTHER_KSTREAM_VARIABLES`).

Everything is validated here, before any connection is made, so a typo exits with status 2
and a message naming the key and where it came from.
"""

from __future__ import annotations

import difflib
import logging
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from kstream.config import (
    Config,
    validate_app_id,
    validate_bootstrap_servers,
)
from kstream.config_checks import DURATION_KEYS
from kstream.errors import ConfigError
from kstream.guarantee import DEFAULT_GUARANTEE, parse_guarantee

__all__ = ["OTHER_KSTREAM_VARIABLES", "SERVICE_KEYS", "Settings", "load_settings"]

log = logging.getLogger("kstream.service")

ENGINES = ("native", "spark")
SERVICE_KEYS = (
    "app_id",
    "bootstrap_servers",
    "processing_guarantee",
    "engine",
    "instance_id",
    "advertised_url",
)
_ENV_PREFIX = "KSTREAM_"
OTHER_KSTREAM_VARIABLES = (
    "KSTREAM_TANSU",
    "KSTREAM_TEST_BOOTSTRAP",
    "KSTREAM_TEST_BROKER",  # tests/conftest.py: the lane, "kafka" or "tansu"
    "KSTREAM_TEST_BROKER_LOG",
    "KSTREAM_TEST_KAFKA_VERSION",  # tests/support/kafka_features.py: the tests' broker's version
    "KSTREAM_TEST_TIMELINE",  # tests/support/timeline.py: where each test ran, and when
    "KSTREAM_KAFKA_LIBS",  # kstream.testing.kafka: the Apache Kafka jars
    "KSTREAM_KAFKA_JAVA_HOME",
    "KSTREAM_LONG",
    "KSTREAM_LOG_LEVEL",  # kstream.service.logs
    "KSTREAM_LOG_FORMAT",
)
"""Variables with the KSTREAM_ prefix that are not settings: read by the embedded broker,
the test suite and the logging setup of every subcommand."""
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def _key_types() -> dict[str, str]:
    """Each engine key's kind: "bool", "int", "duration" or "text"."""
    out: dict[str, str] = {}
    for f in fields(Config):
        if f.name in DURATION_KEYS:
            out[f.name] = "duration"
        elif f.type in ("bool", bool):
            out[f.name] = "bool"
        elif f.type in ("int", int):
            out[f.name] = "int"
        else:
            out[f.name] = "text"
    return out


def _env_value(name: str, key: str, raw: str, kind: str) -> Any:
    """`raw` read as `kind`; ConfigError naming the variable and the form expected."""
    text = raw.strip()
    if kind == "bool":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ConfigError(f"{name}: expected true or false (or 1 or 0), got {raw!r}")
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{name}: expected an integer, got {raw!r}") from None
    if kind == "duration":
        return int(text) if text.isdigit() else text  # "250" is 250 ms; "5s" parsed by Config
    return raw


@dataclass(frozen=True)
class Settings:
    """Everything `kstreamd run` needs besides the app itself."""

    app_id: str | None = None
    bootstrap_servers: str = "127.0.0.1:9092"
    processing_guarantee: str = DEFAULT_GUARANTEE
    engine: str = "native"
    instance_id: str | None = None
    advertised_url: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    def engine_config(self) -> Config:
        return Config.from_mapping(self.config)


def _valid_keys() -> list[str]:
    return list(SERVICE_KEYS) + Config.keys()


def _read_file(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path!r} does not exist") from None
    except OSError as e:
        raise ConfigError(f"config file {path!r} cannot be read: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path!r} is not valid TOML: {e}") from None
    unknown = sorted(k for k in data if k not in _valid_keys())
    if unknown:
        raise ConfigError(
            f"config file {path!r}: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"valid keys are: {', '.join(_valid_keys())}"
        )
    if "kafka" in data and not isinstance(data["kafka"], dict):
        raise ConfigError(f"config file {path!r}: 'kafka' must be a table of librdkafka settings")
    return data


def _read_env(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kafka: dict[str, str] = {}
    kinds = {k: v for k, v in _key_types().items() if k != "kafka"}
    kinds.update(dict.fromkeys(SERVICE_KEYS, "text"))
    for name, raw in sorted(env.items()):
        if not name.startswith(_ENV_PREFIX) or name in OTHER_KSTREAM_VARIABLES:
            continue
        rest = name[len(_ENV_PREFIX) :]
        if rest.startswith("KAFKA__") and len(rest) > len("KAFKA__"):
            kafka[rest[len("KAFKA__") :].lower().replace("_", ".")] = raw
            continue
        key = rest.lower()
        if key not in kinds:
            _warn_unknown(name, kinds)
            continue
        out[key] = _env_value(name, key, raw, kinds[key])
    if kafka:
        out["kafka"] = kafka
    return out


def _warn_unknown(name: str, kinds: Mapping[str, str]) -> None:
    known = [_ENV_PREFIX + k.upper() for k in kinds] + [_ENV_PREFIX + "KAFKA__<SETTING>"]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    log.warning(
        "%s is not a kstream setting; %signored (settings: %s)", name, hint, ", ".join(known)
    )


def load_settings(
    path: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> Settings:
    """Merge file < environment < flags (None flags are unset) and validate the result."""
    merged: dict[str, Any] = {}
    kafka: dict[str, Any] = {}
    layers = [
        _read_file(path) if path else {},
        _read_env(os.environ if env is None else env),
        {k: v for k, v in (flags or {}).items() if v is not None},
    ]
    for layer in layers:
        layer = dict(layer)
        kafka.update(layer.pop("kafka", None) or {})
        merged.update(layer)
    service = {k: merged.pop(k) for k in SERVICE_KEYS if k in merged}
    if kafka:
        merged["kafka"] = kafka
    Config.from_mapping(merged)  # validate the engine keys now, with Config's messages
    guarantee = parse_guarantee(service.get("processing_guarantee", DEFAULT_GUARANTEE))
    engine = service.get("engine", "native")
    if engine not in ENGINES:
        raise ConfigError(f"engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    if service.get("app_id") is not None:
        validate_app_id(service["app_id"])
    if "bootstrap_servers" in service:
        validate_bootstrap_servers(service["bootstrap_servers"])
    for key in ("instance_id", "advertised_url"):
        val = service.get(key)
        if val is not None and (not isinstance(val, str) or not val):
            raise ConfigError(f"{key}: expected a non-empty string, got {val!r}")
    return Settings(
        app_id=service.get("app_id"),
        bootstrap_servers=service.get("bootstrap_servers", "127.0.0.1:9092"),
        processing_guarantee=guarantee,
        engine=engine,
        instance_id=service.get("instance_id"),
        advertised_url=service.get("advertised_url"),
        config=merged,
    )
