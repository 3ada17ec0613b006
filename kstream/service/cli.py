"""The `kstreamd` command line: run, describe, reset, demo, broker, dashboards (docs/api.md).

Each subcommand is a function taking the parsed arguments and returning the exit code. Bad
arguments, a bad MODULE:ATTR and bad configuration exit with status 2 and a one-line message;
any other kstream error (the broker, the app) exits 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from kstream.duration import duration
from kstream.errors import ConfigError, KStreamError
from kstream.guarantee import GUARANTEES
from kstream.service import dashboards
from kstream.service.logs import add_logging_flags, configured_logging
from kstream.spark import cli as spark_cli
from kstream.version import __version__

__all__ = ["build_parser", "main"]


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: expected a number 1-65535")
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: expected a number 1-65535")
    return port


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected a positive integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected a positive integer")
    return value


def _seconds(text: str) -> float:
    """A duration: plain numbers are seconds here; "500ms", "1m" and so on also work."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return duration(text, name="duration") / 1000.0
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e))


def _processes(text: str) -> int:
    from kstream.service.supervisor import parse_processes

    try:
        return parse_processes(text)
    except ConfigError as e:  # argparse names the flag itself
        raise argparse.ArgumentTypeError(str(e).removeprefix("processes: ")) from None


def _hostport(text: str) -> str:
    _host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(
            f"invalid address {text!r}: expected HOST:PORT such as 127.0.0.1:8080"
        )
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kstreamd", description="kstream service: run stream processing apps and tools."
    )
    parser.add_argument("--version", action="version", version=f"kstreamd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_add_run, _add_describe, _add_reset, _add_broker, _add_demo, dashboards.add_parser):
        add(sub)
    for command in sub.choices.values():  # every subcommand logs the same way
        add_logging_flags(command)
    return parser


def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`kstreamd run`: an app until SIGTERM/SIGINT, with its HTTP server."""
    run = sub.add_parser(
        "run",
        help="run an app (MODULE:ATTR: a Topology, an App, or a function returning one) "
        "until SIGTERM/SIGINT, with its HTTP server",
    )
    run.add_argument("target", metavar="MODULE:ATTR", help="e.g. examples.word_count:topology")
    run.add_argument("--config", default=None, help="TOML file (KSTREAM_* variables override it)")
    run.add_argument("--bootstrap-servers", default=None, help="Kafka bootstrap servers")
    run.add_argument("--app-id", default=None, help="application id (the consumer group)")
    run.add_argument(
        "--http", type=_hostport, default=None, help="HTTP listen address (default 127.0.0.1:8080)"
    )
    run.add_argument(
        "--guarantee",
        choices=GUARANTEES,
        default=None,
        help="processing guarantee (default exactly_once_v2, as Kafka Streams)",
    )
    run.add_argument("--engine", choices=("native", "spark"), default=None, help="default native")
    run.add_argument("--instance-id", default=None, help="this instance's id (default host-pid)")
    run.add_argument(
        "--advertised-url",
        default=None,
        help="URL other instances use to reach this one (default: the listen address)",
    )
    run.add_argument(
        "--processes",
        type=_processes,
        default=1,
        help="worker processes under one supervisor and one HTTP address: a number, or "
        "'auto' for every usable core (default 1: this process runs the app)",
    )
    spark_cli.add_flags(run)
    run.set_defaults(func=_cmd_run)


def _add_describe(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`kstreamd describe`: print a topology."""
    describe = sub.add_parser("describe", help="print an app's topology")
    describe.add_argument("target", metavar="MODULE:ATTR")
    describe.add_argument("--format", choices=("text", "mermaid", "dot"), default="text")
    describe.set_defaults(func=_cmd_describe)


def _add_reset(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`kstreamd reset`: a stopped app back to its start."""
    reset = sub.add_parser(
        "reset",
        help="reset a stopped app: input offsets to earliest, internal topics and local state "
        "removed",
    )
    reset.add_argument(
        "target",
        metavar="MODULE:ATTR",
        nargs="?",
        default=None,
        help="the app's topology: its internal topics are then known exactly (without it, "
        "look-alike topics are only listed, and deleted with --yes)",
    )
    reset.add_argument("--app-id", required=True, help="application id to reset")
    reset.add_argument(
        "--dry-run", action="store_true", help="print what would be done, change nothing"
    )
    reset.add_argument(
        "--yes",
        action="store_true",
        help="without MODULE:ATTR: also delete topics that are only named like the app's",
    )
    reset.add_argument(
        "--force", action="store_true", help="reset even if the app's group has members"
    )
    reset.add_argument("--bootstrap-servers", default=None, help="Kafka bootstrap servers")
    reset.add_argument("--config", default=None, help="TOML file (for kafka settings, state_dir)")
    reset.add_argument("--state-dir", default=None, help="local state directory to clean")
    reset.set_defaults(func=_cmd_reset)


def _add_broker(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`kstreamd broker`: the embedded Tansu broker in the foreground."""
    broker = sub.add_parser(
        "broker",
        help="run an embedded Kafka-compatible broker (Tansu, in memory) in the foreground",
    )
    broker.add_argument("--port", type=_port, default=9092, help="listen port (default 9092)")
    broker.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    broker.add_argument("--log-file", default=None, help="broker log file (default: a temp file)")
    broker.set_defaults(func=_cmd_broker)


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`kstreamd demo`: the tour on an embedded broker."""
    demo = sub.add_parser(
        "demo", help="start an embedded broker, produce and consume click events, summarise"
    )
    demo.add_argument(
        "--duration", type=_seconds, default=20.0, help="how long to produce (seconds or '1m')"
    )
    demo.add_argument("--rate", type=_positive_int, default=500, help="events per second")
    demo.add_argument("--partitions", type=_positive_int, default=3, help="partitions of the topic")
    demo.add_argument(
        "--bootstrap-servers", default=None, help="use this Kafka instead of an embedded broker"
    )
    demo.add_argument(
        "--connect-timeout",
        type=_seconds,
        default=10.0,
        help="how long to wait for the broker to answer (seconds or '500ms')",
    )
    demo.add_argument("--seed", type=int, default=None, help="random seed for the events")
    demo.add_argument(
        "--http", type=_hostport, default="127.0.0.1:0", help="HTTP address of the demo app"
    )
    demo.add_argument(
        "--kafka-only",
        action="store_true",
        help="only produce and consume (the Kafka layer tour), no stream processing",
    )
    demo.set_defaults(func=_cmd_demo)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        with configured_logging(
            args.log_level, args.log_format, only_if_asked=args.command != "run"
        ):
            return int(args.func(args))
    except ConfigError as e:
        print(f"kstreamd {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KStreamError as e:
        print(f"kstreamd {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _cmd_broker(args: argparse.Namespace) -> int:
    from kstream.kafka.broker import EmbeddedBroker

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with EmbeddedBroker(args.port, host=args.host, log_path=args.log_file) as broker:
            print(
                f"kstream embedded broker listening on {broker.bootstrap_servers} "
                f"(in memory; log: {broker.log_path}); Ctrl-C to stop. Apps on it need "
                'broker_compat = "tansu" (or KSTREAM_BROKER_COMPAT=tansu)',
                flush=True,
            )
            while not stop.wait(0.5):
                if not broker.running:
                    print(
                        f"kstreamd broker: error: the broker exited; log {broker.log_path}:\n"
                        f"{broker.log_tail()}",
                        file=sys.stderr,
                    )
                    return 1
        print("broker stopped", flush=True)
        return 0
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _cmd_run(args: argparse.Namespace) -> int:
    from kstream.service.runner import run_service
    from kstream.service.settings import load_settings
    from kstream.service.target import load_target

    settings = load_settings(
        args.config,
        flags={
            "bootstrap_servers": args.bootstrap_servers,
            "app_id": args.app_id,
            "http": args.http,
            "processing_guarantee": args.guarantee,
            "engine": args.engine,
            "instance_id": args.instance_id,
            "advertised_url": args.advertised_url,
        },
    )
    spark_cli.check_flags(args, settings.engine)
    target = load_target(args.target)
    if args.processes > 1:
        from kstream.service.supervisor import new_supervisor

        return new_supervisor(
            args.target,
            settings,
            args.processes,
            target=target,
            log_level=args.log_level,
            log_format=args.log_format,
        ).run()
    if settings.engine == "spark":
        return spark_cli.run(target, settings, args)
    return run_service(target, settings)


def _cmd_describe(args: argparse.Namespace) -> int:
    from kstream.service.target import load_target

    target = load_target(args.target)
    topology = getattr(target, "topology", target)
    d = topology.describe()
    if args.format == "mermaid":
        text = str(d.to_mermaid())
    elif args.format == "dot":
        text = str(d.to_dot())
    else:
        text = str(d)
    return _print_quietly(text.rstrip("\n"))


def _print_quietly(text: str) -> int:
    """Print to stdout; a reader that closed the pipe (`| head`) ends the command quietly."""
    import os

    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Python would report the broken pipe again when it flushes stdout at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0


def _cmd_reset(args: argparse.Namespace) -> int:
    from kstream.service.reset import reset_app
    from kstream.service.settings import load_settings

    settings = load_settings(
        args.config,
        flags={
            "bootstrap_servers": args.bootstrap_servers,
            "app_id": args.app_id,
            "state_dir": args.state_dir,
        },
    )
    cfg = settings.engine_config()
    internal = None
    if args.target is not None:
        from kstream.runtime.app import internal_topic_names
        from kstream.service.target import load_target

        target = load_target(args.target)
        topology = getattr(target, "topology", target)
        internal = internal_topic_names(topology.compile(args.app_id), args.app_id)
    report = reset_app(
        args.app_id,
        settings.bootstrap_servers,
        kafka=cfg.kafka,
        state_dir=cfg.state_dir,
        connect_timeout=cfg.connect_timeout,
        internal=internal,
        delete_candidates=args.yes,
        dry_run=args.dry_run,
        force=args.force,
    )
    for line in report:
        print(line)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from kstream.service.demo import run_demo, run_showcase

    if not args.kafka_only:
        result = run_showcase(
            args.duration,
            rate=args.rate,
            partitions=args.partitions,
            bootstrap_servers=args.bootstrap_servers,
            http=args.http,
            out=sys.stdout,
            seed=args.seed,
            connect_timeout_s=args.connect_timeout,
        )
        return 0 if result.ok else 1
    summary = run_demo(
        args.duration,
        rate=args.rate,
        partitions=args.partitions,
        bootstrap_servers=args.bootstrap_servers,
        out=sys.stdout,
        seed=args.seed,
        connect_timeout_s=args.connect_timeout,
    )
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
