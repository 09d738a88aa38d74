"""Spam-campaign copies of real SMS: the edits spammers make, and the short texts that must stay apart."""
import json
import random
import re

import opencc
import pytest

from stream_dedup.config import Settings
from stream_dedup.core.engine import Engine
from stream_dedup.core.stages import Preparer
from stream_dedup.core.text import normalize, skeleton
from tests.conftest import shared_data


@pytest.fixture(scope="module")
def prep():
    return Preparer(Settings())


@pytest.fixture(scope="module")
def ngram(prep):
    return next(d for d in prep.detectors if d.name == "ngram")


@pytest.fixture(scope="module")
def spam():
    """Real spam messages of 20 to 80 characters from the shared SMS corpus (masked digits filled)."""
    out = []
    for line in shared_data("sms/sms_spam_zh.jsonl").open(encoding="utf-8"):
        r = json.loads(line)
        text = r["text"].strip().replace("x", "7")
        if r["label"] == 1 and 20 <= len(text) <= 80 and text not in out:
            out.append(text)
        if len(out) == 60:
            return out
    pytest.skip("too few spam messages in the corpus")


S2T = opencc.OpenCC("s2t")
EDITS = {
    "brand tag": lambda t: "【招商银行】" + t,
    "opt-out tail": lambda t: t + "，回TD退订",
    "hotline and short link": lambda t: t + " 详询400-820-1234 戳 t.cn/A6xYz9Q",
    "dots between characters": lambda t: ".".join(t),
    "stroke filler between characters": lambda t: "".join(c + ("丶" if i % 3 == 0 else "") for i, c in enumerate(t)),
    "a letter between characters": lambda t: "".join(c + ("q" if i % 2 == 0 else "") for i, c in enumerate(t)),
    "full-width digits": lambda t: "".join(chr(ord(c) + 0xFEE0) if c.isdigit() else c for c in t),
    "traditional characters": lambda t: S2T.convert(t),
    "tag, tail and dots together": lambda t: "【美团外卖】" + "*".join(t) + "回T退订 dwz.cn/k3j9a",
    "last fifth cut off": lambda t: t[:len(t) * 4 // 5],
    "every number changed": lambda t: re.sub("[0-9]+", lambda m: str(int(m.group()) % 9 + 1) * len(m.group()), t),
}


def ngram_keys(ngram, prep, text: str) -> set[int]:
    """The ngram detector's index keys of a text."""
    return set(ngram.sketch(prep.document({"id": "a", "text": text, "ts": 1})).keys)


def judged_as_copy(ngram, prep, a: str, b: str) -> bool:
    da = prep.document({"id": "a", "text": a, "ts": 1})
    db = prep.document({"id": "b", "text": b, "ts": 2})
    sa, sb = ngram.sketch(da), ngram.sketch(db)
    return bool(set(sa.keys) & set(sb.keys)) and ngram.verify(sa.payload, sb.payload) is not None


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_each_campaign_edit_of_real_spam_is_found(ngram, prep, spam, edit):
    found = sum(judged_as_copy(ngram, prep, t, EDITS[edit](t)) for t in spam)
    assert found >= 0.95 * len(spam), f"{edit}: {found} of {len(spam)} copies found"


def test_different_spam_messages_stay_apart(ngram, prep, spam):
    wrong = [(a, b) for a, b in zip(spam, spam[1:]) if judged_as_copy(ngram, prep, a, b)]
    assert not wrong


def test_the_skeleton_masks_what_varies_inside_a_campaign():
    assert skeleton(normalize("【京东】您的订单已发货")) == skeleton(normalize("您的订单已发货"))
    assert skeleton(normalize("点击 https://dwz.cn/ab12c 领取")) == "点击领取"
    assert skeleton(normalize("戳 t.cn/A6xYz9 看看")) == "戳看看"
    assert skeleton(normalize("女丶人节来到丶丶沙市")) == "女人节来到沙市"
    assert skeleton(normalize("女x人x节x来x到x沙x市x特x惠")) == "女人节来到沙市特惠"
    # a repeated character that is not put between others stays, and so do version numbers
    assert skeleton(normalize("哈哈哈哈哈哈哈哈哈哈哈哈")) == "哈哈哈哈哈哈哈哈哈哈哈哈"
    assert skeleton(normalize("版本1.2.3发布")) == "版本#发布"


def test_short_everyday_messages_do_not_merge_beyond_exact_copies():
    texts = ["好的", "在吗", "收到", "好的，明天见", "在吗？我到楼下了", "收到，谢谢", "好的好的", "收到收到，马上到",
             "我明天下午三点到", "我明天下午三点到北京，你来接我吗", "好的"]
    with Engine(Settings()) as engine:
        for i, t in enumerate(texts):
            engine.process({"id": str(i), "text": t, "ts": i})
        dups = {v.id: v.duplicate_of for v in engine.verdicts() if v.verdict == "duplicate"}
    assert dups == {"10": "0"}  # only the second "好的"


def test_question_pairs_that_differ_in_meaning_are_rarely_called_copies(ngram, prep):
    """LCQMC's non-paraphrase pairs share most of their characters ("…怎么切" / "…怎么吃"); a char
    3-gram MinHash at Jaccard 0.3 calls about a third of them duplicates."""
    pairs = [json.loads(x) for x in shared_data("pairs/LCQMC_dev.jsonl").open(encoding="utf-8")]
    negatives = [p for p in pairs if p["label"] == 0][:2000]
    called = sum(prep.document({"id": "a", "text": p["text1"], "ts": 1}).digest
                 == prep.document({"id": "b", "text": p["text2"], "ts": 2}).digest
                 or judged_as_copy(ngram, prep, p["text1"], p["text2"]) for p in negatives)
    assert called <= 0.01 * len(negatives), f"{called} of {len(negatives)}"


@pytest.mark.parametrize("a, b", [
    ("左眼皮跳是什么征兆呢？", "右眼皮跳是什么征兆"),            # one character changed
    ("美国为什么打朝鲜", "美国为什么不打朝鲜呢？"),              # one inserted inside
    ("比比皆是什么意思", "比比皆是的皆是什么意思"),              # every character pair still found
    ("谢谢用日语怎么说？", "谢谢用日语怎么写？"),
])
def test_a_short_question_changed_inside_is_not_a_copy(ngram, prep, a, b):
    assert not judged_as_copy(ngram, prep, a, b)


def test_short_questions_that_differ_in_a_small_number_are_not_copies(ngram, prep):
    """LCQMC's non-paraphrase pairs that differ only in a number of one or two digits ("5朵玫瑰" /
    "3朵玫瑰", "仙剑奇侠传5" / "仙剑奇侠传3"): in a short text the number is much of what it says."""
    pairs = [json.loads(x) for x in shared_data("pairs/LCQMC_dev.jsonl").open(encoding="utf-8")]
    only_number = [(p["text1"], p["text2"]) for p in pairs if p["label"] == 0
                   and re.search("[0-9]", p["text1"] + p["text2"])
                   and skeleton(normalize(p["text1"])) == skeleton(normalize(p["text2"]))]
    assert len(only_number) >= 3
    assert [pair for pair in only_number if judged_as_copy(ngram, prep, *pair)] == []
    # the same number with a tag or a tail around it is still a copy
    assert judged_as_copy(ngram, prep, "5朵玫瑰代表什么意思", "【花店】5朵玫瑰代表什么意思？")


@pytest.mark.parametrize("a, b", [
    ("【京东】您的快递已到，请及时取件", "您的快递已到，请及时取件"),      # a tag around it
    ("新店开业，全场饮品买一送一", "新店开业，全场饮品买一送一 退订回T"),  # a tail after it
    ("OK娱乐公司开户就送款 回T退订", "OK娱乐公司开户就送款 www.c.om 回T退订"),  # link letters inside
])
def test_a_short_text_with_a_tag_or_tail_around_it_is_a_copy(ngram, prep, a, b):
    assert judged_as_copy(ngram, prep, a, b)


@pytest.fixture(scope="module")
def accounts():
    """Real scam messages around a masked card or account number whose text without the number is
    short ("农行：卡号…／连秀文": under 12 characters), each mask filled with a number of its own."""
    rng, out = random.Random(5), []
    for line in shared_data("sms/sms_spam_zh.jsonl").open(encoding="utf-8"):
        r = json.loads(line)
        text = r["text"].strip()
        if r["label"] != 1 or not re.search("x{16,19}", text):
            continue
        text = re.sub("x+", lambda m: "".join(rng.choice("0123456789") for _ in m.group()), text)
        if 2 <= len(skeleton(normalize(text)).replace("#", "")) < 12 and re.search("[\u4e00-\u9fff]", text):
            out.append(text)
    if len(out) < 20:
        pytest.skip("too few account-number messages in the corpus")
    return out[:40]


def _change_a_name_character(t: str) -> str:
    i = max(i for i, c in enumerate(t) if "\u4e00" <= c <= "\u9fff")
    return t[:i] + ("王" if t[i] != "王" else "李") + t[i + 1:]


def test_an_account_number_message_with_a_character_changed_or_its_end_cut_is_a_copy(ngram, prep, accounts):
    """Without its number such a message is a bank and a name: one changed character is most of it.
    The number is what names the campaign."""
    changed = sum(judged_as_copy(ngram, prep, t, _change_a_name_character(t)) for t in accounts)
    cut = sum(judged_as_copy(ngram, prep, t, t[:len(t) * 85 // 100]) for t in accounts)
    assert changed >= 0.95 * len(accounts) and cut >= 0.9 * len(accounts), (changed, cut, len(accounts))


def test_account_number_messages_with_other_numbers_stay_apart(ngram, prep, accounts):
    other = [re.sub("[0-9]", lambda m: str((int(m.group()) + 3) % 10), _change_a_name_character(t)) for t in accounts]
    assert not [(a, b) for a, b in zip(accounts, other) if judged_as_copy(ngram, prep, a, b)]
    pairs = [(a, b) for a, b in zip(accounts, accounts[1:]) if skeleton(normalize(a)) != skeleton(normalize(b))]
    assert len(pairs) > 10 and not [(a, b) for a, b in pairs if judged_as_copy(ngram, prep, a, b)]


@pytest.mark.parametrize("a, b", [
    ("泰康针对银行降息", "银行降息泰康针对"),
    ("玛其娜美容美发有限公司祥泰店", "有限公司祥泰店玛其娜美容美发"),
    ("冰雪奇缘哪里可以免费看", "【优酷】哪里可以免费看冰雪奇缘"),
])
def test_a_short_text_with_its_clauses_moved_around_is_a_copy(ngram, prep, a, b):
    assert ngram.verify(ngram.sketch(prep.document({"id": "a", "text": a, "ts": 1})).payload,
                        ngram.sketch(prep.document({"id": "b", "text": b, "ts": 2})).payload) is not None


@pytest.fixture(scope="module")
def short_spam(ngram, prep):
    """Real spam messages whose skeleton has 12 to 30 characters: too short for winnowing's
    guarantee (a shared key for a common run of 15 characters) once they are cut in two."""
    out = []
    for line in shared_data("sms/sms_spam_zh.jsonl").open(encoding="utf-8"):
        r = json.loads(line)
        text = r["text"].strip().replace("x", "7")
        n = len(ngram.skeleton(prep.document({"id": "s", "text": text, "ts": 1})))
        if r["label"] == 1 and 12 <= n <= 30 and text not in out:
            out.append(text)
    assert len(out) >= 40
    return out[:120]


@pytest.mark.parametrize("edit", [lambda t: t[len(t) // 2:] + t[:len(t) // 2], lambda t: t + "，详询400-820-1234"],
                         ids=["halves swapped", "contact tail"])
def test_a_short_message_cut_in_two_or_with_a_tail_shares_a_key_with_its_copy(ngram, prep, short_spam, edit):
    shared = sum(bool(ngram_keys(ngram, prep, t) & ngram_keys(ngram, prep, edit(t))) for t in short_spam)
    assert shared >= 0.95 * len(short_spam), f"{shared} of {len(short_spam)}"


def test_the_shortest_spam_with_its_halves_swapped_shares_a_key_with_its_copy(ngram, prep):
    """Real spam of 8 or 9 skeleton characters ("泰康针对银行降息"): its halves swapped share no gram
    among the few smallest, which is all winnowing and the bottom-k keys gave it; every gram is a key."""
    tiny = []
    for line in shared_data("sms/sms_spam_zh.jsonl").open(encoding="utf-8"):
        r = json.loads(line)
        sk = ngram.skeleton(prep.document({"id": "s", "text": r["text"].replace("x", "7"), "ts": 1}))
        if r["label"] == 1 and len(sk) in (8, 9) and "#" not in sk and sk not in tiny:
            tiny.append(sk)
    assert len(tiny) >= 8
    swapped = [t[len(t) // 2:] + t[:len(t) // 2] for t in tiny]
    assert all(ngram_keys(ngram, prep, t) & ngram_keys(ngram, prep, s) for t, s in zip(tiny, swapped))
    assert judged_as_copy(ngram, prep, "泰康针对银行降息", "银行降息泰康针对")


def test_the_mask_is_skipped_only_where_it_would_change_nothing():
    """``_may_vary`` spares most texts the masking pattern; it must never spare one the pattern changes."""
    from stream_dedup.core.text import _VARYING, _may_vary

    texts = [normalize(json.loads(x)["text"]) for x in shared_data("sms/sms_spam_zh.jsonl").open(encoding="utf-8")]
    texts += ["访问 www.-dg-he- 了解", "详见 http://x", "打开 abc.cn/x 领取", "【京东】好", "回T退订"]
    missed = [t for t in texts if not _may_vary(t) and _VARYING.sub(" ", t) != t]
    assert not missed and sum(map(_may_vary, texts)) < 0.7 * len(texts), missed[:3]


# Real English utterances of DailyDialog (Li et al. 2017, CC BY-NC-SA 4.0; its test split as
# shipped by github.com/snakeztc/NeuralDialog-LAED): pairs of different messages that share most of
# their letters, and a message that its copies must still find.
ENGLISH_APART = [
    ("You have to make an appointment first.", "Good morning, I have an appointment with Mr. Johnson at 10:00"),
    ("Have you found a new job yet?", "Have you found anything nice yet?"),
    ("What do you do?", "What do you drink?"),
    ("Hello, this is Lucy. May I speak to Mr. Smith?", "Hello, this is Steven from Blue Sky Co. May I speak to Mr. James?"),
    ("How long will it take us to get there?", "How long will it take to get them dry?"),
    ("Do you have an appointment with her?", "You have to make an appointment first."),
    ("$ 300.", "¥ 350."),
]
ENGLISH = "Yes, I have booked a room for 24th. It's a double room. Could you keep it for 3 days?"
ENGLISH_COPIES = [
    "[FreeMsg] " + ENGLISH,
    ENGLISH + " Txt STOP to 87239",
    ENGLISH.upper(),
    "".join(chr(ord(c) + 0xFEE0) if c.isascii() and c.isalnum() else c for c in ENGLISH),
    ENGLISH.replace("booked", "bookd"),
    ENGLISH.replace("double", "d.o.u.b.l.e"),
    ENGLISH[:70],
    "It's a double room. Could you keep it for 3 days? Yes, I have booked a room for 24th.",
    # Cyrillic and Greek look-alikes for Latin letters (Yеs, Іt, dοuble), digits and marks for
    # letters ("d0ubl3", "r@@m", "It'$"): how spam dodges keyword filters
    ENGLISH.translate(str.maketrans({"e": "е", "o": "о", "a": "а", "I": "І", "C": "С", "d": "ԁ", "u": "υ"})),
    "Y3s, I h@v3 b00k3d a r@@m f0r 24th. It'$ a d0ubl3 r00m. C0uld y0u k33p 1t f0r 3 days?",
    # SMS spellings of its words
    "Yes, I hv booked a room 4 24th. It's a double room. Could u keep it 4 3 days? Thx",
    "yes i have booked a room for 24th, its a double room, cud u keep it for 3 days pls",
]
SPOKEN = [("c u 2nite at the station, ok?", "See you tonight at the station, okay?"),
          ("thx, ur gr8! pls call me tmr", "Thanks, your great! Please call me tomorrow")]


@pytest.mark.parametrize("a, b", ENGLISH_APART)
def test_different_english_messages_stay_apart(ngram, prep, a, b):
    """26 letters are a small alphabet: two English sentences share most of their letters in order,
    so a Latin-script text is judged by its letter grams, and look-alikes fold only among digits."""
    assert not judged_as_copy(ngram, prep, a, b)


@pytest.mark.parametrize("copy", ENGLISH_COPIES)
def test_an_english_message_with_a_campaign_edit_is_a_copy(ngram, prep, copy):
    assert judged_as_copy(ngram, prep, ENGLISH, copy)


# Article 1 and Article 3 of the Universal Declaration of Human Rights in Russian and Korean (the
# United Nations' published translations): letters of other alphabets are a skeleton's letters too.
OTHER_SCRIPTS = {
    "ru": ("Все люди рождаются свободными и равными в своем достоинстве и правах. Они наделены разумом и "
           "совестью и должны поступать в отношении друг друга в духе братства.",
           "Каждый человек имеет право на жизнь, на свободу и на личную неприкосновенность."),
    "ko": ("모든 인간은 태어날 때부터 자유로우며 그 존엄과 권리에 있어 동등하다. 인간은 천부적으로 이성과 양심을 "
           "부여받았으며 서로 형제애의 정신으로 행동하여야 한다.",
           "모든 사람은 생명과 신체의 자유와 안전에 대한 권리를 가진다."),
}


@pytest.mark.parametrize("lang", sorted(OTHER_SCRIPTS))
def test_texts_of_other_alphabets_are_copies_or_apart_by_their_letters(ngram, prep, lang):
    """Cyrillic and Hangul were dropped from the skeleton: every copy was missed, and two different
    texts with the same phone number were nothing but that number, a copy of each other."""
    first, third = OTHER_SCRIPTS[lang]
    assert judged_as_copy(ngram, prep, first, "[PROMO] " + first + " 8 916 123-45-67")
    assert judged_as_copy(ngram, prep, first, first.upper())
    assert not judged_as_copy(ngram, prep, first + " 89161234567", third + " 89161234567")


def test_look_alike_letters_of_other_scripts_fold_to_latin_and_amounts_stay_numbers():
    """Cyrillic and Greek letters that look Latin are the Latin letter in any text (a Chinese spam's
    ".℃○Μ" is its ".com"); a Russian text stays as distinct from another as it was. A $ or @ in a
    word is a letter; "$ 300" is an amount, whose digits still vary inside a campaign."""
    assert normalize("FRЕЕ ΜΟΝΕΥ") == normalize("FREE MONEY") == "free money"
    first, third = OTHER_SCRIPTS["ru"]
    assert normalize(first) != normalize(third) and normalize(first) == normalize(first.upper())
    assert skeleton(normalize("c@ll n0w, it'$ fr33")) == skeleton(normalize("call now, it's free"))
    assert skeleton(normalize("It is $ 300.")) == skeleton(normalize("It is $ 450.")) == "itis#"


def test_long_runs_of_letters_or_marks_normalize_in_linear_time():
    """Looking for a word with a Cyrillic or Greek letter from every letter of a long run of Han
    characters was quadratic: 20,000 of them and "，μ" took 3.9 s (100,000: minutes); so was a run
    of $ in an English text (20,000: 3.7 s)."""
    import time

    t0 = time.perf_counter()
    assert normalize("中" * 100_000 + "，μ").endswith(",μ")
    assert skeleton(normalize("call now " + "$" * 100_000)).startswith("caiinow")
    assert time.perf_counter() - t0 < 2


def test_look_alikes_fold_in_numbers_and_words_keep_their_letters():
    """A spammer's "l38OO138OOO" is a phone number; "busy" in a Chinese message is a word, and
    folding it ("8u5y", then masked as numbers) left it nothing to be told apart by."""
    from stream_dedup.core.text import skeletons

    assert skeletons(normalize("详询l38OO138OOO，壹万元现金"))[1] == "详询138001380001万元现金"
    assert skeleton(normalize("我今天很busy，明天call你")) == "我今天很busy明天call你"
    assert skeleton(normalize("要oil")) != skeleton(normalize("要lol"))


def test_a_wechat_or_qq_contact_is_masked_as_a_phone_number_is(ngram, prep):
    """A campaign's copies carry each sender's own WeChat or QQ id ("加微信cnpxx789"): masked as a
    link or a phone number is, a truncated copy with one still contains its original's text."""
    assert skeleton(normalize("上海大学生兼职，请加微信ncxx731查看")) == skeleton(normalize("上海大学生兼职，请加微信abcd99查看"))
    assert skeleton(normalize("qq：961694491、只限武汉市")) == skeleton(normalize("只限武汉市"))
    # the name of the app without an id is text
    assert "qq" in skeleton(normalize("QQ号竟然被盗了")) and "微信" in skeleton(normalize("微信支付很方便"))
    original = "重磅消息[玫瑰][玫瑰]合生前滩一号叠加别墅：开发商直降143万，以前需要6693万，现在只需4712万，7房7厅6卫"
    copy = original[:50] + "，加微信cnpxx789"
    assert judged_as_copy(ngram, prep, original, copy)
    # "加" / "添加" / "+" before it is part of the contact: on a short text it was a character too many
    assert skeleton(normalize("法轮大法好、真善忍，加微信agbjb227")) == skeleton(normalize("法轮大法好、真善忍"))
    assert skeleton(normalize("兼职日结，添加微信abc12345")) == skeleton(normalize("兼职日结，+qq 12345678"))
    assert "加油" in skeleton(normalize("加油微信号abcde1"))


def test_a_long_spam_with_marks_between_its_characters_is_a_copy():
    """Real long spam with "*" or "·" after a third of its characters: the marks split every word
    and character shingle they fall in, so the word and shingle detectors missed most such copies.
    A mark that sparse text also holds (a date's hyphens, a name's middle dot) stays."""
    from stream_dedup.core.text import drop_fillers

    rows = [json.loads(x) for x in shared_data("sms/sms_spam_zh.jsonl").open(encoding="utf-8")]
    long_spam = [r["text"] for r in rows if r["label"] == 1 and len(r["text"]) > 200][:20]
    assert len(long_spam) == 20
    rng = random.Random(5)
    found = 0
    for k, text in enumerate(long_spam):
        mark = "*" if k % 2 else "·"
        noisy = "".join(c + (mark if rng.random() < 0.33 else "") for c in text)
        with Engine(Settings()) as e:
            e.process({"id": "o", "text": text, "ts": 1})
            v = e.process({"id": "c", "text": noisy, "ts": 2})[-1]
        found += v.verdict == "duplicate" and v.duplicate_of == "o" and v.match == "near"
    assert found == len(long_spam)
    kept = normalize("2024-01-01 会议纪要：约翰·史密斯说，下午3-4点开会。")
    assert drop_fillers(kept) == kept


@pytest.fixture(scope="module")
def headlines():
    """Real news headlines (THUCNews, the shared corpus): what a hash-buster puts around a spam."""
    rows = [json.loads(line) for line in shared_data("news/thucnews_titles_20k.jsonl").open(encoding="utf-8")]
    return [r["text"] for r in rows[:300]]


def test_a_spam_with_more_headlines_around_it_than_its_own_text_is_a_copy(ngram, prep, spam, headlines):
    """Hash-busting: other text put before or after a message, as much as the message or more; the
    message stays whole in one place of the copy."""
    found, pool = 0, iter(headlines)
    for i, t in enumerate(spam):
        filler = next(pool)
        while len(filler) < len(t):
            filler += "。" + next(pool)
        copy = t + "。" + filler if i % 2 else filler + "。" + t
        found += judged_as_copy(ngram, prep, t, copy)
    assert found >= 0.95 * len(spam)


def test_a_spam_cut_short_with_a_headline_after_it_is_a_copy(ngram, prep, spam, headlines):
    """A gateway's split and then hash-busting: the message's first four fifths, then a headline
    (cut to three quarters as long). Under ``containment`` of it is in the copy, in order or as
    character pairs; it is the copy's beginning, in one place."""
    found, filler = 0, "。".join(headlines[:20])
    for i, t in enumerate(spam):
        kept = t[:len(t) * 4 // 5]
        found += judged_as_copy(ngram, prep, t, kept + "。" + filler[7 * i:][:len(kept) * 3 // 4])
    assert found >= 0.9 * len(spam), found


def test_different_spam_with_the_same_headlines_around_them_stay_apart(ngram, prep, spam, headlines):
    """The headlines are common to both; neither message is in the other. A known limit: a message
    with fewer than ``min_contained`` characters of its own (an account number and a name) is
    mostly headlines then, and that is in one place of the other ("7777777777杨德彪工行卡")."""
    filler = "。".join(headlines[:3])
    own = [t for t in spam if len(re.sub("[0-9]", "", skeleton(normalize(t)))) >= ngram.min_contained]
    merged = [(a, b) for a, b in zip(own[::2], own[1::2])
              if judged_as_copy(ngram, prep, a + "。" + filler, b + "。" + filler)]
    assert len(own) >= 40 and not merged


def test_an_english_message_with_other_sentences_after_it_is_a_copy(ngram, prep):
    """Hash-busting in English: more of other text after the message than the message has."""
    tail = " I'm leaving for Japan at 11 this morning. And I take the dog for a walk every Wednesday and Friday."
    assert judged_as_copy(ngram, prep, ENGLISH, ENGLISH + tail)
    assert judged_as_copy(ngram, prep, ENGLISH, tail + " " + ENGLISH)


def test_a_feed_post_reposted_with_mentions_and_topic_tags_is_a_copy(ngram, prep, headlines):
    """A repost on a feed: a chain of "//@name:" marks with the reposters' few words, or trending
    topic tags ("#热点#") around the post. The marks' names and the tags are masked as a sender tag
    is; what the reposters wrote stays an addition."""
    names = ["小明", "张三丰", "weibo_user88", "吃瓜群众"]
    posts = [h for h in headlines if len(h) >= 16][:60]
    chains = [f"{['转发', '说得对', ''][i % 3]}//@{names[i % 4]}:{['', '赞'][i % 2]}//@{names[(i + 1) % 4]}: {p}"
              for i, p in enumerate(posts)]
    tagged = [f"#{['热点', '今日头条', '新闻速递'][i % 3]}#{p}#{['财经', '社会'][i % 2]}#" for i, p in enumerate(posts)]
    for copies in (chains, tagged):
        found = sum(judged_as_copy(ngram, prep, p, c) for p, c in zip(posts, copies))
        assert found >= 0.95 * len(posts), found


def test_a_reply_mark_or_a_repost_mark_takes_only_the_name():
    """The reply mark is a name without spaces at the start; an English text that begins with a
    leet "@" keeps its words."""
    assert skeleton(normalize("@张三丰: 收到，明天见")) == "收到明天见"
    assert skeleton(normalize("好文//@李四: 转发")) == "好文转发"
    assert "items" in skeleton(normalize("@ll items on sale: 50% off"))


@pytest.mark.parametrize("a, b", SPOKEN)
def test_an_english_message_in_sms_spelling_is_the_same_message(a, b):
    """"u", "gr8", "2nite" are the words they stand for; a letter alone between fillers
    ("sh.o.u.ld") or among the letters of a name spelt out ("S C H L I E") stays a letter."""
    assert skeleton(normalize(a)) == skeleton(normalize(b))
    assert skeleton(normalize("who sh.o.u.ld I s.end")) == skeleton(normalize("who should I send"))
    assert "schiie" in skeleton(normalize("Steve. S C H L I E S S M A N."))


def test_a_spam_with_every_clause_moved_is_a_copy(ngram, prep, spam):
    """Clauses all put in another order (the last first): little of the text stays in order, but
    its characters and character pairs are all in the copy."""
    clause = re.compile(r"[^，,。！？!?；;]+[，,。！？!?；;]?")
    many = [t for t in spam if len(clause.findall(t)) >= 4]
    found = sum(judged_as_copy(ngram, prep, t, "".join(reversed(clause.findall(t)))) for t in many)
    assert len(many) >= 15 and found >= 0.9 * len(many), (found, len(many))



SHUFFLED = [  # real spam of the SMS corpus, and its clauses put in a random order (spam_edits.py)
    ("信用卡提现、垫还业务，全部银行正规机器，积分，费率低！敬请保留，以便急需！打扰之处，请谅解～33521024918",
     "全部银行正规机器，以便急需！费率低！积分，打扰之处，请谅解～33521024918信用卡提现、垫还业务，敬请保留，"),
    ("宇东水岸官邸，公园宅，05%法式园林绿化，双核景观，31-850平米阳光户型隆重推出，6411元起，六月现房臻荣面世，1237820",
     "6411元起，双核景观，05%法式园林绿化，1237820六月现房臻荣面世，31-850平米阳光户型隆重推出，公园宅，宇东水岸官邸，"),
    ("美女您好！女人花迎双节、庆店庆，特推出大量买赠活动。消费满一百就送礼品，礼物品种多，任您选！另护理套系等您，详情进店咨询，活动期间可累计！",
     "美女您好！消费满一百就送礼品，女人花迎双节、庆店庆，详情进店咨询，礼物品种多，另护理套系等您，活动期间可累计！任您选！特推出大量买赠活动。"),
    ("玻璃险，座位每座一万，不计免赔，交强险，车船税。 来店续保即有保养礼包相送，"
     "免费道路救援，二手车置换业务咨询，如有打扰请见谅。",
     "交强险，二手车置换业务咨询，免费道路救援，车船税。玻璃险， 来店续保即有保养礼包相送，"
     "如有打扰请见谅。不计免赔，座位每座一万，"),
]


@pytest.mark.parametrize("a, b", SHUFFLED)
def test_a_spam_of_many_short_clauses_shuffled_is_a_copy(ngram, prep, a, b):
    """Clauses of a few characters each put in another order: every seam is a character pair the
    original does not have, too many for the pair test; the text is still its clauses, each whole
    in a place of its own in the other."""
    assert judged_as_copy(ngram, prep, a, b)


def test_a_short_spam_with_a_number_in_a_moved_piece_is_a_copy(ngram, prep):
    """A real spam of nine characters without its number, in two pieces put the other way round: the
    number's place is a character of its piece ("#折优惠"), which without it is too short to count."""
    assert judged_as_copy(ngram, prep, "云云的清韵诗9.0折优惠", "9.0折优惠云云的清韵诗")


def test_a_spam_with_its_greeting_swapped_and_a_tail_added_is_a_copy(ngram, prep, spam):
    """The opening (a fifth of the text) replaced by another greeting and a contact or opt-out tail
    added: neither text holds the other, but one block of three quarters of the longer is both."""
    greetings, tails = ["温馨提示：", "亲，", "老板好，"], [" 详询4008123456", "，回TD退订", " 加微信cnpxx789"]
    copies = [(t, greetings[i % 3] + t[len(t) // 5:] + tails[i % 3]) for i, t in enumerate(spam)]
    found = sum(judged_as_copy(ngram, prep, a, b) for a, b in copies)
    assert found >= 0.95 * len(copies), (found, len(copies))
    original = "您好，我是兴业银行客户经理胡锐，如您需要贷款等各项金融服务，烦请您联系我，我将竭诚为您服务！"  # corpus id 23719
    assert judged_as_copy(ngram, prep, original, "温馨提示：" + original[10:] + " 详询4008123456")


def test_shares_of_different_files_stay_apart(ngram, prep):
    """Ham of one template ("我分享了百度云里的文件：" and a file's name in Chinese): the shared block is
    the template, under three quarters of the longer text wherever both have 16 characters or more.
    (Names in Latin letters are left out: "…final" / "…insanity" share 14 of 16 characters in order.)"""
    texts = sorted({t for x in shared_data("sms/sms_spam_zh.jsonl").open(encoding="utf-8")
                    for t in (json.loads(x)["text"],) if t.startswith("我分享了百度云里的文件")
                    and not re.search("[A-Za-z]", t)})
    pairs = [(a, b) for i, a in enumerate(texts) for b in texts[i + 1:]
             if min(len(ngram.skeleton(prep.document({"id": "x", "text": t, "ts": 1}))) for t in (a, b)) >= 16]
    assert len(pairs) > 50 and not [p for p in pairs if judged_as_copy(ngram, prep, *p)], len(pairs)


def test_a_text_of_seven_characters_and_a_number_is_still_no_copy_of_its_pieces_moved(ngram, prep):
    """Under ``WHOLE_CONTAINED`` characters without its numbers a text is a copy only of itself,
    whatever place its number takes ("存立送253新葡京充" is two four-character pieces only with it)."""
    assert not judged_as_copy(ngram, prep, "新葡京充存立送253", "存立送253新葡京充")

def test_a_question_that_repeats_a_phrase_of_another_is_no_copy(ngram, prep):
    """LCQMC, label 0: "多米音乐播放器" twice and "下载" are in the other question, but the other
    has the phrase once: a place in the longer text is one clause's."""
    rows = [json.loads(x) for x in shared_data("pairs/LCQMC_dev.jsonl").open(encoding="utf-8")]
    a, b = "多米音乐播放器，多米音乐播放器下载", "多米音乐播放器为何不能下载音乐了"
    assert any({r["text1"], r["text2"]} == {a, b} and r["label"] == 0 for r in rows)
    assert not judged_as_copy(ngram, prep, b, a)


def test_the_character_gate_turns_away_only_what_verify_would(ngram, prep, spam):
    """``verify`` first turns away two texts of which each lacks too many of the other's characters
    (``char_mask``, ``absent_most``): every copy of every edit class and every pair of different
    real spam is answered as with the gate off."""
    sketches = [ngram.sketch(prep.document({"id": "a", "text": t, "ts": 1})).payload
                for t in spam + [edit(t) for t in spam for edit in EDITS.values()]]
    rng = random.Random(5)
    pairs = [(i, len(spam) + i * len(EDITS) + j) for i in range(len(spam)) for j in range(len(EDITS))]
    pairs += [tuple(rng.sample(range(len(sketches)), 2)) for _ in range(3000)]
    gated = [ngram.verify(sketches[a], sketches[b]) for a, b in pairs]
    most, ngram._absent_most = ngram._absent_most, 1.0  # no text lacks more than all its characters
    try:
        plain = [ngram.verify(sketches[a], sketches[b]) for a, b in pairs]
    finally:
        ngram._absent_most = most
    assert gated == plain
    assert sum(m is not None for m in plain) >= len(spam) * len(EDITS) * 0.9


def test_the_character_gate_answers_different_texts_before_the_costly_tests(ngram, prep, monkeypatch):
    """Two campaigns that share an opening ("温馨提示") are told apart by their characters alone."""
    from stream_dedup.core.detectors import ngram as module

    a = ngram.sketch(prep.document({"id": "a", "text": "温馨提示：伊利金领冠奶粉做9.9折优惠，活动到7月05号结束", "ts": 1}))
    b = ngram.sketch(prep.document({"id": "b", "text": "温馨提示：本店新到一批夏季连衣裙，欢迎新老顾客前来选购", "ts": 1}))

    class Refuse:
        @staticmethod
        def similarity(*args, **kwargs):
            raise AssertionError("the costly test ran")

    monkeypatch.setattr(module, "LCSseq", Refuse)
    monkeypatch.setattr(module, "Levenshtein", Refuse)
    assert ngram.verify(a.payload, b.payload) is None
