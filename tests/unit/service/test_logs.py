"""Logging flags and variables of every kstreamd subcommand; JSON lines."""

from __future__ import annotations

import io
import json
import logging

import pytest

from kstream.errors import ConfigError
from kstream.service.cli import build_parser, main
from kstream.service.logs import configured_logging, setup_logging


@pytest.mark.parametrize("command", ["run", "describe", "reset", "broker", "demo", "dashboards"])
def test_every_subcommand_takes_the_logging_flags(command: str) -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    options = {o for a in sub.choices[command]._actions for o in a.option_strings}  # type: ignore[attr-defined]
    assert {"--log-level", "--log-format"} <= options


def test_json_lines_carry_level_logger_message_extras_and_exceptions() -> None:
    out = io.StringIO()
    with configured_logging("debug", "json"):
        handler = setup_logging("debug", "json", stream=out)
        log = logging.getLogger("kstream.test")
        log.info("processed %d", 5, extra={"app_id": "wc"})
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
        logging.getLogger().removeHandler(handler)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["level"] == "INFO" and first["logger"] == "kstream.test"
    assert first["message"] == "processed 5" and first["app_id"] == "wc"
    assert first["time"].endswith("+00:00")
    assert second["level"] == "ERROR" and "ValueError: boom" in second["exception"]


def test_flags_win_over_the_environment_and_bad_values_name_their_source() -> None:
    root = logging.getLogger()
    saved = list(root.handlers), root.level
    try:
        setup_logging(None, None, environ={"KSTREAM_LOG_LEVEL": "warning"})
        assert root.level == logging.WARNING
        setup_logging("error", None, environ={"KSTREAM_LOG_LEVEL": "debug"})
        assert root.level == logging.ERROR
        with pytest.raises(ConfigError, match="KSTREAM_LOG_LEVEL: unknown level 'loud'"):
            setup_logging(None, None, environ={"KSTREAM_LOG_LEVEL": "loud"})
        with pytest.raises(ConfigError, match="KSTREAM_LOG_FORMAT: unknown format 'xml'"):
            setup_logging(None, None, environ={"KSTREAM_LOG_FORMAT": "xml"})
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])


def test_a_bad_level_exits_2_and_main_leaves_logging_as_it_found_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = logging.getLogger()
    before = list(root.handlers), root.level
    assert main(["describe", "examples.word_count:topology", "--log-level", "chatty"]) == 2
    assert "--log-level: unknown level 'chatty'" in capsys.readouterr().err
    monkeypatch.setenv("KSTREAM_LOG_FORMAT", "json")
    assert main(["describe", "examples.word_count:topology"]) == 0
    assert (list(root.handlers), root.level) == before


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from kstream import __version__

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"kstreamd {__version__}"
