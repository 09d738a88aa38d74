"""The one entry point, ``stream-dedup``. Each subcommand is a thin shell over a module.

Exit codes: 0 success; 1 the run finished but found a problem it reports (topic drift, bad
input lines with --strict, an eval below --min-f1); 2 usage or configuration error; 3 the
environment is missing something (no broker reachable, Maven Central unreachable).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from ..config import ConfigError, Settings, load_settings

EXIT_PROBLEM, EXIT_USAGE, EXIT_ENV = 1, 2, 3
_done_with_process = False  # a command that leaves nothing for the interpreter's teardown to do (scan)


class Ctx:
    def __init__(self, config: str | None, bootstrap: str | None):
        self.config_path = config
        self.bootstrap = bootstrap
        self._settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            try:
                s = load_settings(self.config_path)
            except ConfigError as e:
                click.echo(f"stream-dedup: {e}", err=True)
                sys.exit(EXIT_USAGE)
            if self.bootstrap:
                s.kafka.bootstrap = self.bootstrap
            if s.text.template:  # a bad table is a usage error, said before any work starts
                from ..core.template import TemplateTable

                try:
                    TemplateTable.load(s.text.template)
                except ValueError as e:
                    click.echo(f"stream-dedup: text.template: {e}", err=True)
                    sys.exit(EXIT_USAGE)
            self._settings = s
        return self._settings


pass_ctx = click.make_pass_decorator(Ctx)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "-c", type=click.Path(dir_okay=False), envvar="STREAM_DEDUP_CONFIG",
              help="TOML configuration file (STREAM_DEDUP_* environment variables override it).")
@click.option("--bootstrap", "-b", metavar="HOST:PORT", help="Kafka bootstrap servers (overrides the config).")
@click.version_option(package_name="stream-dedup")
@click.pass_context
def main(ctx: click.Context, config: str | None, bootstrap: str | None) -> None:
    """Find exact and near-duplicate documents in a stream of page events."""
    ctx.obj = Ctx(config, bootstrap)


# ----------------------------------------------------------------------------- embedded engine
@main.command()
@click.argument("input", type=click.Path(allow_dash=True, exists=True, dir_okay=False))
@click.option("--out", "-o", type=click.Path(allow_dash=True), default="-", help="verdict JSONL (default stdout)")
@click.option("--state", type=click.Path(file_okay=False), help="RocksDB state folder (default: a temp folder)")
@click.option("--progress/--no-progress", default=None, help="progress bar on stderr (default: for files)")
@click.option("--json-summary", is_flag=True, help="print the summary as JSON on stderr")
@click.option("--clusters", "clusters_path", type=click.Path(dir_okay=False),
              help="also write one line per page that has copies: size, canonical page, members (largest first)")
@click.option("--jobs", "-j", type=click.IntRange(min=0), default=None,
              help="processes that prepare documents beside the one that judges them (0: none, it prepares them "
                   "too; default: one per CPU core, one fewer for short texts); the verdicts are the same for any")
@pass_ctx
def scan(c: Ctx, input: str, out: str, state: str | None, progress: bool | None, json_summary: bool,
         clusters_path: str | None, jobs: int | None) -> None:
    """Run the engine over a JSONL file (or - for stdin) and write one verdict per id."""
    from ..scan import auto_jobs, run_scan

    for path, option in ((out, "--out"), (clusters_path, "--clusters")):
        if path not in (None, "-") and not Path(path).absolute().parent.is_dir():
            raise click.BadParameter(f"the folder of {path} does not exist", param_hint=option)
    summary = run_scan(c.settings, input, out, state_dir=state,
                       progress=(input != "-") if progress is None else progress, clusters_path=clusters_path,
                       jobs=auto_jobs(c.settings, input) if jobs is None else jobs)
    if json_summary:
        click.echo(json.dumps(summary.as_dict()), err=True)
    else:
        click.echo(summary.describe(), err=True)
    global _done_with_process
    _done_with_process = True  # the output is closed, the stores closed and their folder removed


@main.command("eval")
@click.argument("verdicts", type=click.Path(exists=True, dir_okay=False))
@click.argument("labels", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print the scores as JSON")
@click.option("--min-f1", type=float, default=None, help="exit 1 if the overall F1 is below this")
def eval_cmd(verdicts: str, labels: str, as_json: bool, min_f1: float | None) -> None:
    """Precision, recall and F1 of duplicate verdicts against ground-truth clusters."""
    from .evaluate import EvalInputError, evaluate_files

    try:
        report = evaluate_files(verdicts, labels)
    except EvalInputError as e:
        click.echo(f"stream-dedup: {e}", err=True)
        sys.exit(EXIT_USAGE)
    click.echo(json.dumps(report.as_dict(), indent=2) if as_json else report.describe())
    if min_f1 is not None and report.overall.f1 < min_f1:
        sys.exit(EXIT_PROBLEM)


@main.group()
def idf() -> None:
    """Build the IDF table that weights SimHash features and picks I-Match lexicons."""


@idf.command("build")
@click.argument("corpus", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False), help="output table (idf.bin)")
@click.option("--field", default="text", help="JSON field holding the text")
@click.option("--limit", type=int, default=None, help="read at most this many documents")
@pass_ctx
def idf_build(c: Ctx, corpus: str, out: str, field: str, limit: int | None) -> None:
    """Count document frequencies of jieba words in CORPUS.jsonl and write an IDF table."""
    from ..core.idf import build_idf_from_jsonl

    table = build_idf_from_jsonl(corpus, field=field, limit=limit, settings=c.settings.text, progress=True)
    table.save(out)
    click.echo(f"wrote {out}: {len(table)} words from {table.docs} documents", err=True)


@main.group()
def template() -> None:
    """Build the template table: lines and affixes that recur on many documents of a source."""


@template.command("build")
@click.argument("sample", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False), help="output table (JSON)")
@click.option("--min-docs", type=click.IntRange(min=2), default=5, show_default=True,
              help="a unit is template when the originals of this many clusters of one source carry it")
@click.option("--max-per-source", type=click.IntRange(min=1), default=2000, show_default=True,
              help="most units a source keeps (those on the most clusters)")
@pass_ctx
def template_build(c: Ctx, sample: str, out: str, min_docs: int, max_per_source: int) -> None:
    """Learn a template table from SAMPLE.jsonl, page events of the stream (set it as text.template)."""
    from .template_build import build_template

    table = build_template(c.settings, sample, min_docs=min_docs, max_per_source=max_per_source)
    table.save(out)
    click.echo(f"wrote {out}: {len(table)} template units of {len(table.sources)} sources, "
               f"from {table.docs} documents (one per cluster)", err=True)


# ----------------------------------------------------------------------------- Kafka
def reach_kafka(c: Ctx) -> None:
    """Every Kafka command first: librdkafka's log lines to the logger, and exit 3 with one line
    when no broker answers."""
    from ..stream.kafka_io import Unreachable, check_reachable, quiet_librdkafka

    quiet_librdkafka(c.settings)
    try:
        check_reachable(c.settings)
    except Unreachable as e:
        click.echo(f"stream-dedup: {e}", err=True)
        sys.exit(EXIT_ENV)


@main.command()
@pass_ctx
def worker(c: Ctx) -> None:
    """Run a Kafka stream worker. Start N of them (on N machines) to scale out."""
    from ..stream.claims import Claimed, claim
    from ..stream.worker import run_worker

    try:
        lock = claim(c.settings)  # held while the worker runs
    except Claimed as e:
        click.echo(f"stream-dedup: {e}", err=True)
        sys.exit(EXIT_USAGE)
    reach_kafka(c)
    run_worker(c.settings)
    lock.close()


@main.group()
def topics() -> None:
    """Create or check the topics defined in topics/."""


@topics.command("apply")
@click.option("--json", "as_json", is_flag=True)
@click.option("--grow-input", is_flag=True,
              help="give the pages topic its defined partition count when it has fewer (its only state is the id check's)")
@pass_ctx
def topics_apply(c: Ctx, as_json: bool, grow_input: bool) -> None:
    """Create missing topics; report drift (partitions, config) without changing existing ones,
    except the pages topic's partition count with --grow-input."""
    from ..stream.topics import apply

    reach_kafka(c)
    try:
        report = apply(c.settings, grow_input=grow_input)
    except Exception as e:  # noqa: BLE001 - librdkafka raises KafkaException with a clear message
        click.echo(f"stream-dedup: cannot reach Kafka at {c.settings.kafka.bootstrap}: {e}", err=True)
        sys.exit(EXIT_ENV)
    if as_json:
        click.echo(json.dumps(report.as_dict()))
    else:
        for name in report.created:
            click.echo(f"created  {name}")
        for name, (before, after) in report.grown.items():
            click.echo(f"grown    {name}: {before} -> {after} partitions")
        for name in report.ok:
            click.echo(f"ok       {name}")
        for name, problems in report.drift.items():
            click.echo(f"DRIFT    {name}: " + "; ".join(problems))
    sys.exit(0 if report.clean else EXIT_PROBLEM)


@topics.command("list")
@pass_ctx
def topics_list(c: Ctx) -> None:
    """Print the topic definitions with the names this configuration gives them."""
    from ..stream.topics import load_specs

    for s in load_specs(c.settings):
        click.echo(f"{s.name:32} partitions={s.partitions:<4} {s.role}")


@main.command()
@click.argument("input", type=click.Path(allow_dash=True, exists=True, dir_okay=False))
@click.option("--topic", default=None, help="target topic (default: topics.pages)")
@click.option("--limit", type=int, default=None, help="send at most this many lines")
@click.option("--rate", type=float, default=None, help="events per second (default: as fast as possible)")
@click.option("--progress/--no-progress", default=True)
@click.option("--validate", is_flag=True, help="send only lines that are JSON objects; report the others")
@pass_ctx
def produce(c: Ctx, input: str, topic: str | None, limit: int | None, rate: float | None, progress: bool,
            validate: bool) -> None:
    """Put a JSONL corpus on the input topic, one line per message, keyed by id. A line that cannot be
    sent is reported with its number, the rest is sent, and the exit code is 1."""
    from .produce import produce_jsonl

    reach_kafka(c)
    out = produce_jsonl(c.settings, input, topic=topic, limit=limit, rate=rate, progress=progress,
                        validate=validate, warn=lambda line: click.echo(line, err=True))
    delivered = out.sent - len(out.undelivered) - out.unflushed
    click.echo(f"produced {delivered} events to {topic or c.settings.topics.pages}", err=True)
    if out.unflushed:
        click.echo(f"stream-dedup: cannot reach Kafka at {c.settings.kafka.bootstrap}: {out.unflushed} events "
                   "still queued after 60 s", err=True)
        sys.exit(EXIT_ENV)
    if out.refused or out.undelivered:
        click.echo(f"stream-dedup: {len(out.refused)} lines not sent, {len(out.undelivered)} not delivered",
                   err=True)
        sys.exit(EXIT_PROBLEM)


@main.command()
@click.option("--topic", default=None, help="topic to follow (default: topics.verdicts)")
@click.option("--max", "max_messages", type=int, default=None, help="stop after this many messages")
@click.option("--ids", "max_ids", type=click.IntRange(min=1), default=None,
              help="stop once messages about this many distinct documents were read (a verdict's id, else the "
                   "record key): revisions of a verdict do not count again")
@click.option("--idle", type=float, default=None, help="stop after this many seconds without a message")
@click.option("--from-end", is_flag=True, help="only new messages")
@click.option("--to-end", is_flag=True,
              help="read what the topic holds now, then stop (no quiet window to guess; later messages are left)")
@click.option("--summary", is_flag=True, help="print counts by verdict at the end instead of every message")
@pass_ctx
def tail(c: Ctx, topic: str | None, max_messages: int | None, max_ids: int | None, idle: float | None,
         from_end: bool, to_end: bool, summary: bool) -> None:
    """Print verdicts (or any topic's messages) as JSON lines."""
    from .produce import tail_topic

    if from_end and to_end:
        raise click.UsageError("--from-end and --to-end exclude each other")
    reach_kafka(c)
    try:
        counts = tail_topic(c.settings, topic or c.settings.topics.verdicts, max_messages=max_messages,
                            idle=idle, from_end=from_end, echo=None if summary else click.echo, max_ids=max_ids,
                            to_end=to_end)
    except RuntimeError as e:
        click.echo(f"stream-dedup: {e}", err=True)
        sys.exit(EXIT_ENV)
    if summary:
        click.echo(json.dumps(counts, sort_keys=True))


@main.command()
@click.option("--reason", "reasons", multiple=True, metavar="CODE",
              help="a reason code to send back (repeatable; default: quarantined and internal_error, a bug's)")
@click.option("--id", "ids", multiple=True, metavar="ID", help="only records about this document (repeatable)")
@click.option("--from-beginning", is_flag=True, help="read the whole dead-letter topic, not from the last run on")
@click.option("--dry-run", is_flag=True, help="list what would be sent back; send and commit nothing")
@click.option("--json", "as_json", is_flag=True, help="print the counts as JSON")
@pass_ctx
def redrive(c: Ctx, reasons: tuple[str, ...], ids: tuple[str, ...], from_beginning: bool, dry_run: bool,
            as_json: bool) -> None:
    """Send dead-lettered items back to the topic and partition they came from, once the bug that
    put them there is fixed. Each run goes on from where the last one stopped."""
    from .redrive import BUG_REASONS, redrive as run

    reach_kafka(c)
    try:
        counts = run(c.settings, reasons=reasons or BUG_REASONS, ids=ids, from_beginning=from_beginning,
                     dry_run=dry_run, echo=lambda line: click.echo(line, err=True))
    except RuntimeError as e:
        click.echo(f"stream-dedup: {e}", err=True)
        sys.exit(EXIT_ENV)
    if as_json:
        click.echo(json.dumps(counts, sort_keys=True))
    else:
        sent = sum(n for k, n in counts.items() if k.startswith("redriven."))
        click.echo(f"{'would send' if dry_run else 'sent'} back {sent} of {counts.get('read', 0)} dead-letter "
                   f"records ({json.dumps(counts, sort_keys=True)})", err=True)


@main.command()
@click.option("--json", "as_json", is_flag=True)
@click.option("--wait-drained", is_flag=True,
              help="first wait until the workers have processed every event on the input and internal topics, "
                   "so that every verdict, revisions included, is out; exit 1 if that takes over --timeout")
@click.option("--timeout", type=click.FloatRange(min=0), default=300.0, show_default=True,
              help="seconds --wait-drained waits")
@pass_ctx
def status(c: Ctx, as_json: bool, wait_drained: bool, timeout: float) -> None:
    """Consumer lag per partition and partition ownership of the workers' consumer group."""
    from ..stream.status import group_status, wait_drained as wait

    reach_kafka(c)
    if not wait_drained:
        st = group_status(c.settings)
        click.echo(json.dumps(st, indent=2) if as_json else st["text"])
        return
    drained, st = wait(c.settings, timeout, echo=lambda line: click.echo(f"stream-dedup: {line}", err=True))
    st["drained"] = drained
    click.echo(json.dumps(st, indent=2) if as_json else st["text"])
    if not drained:
        click.echo(f"stream-dedup: the workers still had events to process after {timeout:g} s (group "
                   f"{st['group']}: {st['state']}, {len(st['workers'])} workers reporting)", err=True)
        sys.exit(EXIT_PROBLEM)


@main.command("config")
@click.option("--reference", is_flag=True, help="print the reference of every setting (Markdown) instead")
@pass_ctx
def show_config(c: Ctx, reference: bool) -> None:
    """Print the effective configuration (secrets redacted)."""
    if reference:
        from ..config import reference_markdown

        click.echo(reference_markdown())
        return
    data = c.settings.as_dict()
    data["kafka"]["client"] = c.settings.kafka.redacted_client()
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def program() -> None:
    """The ``stream-dedup`` program: ``main``, and after a finished ``scan`` an exit that skips the
    interpreter's teardown.

    Why: freeing what a scan loaded (the segmenter's dictionary, the IDF table, every module) took a
    noticeable share of a short scan, and there is nothing left to save by then: ``scan`` has
    closed its output and its stores. The standard streams and logging are flushed first."""
    try:
        main()
    except SystemExit as e:
        if not _done_with_process:
            raise
        code = e.code
    else:  # pragma: no cover - click's standalone mode always exits
        code = 0
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(code if isinstance(code, int) else (0 if code is None else EXIT_PROBLEM))


if __name__ == "__main__":  # pragma: no cover
    program()
