"""The Python API: the README's example runs as written, and the API agrees with scan."""
import json
import re
from pathlib import Path

import pytest

from stream_dedup import Deduper
from stream_dedup.core.document import Rejected

REPO = Path(__file__).resolve().parents[2]


def test_readme_python_api_example_runs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Python API"):readme.index("## Contracts")]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "README.md#python-api", "exec"), {})


def test_api_matches_scan_on_the_sample_and_rejects_bad_events(tmp_path):
    from stream_dedup.config import load_settings
    from stream_dedup.scan import run_scan

    sample = REPO / "examples" / "sample.jsonl"
    run_scan(load_settings(environ={}), str(sample), str(tmp_path / "v.jsonl"), quiet=True)
    scanned = {v["id"]: (v["verdict"], v["duplicate_of"]) for v in map(json.loads, open(tmp_path / "v.jsonl"))}
    with Deduper() as d:
        for line in sample.read_text(encoding="utf-8").splitlines():
            d.check(line)
        assert {i: (d.verdict(i).verdict, d.verdict(i).duplicate_of) for i in scanned} == scanned
        with pytest.raises(Rejected) as e:
            d.check(b"{broken")
        assert e.value.reason == "not_json"


def test_scan_with_several_preparing_processes_gives_the_same_verdicts_and_rejections(tmp_path):
    """``scan --jobs``: documents are prepared in other processes and judged here in input order."""
    import io
    import pickle

    from stream_dedup.config import load_settings
    from stream_dedup.scan import CHUNK_LINES, run_scan

    lines = (REPO / "examples" / "sample.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    extra = ["{broken", json.dumps({"id": first["id"], "text": "同一个编号，不同的内容：应被拒绝。", "ts": 5}),
             json.dumps({"id": "tw", "text": "新浪體育訊　北京時間４月１２日，湖人隊擊敗國王。", "ts": 9}),
             json.dumps({"id": "cn", "text": "新浪体育讯北京时间4月12日,湖人队击败国王.", "ts": 10})]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines[:12] + extra[:2] + lines[12:] * 25 + extra[2:]) + "\n", encoding="utf-8")
    assert len(src.read_text(encoding="utf-8").splitlines()) > 2 * CHUNK_LINES  # every process gets a chunk
    runs = {}
    for jobs in (0, 1, 2, 3):  # 0: all in this process; 3: a chain of forks (each process forks the next)
        bad = io.StringIO()
        summary = run_scan(load_settings(environ={}), str(src), str(tmp_path / f"v{jobs}.jsonl"), jobs=jobs,
                           report_bad=bad, clusters_path=str(tmp_path / f"c{jobs}.jsonl"))
        runs[jobs] = ((tmp_path / f"v{jobs}.jsonl").read_text(encoding="utf-8"),
                      (tmp_path / f"c{jobs}.jsonl").read_text(encoding="utf-8"), bad.getvalue(), summary.as_dict())
    assert runs[0][:3] == runs[1][:3] == runs[2][:3] == runs[3][:3]
    here, one, two, three = runs[0][3], runs[1][3], runs[2][3], runs[3][3]
    for d in (here, one, two, three):
        d.pop("seconds"), d.pop("docs_per_s")
    assert here == one == two == three and one["rejected"] == 2 and one["reasons"] == {"not_json": 1, "id_conflict": 1}
    verdicts = {v["id"]: v for v in map(json.loads, runs[2][0].splitlines())}
    assert verdicts["cn"]["verdict"] == "duplicate" and verdicts["cn"]["duplicate_of"] == "tw"
    e = pickle.loads(pickle.dumps(Rejected("not_json", "line 3")))  # how rejections come back from a worker
    assert (e.reason, e.detail) == ("not_json", "line 3")
    from stream_dedup.core.wire import Prepared

    # and prepared documents, as the arguments of __init__ (Prepared.__reduce__): every field back
    for p in (Prepared("id-1", 7, b"\x01" * 16, "text", [(2, (11, 12), b"payload")], 0.5, "snip", 1),
              Prepared("id-2", 8, b"\x02" * 16, "html", [])):
        assert pickle.loads(pickle.dumps(p, pickle.HIGHEST_PROTOCOL)) == p


def test_scan_leaves_a_core_to_the_judging_process_for_short_texts_only(tmp_path):
    """``auto_jobs``: short texts (SMS) cost about as much to judge as to prepare, so on n cores
    n - 1 processes prepare them; longer texts keep one per core. Decided on the first lines."""
    from stream_dedup.config import load_settings
    from stream_dedup.scan import SAMPLE_LINES, auto_jobs

    settings = load_settings(environ={})
    sms = "【双十一】尊敬的客户，您的积分即将清零，回复Y兑换礼品，退订回T。"
    article = ("新华社北京11月25日电　国家统计局今天发布数据，前十个月全国规模以上工业增加值同比增长百分之五点八，"
               "其中装备制造业增长较快，高技术制造业增加值占比继续提高。") * 4
    assert len(sms) < settings.text.short_chars < len(article)

    def write(name: str, texts: list[str]) -> str:
        path = tmp_path / name
        path.write_text("".join(json.dumps({"id": f"{name}{i}", "text": t, "ts": i}, ensure_ascii=False) + "\n"
                                for i, t in enumerate(texts)), encoding="utf-8")
        return str(path)

    assert auto_jobs(settings, write("sms", [sms] * 300), cores=2) == 1
    assert auto_jobs(settings, write("sms", [sms] * 300), cores=1) == 0  # one core: all in one process
    assert auto_jobs(settings, write("news", [article] * 300), cores=2) == 2
    # only the first lines count; an HTML page counts its markup
    assert auto_jobs(settings, write("mixed", [sms] * SAMPLE_LINES + [article] * 1000), cores=4) == 3
    page = tmp_path / "pages.jsonl"
    page.write_text(json.dumps({"id": "p", "ts": 1, "html": f"<html><body><p>{sms}</p>" + "<div>菜单</div>" * 40
                                + "</body></html>"}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert auto_jobs(settings, str(page), cores=2) == 2
    assert auto_jobs(settings, "-", cores=2) == 2  # standard input is not sampled


def test_scan_stops_with_the_error_of_a_preparing_process_that_fails_or_dies(tmp_path, monkeypatch):
    """``FilePreparers``: an error in a preparing process (a bug, not a rejected line) stops the scan
    with that process's traceback, and a process killed midway stops it too, instead of a hang (the
    second process is forked by the first: only the judging process holds its pipe's reading end)."""
    import os
    import signal

    from stream_dedup import scan
    from stream_dedup.config import load_settings

    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "text": f"第{i}条短信：周末特价，欢迎光临。", "ts": i}) + "\n"
                           for i in range(2_000)), encoding="utf-8")
    settings = load_settings(environ={})

    def broken(preparer, lines):
        raise OSError("disk on fire")

    with monkeypatch.context() as m:
        m.setattr(scan, "_prepare_lines", broken)  # the processes are forked: they run it too
        with pytest.raises(RuntimeError, match="(?s)preparing process 0 failed.*disk on fire"):
            scan.run_scan(settings, str(src), str(tmp_path / "v.jsonl"), jobs=2, quiet=True)

    prep = scan.FilePreparers(settings, str(src), 2, chunk=8)
    try:
        outcomes = prep.outcomes()
        assert next(outcomes)[0] == 1  # process 0 is ready, so it has forked process 1
        first = prep.first.pid
        with open(f"/proc/{first}/task/{first}/children") as f:
            (second,) = map(int, f.read().split())
        os.kill(second, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="preparing process 1 died"):
            for _ in outcomes:
                pass
    finally:
        prep.close()


def test_a_long_lived_deduper_forgets_old_states_so_its_folder_stops_growing(tmp_path):
    """A ``Deduper`` over many windows of documents: its records that left memory are forgotten
    two to three windows after their last write (whole folders deleted), so the folder holds a
    bounded number of them, while a recent copy still finds its original and an original's cluster
    that copies keep joining stays (a campaign that never stops: its first message). Documents
    without ``ts`` are dated by the clock at ``check``."""
    import random

    from stream_dedup.config import load_settings

    settings = load_settings(environ={"STREAM_DEDUP_ENGINE__WINDOW_MS": "1000",
                                      "STREAM_DEDUP_ENGINE__DOCS_IN_MEMORY": "20"})
    clock = [1_700_000_000.0]
    rng = random.Random(8)
    words = ["本市", "今天", "上午", "召开", "新闻", "发布会", "介绍", "夏季", "防汛", "工作", "安排", "河道", "清淤",
             "排水", "泵站", "气象", "部门", "预计", "降雨", "偏多", "局地", "短时", "强降雨", "居民", "出行", "注意",
             "安全", "交通", "管制", "地铁", "延长", "运营", "学校", "停课", "医院", "开通", "绿色", "通道"]
    texts = ["，".join("".join(rng.sample(words, 4)) for _ in range(3)) + "。" for _ in range(3_000)]
    campaign = "【中奖通知】恭喜您的手机号被抽中为幸运用户，获得现金大奖，请点击链接填写信息领取，编号"
    sizes = []
    with Deduper(settings, tmp_path / "state", clock=lambda: clock[0]) as d:
        for i, text in enumerate(texts):  # 10 documents a second of clock, 300 s: 150 spans of half a window
            clock[0] += 0.1
            assert d.check({"id": f"sms-{i}", "text": text}).verdict == "unique"
            if i % 10 == 0:  # a campaign that never stops: a copy a second, each of an original in the window
                v = d.check({"id": f"spam-{i}", "text": campaign + str(i)})
                assert v.verdict == ("unique" if i == 0 else "duplicate")
            if i % 500 == 499:
                sizes.append(len(d.engine.digests) + len(d.engine.decide.states))
        assert d.verdict("sms-0") is None and d.verdict("sms-2990").verdict == "unique"
        # the campaign is one cluster: every copy names its first message, whose state its joins keep
        assert d.verdict("spam-0").verdict == "unique" and d.verdict("spam-2990").duplicate_of == "spam-0"
        recent = d.check({"id": "copy", "text": texts[-5]})  # an original half a second back
        assert (recent.verdict, recent.duplicate_of) == ("duplicate", "sms-2995")
        assert recent.ts == int(clock[0] * 1000)
        clock[0] -= 100  # a clock set back: dates do not go back with it
        assert d.check({"id": "after", "text": texts[7]}).ts == recent.ts
        clusters = d.clusters()
        assert clusters and all(d.verdict(c.id) is not None for c in clusters) and len(clusters) < 10
        run = d.engine.run_kv
        assert run.dropped > 100 and len(run.gens) == 3
        assert {p.name for p in (tmp_path / "state" / "run").iterdir()} == {f"g{run.serial - i}" for i in range(3)}
    # ids and states kept: 20 of each in memory, and those of at most 3 s out of it (11 new ids a
    # second): flat, where the 3,300 checked would all be kept without forgetting
    assert max(sizes) <= 2 * (20 + 3 * 11) and max(sizes) - min(sizes) <= 20, sizes

    with Deduper(settings, tmp_path / "kept", forget_windows=None) as d:  # opting out: every state kept
        for i, text in enumerate(texts[:600]):
            d.check({"id": f"sms-{i}", "text": text, "ts": i * 100})
        assert d.verdict("sms-0").verdict == "unique" and len(d.engine.digests) == 600
