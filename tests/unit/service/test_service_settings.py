"""`kstreamd` settings: environment values read by their key's type, misspelled variables
warned about, and every bad setting an exit 2 naming the key, before any connection."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

import kstream
from kstream.dsl import StreamBuilder
from kstream.errors import ConfigError
from kstream.runtime import App
from kstream.service.cli import main
from kstream.service.settings import load_settings


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("false", False), ("true", True), ("0", False), ("1", True), ("FALSE", False)],
)
def test_gc_pause_from_the_environment(raw: str, expected: bool) -> None:
    s = load_settings(env={"KSTREAM_GC_PAUSE": raw})
    assert s.engine_config().gc_pause is expected


def test_a_bad_flag_value_names_the_variable() -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(env={"KSTREAM_GC_PAUSE": "maybe"})
    assert str(e.value) == "KSTREAM_GC_PAUSE: expected true or false (or 1 or 0), got 'maybe'"


def test_numbers_stay_text_for_text_keys_and_durations_take_units() -> None:
    s = load_settings(
        env={
            "KSTREAM_APP_ID": "2024",
            "KSTREAM_STATE_DIR": "123",
            "KSTREAM_HTTP_TOKEN": "0042",
            "KSTREAM_INSTANCE_ID": "7",
            "KSTREAM_COMMIT_INTERVAL": "250",
            "KSTREAM_SHUTDOWN_TIMEOUT": "5s",
            "KSTREAM_BATCH_MAX_RECORDS": "64",
        }
    )
    assert (s.app_id, s.instance_id) == ("2024", "7")
    c = s.engine_config()
    assert (c.state_dir, c.http_token) == ("123", "0042")
    assert (c.commit_interval, c.shutdown_timeout, c.batch_max_records) == (250, 5000, 64)


def test_a_misspelled_variable_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kstream.service"):
        s = load_settings(
            env={"KSTREAM_COMIT_INTERVAL": "5", "KSTREAM_TANSU": "/x", "KSTREAM_LONG": "1"}
        )
    assert s.engine_config().commit_interval == 100
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1, warned
    assert warned[0].startswith(
        "KSTREAM_COMIT_INTERVAL is not a kstream setting; did you mean KSTREAM_COMMIT_INTERVAL?"
    )


def _run(config: Path, *flags: str) -> int:
    # nothing listens on port 1: reaching for the broker would exit 1, not 2
    return main(
        [
            "run",
            "examples.word_count:topology",
            "--config",
            str(config),
            "--bootstrap-servers",
            "127.0.0.1:1",
            *flags,
        ]
    )


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("commit_interval = nan\n", "commit_interval: expected a finite duration"),
        ("batch_max_wait = inf\n", "batch_max_wait: expected a finite duration"),
        ('[kafka]\n"lingr.ms" = 5\n', "kafka['lingr.ms'] is not a librdkafka setting"),
        ('[kafka]\n"linger.ms" = "soon"\n', "kafka['linger.ms'] = 'soon' is invalid"),
        (f'app_id = "{"a" * 300}"\n', "app_id: 300 characters is too long"),
        ('app_id = "../escape"\n', "app_id: '../escape' contains '/'"),
        ('app_id = ".."\n', "app_id: '..' is not allowed"),
        ("gc_pause = 1\n", "gc_pause: expected true or false"),
    ],
)
def test_bad_settings_exit_2_naming_the_key(
    toml: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "app.toml"
    state = tmp_path / "state"
    cfg.write_text(f'state_dir = "{state}"\n' + ("" if "app_id" in toml else 'app_id = "a"\n'))
    with cfg.open("a") as f:
        f.write(toml)
    assert _run(cfg) == 2
    err = capsys.readouterr().err
    assert err.startswith("kstreamd run: error: ") and message in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_a_state_dir_that_is_a_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "state"
    afile.write_text("")
    cfg = tmp_path / "app.toml"
    cfg.write_text(f'app_id = "a"\nstate_dir = "{afile}"\n')
    assert _run(cfg) == 2
    assert "state_dir: " in capsys.readouterr().err


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("127.0.0.1:notaport", "'127.0.0.1:notaport' has port 'notaport', not a number 1-65535"),
        ("127.0.0.1:0", "'127.0.0.1:0' has port '0', not a number 1-65535"),
        ("kafka", "'kafka' has no port"),
        ("::1:9092", "write an IPv6 address in brackets"),
        ("a:9092,", "entry 2 of 'a:9092,': an empty entry"),
        ("http://a:9092", "a listener name must be one of PLAINTEXT, SSL"),
    ],
)
def test_a_bad_bootstrap_address_exits_2_naming_the_key_before_connecting(
    address: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "app.toml"
    cfg.write_text(f'app_id = "a"\nstate_dir = "{tmp_path / "state"}"\n')
    t0 = time.monotonic()
    code = main(
        [
            "run",
            "examples.word_count:topology",
            "--config",
            str(cfg),
            "--bootstrap-servers",
            address,
        ]
    )
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("kstreamd run: error: bootstrap_servers: ") and message in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert took < 3, f"{took:.1f}s: checked before connecting, not after connect_timeout"


def test_good_bootstrap_lists_pass_and_the_library_checks_them_too(tmp_path: Path) -> None:
    for good in ("127.0.0.1:9092", " a:1, [::1]:9093 ", "SASL_SSL://kafka-0.kafka:9093"):
        assert load_settings(env={}, flags={"bootstrap_servers": good}).bootstrap_servers == good
    b = StreamBuilder()
    b.stream("in").to("out")
    with pytest.raises(ConfigError, match=r"^bootstrap_servers: '127.0.0.1:notaport' has port"):
        App(b.build(), "a", "127.0.0.1:notaport", config={"state_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"^bootstrap_servers: 'kafka' has no port"):
        kstream.run_processes("mod:topology", app_id="a", bootstrap_servers="kafka")
