"""How a Spark job gets its master and flags: from the launcher, never overridden in code, and
`kstreamd run --engine spark` refusing what it cannot honour. No Spark is started here."""

from __future__ import annotations

from pathlib import Path

import pytest

from kstream.service.cli import main
from kstream.spark.session import LOCAL_MASTER, launcher_settings


def test_launcher_settings_come_from_submit_args_and_defaults_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "spark-defaults.conf").write_text(
        "# comment\nspark.executor.memory   2g\nspark.sql.shuffle.partitions 8\n"
    )
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.setenv(
        "PYSPARK_SUBMIT_ARGS",
        "--master spark://h:7077 --conf spark.sql.shuffle.partitions=4 pyspark-shell",
    )
    assert launcher_settings() == {
        "spark.executor.memory": "2g",
        "spark.sql.shuffle.partitions": "4",
        "spark.master": "spark://h:7077",
    }
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "none"))
    assert "spark.master" not in launcher_settings()  # then the session uses LOCAL_MASTER
    assert LOCAL_MASTER == "local[2]"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--engine", "spark", "--http", "127.0.0.1:1"], "--http: not supported with --engine"),
        (["--engine", "spark", "--instance-id", "a"], "--instance-id: not supported"),
        (["--engine", "spark", "--processes", "2"], "--processes: not supported"),
        (["--master", "local[1]"], "--master: only with --engine spark"),
        (["--engine", "spark", "--trigger", "sometimes"], "trigger: expected 'availableNow'"),
    ],
)
def test_kstreamd_refuses_flags_it_cannot_honour(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "examples.word_count:topology", "--app-id", "wc", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_bad_spark_conf_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "examples.word_count:topology", "--engine", "spark", "--spark-conf", "x"])
    assert exit_info.value.code == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
