"""Template tables (``core.template``) learned from real pages and messages: what recurs on many
different documents of one source is left out of fingerprints, and never makes two documents copies."""
import json
import random
import sys
from pathlib import Path

import msgspec
import pytest

from stream_dedup.cli.template_build import build_template
from stream_dedup.config import Settings
from stream_dedup.core.document import TEMPLATE_ONLY, make_doc
from stream_dedup.core.engine import Engine
from stream_dedup.core.template import TemplateLearner, TemplateTable, source_of, text_units
from stream_dedup.core.text import normalize
from tests.conftest import shared_data

# an SMS gateway's signature, appended to every message it sends (real messages, made-up gateway)
TAIL = "。本短信由云信通平台代发，详询客服"


def with_template(table: TemplateTable, tmp_path: Path) -> Settings:
    path = tmp_path / "template.json"
    table.save(path)
    s = Settings()
    return msgspec.structs.replace(s, text=msgspec.structs.replace(s.text, template=path))


def sms_sample(n: int, seed: int = 3) -> list[dict]:
    """Real distinct short messages; half go through a gateway that appends its signature."""
    rows = [json.loads(x) for x in shared_data("sms/sms_spam_zh.jsonl").read_text(encoding="utf-8").splitlines()]
    ham = sorted({r["text"] for r in rows if r["label"] == 0 and 6 <= len(r["text"]) <= 20})
    random.Random(seed).shuffle(ham)
    return [{"id": f"m{i}", "ts": 1000 + i, "source": "gw1" if i % 2 == 0 else "gw2",
             "text": text + (TAIL if i % 2 == 0 else "")} for i, text in enumerate(ham[:n])]


def duplicates(settings: Settings, events: list[dict]) -> dict[str, str]:
    with Engine(settings) as engine:
        for e in events:
            engine.process(e)
        return {v.id: v.duplicate_of for v in engine.verdicts() if v.verdict == "duplicate"}


def test_a_gateway_signature_is_learned_and_no_longer_makes_messages_copies(tmp_path):
    events = sms_sample(1200)
    sample = tmp_path / "sample.jsonl"
    sample.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
    table = build_template(Settings(), str(sample), min_docs=5)
    assert set(table.sources) == {"gw1"}  # the other gateway adds nothing
    assert table.contains("gw1", normalize("本短信由云信通平台代发")) and table.contains("gw1", normalize("详询客服"))
    before = duplicates(Settings(), events)
    after = duplicates(with_template(table, tmp_path), events)
    signed = {e["id"] for e in events if e["source"] == "gw1"}
    # without the table, distinct messages of the signing gateway match on its signature
    assert len(before.keys() & signed) > 3 * len(before.keys() - signed) + 10
    assert len(after.keys() & signed) <= len(after.keys() - signed) + 5
    # a message sent through both gateways is still a copy of itself
    both = [events[1], {**events[1], "id": "again", "ts": 9999, "source": "gw1", "text": events[1]["text"] + TAIL}]
    assert duplicates(with_template(table, tmp_path), both) == {"again": events[1]["id"]}


def test_a_message_that_is_all_signature_keeps_its_text():
    table = TemplateTable({"gw1": frozenset(_hashes(text_units([normalize("欢迎光临" + TAIL)])))}, 5)
    text = normalize("欢迎光临" + TAIL)
    assert table.strip_text("gw1", [text]) == [text]
    assert table.strip_text("gw1", [normalize("明天下午三点开会" + TAIL)]) == [normalize("明天下午三点开会")]
    assert table.strip_text("other", [text]) == [text]
    # a clause cut at its place, not where its text first occurs (inside the template clause here)
    tail = TemplateTable({"s": frozenset(_hashes({normalize("好的请回复")}))}, 5)
    assert tail.strip_text("s", [normalize("好的请回复，请回复，周五开会")]) == [normalize("请回复，周五开会")]
    doc = make_doc("a", 1, "text", "明天下午三点开会" + TAIL, source="gw1", template=table)
    assert doc.text == normalize("明天下午三点开会")


def test_the_learner_counts_a_cluster_once_and_keeps_its_bound():
    learner = TemplateLearner(min_docs=3, max_per_source=1, max_units=50)
    for i in range(3):
        learner.add("s", {"页脚一行文字", f"正文第{i}段"})
        learner.add("s", {"另一行页脚文字"})
    for i in range(200):  # many units seen once: the counters drop them, the template stays
        learner.add("t", {f"只出现一次的第{i}行"})
    table = learner.table()
    assert set(table.sources) == {"s"} and len(table.units_of("s")) == 1  # the bound per source
    assert len(learner.counts) <= 50 + 1


def test_source_is_the_event_source_else_the_url_host():
    assert source_of("gw1", "https://news.163.com/a") == "gw1"
    assert source_of(None, "https://www.163.com/a/b.html") == "163.com"
    assert source_of(None, None) == ""


def test_a_table_round_trips_and_a_bad_file_is_refused(tmp_path):
    t = TemplateTable({"163.com": frozenset({1, 2**64 - 1}), "": frozenset({7})}, 4, 10)
    t.save(tmp_path / "t.json")
    back = TemplateTable.load(tmp_path / "t.json")
    assert (back.sources, back.min_docs, back.docs) == (t.sources, 4, 10)
    (tmp_path / "bad.json").write_text('{"format": "other"}', encoding="utf-8")
    with pytest.raises(ValueError, match="not a template table"):
        TemplateTable.load(tmp_path / "bad.json")


def page(name: str) -> str:
    return shared_data(f"html_dev/{name}.html").read_text(encoding="utf-8", errors="replace")


def html_events(names: list[str]) -> list[dict]:
    return [{"id": n, "html": page(n), "ts": i, "url": f"https://www.{n.split('_')[0]}.com/{n}.html"}
            for i, n in enumerate(names)]


NETEASE = [f"163_{i}" for i in range(1, 21)]


@pytest.fixture(scope="module")
def netease_table(tmp_path_factory) -> TemplateTable:
    sample = tmp_path_factory.mktemp("netease") / "sample.jsonl"
    sample.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in html_events(NETEASE)), encoding="utf-8")
    return build_template(Settings(), str(sample), min_docs=3)


def test_a_portals_comment_disclaimer_is_learned_from_its_pages(netease_table):
    """NetEase's pages carry a comment disclaimer under every article; learned from 20 real pages,
    it is left out of each page's text, and the article stays."""
    disclaimer = normalize("网友评论仅供其表达个人看法，并不表明网易立场。")
    assert netease_table.contains("163.com", disclaimer)
    doc = make_doc("163_4", 1, "html", page("163_4"), source="163.com", template=netease_table)
    plain = make_doc("163_4", 1, "html", page("163_4"))
    assert disclaimer in plain.text and disclaimer not in doc.text
    assert len(doc.text) > 0.9 * len(plain.text) and doc.note is None


def boilerplate_only(name: str) -> str:
    """A real page whose article is replaced by its portal's boilerplate: what an extraction that
    missed the body kept (the issue's NetEase pages: title, comment disclaimer, headers)."""
    import lxml.html

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from html_variants import article_container, raw_blocks

    root = lxml.html.document_fromstring(page(name))
    box = article_container(root, [" ".join(t.split()) for _, t in raw_blocks(page(name))])
    assert box is not None
    for child in list(box):
        box.remove(child)
    box.text = None
    for line in ("网友评论仅供其表达个人看法，并不表明网易立场。", "跟贴热词：",
                 "网友评论仅供其表达个人看法，并不表明网易立场。"):
        p = lxml.html.Element("p")
        p.text = line
        box.append(p)
    return lxml.html.tostring(root, encoding="unicode")


def test_two_articles_that_extract_to_boilerplate_are_never_copies(netease_table, tmp_path):
    events = [{"id": n, "html": boilerplate_only(n), "ts": i, "url": f"https://www.163.com/{n}.html"}
              for i, n in enumerate(["163_5", "163_6", "163_7"])]
    assert duplicates(Settings(), events)  # without the table their boilerplate matches
    with Engine(with_template(netease_table, tmp_path)) as engine:
        for e in events:
            engine.process(e)
        got = {v.id: v.to_dict() for v in engine.verdicts()}
    assert all(v["verdict"] == "unique" for v in got.values()), got
    # what is left of a page is its own (a title, an author's note), or nothing: then it says so
    assert [v.get("note") for v in got.values()].count(TEMPLATE_ONLY) >= 2, got


def test_the_portals_own_pages_and_a_repost_keep_their_verdicts(netease_table, tmp_path):
    events = html_events(NETEASE) + [{"id": "repost", "html": page("163_4"), "ts": 99, "url": "https://www.163.com/x"}]
    assert duplicates(with_template(netease_table, tmp_path), events) == duplicates(Settings(), events)


def _hashes(units):
    from stream_dedup.core.template import unit_hash

    return {unit_hash(u) for u in units}


def test_the_command_builds_a_table_that_scan_then_uses(tmp_path):
    from click.testing import CliRunner

    from stream_dedup.cli import main

    events = sms_sample(400, seed=5)
    sample = tmp_path / "sample.jsonl"
    sample.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
    out = tmp_path / "t.json"
    r = CliRunner().invoke(main, ["template", "build", str(sample), "-o", str(out), "--min-docs", "4"])
    assert r.exit_code == 0, r.output
    assert "template units of 1 sources" in r.output and TemplateTable.load(out).contains("gw1", normalize("详询客服"))
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f'[text]\ntemplate = "{out}"\n', encoding="utf-8")
    r = CliRunner().invoke(main, ["--config", str(cfg), "scan", str(sample), "--out", str(tmp_path / "v.jsonl")])
    assert r.exit_code == 0, r.output
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[text]\ntemplate = "{sample}"\n', encoding="utf-8")
    r = CliRunner().invoke(main, ["--config", str(bad), "scan", str(sample), "--out", str(tmp_path / "w.jsonl")])
    assert r.exit_code == 2 and "text.template" in r.output and "not a template table" in r.output


def test_grams_common_on_the_stream_are_short_text_keys_only_as_a_last_resort(tmp_path):
    """The table also holds the short-text grams that the originals of many clusters carry (here the
    signature's): the ngram detector keys a message by its other grams, whatever its source."""
    from stream_dedup.core.detectors.ngram import DEMOTED
    from stream_dedup.core.hashing import shingle_hashes_list
    from stream_dedup.core.stages import Preparer

    events = sms_sample(1200)
    sample = tmp_path / "sample.jsonl"
    sample.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
    table = build_template(Settings(), str(sample), min_docs=5)
    tail = normalize("本短信由云信通平台代发详询客服")
    tail_grams = set(shingle_hashes_list(tail, 4, DEMOTED - 1))
    assert table.gram_m == 4 and tail_grams <= table.grams and len(table.grams) < 200
    text = "明天下午三点在三楼会议室开会" + TAIL  # from a source without a learned signature
    plain, learned = Preparer(Settings()), Preparer(with_template(table, tmp_path))
    keys = {p: set(det.keys(p.document({"id": "x", "ts": 1, "text": text, "source": "gw9"})))
            for p in (plain, learned) for det in p.detectors if det.name == "ngram"}
    assert keys[plain] & tail_grams and not keys[learned] & tail_grams
    assert TemplateTable.load(tmp_path / "template.json").grams == table.grams
