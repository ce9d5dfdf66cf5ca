"""The campus knowledge base (docs/design.md#the-knowledge-base): collections of documents staff
keep, cut into passages that search finds and the agent cites.

Who may read a collection is decided by its groups, as for agents, MCP services and sub-agents
(docs/design.md#campus-identity-and-audit): none means everyone.
"""

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from simple_history.models import HistoricalRecords

from campus_agent.base.models import TimeStampedModel
from knowledge_app.synonyms import SYNONYMS_MAX_CHARS

# `search_<slug>` is the collection's tool name (`-` → `_`): the slug keeps it a valid tool name.
SLUG_PATTERN = r"^[a-z][a-z0-9-]{1,40}$"
MSG_SLUG = "以小写字母开头，只含小写字母、数字和 -，2–41 个字符。"


class KnowledgeCollection(TimeStampedModel):
    slug = models.CharField(
        "标识", max_length=41, unique=True, validators=[RegexValidator(SLUG_PATTERN, MSG_SLUG)],
        help_text="工具名为 search_<标识>（- 换成 _）。" + MSG_SLUG,
    )
    name = models.CharField("名称", max_length=100)
    description = models.TextField(
        "说明", help_text="模型据此决定何时检索这个知识库：写清它收了哪些文件、能回答哪类问题（如“学生手册、转专业、请假”）。"
    )
    enabled = models.BooleanField("启用", default=True)
    synonyms = models.TextField(
        "同义词", blank=True, default="", max_length=SYNONYMS_MAX_CHARS,
        help_text="学生的说法和文件的说法，每行一组，用空格或逗号分隔，如“宿舍 寝室 宿舍楼”“不及格 挂科 挂了”。"
                  "问题里出现一组中的某个词时，也按同组的其他词检索（关键词检索）。",
    )
    allowed_groups = models.ManyToManyField(
        "auth.Group", blank=True, related_name="+", verbose_name="可用的组", help_text="不选：所有人可用。"
    )
    # As the rest of the catalog: every change kept, shown as a diff and rolled back from admin.
    history = HistoricalRecords(m2m_fields=["allowed_groups"])

    class Meta:
        verbose_name = verbose_name_plural = "知识库"
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name

    @property
    def tool_name(self) -> str:
        return "search_" + self.slug.replace("-", "_")


class KnowledgeDocument(TimeStampedModel):
    class Status(models.TextChoices):
        WAITING = "waiting", "等待索引"
        INDEXING = "indexing", "索引中"
        READY = "ready", "可检索"
        FAILED = "failed", "失败"

    collection = models.ForeignKey(
        KnowledgeCollection, on_delete=models.CASCADE, related_name="documents", verbose_name="知识库"
    )
    title = models.CharField("标题", max_length=200)
    file = models.FileField("文件", upload_to="knowledge/%Y/%m/", max_length=300)
    file_name = models.CharField("原文件名", max_length=255, blank=True, default="")
    content_type = models.CharField("类型", max_length=100, blank=True, default="")
    size = models.PositiveBigIntegerField("大小（字节）", default=0)
    content_hash = models.CharField("内容哈希", max_length=64, help_text="文件内容的 SHA-256：同一知识库里相同内容只收一次。")
    pages = models.PositiveIntegerField("页数", null=True, blank=True)
    status = models.CharField("状态", max_length=10, choices=Status.choices, default=Status.WAITING)
    progress = models.PositiveSmallIntegerField("进度（%）", default=0)
    error = models.TextField("失败原因", blank=True, default="")
    passage_count = models.PositiveIntegerField("段落数", default=0)
    indexed_at = models.DateTimeField("索引完成时间", null=True, blank=True)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        verbose_name="上传者",
    )

    class Meta:
        verbose_name = verbose_name_plural = "知识库文件"
        ordering = ["collection", "title"]
        constraints = [
            models.UniqueConstraint(fields=["collection", "content_hash"], name="knowledge_document_once_per_collection")
        ]

    def __str__(self) -> str:
        return self.title


class KnowledgePassage(models.Model):
    """One passage of a document, as search finds it and the tool cites it: its text, the heading
    path above it (「第三章 学籍管理 › 第二十条」) and the page it starts on. A document's passages
    are replaced in one transaction when it is indexed again, so a search never sees half of it."""

    document = models.ForeignKey(
        KnowledgeDocument, on_delete=models.CASCADE, related_name="passages", verbose_name="文件"
    )
    seq = models.PositiveIntegerField("序号")
    text = models.TextField("内容")
    heading = models.CharField("标题路径", max_length=500, blank=True, default="")
    page = models.PositiveIntegerField("页码", null=True, blank=True)

    class Meta:
        verbose_name = verbose_name_plural = "知识库段落"
        ordering = ["document", "seq"]
        constraints = [models.UniqueConstraint(fields=["document", "seq"], name="knowledge_passage_seq_unique")]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.seq}"
