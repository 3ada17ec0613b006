"""The variables that point Spark's Python workers at this interpreter last only while a
session starts: subprocesses the application starts later keep the process's own."""

from __future__ import annotations

import os
import sys

import pytest

from kstream.spark.session import worker_environment


def test_worker_variables_are_set_while_a_session_starts_and_restored_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", "/opt/python")
    with worker_environment():
        paths = os.environ["PYTHONPATH"].split(os.pathsep)
        assert paths[0] == "/somewhere/else"  # the user's entries first, then sys.path
        assert os.getcwd() in paths
        assert all(p in paths for p in sys.path if p and os.path.isdir(p))
        assert os.environ["PYSPARK_PYTHON"] == sys.executable
        assert os.environ["PYSPARK_DRIVER_PYTHON"] == "/opt/python"  # a user's choice stays
    assert os.environ["PYTHONPATH"] == "/somewhere/else"
    assert "PYSPARK_PYTHON" not in os.environ
    assert os.environ["PYSPARK_DRIVER_PYTHON"] == "/opt/python"


def test_the_environment_comes_back_when_the_start_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    with pytest.raises(RuntimeError), worker_environment():
        assert "PYTHONPATH" in os.environ
        raise RuntimeError("the JVM did not start")
    assert "PYTHONPATH" not in os.environ
