"""`kstreamd run --engine spark`: the Spark engine's flags and how they reach `kstream.spark.run`.

The flags are those of any Spark job (`--master`, `--spark-conf KEY=VALUE`) plus the runner's
(`--trigger`, `--max-records-per-batch`, `--checkpoint-dir`). Flags of the native engine that
Spark cannot honour (`--http`, `--instance-id`, `--advertised-url`, `--processes`; Spark
spreads the work over its executors) are refused rather than
ignored, and the Spark flags are refused with the native engine. Without `--master` the master
is the launcher's (`spark-submit --master`, `SPARK_MASTER`), else `local[2]`.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
from typing import Any

from kstream.errors import ConfigError

log = logging.getLogger("kstream.spark")

SPARK_FLAGS = ("master", "trigger", "spark_conf", "max_records_per_batch", "checkpoint_dir")
NATIVE_ONLY = {
    "http": "--http",
    "instance_id": "--instance-id",
    "advertised_url": "--advertised-url",
}
MISSING_EXTRA = (
    "--engine spark needs the spark extra (pyspark, pyarrow, pandas) and Java 17: "
    "pip install 'kstream[spark]'"
)


def _conf_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(
            f"invalid Spark setting {text!r}: expected KEY=VALUE such as spark.executor.memory=2g"
        )
    return key.strip(), value


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return n


def add_flags(run: argparse.ArgumentParser) -> None:
    """Add the Spark engine's flags to `kstreamd run`."""
    g = run.add_argument_group("Spark engine (--engine spark)")
    g.add_argument(
        "--master",
        default=None,
        help="Spark master URL, e.g. spark://host:7077 or local[4] (default: the launcher's, "
        "else local[2])",
    )
    g.add_argument(
        "--trigger",
        default=None,
        help="availableNow (process what is there, then exit; default) or processingTime=1s",
    )
    g.add_argument(
        "--spark-conf",
        action="append",
        type=_conf_pair,
        default=None,
        metavar="KEY=VALUE",
        help="a Spark setting (repeatable), e.g. spark.executor.memory=2g",
    )
    g.add_argument(
        "--max-records-per-batch",
        type=_positive,
        default=None,
        help="records per micro-batch, all partitions together (default 100000)",
    )
    g.add_argument(
        "--checkpoint-dir",
        default=None,
        help="Spark checkpoint location; on a cluster, storage every node shares "
        "(default <state_dir>/<app_id>/spark-checkpoint)",
    )


def check_flags(args: argparse.Namespace, engine: str) -> None:
    """Refuse flags the chosen engine cannot honour (exit 2 through ConfigError)."""
    if engine == "spark":
        given = [flag for attr, flag in NATIVE_ONLY.items() if getattr(args, attr, None)]
        if getattr(args, "processes", 1) not in (1, None):
            given.append("--processes")
        if given:
            raise ConfigError(
                f"{', '.join(given)}: not supported with --engine spark (Spark serves no HTTP "
                "endpoint and has no instances; the Spark UI and the logs show progress)"
            )
        return
    given = ["--" + attr.replace("_", "-") for attr in SPARK_FLAGS if getattr(args, attr, None)]
    if given:
        raise ConfigError(f"{', '.join(given)}: only with --engine spark")


def run(target: Any, settings: Any, args: argparse.Namespace) -> int:
    """Run `target` on Spark with the service settings and the Spark flags."""
    check_flags(args, "spark")
    if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
        raise ConfigError(MISSING_EXTRA)
    from kstream.spark.runner import DEFAULT_MAX_RECORDS_PER_BATCH, parse_trigger
    from kstream.spark.runner import run as run_on_spark
    from kstream.spark.session import spark_session

    topology = getattr(target, "topology", target)
    app_id = getattr(target, "app_id", None) or settings.app_id
    if not app_id:
        raise ConfigError("app_id is required: pass --app-id or set KSTREAM_APP_ID")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one line per callback otherwise
    trigger = args.trigger or "availableNow"
    parse_trigger(trigger)  # a bad trigger is reported before Spark starts
    batch = args.max_records_per_batch or DEFAULT_MAX_RECORDS_PER_BATCH
    # the runner takes this active session and sizes its shuffle to the input partitions
    spark = spark_session(master=args.master, app_name=app_id, conf=dict(args.spark_conf or []))
    log.info(
        "running %s on Spark %s (master %s, trigger %s, up to %d records per batch, %s)",
        app_id,
        spark.version,
        spark.sparkContext.master,
        trigger,
        batch,
        settings.processing_guarantee,
    )
    run_on_spark(
        topology,
        app_id,
        settings.bootstrap_servers,
        checkpoint_dir=args.checkpoint_dir,
        trigger=trigger,
        config=settings.config,
        max_records_per_batch=batch,
        guarantee=settings.processing_guarantee,
    )
    log.info("%s: done", app_id)
    return 0
