"""The `kstreamd` command line.

Subcommands are added as the engine grows; each one is a function taking the parsed
arguments and returning the exit code. Bad arguments exit with status 2 (argparse's usage
error); a kstream error exits 1 with its message on one line.
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kstreamd", description="kstream service: run stream processing apps and tools."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    broker = sub.add_parser(
        "broker",
        help="run an embedded Kafka-compatible broker (Tansu, in memory) in the foreground",
    )
    broker.add_argument("--port", type=_port, default=9092, help="listen port (default 9092)")
    broker.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    broker.add_argument("--log-file", default=None, help="broker log file (default: a temp file)")
    broker.set_defaults(func=_cmd_broker)

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
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
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
                f"(in memory; log: {broker.log_path}); Ctrl-C to stop",
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


def _cmd_demo(args: argparse.Namespace) -> int:
    from kstream.service.demo import run_demo

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
