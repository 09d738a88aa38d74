"""Configuration: one TOML file plus ``STREAM_DEDUP_*`` environment overrides, validated at start.

Why a small loader instead of a settings framework: the file and the environment must merge into
one nested model *before* validation, so that an error names the setting wherever it came from
(``engine.window_ms: Expected `int` > 0 (from STREAM_DEDUP_ENGINE__WINDOW_MS)``). The models are
msgspec structs (see ``_Section``).

Environment overrides use ``__`` between levels: ``STREAM_DEDUP_SIMHASH__K=4``,
``STREAM_DEDUP_KAFKA__CLIENT__SASL_MECHANISM=SCRAM-SHA-512`` (under ``kafka.client`` a single
``_`` becomes ``.``, since librdkafka keys are dotted). Values are parsed as JSON when they parse
(numbers, booleans, lists), else taken as strings. ``KAFKA_BOOTSTRAP`` is honoured as the default
bootstrap address so that the test suite, the demo and the worker agree on one cluster.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
import re
import typing
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, field

ENV_PREFIX = "STREAM_DEDUP_"
# Environment names under the prefix that are not settings: the topic specs' folder, the sample
# corpora of the benchmarks, the benchmarks' results folder, and the test suite's knobs
# (STREAM_DEDUP_TEST_*). A worker or command started beside them must not reject them as unknown settings.
NOT_SETTINGS = frozenset({"STREAM_DEDUP_TOPICS_DIR", "STREAM_DEDUP_SHARED", "STREAM_DEDUP_BENCH_RESULTS"})
TOPICS_DIR = Path(__file__).resolve().parent / "data" / "topics"  # package data; the repository's topics/ links here


class ConfigError(ValueError):
    """A configuration that cannot start a run; the message names the bad setting and where it came from."""


class _Section(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A section: typed fields with their bounds and meaning (``Meta``), unknown keys refused.

    Why msgspec rather than pydantic: the same declarations and checks, and the start-up of every
    command pays for the configuration's import, and pydantic's was several times msgspec's, a
    visible share of a short ``scan``."""

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (paths as strings)."""
        return msgspec.to_builtins(self, enc_hook=str)


class KafkaSettings(_Section):
    bootstrap: Annotated[str, Meta(description="host:port[,host:port...] of the Kafka cluster "
                                                      "(default: $KAFKA_BOOTSTRAP if set)")] = "127.0.0.1:9092"
    client: Annotated[dict[str, str], Meta(description="librdkafka-style client settings passed to every Kafka client as they are: "
        "security.protocol, sasl.mechanism, sasl.username, sasl.password, ssl.ca.location, ...")] = field(default_factory=dict)
    replication_factor: Annotated[int, Meta(ge=1, description="replication factor for topics created by `topics apply`")] = 1
    min_insync_replicas: Annotated[int, Meta(ge=1, description="min.insync.replicas for topics created by `topics apply`")] = 1
    log_level: Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], Meta(
        description="the commands' librdkafka log lines at this level and above go to stderr, through the logger "
                    "stream_dedup.librdkafka (CRITICAL: none; a command that cannot reach Kafka says so in one line)")] = "CRITICAL"

    def __post_init__(self) -> None:
        for part in self.bootstrap.split(","):
            host, _, port = part.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"bootstrap: expected host:port, got {part!r}")  # "field: ": see load_settings

    def redacted_client(self) -> dict[str, str]:
        """Client settings safe to print: secrets replaced by ``***``."""
        return {k: ("***" if any(s in k for s in ("password", "secret", "key.pem", "token")) else v)
                for k, v in self.client.items()}


class TopicSettings(_Section):
    pages: Annotated[str, Meta(description="input: page events")] = "pages"
    dlq: Annotated[str, Meta(description="rejected events with reason, original bytes and offset")] = "pages.dlq"
    verdicts: Annotated[str, Meta(description="compacted: latest verdict per page id")] = "verdicts"
    unique: Annotated[str, Meta(description="verdicts that say unique")] = "unique"
    duplicate: Annotated[str, Meta(description="verdicts that say duplicate")] = "duplicate"
    clusters: Annotated[str, Meta(description="compacted: per original page, its cluster size and canonical page")] = "clusters"
    internal_prefix: Annotated[str, Meta(description="prefix of the internal repartition and changelog topics")] = "stream-dedup"
    partitions: Annotated[int, Meta(ge=1, le=1024, description="partitions of pages and every internal topic")] = 6
    dir: Annotated[Path | None, Meta(description="folder with topics.toml and schemas/ (default: the definitions the "
                                     "package ships, whose editable source is the repository's topics/)")] = None

    def definitions_dir(self) -> Path:
        """The folder of topics.toml and schemas/: ``dir``, else $STREAM_DEDUP_TOPICS_DIR, else the package's."""
        return self.dir or Path(os.environ.get("STREAM_DEDUP_TOPICS_DIR", TOPICS_DIR))


class TextSettings(_Section):
    segmenter: Annotated[Literal["rjieba", "jieba"], Meta(description="word segmenter, both jieba's algorithm and dictionary: rjieba (Rust, much faster "
        "than jieba, jieba's tokens on nearly every document) or jieba (the reference); "
        "bench/segmenters.py measures speed and agreement")] = "rjieba"
    traditional_to_simplified: Annotated[bool, Meta(description="fold traditional Chinese to simplified (OpenCC t2s) before everything")] = True
    user_dict: Annotated[Path | None, Meta(description="jieba user dictionary (word [freq [tag]] per line)")] = None
    stopwords: Annotated[Path | None, Meta(description="stop-word list, one per line (default: the shipped list)")] = None
    idf: Annotated[Path | None, Meta(description="IDF table built by `stream-dedup idf build` (default: the shipped one)")] = None
    template: Annotated[Path | None, Meta(description="template table built by `stream-dedup template build` from a sample "
                        "of the stream: the lines and affixes that recur on many different documents of a source "
                        "(event `source`, else the URL's host) are left out of fingerprints (default: none)")] = None
    max_chars: Annotated[int, Meta(gt=0, description="longer texts are rejected to the DLQ")] = 2_000_000
    max_html_depth: Annotated[int, Meta(gt=0, le=255, description="deeper HTML is rejected to the DLQ (libxml2 itself stops nesting at 256)")] = 200
    short_chars: Annotated[int, Meta(ge=0, description="texts with fewer normalized chars are 'short' (SMS, headlines)")] = 200
    token_cache: Annotated[int, Meta(ge=64, le=1 << 22, description="entries per generation of the worker's memos "
                             "of word filtering and feature hashing (two generations each, ~150 bytes an entry): a "
                             "stream keeps bringing new words, so the memos fill over the first hours up to this bound")] = 32_768


class SimhashSettings(_Section):
    k: Annotated[int, Meta(ge=0, le=31, description="Hamming distance at or below which two fingerprints match")] = 3
    bands: Annotated[Literal["4x16", "5c2", "auto"], Meta(description="5c2: k+2 blocks, every pair of blocks a key, "
        "buckets that stay small as the window fills, so a document costs about the same at any window size; "
        "4x16: k+1 blocks, one key each, cheaper in small windows, costlier as they fill (bench/index_scale.py)")] = "5c2"
    min_features: Annotated[int, Meta(ge=1, description="documents with fewer distinct words are left to other detectors")] = 8


class NgramSettings(_Section):
    m: Annotated[int, Meta(ge=2, description="gram length in characters")] = 4
    w: Annotated[int, Meta(ge=1, description="winnowing window: one key per w consecutive grams at least; any common "
                   "substring of w + m - 1 characters shares a key")] = 12
    threshold: Annotated[float, Meta(gt=0, le=1, description="word Jaccard at or above which short texts match")] = 0.7
    edit_threshold: Annotated[float, Meta(ge=0, le=1, description="and normalized Levenshtein similarity of the skeletons at or above which they match (0 = off); "
        "separates reworded paraphrases, which share words, from copies, which share sequences")] = 0.8
    containment: Annotated[float, Meta(ge=0, le=1, description="or the share of the shorter skeleton found in the longer, in order (or as character pairs), "
        "at or above which a short text is a copy with additions (0 = off)")] = 0.85
    min_contained: Annotated[int, Meta(ge=1, description="a shorter text of fewer skeleton characters (numbers left out) must be contained whole "
        "and in one piece, or as its clauses moved around, with at most half as much again added around it "
        "(under 8: the same skeleton only); alphabetic texts (English, Russian): see docs/design.md")] = 16
    contained_ratio: Annotated[float, Meta(gt=0, le=1, description="and its length as a share of the longer's at least this; "
        "a shorter one only in one place of the longer (hash-busting: other text put around a copy)")] = 0.5


class MinhashSettings(_Section):
    num_perm: Annotated[int, Meta(ge=8, description="MinHash permutations (signature length)")] = 128
    bands: Annotated[int, Meta(ge=1, description="LSH bands (bucket keys per document); num_perm / bands rows each")] = 32
    shingle: Annotated[int, Meta(ge=1, description="character shingle length")] = 5
    threshold: Annotated[float, Meta(gt=0, le=1, description="estimated Jaccard of character shingles (bench/article_edits.py)")] = 0.5
    containment: Annotated[float, Meta(ge=0, le=1, description="or the shorter text's estimated share of shingles in the "
                                       "longer (a copy with additions); 0 turns it off")] = 0.9
    contained_ratio: Annotated[float, Meta(gt=0, le=1, description="containment only when the shorter text has this "
                                           "share of the longer's distinct shingles or more")] = 0.5


class ImatchSettings(_Section):
    lexicons: Annotated[int, Meta(ge=0, description="extra randomized lexicons besides the main one")] = 5
    drop: Annotated[float, Meta(ge=0, lt=1, description="share of the main lexicon each extra lexicon drops")] = 0.1
    min_words: Annotated[int, Meta(ge=1, description="distinct lexicon words a document needs for a signature")] = 10
    low: Annotated[float, Meta(ge=0, lt=1, description="lexicon keeps words whose IDF lies between these quantiles")] = 0.2
    high: Annotated[float, Meta(gt=0, le=1, description="upper IDF quantile of the lexicon (see low)")] = 0.95


class StructureSettings(_Section):
    beta: Annotated[float, Meta(gt=0, le=1, description="a level is similar when 2c/(o+w) exceeds this")] = 0.92
    beta2: Annotated[float, Meta(gt=0, le=1, description="pages are duplicates when this share of levels is similar")] = 0.90
    keys: Annotated[int, Meta(ge=1, le=64, description="bucket keys per page: the smallest feature-string hashes")] = 6
    min_features: Annotated[int, Meta(ge=1, description="feature strings a page needs to be judged")] = 8


class EngineSettings(_Section):
    detectors: Annotated[list[str] | Literal["auto"], Meta(description="detectors to run, or auto: ngram for short texts, simhash for long ones")] = "auto"
    window_ms: Annotated[int, Meta(gt=0, description="event-time window of exact and near state")] = 7 * 24 * 3600 * 1000
    max_future_ms: Annotated[int, Meta(ge=0, description="an event whose ts is further than this ahead of its record's broker "
        "timestamp (workers) or of the clock (scan, Deduper) goes to the dead-letter topic as bad_ts: it would move the "
        "window past every other document (0 = no bound)")] = 24 * 3600 * 1000
    bloom_capacity: Annotated[int, Meta(gt=0, description="distinct documents per window (whole stream) the Bloom filters are sized for; "
                                "each exact partition gets capacity / topics.partitions")] = 1_000_000
    bloom_fp_rate: Annotated[float, Meta(gt=0, lt=1, description="target false-positive rate of the decaying Bloom filter (the digest store confirms every hit)")] = 0.01
    docs_in_memory: Annotated[int, Meta(ge=1, description="scan and the Python API: documents whose verdict state "
                              "and id check are kept as objects (about 1 KB each); older ones go to a RocksDB folder of "
                              "the run's, so memory does not grow with the input (the workers keep theirs in tables)")] = 100_000
    max_bucket: Annotated[int, Meta(ge=1, description="most entries a near-duplicate bucket keeps (its earliest): a full bucket takes no "
                          "new document and is not rewritten. Every other write rewrites the whole bucket (in the workers, a "
                          "changelog record), so a campaign's copies cost more each up to this size; past its first 32 "
                          "entries a bucket holds an SMS's payload by reference, so each copy adds its id and 12 bytes "
                          "(bench/campaign.py). Keep it well above "
                          "the documents in a window / 65,536 with 4x16 SimHash bands, whose buckets fill by chance; "
                          "every worker must use the same value")] = 200


class WorkerSettings(_Section):
    app_id: Annotated[str, Meta(description="Faust app id = consumer group: workers with one app_id share the work")] = "stream-dedup"
    state_dir: Annotated[Path, Meta(description="RocksDB tables of this worker (rebuilt from changelogs when lost)")] = Path(".state")
    web_host: Annotated[str, Meta(description="status/metrics HTTP bind address (loopback unless set)")] = "127.0.0.1"
    web_port: Annotated[int, Meta(ge=0, le=65535, description="HTTP port of /status, /metrics, /healthz, /ready; 0 turns it off")] = 6066
    processing_guarantee: Annotated[Literal["at_least_once", "exactly_once"], Meta(description="at_least_once (idempotent stages, gap filling) or Kafka transactions, one per input partition (exactly_once: slower, see docs/operations.md)")] = "at_least_once"
    log_level: Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR"], Meta(description="worker log level")] = "INFO"
    name: Annotated[str, Meta(description="this worker's name in `status`, the status page and its reports (empty: "
                              "host:pid); give each worker a stable one (the pod name) for static membership")] = ""
    static_membership: Annotated[bool, Meta(description="join the group as a static member named `worker.name`: a "
                                            "worker restarted within session_timeout_s takes its partitions back "
                                            "without a rebalance, and a stopped one keeps them for that long")] = False
    session_timeout_s: Annotated[float, Meta(ge=6, le=300, description="how long the group waits for a worker that "
                                             "stopped heartbeating (killed, hung, cut off) before its partitions go to "
                                             "the others: the longest stretch without verdicts after a crash")] = 10.0
    heartbeat_interval_s: Annotated[float, Meta(gt=0, le=60, description="how often a worker heartbeats to the group "
                                                "coordinator; also how soon it learns of a rebalance (at most a "
                                                "third of session_timeout_s)")] = 1.0
    standby_replicas: Annotated[int, Meta(ge=0, description="warm copies of each table partition on other workers "
                                  "(faster fail-over, more changelog reading); like Kafka Streams, 0 by default")] = 0
    bulk_restore: Annotated[bool, Meta(description="restore tables from their changelogs in bulk (librdkafka reads, "
                                       "RocksDB write batches) before Faust's recovery, which reads the rest "
                                       "record by record")] = True
    stall_timeout_s: Annotated[float, Meta(ge=0, description="exit (code 75) for the supervisor to restart the worker "
                                   "when an assigned partition has lag and no progress this long; 0 disables")] = 120.0
    stall_nudge_s: Annotated[float, Meta(ge=0, description="before that restart: resume and re-seek a partition "
                                 "that has had lag and no progress this long (once per stall); 0 disables")] = 20.0
    batch_max: Annotated[int, Meta(ge=1, le=10_000, description="most messages an agent takes from its stream at once "
                           "(one batch: one message per destination partition, one state write per key)")] = 1024
    reject_id_conflicts: Annotated[bool, Meta(description="dead-letter a page event whose id was seen with other "
                                   "content (reason id_conflict), as scan does: the first content of an id stands. One "
                                   "table read and write per event, on the id's pages partition (pages "
                                   "keyed by id, as `stream-dedup produce` does); off when ids are unique by "
                                   "construction")] = True
    prepare_slice_bytes: Annotated[int, Meta(ge=1, le=1 << 26, description="page bytes the prepare agent "
                                     "prepares and sends in one go before it lets the worker's other agents run "
                                     "(a batch of long pages would hold them for a second)")] = 262_144
    quarantine_after: Annotated[int, Meta(ge=0, le=100, description="a message whose processing raised this many times "
                                  "(counted across restarts) has its failing items dead-lettered (reason quarantined) "
                                  "and the partition goes on (the first attempt is its whole batch's: 1 acts as 2); "
                                  "0: restart for as long as it fails")] = 3
    batch_within_s: Annotated[float, Meta(gt=0, le=10, description="longest an agent waits to fill a batch (adds up to "
                                  "4x this to a verdict's latency at low rates)")] = 0.02
    state_ttl_s: Annotated[int, Meta(ge=0, description="seconds a table entry lives without a rewrite (RocksDB TTL, applied "
                             "at compaction); 0: two windows, at least an hour")] = 0
    rocksdb_write_buffer_mb: Annotated[int, Meta(ge=1, le=1024, description="memtable size of each table partition's RocksDB "
                                         "(two per partition; a full one is flushed to disk, which lets TTL compaction run)")] = 8
    state_flush_s: Annotated[float, Meta(ge=0, description="flush every table partition's memtable this often, so that "
                                 "RocksDB compacts and its TTL drops expired entries at any input rate (bounded memory "
                                 "and disk); 0: only when a memtable fills")] = 60.0
    rocksdb_memory_mb: Annotated[int, Meta(ge=8, le=65536, description="RocksDB memory of the whole worker: one block "
                                   "cache shared by every table partition, holding index and filter blocks, with half "
                                   "of it for memtables (charged to the cache); bounds RSS whatever the partition count")] = 64
    rocksdb_wal: Annotated[bool, Meta(description="RocksDB's write-ahead log for the tables; off, as in Kafka Streams: "
                           "the changelog topic is the tables' log, and after a crash a table partition is its last "
                           "flushed state (see state_flush_s) plus the changelog from the offset stored with it")] = False
    malloc_arena_max: Annotated[int, Meta(ge=0, le=64, description="glibc malloc arenas of the worker process (set at "
                                  "start); fewer arenas fragment less across RocksDB's and Kafka's threads; 0: glibc's "
                                  "default (8 per core)")] = 2
    fetch_max_wait_ms: Annotated[int, Meta(ge=0, le=30_000, description="longest the broker holds the worker's "
                                   "fetch when no new data is there (Faust fixes 1500; one fetch is in flight per "
                                   "broker, so this bounds how long new data for a stage can wait to be fetched)")] = 100
    fetch_min_bytes: Annotated[int, Meta(ge=1, le=1 << 20, description="the broker answers the worker's fetch once "
                                 "this much data is there (or fetch_max_wait_ms has passed); above 1 a busy "
                                 "worker makes fewer, fuller fetches, and a quiet one waits up to fetch_max_wait_ms "
                                 "a hop")] = 1
    metadata_max_age_s: Annotated[float, Meta(ge=1, le=3600, description="how often the worker's consumer "
                                      "refreshes topic metadata at the latest; partitions added to the pages topic "
                                      "(`topics apply --grow-input`) are read within this long (Faust's default "
                                      "is 300)")] = 60.0
    producer_linger_ms: Annotated[float, Meta(ge=0, le=1000, description="how long the worker's Kafka producer "
                                      "waits to fill a request: every event makes a dozen or more messages "
                                      "(changelogs, internal topics, verdicts), and one request per message cost "
                                      "more CPU than judging the event; adds up to 4x this to a verdict's latency")] = 5.0
    producer_batch_bytes: Annotated[int, Meta(ge=1024, le=8 << 20, description="most bytes of one producer batch "
                                     "(one partition's records in a request). A full batch makes the sending agent "
                                     "wait until the one request in flight to the broker is answered, and an SMS "
                                     "rewrites several index buckets: with Faust's default of 16,384, the index "
                                     "agent waited for several requests per batch at a steady rate. Keep it under "
                                     "the topics' max.message.bytes (the broker's default, 1 MB, for every topic but "
                                     "the changelogs): the broker refuses a larger batch, and the worker stops")] = 262_144
    producer_compression: Annotated[Literal["none", "lz4", "zstd", "snappy", "gzip"], Meta(description="compression of "
                                        "the worker's producer batches (table changelogs, internal topics, verdicts). An index bucket "
                                        "is rewritten whole, a changelog record per bucket an SMS touches, which lz4 makes several times smaller: "
                                        "worth it over a network; on one machine the broker's decompression cost more CPU "
                                        "than it saved")] = "none"
    heap_trim_s: Annotated[float, Meta(ge=0, description="give free heap pages back to the system this often "
                               "(glibc malloc_trim), so RSS follows the memory in use; 0: never")] = 60.0
    gc_threshold: Annotated[int, Meta(ge=0, description="allocations between the garbage collector's young "
                                "passes, with start-up's objects frozen out of its walks once the worker is up "
                                "(with CPython's default of 700 the full passes walk them again and again); 0: CPython's "
                                "defaults, nothing frozen")] = 50_000

    def __post_init__(self) -> None:
        if self.static_membership and not self.name:
            raise ValueError("static_membership: needs worker.name, a stable name per worker")
        if self.heartbeat_interval_s * 3 > self.session_timeout_s:
            raise ValueError(f"heartbeat_interval_s: at most a third of session_timeout_s ({self.session_timeout_s:g})")

    @property
    def exactly_once(self) -> bool:
        """Whether every input partition's work commits in a Kafka transaction."""
        return self.processing_guarantee == "exactly_once"

    def display_name(self) -> str:
        """``name``, or host:pid: what ``status`` and the status page call this worker."""
        import os
        import socket

        return self.name or f"{socket.gethostname()}:{os.getpid()}"


class Settings(_Section):
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    text: TextSettings = field(default_factory=TextSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    simhash: SimhashSettings = field(default_factory=SimhashSettings)
    ngram: NgramSettings = field(default_factory=NgramSettings)
    minhash: MinhashSettings = field(default_factory=MinhashSettings)
    imatch: ImatchSettings = field(default_factory=ImatchSettings)
    structure: StructureSettings = field(default_factory=StructureSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)


def _parse_env_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _env_overrides(environ: dict[str, str]) -> tuple[dict[str, Any], dict[tuple[str, ...], str]]:
    tree: dict[str, Any] = {}
    origin: dict[tuple[str, ...], str] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name in NOT_SETTINGS or name.startswith("STREAM_DEDUP_TEST_"):
            continue
        path = [p.lower() for p in name[len(ENV_PREFIX):].split("__") if p]
        if not path:
            continue
        if path[:2] == ["kafka", "client"] and len(path) == 3:
            path[2] = path[2].replace("_", ".")
            value: Any = raw
        else:
            value = _parse_env_value(raw)
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{name}: {'.'.join(path)} is not a section")
        node[path[-1]] = value
        origin[tuple(path)] = name
    return tree, origin


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_settings(path: str | Path | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Read the TOML file (if any), apply environment overrides, validate; raise ConfigError."""
    environ = dict(os.environ if environ is None else environ)
    data: dict[str, Any] = {}
    if path is None and environ.get("STREAM_DEDUP_CONFIG"):
        path = environ["STREAM_DEDUP_CONFIG"]
    if path is not None:
        import tomllib  # here: most runs have no file, and every command's start-up pays for imports

        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {p}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{p}: not valid TOML: {e}") from None
    environ.pop("STREAM_DEDUP_CONFIG", None)
    overrides, origin = _env_overrides(environ)
    merged = _merge(data, overrides)
    if environ.get("KAFKA_BOOTSTRAP") and "bootstrap" not in merged.get("kafka", {}):
        merged.setdefault("kafka", {})["bootstrap"] = environ["KAFKA_BOOTSTRAP"]
        origin[("kafka", "bootstrap")] = "KAFKA_BOOTSTRAP"
    try:
        return msgspec.convert(merged, Settings, dec_hook=_decode)
    except msgspec.ValidationError as e:
        loc, msg = _error_location(str(e))
        choices = _choices(loc)
        if msg.startswith("Invalid enum value") and choices:
            msg += " (one of: " + ", ".join(choices) + ")"
        src = next((origin[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in origin), None)
        where = f" (from {src})" if src else (f" (in {path})" if path else "")
        raise ConfigError(f"invalid configuration:\n  {'.'.join(loc)}: {msg}{where}") from None


def _choices(loc: tuple[str, ...]) -> list[str]:
    """The values a ``Literal`` setting takes, for an error message; [] for any other setting."""
    typ: Any = Settings
    for part in loc:
        hints = typing.get_type_hints(typ, include_extras=True) if isinstance(typ, type) else {}
        if part not in hints:
            return []
        typ = hints[part]
        while typing.get_origin(typ) is Annotated:
            typ = typing.get_args(typ)[0]
    return [str(a) for a in typing.get_args(typ)] if typing.get_origin(typ) is Literal else []


def _decode(typ: type, value: Any) -> Any:
    if typ is Path and isinstance(value, str):
        return Path(value)
    raise TypeError(f"Expected a path (`str`), got `{type(value).__name__}`")


_AT = re.compile(r"^(?P<msg>.*) - at `\$(?P<path>[^`]*)`$", re.S)
_UNKNOWN = re.compile(r"unknown field `(?P<name>[^`]+)`")
_FIELD_MSG = re.compile(r"^(?P<name>[a-z_]+): (?P<msg>.*)$", re.S)


def _error_location(text: str) -> tuple[tuple[str, ...], str]:
    """The setting an error is about, and what is wrong with it, from msgspec's message
    ("Expected `int` > 0 - at `$.engine.window_ms`"). msgspec stops at the first error."""
    m = _AT.match(text)  # an error at the top level has no " - at" part
    msg, path = (m["msg"], m["path"]) if m else (text, "")
    loc = tuple(p for p in re.split(r"\.|\[(\d+)\]", path) if p)
    unknown = _UNKNOWN.search(msg)
    if unknown:  # reported at its section: name the key itself
        loc += (unknown["name"],)
    elif (fm := _FIELD_MSG.match(msg)) is not None:  # a section's own check names its field
        loc, msg = loc + (fm["name"],), fm["msg"]
    return loc, msg


def fields(section: type[msgspec.Struct]) -> list[tuple[str, Any, Any, str]]:
    """(name, type, default, description) of each field of a section (or of ``Settings``)."""
    out = []
    for f in msgspec.structs.fields(section):
        typ, desc = f.type, ""
        if typing.get_origin(typ) is Annotated:
            typ, *extras = typing.get_args(typ)
            desc = next((m.description for m in extras if isinstance(m, Meta) and m.description), "")
        default = f.default_factory() if f.default is msgspec.NODEFAULT else f.default
        out.append((f.name, typ, default, desc))
    return out


def reference_markdown() -> str:
    """The configuration reference (README), generated from the model so that it cannot drift."""
    lines = ["| setting | environment | type | default | meaning |", "|---|---|---|---|---|"]
    for section, model, _, _ in fields(Settings):
        for name, ann, default, desc in fields(model):
            typ = getattr(ann, "__name__", None) or str(ann).replace("typing.", "")
            typ = typ.replace("pathlib.", "").replace("NoneType", "None").replace("|", "\\|")
            if isinstance(default, Path):
                default = str(default)
            dflt = json.dumps(default, ensure_ascii=False) if default is not None else "-"
            desc = desc.replace("|", "\\|")
            env = f"`{ENV_PREFIX}{section.upper()}__{name.upper()}`"
            lines.append(f"| `{section}.{name}` | {env} | {typ} | `{dflt}` | {desc} |")
    return "\n".join(lines)
