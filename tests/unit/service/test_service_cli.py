"""`kstreamd run/describe/reset` argument and configuration handling (no broker needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kstream.errors import ConfigError
from kstream.service.cli import main
from kstream.service.settings import load_settings


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "app.toml"
    cfg.write_text(
        'app_id = "from-file"\nbatch_max_records = 500\ncommit_interval = "1s"\n'
        '[kafka]\n"client.id" = "file"\n"linger.ms" = 7\n'
    )
    env = {
        "KSTREAM_APP_ID": "from-env",
        "KSTREAM_BATCH_MAX_RECORDS": "250",
        "KSTREAM_KAFKA__CLIENT_ID": "env",
        "KSTREAM_TANSU": "/not/ours",
    }
    s = load_settings(str(cfg), env=env, flags={"app_id": "from-flag", "http": None})
    assert s.app_id == "from-flag"
    c = s.engine_config()
    assert c.batch_max_records == 250
    assert c.commit_interval == 1000
    assert dict(c.kafka) == {"client.id": "env", "linger.ms": 7}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bacth_max_records = 5\n", "unknown key(s) 'bacth_max_records'"),
        ("batch_max_records = 0\n", "batch_max_records: expected a positive int"),
        ('processing_guarantee = "maybe"\n', "processing_guarantee: expected one of"),
        ('engine = "flink"\n', "engine: expected one of native, spark"),
        ("app_id = \n", "is not valid TOML"),
    ],
)
def test_bad_config_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_settings(str(cfg), env={})
    assert message in str(e.value)


def test_bad_environment_value() -> None:
    with pytest.raises(ConfigError, match="KSTREAM_BATCH_MAX_RECORDS: expected an integer"):
        load_settings(env={"KSTREAM_BATCH_MAX_RECORDS": "lots"})


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nosuchmodule_xyz:topology", "no module named 'nosuchmodule_xyz'"),
        ("examples.word_count:nothing", "has no attribute 'nothing'"),
        ("examples.word_count", "expected MODULE:ATTR"),
        ("examples.word_count:words", "calling words() failed"),
        ("examples.word_count:_WORD", "expected a Topology, a StreamBuilder, an App"),
    ],
)
def test_bad_targets_exit_2(
    target: str, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["run", target, "--app-id", "x", "--config", str(tmp_path / "none.toml")])
    assert code == 2
    assert "kstreamd run: error:" in capsys.readouterr().err
    code = main(["describe", target])
    assert code == 2
    assert message in capsys.readouterr().err


def test_missing_config_file_and_app_id_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "examples.word_count:topology", "--config", "/nonexistent.toml"]) == 2
    assert "config file '/nonexistent.toml' does not exist" in capsys.readouterr().err


def test_describe_formats(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["describe", "examples.word_count:topology"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Topologies:") and "counts" in out
    assert main(["describe", "examples.word_count:build_topology", "--format", "mermaid"]) == 0
    assert capsys.readouterr().out.startswith("flowchart")
    assert main(["describe", "examples.word_count:topology", "--format", "dot"]) == 0
    assert capsys.readouterr().out.startswith("digraph")


def test_bad_http_address(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["run", "examples.word_count:topology", "--http", "localhost"])
    assert e.value.code == 2
    assert "invalid address 'localhost': expected HOST:PORT" in capsys.readouterr().err
