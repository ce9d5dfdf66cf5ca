"""The moderation word lists (docs/design.md#content-safety-and-labels, docs/staff.md)."""

from django.core.exceptions import ValidationError
from django.db import models

from safety_app.matcher import word_key

MSG_WORD_SEPARATORS_ONLY = "去掉空格和标点后这个词什么也不剩，无法匹配。"

# Where a list applies: the student's question, the model's answer, its reasoning.
STAGES = ("question", "answer", "reasoning")


class WordList(models.Model):
    class Action(models.TextChoices):
        BLOCK = "block", "拦截"
        MASK = "mask", "打码"

    name = models.CharField("名称", max_length=100, unique=True)
    category = models.CharField("类别", max_length=50, help_text="命中时记录并告诉客户端的类别，如“涉政”“色情”“广告”。")
    action = models.CharField(
        "处理方式",
        max_length=10,
        choices=Action.choices,
        default=Action.BLOCK,
        help_text="拦截：问题不发给模型，回答以固定提示结束；打码：把词换成 *。",
    )
    question = models.BooleanField("检查提问", default=True, help_text="学生发出的问题。")
    answer = models.BooleanField("检查回答", default=True, help_text="模型给出的回答。")
    reasoning = models.BooleanField("检查思考过程", default=True, help_text="模型展示的思考过程。")
    enabled = models.BooleanField("启用", default=True)
    updated_at = models.DateTimeField("更新时间", auto_now=True)

    class Meta:
        verbose_name = verbose_name_plural = "敏感词表"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def stages(self) -> tuple[str, ...]:
        return tuple(stage for stage in STAGES if getattr(self, stage))


class ListWord(models.Model):
    word_list = models.ForeignKey(WordList, on_delete=models.CASCADE, related_name="words", verbose_name="词表")
    word = models.CharField(
        "词",
        max_length=100,
        help_text="匹配时忽略全角/半角、大小写，以及字之间插入的空格和标点。",
    )

    class Meta:
        verbose_name = verbose_name_plural = "敏感词"
        constraints = [models.UniqueConstraint(fields=["word_list", "word"], name="list_word_unique")]

    def __str__(self) -> str:
        return self.word

    def clean(self) -> None:
        if not word_key(self.word):
            raise ValidationError({"word": MSG_WORD_SEPARATORS_ONLY})


class WordListStamp(models.Model):
    """One row whose `token` a database trigger replaces at every write to the word lists
    (safety_app.lists_cache): a worker rebuilds its automaton only when the token has changed."""

    token = models.CharField("版本标记", max_length=32)

    class Meta:
        verbose_name = verbose_name_plural = "词表版本标记"

    def __str__(self) -> str:
        return self.token
