"""The token estimator (agctl.context.tokens): exact counts, and estimates against real
tokenizers."""

from __future__ import annotations

import pytest
from helpers import msg, tool_call

from agctl.context.tokens import MESSAGE_OVERHEAD, estimate_content, estimate_text

# ---- the estimator -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("a", 1),
        ("abcd", 1),
        ("abcde", 2),
        ("You are terse.", 4),  # 14 ASCII characters: ceil(14 / 4)
        ("你好世界", 4),  # CJK: one token a character
        ("ab你好", 3),  # 2 CJK + ceil(2 / 4)
        ("東京タワー", 5),
        ("Москва", 4),  # two-byte characters: half wide, half narrow: 3 + ceil(3 / 4)
    ],
)
def test_estimate_text_exact(text: str, tokens: int) -> None:
    assert estimate_text(text) == tokens


def test_message_tokens_count_overhead_tool_calls_and_reported_usage() -> None:
    assert msg("user", "abcdefgh").token_count() == MESSAGE_OVERHEAD + 2
    call = tool_call(("c1", "read_file", '{"path": "a.py"}'))
    # content None; name 9 chars -> 3, arguments 16 chars -> 4
    assert call.token_count() == MESSAGE_OVERHEAD + 3 + 4
    reported = msg("assistant", "a" * 400).model_copy(update={"tokens": 7})
    assert reported.token_count() == 7
    parts = [{"type": "text", "text": "abcd"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert estimate_content(parts) == 1 + 85


# ---- estimates against real tokenizers -----------------------------------------------

# The estimate divided by a real tokenizer's count, per paragraph, must stay within these
# bounds. Measured over the paragraphs below (bpe-openai):
#   cl100k_base: 0.76 (SQL, JavaScript) .. 1.55 (Russian); English 1.14-1.37, CJK 0.83-1.12
#   o200k_base:  0.76 (SQL, JavaScript) .. 2.63 (Russian); CJK 1.11-1.62
# The low end is what matters for staying inside a window: code, at about three ASCII
# characters a token, is the only text the estimator undercounts, by up to a quarter.
# The high end is Cyrillic, which o200k packs densely while the estimator counts a two-byte
# character as 0.625 tokens. Margins: 0.1 below the lowest ratio, 0.25 above cl100k's highest
# and 0.35 above o200k's, so that another realistic paragraph does not make the test flaky,
# while real regressions still fail: CJK counted per byte (about 3x) or ASCII per character
# (about 4x) land far outside.
RATIO_BOUNDS: dict[str, tuple[float, float]] = {
    "cl100k_base": (0.65, 1.8),
    "o200k_base": (0.65, 3.0),
}
# Chinese and Japanese are "about one token a character" (the issue): a tighter band around
# cl100k's count, measured 0.83-1.12.
CJK_BOUNDS_CL100K = (0.75, 1.3)

PARAGRAPHS: dict[str, list[str]] = {
    "english": [
        "The quarterly report shows that revenue grew by twelve percent, driven mostly by the "
        "new subscription tier. Churn stayed flat, but support tickets doubled after the March "
        "release, which suggests the onboarding flow needs another look before we expand.",
        "When you branch a conversation, the parent keeps its history untouched and the child "
        "starts with a copy of every message. Later you can merge what the branch worked out "
        "back into the main line, either verbatim or as a short summary written by the model.",
        "Please remember to water the plants on the balcony while I am away; the tomatoes need "
        "a full can every evening, and the basil only every other day. The key is under the "
        "blue pot next to the door.",
    ],
    "code": [
        "def effective_budget(slot: Slot, window: int) -> ContextBudget:\n"
        '    """The slot\'s own budget when it has one."""\n'
        "    if slot.config.budget is not None:\n"
        "        return slot.config.budget\n"
        "    return ContextBudget.auto(window)\n",
        "for (let i = 0; i < items.length; i++) {\n  const item = items[i];\n"
        "  if (item.price > 100 && !item.discounted) {\n    total += item.price * 0.9;\n"
        "  } else {\n    total += item.price;\n  }\n}\n"
        "console.log(`total: ${total.toFixed(2)}`);\n",
        "SELECT u.id, u.email, COUNT(o.id) AS orders\nFROM users u\n"
        "LEFT JOIN orders o ON o.user_id = u.id\nWHERE u.created_at >= '2024-01-01'\n"
        "GROUP BY u.id, u.email\nHAVING COUNT(o.id) > 3\nORDER BY orders DESC;\n",
    ],
    "chinese": [
        "上下文窗口是模型一次能够处理的最大令牌数。当对话变得很长时，我们需要把较早的消息压缩成"
        "摘要，同时保留最近的几条消息，这样模型才能继续回答新的问题。",
        "今天下午三点在会议室讨论新版本的发布计划。产品经理希望在月底之前完成所有测试，但是开发"
        "团队认为时间太紧，建议推迟两周。最后大家同意先发布测试版。",
        "北京是中国的首都，也是全国的政治和文化中心。这座城市有三千多年的历史，拥有故宫、长城和"
        "天坛等许多著名的名胜古迹，每年吸引数百万游客前来参观。",
    ],
    "japanese": [
        "コンテキストウィンドウとは、モデルが一度に処理できるトークンの最大数のことです。会話が"
        "長くなると、古いメッセージを要約にまとめ、最近のメッセージだけを残す必要があります。",
        "明日の会議は午前十時から始まります。資料は前日までに共有フォルダにアップロードして"
        "ください。質問がある場合は、田中さんにメールで連絡してください。",
        "東京の桜は三月の終わりごろに咲き始め、四月の初めに満開になります。上野公園や目黒川には"
        "毎年たくさんの人が花見に訪れます。",
    ],
    "russian": [
        "Контекстное окно — это максимальное число токенов, которое модель может обработать за "
        "один раз. Когда разговор становится длинным, старые сообщения нужно сжимать в краткое "
        "изложение и оставлять только последние.",
        "Завтра в десять утра состоится совещание по новому выпуску. Пожалуйста, загрузите "
        "материалы в общую папку до вечера, вопросы присылайте Ивану по электронной почте.",
        "Москва — столица России и крупнейший город страны. Здесь находятся Кремль, Красная "
        "площадь и Большой театр, которые каждый год посещают миллионы туристов.",
    ],
    "mixed": [
        "The function 计算总价(items) returns the total price; если список пуст, it returns 0. "
        "詳しくはドキュメントを参照してください。",
        "Meeting notes (会议记录): we agreed to ship v2.1 on Friday. Иван отвечает за релиз, "
        "田中さん handles the Japanese docs, and 王芳 reviews the Chinese translation.",
        "Error: ファイルが見つかりません (file not found) at /home/user/数据/report.csv — "
        "проверьте путь и права доступа, then retry with --force.",
    ],
}


def ratios(encoding: str, script: str) -> list[float]:
    bpe_openai = pytest.importorskip("bpe_openai")
    encoder = bpe_openai.get_encoding(encoding)
    return [estimate_text(p) / len(encoder.encode(p)) for p in PARAGRAPHS[script]]


@pytest.mark.parametrize("encoding", sorted(RATIO_BOUNDS))
@pytest.mark.parametrize("script", sorted(PARAGRAPHS))
def test_estimate_is_within_tolerance_of_real_tokenizers(encoding: str, script: str) -> None:
    low, high = RATIO_BOUNDS[encoding]
    measured = ratios(encoding, script)
    assert all(low <= r <= high for r in measured), [round(r, 3) for r in measured]


@pytest.mark.parametrize("script", ["chinese", "japanese"])
def test_cjk_is_about_one_token_a_character(script: str) -> None:
    low, high = CJK_BOUNDS_CL100K
    measured = ratios("cl100k_base", script)
    assert all(low <= r <= high for r in measured), [round(r, 3) for r in measured]
    for paragraph in PARAGRAPHS[script]:
        assert estimate_text(paragraph) == len(paragraph)
