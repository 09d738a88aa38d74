"""HTML main content, the structure detector and I-Match on real Chinese text (the project's sample)."""
import json
import sys
from pathlib import Path

import mmh3
import numpy as np
import pytest

from stream_dedup.config import Settings
from stream_dedup.core.detectors.imatch import ImatchDetector
from stream_dedup.core.detectors.structure import (Level, StructureDetector, bloom, feature_strings, found_in,
                                                   level_similarity, tree_depths)
from stream_dedup.core.document import Rejected
from stream_dedup.core.engine import Engine
from stream_dedup.core.html import extract_blocks
from stream_dedup.core.paragraphs import BODY, COLOUR, EMPHASIS, FONT_SIZE, heading
from stream_dedup.core.stages import Preparer

from ..conftest import shared_data

REPO = Path(__file__).resolve().parents[2]
SAMPLE = {e["id"]: e for e in map(json.loads, (REPO / "examples" / "sample.jsonl").read_text("utf-8").splitlines())}
ARTICLE_X = [SAMPLE[f"news-{i}"]["text"] for i in (0, 1, 2)]
ARTICLE_Y = [SAMPLE[f"news-{i}"]["text"] for i in (3, 4, 5)]
NAV = "".join(f"<li><a href='/c{i}'>频道{i} 热点新闻排行榜第{i}名，点击查看更多精彩内容。</a></li>" for i in range(30))


def page(template: str, title: str, paragraphs: list[str], sub: str = "记者观察：各方积极回应。") -> str:
    body = f"<h1>{title}</h1><p><strong>{sub}</strong></p>" + "".join(f"<p>{p}</p>" for p in paragraphs)
    if template == "a":
        return (f"<html><head><title>A网</title><script>var x = 1;</script></head><body><div class='nav'><ul>{NAV}"
                f"</ul></div><div id='main'><article>{body}</article></div><div class='related'><h3>相关阅读</h3>"
                f"<ul>{NAV}</ul></div><footer>版权所有 A网 京ICP备000001号</footer></body></html>")
    return (f"<html><body><header><a href='/'>B报首页</a> | <a href='/s'>社会</a></header><table><tr><td>"
            f"<div class='content'>{body}</div></td><td><ul>{NAV[::-1][:2000][::-1]}</ul></td></tr></table>"
            f"<div id='foot'>B报 版权声明：未经授权禁止转载。</div></body></html>")


@pytest.fixture(scope="module")
def prep():
    return Preparer(Settings())


def structure(prep) -> StructureDetector:
    return next(d for d in prep.detectors if d.name == "structure")


def test_main_content_drops_navigation_and_keeps_levels():
    blocks = extract_blocks(page("a", "防汛工作安排", ARTICLE_X))
    text = "".join(t for _, t in blocks)
    assert "频道" not in text and "版权所有" not in text and "var x" not in text
    assert blocks[0] == (heading(1), "防汛工作安排")
    assert (EMPHASIS, "记者观察：各方积极回应。") in blocks
    assert [t for lvl, t in blocks if lvl == BODY] == ARTICLE_X


def test_line_breaks_split_blocks_and_bombs_are_rejected():
    blocks = extract_blocks("<html><body><article><p>" + "<br>".join(ARTICLE_Y) + "</p></article></body></html>")
    assert [t for _, t in blocks] == ARTICLE_Y
    with pytest.raises(Rejected) as e:
        extract_blocks("<div>" * 2000 + "x" + "</div>" * 2000)  # default limit 200
    assert e.value.reason == "html_too_deep"


def test_feature_strings_and_the_per_string_bloom_test():
    assert feature_strings("今天,天气很好.我们去公园吧?") == ["今天,", "天好.", "我吧?"]
    fs = np.array([mmh3.hash64(f"{chr(0x4e00 + i)}{chr(0x4e80 + i)}.", signed=False)[0] for i in range(200)],
                  dtype=np.uint64)
    other = np.array([mmh3.hash64(f"{chr(0x5000 + i)}{chr(0x5100 + i)}.", signed=False)[0] for i in range(200)],
                     dtype=np.uint64)
    a = Level(bloom(fs), fs)
    assert found_in(fs, a.bits) == 200  # no false negatives
    assert found_in(other, a.bits) <= 2  # 16 bits a string, k = 4: about 0.2% false positives
    b = Level(bloom(np.concatenate([fs[:180], other[:20]])), np.concatenate([fs[:180], other[:20]]))
    assert level_similarity(a, a) == 1.0
    assert level_similarity(a, b) == pytest.approx(2 * 180 / 400, abs=0.01)
    small = Level(bloom(fs[:100]), fs[:100])  # filters of other sizes: each string tested in the other's
    assert level_similarity(a, small) == pytest.approx(2 * 100 / 300, abs=0.01)
    assert level_similarity(a, b) == level_similarity(b, a)


def test_structure_tree_rules():
    """Same weight: sibling; lower: child; higher: compare with the parent, up to the title."""
    h2, bold, body, num1, num2 = heading(2), EMPHASIS, BODY, 2, 3  # 一、 and （一）
    assert tree_depths([body, body, body]) == [1, 1, 1]
    assert tree_depths([h2, body, body, h2, body]) == [1, 2, 2, 1, 2]
    assert tree_depths([h2, bold, body, bold, body, h2]) == [1, 2, 3, 2, 3, 1]
    assert tree_depths([num1, num2, body, num2, body, num1, body]) == [1, 2, 3, 2, 3, 1, 2]
    assert tree_depths([body, h2, body]) == [1, 1, 2]  # the first block is the title's first child


def test_numbered_sub_headings_and_fonts_give_classes():
    html = ("<html><body><article><h2>总体要求</h2>"
            "<p>一、坚持稳中求进，推动高质量发展，各地各部门要认真落实。</p>"
            "<p>（一）加强组织领导，压实各方责任，确保各项措施落地见效。</p>"
            "<p>1．建立工作台账，明确时间节点，定期调度工作进展情况。</p>"
            "<p>（1）每月报送一次进展，遇到重大问题及时报告，不得拖延。</p>"
            '<p><span style="font-size: 22px">防汛工作进入关键时期</span></p>'
            '<p><font color="red">请各单位高度重视，立即部署落实。</font></p>'
            + "".join(f'<p style="font-size:16px">{t}</p>' for t in ARTICLE_X) +
            "</article></body></html>")
    classes = dict((t, lvl) for lvl, t in extract_blocks(html))
    assert classes["总体要求"] == heading(2)
    assert [classes[t] for t in classes if t[0] in "一（1"] == [2, 3, 4, 5]
    assert classes["防汛工作进入关键时期"] == FONT_SIZE
    assert classes["请各单位高度重视，立即部署落实。"] == COLOUR
    assert all(classes[t] == BODY for t in ARTICLE_X)  # every paragraph in the usual size: none set apart


def test_real_pages_numbered_sub_headings_and_font_sizes():
    """chinacomcn_1 numbers its measures 一、 二、 …; jlgov_1 sets its notice's title in a larger font."""
    china = extract_blocks(shared_data("html_dev/chinacomcn_1.html").read_text("utf-8", errors="replace"))
    numbered = [t for lvl, t in china if lvl == 2]
    assert len(numbered) >= 4 and numbered[0].startswith("一、") and numbered[1].startswith("二、")
    gov = extract_blocks(shared_data("html_dev/jlgov_1.html").read_text("utf-8", errors="replace"))
    assert any(lvl == FONT_SIZE for lvl, _ in gov)
    assert any(lvl == BODY for lvl, _ in gov)


def test_structure_same_article_other_template_is_duplicate_different_article_same_template_is_not(prep):
    det = structure(prep)
    x_a = prep.document({"id": "xa", "html": page("a", "防汛", ARTICLE_X), "ts": 1})
    x_b = prep.document({"id": "xb", "html": page("b", "防汛工作", ARTICLE_X), "ts": 2})
    y_a = prep.document({"id": "ya", "html": page("a", "寒潮", ARTICLE_Y), "ts": 3})
    sx, sxb, sy = det.sketch(x_a), det.sketch(x_b), det.sketch(y_a)
    assert set(sx.keys) & set(sxb.keys)
    assert det.verify(sx.payload, sxb.payload) is not None
    assert det.verify(sx.payload, sy.payload) is None
    # a level missing on one side (the bold sub-heading dropped) makes the share of similar levels 1/2
    x_plain = prep.document({"id": "xp", "html": page("b", "防汛", ARTICLE_X, sub=""), "ts": 4})
    assert det.verify(sx.payload, det.sketch(x_plain).payload) is None


def test_engine_with_html_events(prep):
    with Engine(Settings()) as e:
        e.process({"id": "x-on-a", "html": page("a", "防汛", ARTICLE_X), "ts": 1})
        e.process({"id": "y-on-a", "html": page("a", "寒潮", ARTICLE_Y), "ts": 2})
        e.process({"id": "x-on-b", "html": page("b", "防汛", ARTICLE_X), "ts": 3})
        v = {x.id: x for x in e.verdicts()}
    assert v["y-on-a"].verdict == "unique"
    assert v["x-on-b"].verdict == "duplicate" and v["x-on-b"].duplicate_of == "x-on-a"


def imatch(prep, **kw) -> ImatchDetector:
    return ImatchDetector(prep.tokenizer, prep.idf, **kw)


def test_imatch_is_order_and_punctuation_blind_and_guards_short_docs(prep):
    det = imatch(prep, min_words=5)
    a = prep.document({"id": "a", "text": "".join(ARTICLE_X), "ts": 1})
    shuffled = prep.document({"id": "b", "text": "；".join(reversed(ARTICLE_X)), "ts": 2})
    other = prep.document({"id": "c", "text": "".join(ARTICLE_Y), "ts": 3})
    assert det.signatures(a) == det.signatures(shuffled)
    assert det.verify(det.sketch(a).payload, det.sketch(shuffled).payload).similarity == 1.0
    assert det.verify(det.sketch(a).payload, det.sketch(other).payload) is None
    assert imatch(prep, min_words=10_000).sketch(a) is None  # too few lexicon words: no signature at all


def test_randomized_lexicons_survive_a_one_word_edit(prep):
    """Kolcz et al.: one changed lexicon word breaks the main signature but not every extra lexicon's."""
    det = imatch(prep, lexicons=10, drop=0.3, min_words=5)
    a = prep.document({"id": "a", "text": "".join(ARTICLE_X), "ts": 1})
    words = det.filtered(a)
    survived = 0
    for w in words[:20]:
        edited = prep.document({"id": "e", "text": a.text.replace(w, "", 1), "ts": 2})
        if set(det.filtered(edited)) == set(words):
            continue  # the word occurs twice: the set did not change
        sa, se = det.signatures(a), det.signatures(edited)
        assert sa[0] != se[0]
        survived += det.verify(det.sketch(a).payload, det.sketch(edited).payload) is not None
    assert survived >= 10


def test_real_pages_other_templates_found_same_site_never_confused():
    folder = shared_data("news/html")
    sys.path.insert(0, str(REPO / "bench"))
    from html_variants import build_events, site

    events, group = build_events(folder, per_page=2)
    with Engine(Settings()) as e:
        for ev in events:
            e.process(ev)
        verdicts = {v.id: v for v in e.verdicts()}
    first = {}
    for ev in events:
        first.setdefault(group[ev["id"]], ev["id"])
    copies = [i for i in group if first[group[i]] != i]
    found = [i for i in copies if verdicts[i].verdict == "duplicate" and group[verdicts[i].duplicate_of] == group[i]]
    wrong = [i for i, v in verdicts.items() if v.verdict == "duplicate" and group[v.duplicate_of] != group[i]]
    assert len(found) >= 0.9 * len(copies), sorted(set(copies) - set(found))
    assert not wrong, [(i, verdicts[i].duplicate_of) for i in wrong]
    same_site = [i for i in verdicts if "@" not in i and site(i) in {"sina", "thepaper", "toutiao"}]
    assert len(same_site) >= 12  # the template trap is actually in the data


def test_default_config_picks_detectors_by_kind_and_length_on_a_mixed_stream(prep):
    long_text = "".join(ARTICLE_Y) * 2
    sms = SAMPLE["sms-1"]["text"]
    stream = [
        {"id": "news", "text": long_text, "ts": 1},
        {"id": "sms", "text": sms, "ts": 2},
        {"id": "html", "html": page("a", "防汛", ARTICLE_X), "ts": 3},
        {"id": "news-copy", "text": "来源：本报综合。" + long_text, "ts": 4},
        {"id": "sms-copy", "text": SAMPLE["sms-1-noise"]["text"], "ts": 5},
        {"id": "html-copy", "html": page("b", "防汛", ARTICLE_X), "ts": 6},
    ]
    used = {ev["id"]: {d.name for d in prep.detectors if d.applies(prep.document(ev))} for ev in stream}
    assert used["sms"] == {"ngram"}
    assert {"simhash", "minhash"} <= used["news"] and "ngram" not in used["news"] and "structure" not in used["news"]
    assert "structure" in used["html"]
    with Engine(Settings()) as e:
        for ev in stream:
            e.process(ev)
        v = {x.id: x for x in e.verdicts()}
    assert [v[i].verdict for i in ("news", "sms", "html")] == ["unique"] * 3
    assert (v["sms-copy"].duplicate_of, v["sms-copy"].detector) == ("sms", "ngram")
    assert v["news-copy"].duplicate_of == "news" and v["news-copy"].detector in ("simhash", "minhash")
    assert v["html-copy"].duplicate_of == "html"


def test_every_detectors_verify_answers_the_same_both_ways():
    """``BucketIndex.covered`` spares a late copy's offer to a later copy that matches the late
    copy's earliest match, on the grounds that whichever of that pair was indexed second verified
    it: so ``verify(a, b)`` must answer as ``verify(b, a)`` does, for every detector, on real
    Chinese text, near copies (a character dropped, a particle added, punctuation changed) and HTML
    pages in two templates."""
    from stream_dedup.config import EngineSettings
    from stream_dedup.core.detectors import NAMES

    prep_all = Preparer(Settings(engine=EngineSettings(detectors=list(NAMES))))
    texts = [e["text"] for e in SAMPLE.values()]
    variants = [t[:len(t) // 3] + t[len(t) // 3 + 1:] for t in texts] + [t.replace("，", "的，", 2) for t in texts]
    variants += [t.replace("。", "！") for t in texts]
    docs = [prep_all.document({"id": f"t{i}", "text": t, "ts": i}) for i, t in enumerate(texts + variants)]
    docs += [prep_all.document({"id": f"h{i}", "html": page(tpl, title, art), "ts": i})
             for i, (tpl, title, art) in enumerate([("a", "防汛", ARTICLE_X), ("b", "防汛工作", ARTICLE_X),
                                                     ("a", "寒潮", ARTICLE_Y), ("b", "寒潮来袭", ARTICLE_Y[:2])])]
    matched = {}
    for det in prep_all.detectors:
        payloads = [s.payload for d in docs if det.applies(d) and (s := det.sketch(d)) is not None and s.keys]
        matched[det.name] = 0
        for i, a in enumerate(payloads):
            for b in payloads[i + 1:]:
                ab, ba = det.verify(a, b), det.verify(b, a)
                assert (ab is None) == (ba is None), det.name
                if ab is not None:
                    matched[det.name] += 1
                    assert (ab.similarity, ab.distance) == pytest.approx((ba.similarity, ba.distance)), det.name
    assert set(matched) == set(NAMES) and all(n >= 1 for n in matched.values()), matched


def test_a_small_level_that_extraction_let_through_does_not_split_a_page_from_its_copy(prep):
    """A related-links heading and a line under it inside the article's box add a level of two
    strings on one page only: not counted (``MIN_LEVEL_SHARE``), so the copy is still found."""
    det = structure(prep)
    leak = "<h3>相关阅读</h3><p>热点，推荐。</p>"
    plain = prep.document({"id": "x", "html": page("a", "防汛", ARTICLE_X + ARTICLE_Y, sub=""), "ts": 1})
    leaked = prep.document({"id": "y", "html": page("b", "防汛", ARTICLE_X + ARTICLE_Y, sub="").replace(
        "</div></td>", leak + "</div></td>"), "ts": 2})
    assert len(det.levels(leaked)) == len(det.levels(plain)) + 1
    assert det.verify(det.sketch(plain).payload, det.sketch(leaked).payload) is not None


def test_a_level_of_more_than_65535_strings_is_sketched():
    """A very long page's level can hold more distinct strings than two bytes count."""
    import itertools

    from stream_dedup.core.document import Doc

    chars = [chr(0x4e00 + i) for i in range(300)]
    text = ",".join(a + "x" + b for a, b in itertools.islice(itertools.product(chars, chars), 70_000)) + "."
    det = StructureDetector()
    s = det.sketch(Doc("a", 1, text, b"0" * 16, "html", None, None, [(BODY, text)]))
    assert s is not None and det.verify(s.payload, s.payload) is not None
