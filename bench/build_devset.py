"""Build the labelled development benchmark from ../shared/data (written to bench/work/devset/).

    python bench/build_devset.py [--shared ../shared/data] [--out bench/work/devset] [--seed 7]

None of the source sets labels near-duplicates, so the ground truth is made here:

news.jsonl (+ news_labels.jsonl): long texts.
  * originals: THUCNews articles (1,000) and Sogou articles (330, whose 33 natural exact
    duplicates are kept and labelled exact). Originals that already overlap an earlier one
    (more than 15% shared character 8-grams) are dropped, so unlabelled natural near-duplicates
    cannot count as false positives.
  * derived near-duplicates of 45% of the THUCNews originals, one edit each, at these rates:
      source  25%  a source/editor line added at the top or bottom ("来源：… 责任编辑：…")
      drop    20%  one sentence (not the first) dropped
      insert  15%  one boilerplate sentence inserted (a follow-us/notice line)
      style   15%  punctuation to half-width, 40% of characters to traditional (OpenCC s2t), spaces
      chars   15%  three characters replaced by random common characters
      combo   10%  two of the above
  * exact reposts: 5% of the originals again under a new id.
  * hard negatives (must stay unique): both texts of 500 SOHU short-news pairs (same topic or
    not) whose texts share at most 15% of their 8-grams (the set also holds reposts of one
    article, which are duplicates, not negatives).
pairs.jsonl (+ pairs_labels.jsonl): both questions of 1,000 LCQMC paraphrase pairs (label 1),
  each pair its own two clusters, except questions whose normalized text repeats (natural exact
  duplicates, labelled). The labels carry each pair's character-bigram Jaccard, so a report can
  split "reworded" pairs (< 0.5) from near-identical ones.
sms.jsonl (+ sms_labels.jsonl): short texts.
  * 2,500 spam originals and 6,000 ham messages (natural exact duplicates kept and labelled);
    the source masks digits as x: the masks are filled with random digits, as real messages have;
  * 2 campaign variants of 40% of the spam originals: noise characters (. * space) inserted
    between 20% of the characters, digits and masked numbers changed, a link or reply code
    appended or changed, and look-alike digits (0/o, 1/l).
Every document gets an event time: the whole set is shuffled, then ts = position * 1000, so
variants arrive before their originals about half of the time (late matches are exercised).
"""
from __future__ import annotations

import argparse
import json
import random
import re
from collections import defaultdict
from pathlib import Path

import opencc

REPO = Path(__file__).resolve().parent.parent
COMMON = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理府研质"
SOURCES = ["来源：新华网", "来源：人民网", "来源：中国新闻网", "来源：新浪财经", "来源：央视新闻客户端", "本文来源：澎湃新闻"]
EDITORS = ["责任编辑：张伟", "责任编辑：王芳", "编辑：李娜", "(编辑 刘洋)", "[责任编辑：陈静]"]
BOILER = ["关注我们的公众号，获取更多精彩资讯。", "本文仅代表作者观点，不代表本站立场。", "如需转载请注明出处。",
          "欢迎读者朋友提供新闻线索。", "更多内容请下载客户端阅读。"]
_SENT = re.compile(r"[^。！？]+[。！？]?")


def read(path: Path):
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def grams(text: str, n: int = 8) -> set[str]:
    t = re.sub(r"\s+", "", text)
    return {t[i:i + n] for i in range(max(1, len(t) - n + 1))}


def bigrams(text: str) -> set[str]:
    return {text[i:i + 2] for i in range(max(1, len(text) - 1))}


def fill_masks(text: str, rng: random.Random) -> str:
    """The SMS source masks digits as runs of x: fill them with random digits."""
    return re.sub(r"x{2,}|(?<![a-wyz])x(?![a-wyz])", lambda m: "".join(rng.choice("0123456789") for _ in m.group(0)), text)


def drop_overlapping(docs: list[dict], share: float = 0.15) -> list[dict]:
    """Keep docs (in order) that share at most `share` of their 8-grams with any kept doc."""
    owner: dict[str, int] = {}
    kept = []
    for d in docs:
        g = grams(d["text"])
        hits: dict[int, int] = defaultdict(int)
        for x in g:
            if x in owner:
                hits[owner[x]] += 1
        if hits and max(hits.values()) > share * len(g):
            continue
        idx = len(kept)
        kept.append(d)
        for x in g:
            owner.setdefault(x, idx)
    return kept


class Editor:
    def __init__(self, rng: random.Random):
        self.rng = rng
        self.s2t = opencc.OpenCC("s2t")

    def source(self, t: str) -> str:
        line = f"{self.rng.choice(SOURCES)} {self.rng.choice(EDITORS)}"
        return f"{line}\n{t}" if self.rng.random() < 0.5 else f"{t}\n{line}"

    def drop(self, t: str) -> str:
        s = _SENT.findall(t)
        if len(s) < 3:
            return self.chars(t)
        del s[self.rng.randrange(1, len(s))]
        return "".join(s)

    def insert(self, t: str) -> str:
        s = _SENT.findall(t)
        s.insert(self.rng.randrange(1, len(s) + 1), self.rng.choice(BOILER))
        return "".join(s)

    def style(self, t: str) -> str:
        t = t.translate(str.maketrans("，。！？：；（）", ",.!?:;()"))
        out = []
        for ch in t:
            out.append(self.s2t.convert(ch) if self.rng.random() < 0.4 else ch)
        s = "".join(out)
        pos = sorted(self.rng.sample(range(len(s)), min(5, len(s))))
        for p in reversed(pos):
            s = s[:p] + " " + s[p:]
        return s

    def chars(self, t: str) -> str:
        s = list(t)
        for p in self.rng.sample(range(len(s)), min(3, len(s))):
            s[p] = self.rng.choice(COMMON)
        return "".join(s)

    def apply(self, t: str) -> tuple[str, str]:
        r = self.rng.random()
        ops = [("source", .25), ("drop", .20), ("insert", .15), ("style", .15), ("chars", .15)]
        acc = 0.0
        for name, p in ops:
            acc += p
            if r < acc:
                return getattr(self, name)(t), name
        a, b = self.rng.sample([o for o, _ in ops], 2)
        return getattr(self, b)(getattr(self, a)(t)), f"{a}+{b}"

    def spam_variant(self, t: str) -> str:
        s = re.sub(r"\d", lambda m: self.rng.choice("0123456789") if self.rng.random() < 0.5 else m.group(0), t)
        out = []
        for ch in s:
            out.append(ch)
            if not ch.isspace() and self.rng.random() < 0.2:
                out.append(self.rng.choice([".", "*", " ", "·"]))
        s = "".join(out).replace("0", "o", 1).replace("1", "l", 1)
        tail = self.rng.choice(["", " 回T退订", f" t.cn/{self.rng.randrange(10**5, 10**6)}", " 详情见官网"])
        return s + tail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "work" / "devset")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    ed = Editor(rng)
    a.out.mkdir(parents=True, exist_ok=True)

    def write(name: str, docs: list[dict]) -> None:
        rng.shuffle(docs)
        with (a.out / f"{name}.jsonl").open("w", encoding="utf-8") as f, \
             (a.out / f"{name}_labels.jsonl").open("w", encoding="utf-8") as g:
            for i, d in enumerate(docs):
                f.write(json.dumps({"id": d["id"], "text": d["text"], "ts": (i + 1) * 1000}, ensure_ascii=False) + "\n")
                g.write(json.dumps({"id": d["id"], "cluster": d["cluster"], "kind": d.get("kind", "original"),
                                    "edit": d.get("edit"), "pair": d.get("pair"), "jaccard": d.get("jaccard")},
                                   ensure_ascii=False) + "\n")
        print(f"{name}: {len(docs)} docs -> {a.out / (name + '.jsonl')}")

    # ---- news
    thuc = [{"id": f"thuc-{r['id']}", "text": r["text"]} for r in read(a.shared / "news/thucnews_1000.jsonl")]
    sogou_all = list(read(a.shared / "news/sogou_smarty.jsonl"))
    first_of: dict[str, str] = {}
    sogou, sogou_dups = [], []
    for i, r in enumerate(sogou_all):
        text = r["text"]
        if text in first_of:
            sogou_dups.append({"id": f"sogou-{i}", "text": text, "cluster": first_of[text], "kind": "exact", "edit": "natural"})
        else:
            first_of[text] = f"c-sogou-{i}"
            sogou.append({"id": f"sogou-{i}", "text": text})
    originals = drop_overlapping(thuc + sogou)
    orig_ids = {d["id"] for d in originals}
    sogou_dups = [d for d in sogou_dups if d["cluster"][2:] in orig_ids]
    news: list[dict] = []
    for d in originals:
        news.append({**d, "cluster": f"c-{d['id']}"})
    for d in [d for d in originals if d["id"].startswith("thuc-")]:
        if rng.random() < 0.45:
            text, edit = ed.apply(d["text"])
            news.append({"id": f"{d['id']}-v", "text": text, "cluster": f"c-{d['id']}", "kind": "near", "edit": edit})
        if rng.random() < 0.05:
            news.append({"id": f"{d['id']}-copy", "text": d["text"], "cluster": f"c-{d['id']}", "kind": "exact",
                         "edit": "repost"})
    news += sogou_dups
    sohu = list(read(a.shared / "pairs/SOHU_A_ss_valid.jsonl"))
    rng.shuffle(sohu)
    sohu = [r for r in sohu if len(drop_overlapping([{"text": r["text1"]}, {"text": r["text2"]}])) == 2]
    for i, r in enumerate(sohu[:500]):
        for j in (1, 2):
            news.append({"id": f"sohu-{i}-{j}", "text": r[f"text{j}"], "cluster": f"c-sohu-{i}-{j}",
                         "edit": f"hard-negative(label={r['label']})"})
    write("news", news)

    # ---- paraphrase hard negatives (short)
    lcq = [r for r in read(a.shared / "pairs/LCQMC_dev.jsonl") if r["label"] == 1]
    rng.shuffle(lcq)
    pairs = []
    from stream_dedup.core.text import normalize

    first_q: dict[str, str] = {}
    for i, r in enumerate(lcq[:1000]):
        b1, b2 = (bigrams(normalize(r["text1"])), bigrams(normalize(r["text2"])))
        jac = round(len(b1 & b2) / max(1, len(b1 | b2)), 3)
        for j in (1, 2):
            ident, norm = f"lcqmc-{i}-{j}", normalize(r[f"text{j}"])
            if norm in first_q:
                pairs.append({"id": ident, "text": r[f"text{j}"], "cluster": first_q[norm], "kind": "exact",
                              "edit": "natural"})
            else:
                first_q[norm] = f"c-{ident}"
                pairs.append({"id": ident, "text": r[f"text{j}"], "cluster": f"c-{ident}",
                              "edit": f"paraphrase(bigram_jaccard={jac})", "pair": f"lcqmc-{i}", "jaccard": jac})
    write("pairs", pairs)

    # ---- sms
    rows = list(read(a.shared / "sms/sms_spam_zh.jsonl"))
    spam_rows = [r for r in rows if r["label"] == 1]
    ham_rows = [r for r in rows if r["label"] == 0]
    rng.shuffle(spam_rows)
    rng.shuffle(ham_rows)
    sms: list[dict] = []
    seen_text: dict[str, str] = {}

    def add_natural(r: dict, prefix: str, out: list[dict]) -> None:
        ident = f"{prefix}-{r['id']}"
        if r["text"] in seen_text:
            out.append({"id": ident, "text": r["text"], "cluster": seen_text[r["text"]], "kind": "exact",
                        "edit": "natural"})
        else:
            seen_text[r["text"]] = f"c-{ident}"
            out.append({"id": ident, "text": r["text"], "cluster": f"c-{ident}"})

    for r in spam_rows[:4000] + ham_rows[:9000]:
        r["text"] = fill_masks(r["text"], rng)
    pool = [{"id": f"spam-{r['id']}", "text": r["text"], "src": r} for r in spam_rows[:4000]]
    pool += [{"id": f"ham-{r['id']}", "text": r["text"], "src": r} for r in ham_rows[:9000]]
    uniq = drop_overlapping([d for d in pool if len(d["text"]) >= 4], share=0.5)
    spam_orig = [d for d in uniq if d["id"].startswith("spam-")][:2500]
    ham_orig = [d for d in uniq if d["id"].startswith("ham-")][:6000]
    for d in spam_orig + ham_orig:
        add_natural(d["src"], d["id"].split("-")[0], sms)
    for d in spam_orig:
        if rng.random() < 0.4:
            for j in (1, 2):
                sms.append({"id": f"{d['id']}-v{j}", "text": ed.spam_variant(d["text"]), "cluster": f"c-{d['id']}",
                            "kind": "near", "edit": "campaign"})
    write("sms", sms)


if __name__ == "__main__":
    main()
