"""A corpus of nasty page events: every one must end in a verdict or a dead-letter record with a reason."""
from __future__ import annotations

import json
import time

ZW = "\u200b\u200c\u200d\ufeff\u2060"
PLANES = "".join(chr(c) for c in (0x41, 0xE9, 0x4E2D, 0x1F600, 0x20000, 0x30000, 0xE0001, 0xF0000, 0x10FFFD))


def nasty_events() -> list[tuple[str, bytes]]:
    """(name, raw bytes) pairs; ids are unique so each one can be counted."""
    out: list[tuple[str, bytes]] = []

    def ev(name: str, **fields) -> None:
        out.append((name, json.dumps({"id": f"nasty-{name}", **fields}, ensure_ascii=False).encode()))

    out += [("not-json", b"{nope"), ("bad-utf8", b'{"id": "x", "text": "\xc3\x28"}'), ("empty-bytes", b""),
            ("json-null", b"null"), ("json-list", b"[]"), ("json-string", b'"text"'),
            ("deep-json", b'{"id": "deep", "text": "x", "n": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
            ("lone-surrogate-id", b'{"id": "a\\ud800", "text": "x"}')]
    ev("null-text", text=None)
    ev("null-id-ish", text="正常的文本内容")  # a normal one among the nasty
    out.append(("null-id", json.dumps({"id": None, "text": "x"}).encode()))
    ev("number-text", text=12345)
    ev("list-text", text=["a", "b"])
    ev("object-text", text={"a": 1})
    ev("empty-text", text="")
    ev("spaces-only", text="   \t\n  ")
    ev("zero-width-only", text=ZW * 50)
    ev("control-chars", text="\x00\x01\x02正文\x1b[31m红色\x7f\x08内容" * 5)
    ev("every-plane", text=PLANES * 20)
    ev("zero-width-inside", text=ZW.join("恭喜您获得本期幸运大奖请点击链接领取"))
    ev("bidi", text="\u202e这是反向文本\u202c和正常文本\u2066隔离\u2069")
    ev("ts-string", text="x", ts="noon")
    out.append(("ts-nan", b'{"id": "nasty-ts-nan", "text": "x", "ts": NaN}'))
    out.append(("ts-inf", b'{"id": "nasty-ts-inf", "text": "x", "ts": 1e999}'))
    ev("ts-negative", text="负时间戳的文本内容", ts=-5)
    ev("ts-huge", text="x", ts=10**30)
    ev("ts-next-year", text="明年今日的新闻", ts=int(time.time() * 1000) + 365 * 24 * 3600 * 1000)  # past max_future_ms
    out.append(("id-5000-digits", b'{"id": ' + b"7" * 5000 + b', "text": "x", "ts": 1}'))
    ev("rank-string", text="x", rank="high")
    ev("bool-id-text", text=True)
    out.append(("bool-id", json.dumps({"id": True, "text": "x"}).encode()))
    out.append(("float-id", json.dumps({"id": 3.5, "text": "有小数的编号"}).encode()))
    out.append(("long-id", json.dumps({"id": "x" * 5000, "text": "x"}).encode()))
    ev("html-empty", html="")
    ev("html-no-text", html="<html><body><script>var a=1;</script></body></html>")
    ev("html-bomb-depth", html="<div>" * 5000 + "深" + "</div>" * 5000)
    ev("html-giant-attr", html=f'<p title="{"a" * 500_000}">属性很大的页面正文内容</p>')
    ev("html-unclosed", html="<html><body><p>未闭合的段落<p>第二段<div><span>继续")
    ev("html-binaryish", html="<p>\x00\x01\ufffd\ufffd</p>")
    ev("both-text-and-html", text="文本优先", html="<p>网页</p>")
    ev("big-text", text="长" * 3_000_000)
    ev("extra-fields", text="有额外字段的正常事件", extra={"nested": [1, 2, {"x": None}]}, source=None)
    ev("dup-id-a", text="同一个编号的第一份内容，讲的是防汛工作安排")
    out.append(("dup-id-b", json.dumps({"id": "nasty-dup-id-a", "text": "同一个编号的另一份内容，讲的是足球比赛结果"},
                                       ensure_ascii=False).encode()))
    return out
