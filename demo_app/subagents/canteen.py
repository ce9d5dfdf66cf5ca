"""The canteen demo sub-agent: menus, prices, calories and opening hours from bundled data."""
from demo_app.subagents.answer import DemoAnswer, answer_from_lines, chart_bar, first_found
from demo_app.subagents.data import demo_data_load

# Compared with the question lower-cased: the English words are those keyword routing sends here
# (the canteen's English keywords, demo_app/subagents/catalog.py); the answer stays Chinese.
MEAL_WORDS = {
    "早餐": ("早餐", "早饭", "早点", "早上", "早晨", "breakfast"),
    "午餐": ("午餐", "午饭", "中饭", "中午", "午间", "lunch"),
    "晚餐": ("晚餐", "晚饭", "晚上", "傍晚", "dinner", "supper"),
}
DEFAULT_MEAL = "午餐"
HOURS_WORDS = ("营业时间", "几点开", "几点关", "开门", "关门", "营业", "hour", "open", "close")
KCAL_WORDS = ("热量", "卡路里", "千卡", "减肥", "减脂", "低卡", "健康", "calorie", "diet", "healthy")
CHEAP_WORDS = ("便宜", "实惠", "省钱", "性价比", "最低价", "cheap", "budget")


def _meal_of(message: str) -> str | None:
    return next((meal for meal, words in MEAL_WORDS.items() if first_found(message, words)), None)


def _canteens_named(message: str, canteens: list[dict]) -> list[dict]:
    return [canteen for canteen in canteens if first_found(message, canteen["aliases"])]


def _price(value: float) -> str:
    return f"{value:g} 元"


def _hours_answer(canteens: list[dict]) -> DemoAnswer:
    lines = ["食堂营业时间（节假日可能调整，以食堂门口公告为准）：", ""]
    for canteen in canteens:
        hours = "，".join(f"{meal} {span}" for meal, span in canteen["hours"].items())
        lines.append(f"- **{canteen['name']}**（{canteen['location']}）：{hours}")
    return answer_from_lines(lines, lookup="canteen_hours", lookup_args={"canteens": [c["name"] for c in canteens]})


def _menu_answer(canteens: list[dict], meal: str, *, meal_given: bool, by_kcal: bool, cheap: bool) -> DemoAnswer:
    sort_key = (lambda dish: dish["kcal"]) if by_kcal else (lambda dish: dish["price"]) if cheap else None
    lines = [f"{meal}菜单如下：" if meal_given else f"你没有说哪一餐，先给你看{meal}的菜单：", ""]
    shown: list[tuple[dict, dict]] = []
    for canteen in canteens:
        dishes = canteen["menus"][meal]
        if sort_key:
            dishes = sorted(dishes, key=sort_key)
        lines += [
            f"**{canteen['name']}**（{canteen['location']}，{meal} {canteen['hours'][meal]}）",
            "",
            "| 菜品 | 价格 | 热量 |",
            "|---|---|---|",
        ]
        lines += [f"| {dish['name']} | {_price(dish['price'])} | {dish['kcal']} 千卡 |" for dish in dishes]
        lines.append("")
        shown += [(canteen, dish) for dish in dishes]

    if by_kcal:
        canteen, dish = min(shown, key=lambda pair: pair[1]["kcal"])
        lines.append(f"热量最低：{canteen['name']}的{dish['name']}（{dish['kcal']} 千卡）。")
    else:
        canteen, dish = min(shown, key=lambda pair: pair[1]["price"])
        lines.append(f"最实惠：{canteen['name']}的{dish['name']}（{_price(dish['price'])}）。")
    if not meal_given:
        lines.append("想看别的餐次可以问我，比如“二食堂晚饭吃什么”。")

    field, unit = ("kcal", "热量（千卡）") if by_kcal else ("price", "价格（元）")
    if len(canteens) == 1:
        chart = chart_bar(
            title=f"{canteens[0]['name']}{meal}{unit}",
            labels=[dish["name"] for _, dish in shown],
            label=unit,
            data=[dish[field] for _, dish in shown],
        )
    else:
        # Many dishes across canteens read badly as bars: compare the canteens' averages instead.
        averages = [
            round(sum(d[field] for d in c["menus"][meal]) / len(c["menus"][meal]), 1) for c in canteens
        ]
        chart = chart_bar(
            title=f"各食堂{meal}平均{unit}", labels=[c["name"] for c in canteens], label=f"平均{unit}", data=averages
        )
    return answer_from_lines(
        lines, chart=chart, lookup="canteen_menu", lookup_args={"canteens": [c["name"] for c in canteens], "meal": meal}
    )


def canteen_answer(*, message: str) -> DemoAnswer:
    """Answers a canteen question: which canteens (all when none is named), which meal (lunch
    when none is named), and whether the student cares about hours, calories or price."""
    canteens = demo_data_load(name="canteen")["canteens"]
    message = message.lower()
    named = _canteens_named(message, canteens) or canteens
    if first_found(message, HOURS_WORDS):
        return _hours_answer(named)
    meal = _meal_of(message)
    return _menu_answer(
        named,
        meal or DEFAULT_MEAL,
        meal_given=meal is not None,
        by_kcal=first_found(message, KCAL_WORDS) is not None,
        cheap=first_found(message, CHEAP_WORDS) is not None,
    )
