"""Build examples/sample.jsonl: the small corpus `make demo` replays (text written for this project).

Originals are short news items and SMS; variants are the edits the product must catch: an exact
repost, a repost with a source line and traditional characters, a notice appended, a sentence dropped, SMS spam
with noise between characters and a changed number. Run: python examples/build_sample.py
"""
import json
from pathlib import Path

NEWS = [
    "本市今天上午召开新闻发布会，介绍今年夏季防汛工作安排。据介绍，全市已完成主要河道清淤二百余公里，"
    "新建排水泵站十二座。气象部门预计，今年汛期降雨总量较常年偏多一到两成，局地可能出现短时强降雨。"
    "有关部门提醒市民关注预警信息，雨天尽量减少外出，不要在低洼地带停车。",
    "第十五届全国大学生机器人大赛昨日在南方某高校落下帷幕。来自全国一百二十所高校的四百多支队伍参加了比赛。"
    "经过三天激烈角逐，东部一所理工大学代表队获得总冠军。组委会表示，明年比赛将增设农业机器人项目，"
    "鼓励学生把技术用在田间地头。",
    "今年前三季度，全省外贸进出口总额同比增长百分之八点五，其中出口增长百分之十点二。海关人士分析，"
    "新能源汽车、锂电池和光伏产品成为出口增长的主要动力。与此同时，对东盟和中东地区的贸易额增长较快，"
    "市场结构进一步优化。",
    "一场突如其来的寒潮让北方多地气温骤降十度以上。记者在城郊蔬菜大棚看到，菜农们正忙着加盖草帘、"
    "点燃炉火为大棚保温。农业技术人员建议，寒潮期间要及时清扫棚顶积雪，防止大棚被压塌，"
    "同时注意通风换气，避免作物发生病害。",
    "市图书馆新馆将于下月正式开放。新馆建筑面积约六万平方米，设有少儿阅览区、古籍修复展示区和数字体验区，"
    "可提供阅览座位三千个。开放初期实行预约入馆，读者可通过官方网站或公众号预约。图书馆负责人表示，"
    "新馆将延长开放时间至晚上九点。",
    "国内一家新能源车企发布了新款纯电动轿车，官方公布的续航里程达到七百公里。该车搭载自主研发的电池管理系统，"
    "充电十五分钟可补充四百公里续航。业内人士认为，随着充电网络不断完善，消费者的里程焦虑正在逐步缓解。",
    "为期两天的全国乡村旅游发展论坛在西南某县举行。与会专家认为，乡村旅游要避免千村一面，"
    "应当深入挖掘本地文化资源，发展民宿、研学和农事体验等多种业态，让游客留得下、住得久，"
    "让村民在家门口增收致富。",
    "昨晚进行的足球联赛中，主队凭借下半场的两个进球以二比一逆转客队。比赛第三十分钟，客队利用角球率先破门。"
    "易边再战，主队加强进攻，第六十五分钟扳平比分，终场前五分钟再入一球锁定胜局。赛后主教练称赞球员们意志顽强。",
]
SMS = [
    "尊敬的客户您好，本店周年庆全场商品五折起，会员再享九折，活动时间本周六至周日，详询4008001234，回T退订",
    "恭喜您获得本期幸运大奖，奖金五万元，请点击链接领取并填写银行卡信息，逾期作废",
    "您的快递因地址不详无法派送，请在今天内联系客服处理，否则将退回寄件人",
    "妈，我换了新手机号，旧号不用了，有事打这个号码，明天再跟你细说",
    "明天下午三点部门开会，请大家准时到三楼会议室，带上本季度的工作总结",
    "周末一起去爬山吗？天气预报说周六是晴天，早上八点在地铁站集合",
]
TRAD = str.maketrans("发会这为进场预乡东与场经两际币们门时间来对说让气车续电网统认随远实线级调动传点页",
                     "發會這為進場預鄉東與場經兩際幣們門時間來對說讓氣車續電網統認隨遠實線級調動傳點頁")


def main() -> None:
    rows, ts = [], 1_700_000_000_000
    def add(ident, text, cluster):
        nonlocal ts
        ts += 60_000
        rows.append({"id": ident, "text": text, "ts": ts, "cluster": cluster})
    for i, t in enumerate(NEWS):
        add(f"news-{i}", t, f"n{i}")
    for i, t in enumerate(SMS):
        add(f"sms-{i}", t, f"s{i}")
    for i in (0, 3, 5):
        add(f"news-{i}-repost", NEWS[i], f"n{i}")  # exact copy under another id
    for i in (1, 4, 6):
        add(f"news-{i}-source", "来源：本报综合　责任编辑：王明\n" + NEWS[i].translate(TRAD), f"n{i}")
    add("news-2-notice", NEWS[2] + "本文仅代表作者观点，欢迎读者提供新闻线索。", "n2")  # a boilerplate line appended
    for i in (7,):
        sents = [x for x in NEWS[i].split("。") if x]
        drop = min(range(1, len(sents)), key=lambda j: len(sents[j]))  # the shortest sentence after the first
        add(f"news-{i}-cut", "。".join(sents[:drop] + sents[drop + 1:]) + "。", f"n{i}")
    add("sms-0-noise", "尊.敬.的.客.户您好，本店周年庆全场商品五折起，会员再享九折，活动时间本周六至周日，详询4008005678，回T退订", "s0")
    add("sms-1-noise", "恭 喜 您 获 得 本期幸运大奖，奖金伍万元，请点击链接领取并填写银行卡信息，逾期作废！！", "s1")
    out = Path(__file__).with_name("sample.jsonl")
    with out.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps({k: v for k, v in r.items() if k != "cluster"}, ensure_ascii=False) + "\n")
    with out.with_name("sample_labels.jsonl").open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps({"id": r["id"], "cluster": r["cluster"]}) + "\n")
    print(f"wrote {out}: {len(rows)} events")


if __name__ == "__main__":
    main()
