"""Replicas: ``kcompact inspect replicas`` and ``spark inspect replicas`` (the replica fence options of
``clean``/``spark clean`` are ``kcompact.cli.options.fence_options``).

Registered into the ``inspect`` group by ``kcompact.cli.main``. Only click and ``kcompact.cli.render`` are imported here
at import time (``kcompact --help`` stays fast); the library is imported inside the command.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from kcompact.cli import render
from kcompact.cli.help_text import with_examples
from kcompact.cli.input_path import InputPath
from kcompact.cli.options import EXIT_BAD_INPUT, EXIT_DIVERGED, json_option
from kcompact.cli.partition_filter_options import partition_filter_options
from kcompact.cli.spark_options import session_options

if TYPE_CHECKING:
    from kcompact.segment.partition_filter import PartitionFilter

EPILOG = (
    "Exit codes: 0 the replicas agree; 3 they diverge; 2 bad input or refused (one line on stderr "
    "names the file and byte position); 1 a bug in kcompact (with a traceback)."
)


HOST_PATHS_REFUSED = (
    "spark inspect replicas compares a partition's copies in one task, which reads every broker's copy, so a "
    "HOST:/path (a broker host's own disk) cannot be read there; expected log dirs every executor sees at "
    "the same path (a shared file system, or copies on one machine)")


@click.command("replicas", short_help="Do a partition's replica copies agree? Log and consumer state.",
               epilog=with_examples(
                   EPILOG,
                   "kcompact inspect replicas b1/kafka-logs/orders-0 b2/kafka-logs/orders-0",
                   "kcompact inspect replicas b1/logs b2/logs b3/logs --topic orders --partition 0",
                   "kcompact inspect replicas b1/orders-0 b2/orders-0 --json --max-keys 1000",
               ))
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=str))
@partition_filter_options("paths")
@click.option("--max-keys", type=click.IntRange(min=0), default=100, show_default=True, metavar="N",
              help="How many divergent keys to list (all are counted).")
@json_option("Print the report as one JSON object (every divergent key up to --max-keys).")
def replicas_command(paths: tuple[str, ...], selection: PartitionFilter | None, max_keys: int,
                     as_json: bool) -> None:
    """Compare two or more copies of one partition taken from its replicas (partition dirs, or log
    dirs with --topic and --partition selecting one partition in them; log dirs without them: every
    partition they share, one line each, as `spark inspect replicas` in this process): per copy its
    log start, log end, high watermark
    (replication-offset-checkpoint), last stable offset and leader epochs; then where the logs part
    (the first offset their leader-epoch lineages assign to different epochs, where Kafka would
    truncate a follower; records that differ at one offset below the lowest high watermark) and
    whether consumers see the same thing: per key the latest committed value up to the lowest high
    watermark (a tombstone and a removed tombstone both mean absent, so differently compacted copies
    agree), and transactions one copy has committed and another aborted or open. The first copy
    named is the reference. Reads every record; writes nothing.
    """
    from kcompact.inspect.replicas import replicas_report
    from kcompact.segment.partition import is_partition_dir
    from kcompact.segment.partition_filter import sole_partition

    if not any(is_partition_dir(path) for path in paths) and not _one_partition(paths, selection):
        _every_shared_partition(paths, selection, max_keys, as_json=as_json)
        return
    topic, partition = (None, None) if selection is None else sole_partition(paths, selection)
    report = replicas_report(paths, topic=topic, partition=partition, max_keys=max_keys)
    if as_json:
        render.emit_json(report.as_dict())
    else:
        _print_report(report)
    if not report.agree:
        raise click.exceptions.Exit(EXIT_DIVERGED)


def _one_partition(log_dirs: tuple[str, ...], selection: PartitionFilter | None) -> bool:
    """Whether ``selection`` keeps exactly one partition of the log dirs (its full report is printed)."""
    from kcompact.errors import KcompactError
    from kcompact.segment.partition_filter import sole_partition

    if selection is None:
        return False
    try:
        sole_partition(log_dirs, selection)
    except KcompactError:
        return False
    return True


def _every_shared_partition(log_dirs: tuple[str, ...], selection: PartitionFilter | None, max_keys: int, *,
                            as_json: bool) -> None:
    """Log dirs: every partition with copies in two or more of them, one row each (as spark's rows)."""
    from kcompact.inspect.replicas import replicas_rows

    rows = replicas_rows(log_dirs, selection=selection, max_keys=max_keys)
    if as_json:
        render.emit_json([_row_dict(row) for row in rows])
    else:
        for row in rows:
            render.plain(_row_text(row))
        render.plain(f"{render.plural(len(rows), 'partition')} with two or more copies; "
                     f"{sum(1 for r in rows if r.agree is False)} diverge (one partition's full report: "
                     "--topic and --partition naming it)")
    if any(row.error for row in rows):
        raise click.exceptions.Exit(EXIT_BAD_INPUT)
    if any(row.agree is False for row in rows):
        raise click.exceptions.Exit(EXIT_DIVERGED)


def _print_report(report: Any) -> None:
    render.plain(f"{report.topic}-{report.partition}: {len(report.replicas)} copies, compared from offset "
                 f"{report.start} (the highest log start) below {report.limit} (the lowest high watermark)")
    for i, r in enumerate(report.replicas):
        hw = "-" if r.high_watermark is None else str(r.high_watermark)
        epochs = ", ".join(f"{e}@{s}" for e, s in r.leader_epochs[-4:]) or "-"
        render.plain(f"  [{i}] {r.path}")
        render.plain(f"      log start offset {r.log_start_offset}, log end offset {r.log_end_offset}, "
                     f"high watermark {hw}, last stable {r.last_stable_offset}, epochs {epochs}")
    for r in report.replicas:
        for warning in r.warnings:
            render.warning_line(warning)
    for part in report.epoch_divergence:
        render.plain(f"log: [{part['replica']}] parts from [0] at offset {part['offset']} "
                     "(leader-epoch lineages)")
    for rec in report.records:
        render.plain(f"log: [{rec.replica}] has {render.plural(rec.count, 'record')} unlike [0]'s at the same offset, "
                     f"first {rec.first_offset}")
    if report.divergent_keys:
        render.plain(f"state: {report.divergent_keys} of {render.plural(report.keys_compared, 'key')} differ")
        for key in report.keys:
            sides = "; ".join(f"[{i}] {_side_text(s)}" for i, s in enumerate(key.sides))
            render.plain(f"  {key.key}: {sides}")
    for txn in report.transactions:
        render.plain(f"state: producer {txn.producer_id} at offset {txn.first_offset}: [0] {txn.reference}, "
                     f"[{txn.replica}] {txn.other}")
    verdict = "the replicas agree" if report.agree else "the replicas DIVERGE"
    render.plain(f"{verdict} ({render.plural(report.keys_compared, 'key')} compared, {report.keys_not_comparable} "
                 "not comparable: a later record above the limit)")


def _side_text(side: dict[str, Any]) -> str:
    if side["state"] == "value":
        return f"value {side['value_digest']} @{side['offset']}"
    if side["offset"] is not None and side["state"] == "absent":
        return f"absent (tombstone @{side['offset']})"
    return str(side["state"])


HOST_PATHS_REFUSED = (
    "spark inspect replicas compares a partition's copies in one task, which reads every broker's copy, so a "
    "HOST:/path (a broker host's own disk) cannot be read there; expected log dirs every executor sees at "
    "the same path (a shared file system, or copies on one machine)")


@click.command("replicas", short_help="inspect replicas over every partition of a cluster's copies.",
               epilog=with_examples(
                   "Starting Spark costs seconds (a JVM and Python workers): for one partition, the "
                   "serial command is faster.\n\n" + EPILOG,
                   "kcompact spark inspect replicas /copies/b1/logs /copies/b2/logs /copies/b3",
                   "kcompact spark inspect replicas b1/logs b2/logs --json --max-keys 10",
                   "kcompact spark inspect replicas b1/logs b2/logs --topic 'orders.*'",
               ))
@click.argument("log_dirs", nargs=-1, required=True,
                type=InputPath(host_paths_refused=HOST_PATHS_REFUSED, urls=False))
@session_options
@click.option("--max-keys", type=click.IntRange(min=0), default=100, show_default=True, metavar="N",
              help="How many divergent keys each partition's report lists (all are counted).")
@partition_filter_options("log_dirs")
@json_option("Print a JSON list of rows; each row's report is inspect replicas --json of that partition.")
def spark_replicas_command(log_dirs: tuple[str, ...], master: str | None, verbose: bool,
                           spark_conf_pairs: tuple[str, ...], executor_python: str | None, max_keys: int,
                           selection: PartitionFilter | None, as_json: bool) -> None:
    """Compare the copies of every partition found in two or more of LOG_DIRS (one log dir per
    broker, copied from a whole cluster) as Spark tasks, one partition a task: each row is the
    verdict of `kcompact inspect replicas` on that partition's copies (in the order of LOG_DIRS,
    the first the reference), with its --json report. Exits 3 when a partition's copies diverge,
    2 when a partition's files do not parse (its row says why), or when a Spark task is lost (its Python
    worker or the JVM died: one error line, nothing changed). Executors must see the log dirs at the
    same paths: a HOST:/path is refused (a task reads every copy of its partition).
    """
    from kcompact.cli.spark_checks import checks_before_session, checks_in_session, startup_line
    from kcompact.inspect.replicas import replica_sets
    from kcompact.spark.replicas_job import spark_replicas
    from kcompact.spark.session import command_session

    absolute = tuple(os.path.abspath(d) for d in log_dirs)  # the executors are handed absolute paths
    sets = replica_sets(list(absolute))  # before Spark starts
    sets = [s for s in sets if selection is None or selection.matches(s.topic, s.partition)]
    conf = checks_before_session(absolute, output=None, master=master, spark_conf_pairs=spark_conf_pairs,
                                 executor_python=executor_python)
    with command_session(master, verbose=verbose, conf=conf, executor_python=executor_python) as (spark, startup_s):
        checks_in_session(spark, absolute, output=None, verbose=verbose)
        run = spark_replicas(spark, sets, max_keys=max_keys, verbose=verbose)
    if as_json:
        render.emit_json([_row_dict(row) for row in run.rows])
    else:
        for row in run.rows:
            render.plain(_row_text(row))
        render.plain(f"{render.plural(len(run.rows), 'partition')} with two or more copies; "
                     f"{sum(1 for r in run.rows if r.agree is False)} diverge")
        startup_line(startup_s)
    if any(row.error for row in run.rows):
        raise click.exceptions.Exit(EXIT_BAD_INPUT)
    if any(row.agree is False for row in run.rows):
        raise click.exceptions.Exit(EXIT_DIVERGED)


def _row_dict(row: Any) -> dict[str, Any]:
    import dataclasses
    import json

    out = dataclasses.asdict(row)
    out["report"] = None if row.report is None else json.loads(row.report)
    return out


def _row_text(row: Any) -> str:
    name = f"{row.topic}-{row.partition}"
    if row.error is not None:
        return f"{name}: error: {row.error}"
    if row.agree:
        return f"{name}: {row.copies} copies agree"
    what = [w for w, flag in (("log", row.log_diverged), ("state", row.state_diverged)) if flag]
    return (f"{name}: {row.copies} copies DIVERGE ({' and '.join(what)}: {render.plural(row.divergent_keys, 'key')}, "
            f"{render.plural(row.divergent_transactions, 'transaction')})")
