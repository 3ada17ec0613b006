"""`App(..., config={"processes": N})`: the setting is checked by the constructor, before
anything starts, and the workers' reference to the topology is found or asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from kstream import App, AppState
from kstream.dsl import StreamBuilder
from kstream.errors import ConfigError, KStreamError
from kstream.processes import AppProcesses
from kstream.runtime.app import App as RuntimeApp
from kstream.runtime.workers import find_reference, split_processes
from kstream.testing import MockClientSupplier


def _builder() -> StreamBuilder:
    b = StreamBuilder()
    b.stream("in", key_serde="string", value_serde="string").to("out")
    return b


MODULE_TOPOLOGY = _builder()


@pytest.mark.parametrize("value", [0, -1, 1.5, "many", True, None])
def test_a_bad_value_names_the_key(value: object, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config\['processes'\]"):
        App(
            MODULE_TOPOLOGY,
            "a",
            "127.0.0.1:1",
            config={"processes": value, "state_dir": str(tmp_path)},
        )


def test_one_process_runs_in_this_process(tmp_path: Path) -> None:
    app = App(_builder(), "a", "127.0.0.1:1", config={"processes": 1, "state_dir": str(tmp_path)})
    assert isinstance(app, RuntimeApp) and not isinstance(app, AppProcesses)
    assert app.store("anything").partitions() == []


def test_auto_is_at_least_one(tmp_path: Path) -> None:
    rest, n = split_processes({"processes": "auto", "state_dir": str(tmp_path)})
    assert n >= 1
    assert rest == {"state_dir": str(tmp_path)}


def test_a_topology_without_a_module_reference_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config\['processes'\].*module:attr"):
        App(_builder(), "a", "127.0.0.1:1", config={"processes": 2, "state_dir": str(tmp_path)})


def test_a_module_level_topology_is_found_by_reference(tmp_path: Path) -> None:
    ref = find_reference(MODULE_TOPOLOGY)
    assert ref is not None and ref.endswith(":MODULE_TOPOLOGY")
    app = App(
        MODULE_TOPOLOGY, "a", "127.0.0.1:1", config={"processes": 2, "state_dir": str(tmp_path)}
    )
    assert isinstance(app, AppProcesses)
    assert app.processes == 2 and app.reference == ref
    assert app.state == AppState.CREATED and not app.attach_registry(object())
    with pytest.raises(KStreamError, match="worker processes"):
        app.store("counts")


def test_a_reference_string_is_a_topology_argument(tmp_path: Path) -> None:
    app = App(
        "kstream.examples.word_count:topology",
        "a",
        "127.0.0.1:1",
        config={"processes": 2, "state_dir": str(tmp_path)},
    )
    assert isinstance(app, AppProcesses) and app.processes == 2
    assert app.topology.stores


def test_a_client_supplier_cannot_span_processes(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config\['processes'\].*client_supplier"):
        App(
            MODULE_TOPOLOGY,
            "a",
            "127.0.0.1:1",
            config={"processes": 2, "state_dir": str(tmp_path)},
            client_supplier=MockClientSupplier(),
        )


def test_the_one_process_app_takes_no_processes_key(tmp_path: Path) -> None:
    """kstream.runtime.App runs in this process only: the key belongs to kstream.App."""
    with pytest.raises(ConfigError, match=r"config\['processes'\]: 2 worker processes run through"):
        RuntimeApp(
            MODULE_TOPOLOGY, "a", "127.0.0.1:1", config={"processes": 2, "state_dir": str(tmp_path)}
        )


def test_closing_an_unstarted_fleet_releases_its_directory(tmp_path: Path) -> None:
    app = App(
        MODULE_TOPOLOGY, "a", "127.0.0.1:1", config={"processes": 2, "state_dir": str(tmp_path)}
    )
    assert isinstance(app, AppProcesses)
    app.app.lock_state_dir()
    assert app.close()
    assert app.state == AppState.NOT_RUNNING
    again = RuntimeApp(MODULE_TOPOLOGY, "a", "127.0.0.1:1", config={"state_dir": str(tmp_path)})
    again.lock_state_dir()  # free again: no StateDirLockedError
    again.close()
