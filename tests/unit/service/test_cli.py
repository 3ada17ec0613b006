"""`kstreamd` argument handling (no broker needed)."""

from __future__ import annotations

import pytest

from kstream.service.cli import build_parser, main


def run_bad(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kstreamd")
    assert "broker" in err and "demo" in err


def test_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    err = run_bad(["frobnicate"], capsys)
    assert "kstreamd: error: argument COMMAND: invalid choice: 'frobnicate'" in err


def test_bad_port(capsys: pytest.CaptureFixture[str]) -> None:
    err = run_bad(["broker", "--port", "70000"], capsys)
    assert (
        "kstreamd broker: error: argument --port: invalid port '70000': expected a number 1-65535"
        in err
    )
    err = run_bad(["broker", "--port", "http"], capsys)
    assert "argument --port: invalid port 'http': expected a number 1-65535" in err


def test_bad_duration_and_rate(capsys: pytest.CaptureFixture[str]) -> None:
    err = run_bad(["demo", "--duration", "soon"], capsys)
    assert (
        "kstreamd demo: error: argument --duration: duration: cannot parse duration 'soon'" in err
    )
    err = run_bad(["demo", "--rate", "0"], capsys)
    assert "argument --rate: invalid value '0': expected a positive integer" in err


def test_durations_accept_seconds_and_units() -> None:
    p = build_parser()
    assert p.parse_args(["demo", "--duration", "20"]).duration == 20.0
    assert p.parse_args(["demo", "--duration", "1m"]).duration == 60.0
    assert p.parse_args(["demo", "--duration", "1500ms"]).duration == 1.5
    args = p.parse_args(["broker"])
    assert (args.port, args.host, args.log_file) == (9092, "127.0.0.1", None)


def test_kafka_errors_exit_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from kstream.kafka.broker import free_port

    port = free_port()
    address = f"127.0.0.1:{port}"
    code = main(["demo", "--bootstrap-servers", address, "--connect-timeout", "1"])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"kstreamd demo: error: Admin: Kafka at '127.0.0.1:{port}' did not answer within 1s"
    )


def test_broker_on_a_busy_port_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        assert main(["broker", "--port", str(port)]) == 1
    assert capsys.readouterr().err == (
        f"kstreamd broker: error: embedded broker cannot listen on 127.0.0.1:{port}: "
        "Address already in use; choose another port (or none for a free one)\n"
    )
