"""REST reads and writes outside the stream: agents, the caller's conversations (list, search,
rename, delete, setting the last turn aside for regenerate / edit), messages, answer feedback."""
import re

from asgiref.sync import async_to_sync
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.exceptions import NotFound
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response

from agents_app.access import agents_for, audience_of
from campus_agent.base import errors
from campus_agent.base.errors import INVALID_BODY
from campus_agent.base.text import text_clean
from chat_app.conversations.feedback import feedback_clear, feedback_set
from chat_app.conversations.selectors import (
    answer_get,
    conversation_get,
    conversation_list,
    conversation_search,
    feedback_get,
    message_list,
)
from chat_app.conversations.services import (
    NoTurn,
    TurnBusy,
    conversation_delete,
    conversation_rename,
    last_turn_supersede,
)
from chat_app.gateways.api.base import ApiView
from chat_app.gateways.api.serializers import (
    SEARCH_QUERY_MAX,
    AgentSerializer,
    ConversationSerializer,
    ConversationTitleSerializer,
    ErrorSerializer,
    FeedbackSerializer,
    MessageSerializer,
    SupersedeResponseSerializer,
)
from chat_app.runs.engine import runs_end_before_delete
from safety_app.reports import report_status_of

TURN_BUSY = 40901
NO_TURN = 40902
MSG_QUERY_TOO_LONG = format_lazy(_("q 不能超过 {limit} 个字符。"), limit=SEARCH_QUERY_MAX)
MSG_TURN_BUSY = _("这个对话正在回答中，请等回答结束后再试。")
MSG_NO_TURN = _("这个对话还没有可以重新生成的问题。")
MSG_ANSWER_NOT_FOUND = _("回答不存在。")
MSG_FEEDBACK_NOT_FOUND = _("还没有评价这个回答。")
MSG_PAGE_INVALID = _("page 必须是正整数（从 1 开始）。")
MSG_PAGE_PAST_END = _("没有这一页：page 超出了最后一页。")
_PAGE = re.compile(r"[1-9][0-9]{0,8}")


class Pages(PageNumberPagination):
    """DRF's page numbers with the API's errors: a `page` that is not a positive number is 400 (40001)
    and one past the last page 404 saying so (DRF's NotFound read "对话不存在。")."""

    page_size = 20
    page_size_query_param = "page_size"
    max_page_size = 100

    def paginate_queryset(self, queryset, request, view=None):
        raw = request.query_params.get(self.page_query_param)
        if raw and raw not in self.last_page_strings and not _PAGE.fullmatch(raw):
            raise errors.ApiError(MSG_PAGE_INVALID, code=INVALID_BODY, status=400)
        try:
            return super().paginate_queryset(queryset, request, view)
        except NotFound:
            raise errors.ApiError(MSG_PAGE_PAST_END, code=errors.NOT_FOUND, status=404) from None


class MessagePages(Pages):
    page_size = 100
    max_page_size = 500


@extend_schema(tags=["agents"], summary="你可用的智能体（只列你所在的用户组能用的；默认的排在最前）")
class AgentListView(ApiView, generics.ListAPIView):
    serializer_class = AgentSerializer
    pagination_class = None

    def get_queryset(self):
        return agents_for(audience=audience_of(user=self.request.user))  # agents_app.access: who sees what


@extend_schema(
    tags=["conversations"],
    summary="我的对话（最近更新的在前，分页；q 搜索标题和消息内容）",
    parameters=[
        OpenApiParameter("q", str, description=f"搜索词：标题或问答内容包含它（不区分大小写，≤ {SEARCH_QUERY_MAX} 个字符）")
    ],
)
class ConversationListView(ApiView, generics.ListAPIView):
    serializer_class = ConversationSerializer
    pagination_class = Pages

    def get_queryset(self):
        query = self.request.query_params.get("q", "")
        if len(query) > SEARCH_QUERY_MAX:
            raise errors.ApiError(MSG_QUERY_TOO_LONG, code=INVALID_BODY, status=400)
        # NUL cannot reach a PostgreSQL query. Dropping it searched for what was left, and a `q`
        # of NUL alone listed every conversation as a match: refused, as in every chat body.
        if "\x00" in query:
            raise errors.invalid_body(errors.MSG_NUL_CHARACTER.format(field="q"))
        # A lone surrogate cannot be encoded for the database: it becomes U+FFFD.
        query = text_clean(query).strip()
        if not query:
            return conversation_list(user=self.request.user)
        return conversation_search(user=self.request.user, query=query)


class _OwnConversationMixin:
    def get_conversation(self):
        conversation = conversation_get(user=self.request.user, conversation_id=self.kwargs["conversation_id"])
        if conversation is None:
            raise errors.not_found()  # another user's conversation looks exactly like a missing one
        return conversation


@extend_schema_view(
    patch=extend_schema(
        summary="重命名对话",
        request=ConversationTitleSerializer,
        responses={200: ConversationSerializer, 400: ErrorSerializer, 404: ErrorSerializer},
    )
)
@extend_schema(tags=["conversations"])
class ConversationDetailView(_OwnConversationMixin, ApiView, generics.RetrieveUpdateDestroyAPIView):
    serializer_class = ConversationSerializer
    http_method_names = ["get", "patch", "delete", "head", "options"]

    def get_object(self):
        return self.get_conversation()

    def patch(self, request, *args, **kwargs):
        conversation = self.get_conversation()
        body = ConversationTitleSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        conversation = conversation_rename(conversation=conversation, title=body.validated_data["title"])
        return Response(ConversationSerializer(conversation).data)

    def perform_destroy(self, instance):
        async_to_sync(runs_end_before_delete)(user_id=instance.user_id, conversation_id=instance.id)
        conversation_delete(conversation=instance)


@extend_schema(
    tags=["conversations"],
    summary="把最后一轮问答设为旧版本（重新生成 / 编辑后重发的第一步）",
    description="最后一个问题及其回答标记为 superseded：不再发给模型，页面作为旧版本显示。"
    "随后用 POST /api/v1/chat 发送同一问题（重新生成）或改过的问题（编辑后重发）。",
    request=None,
    responses={
        200: SupersedeResponseSerializer,
        404: ErrorSerializer,
        409: OpenApiResponse(ErrorSerializer, description="40901 正在回答中；40902 没有问题可以替换"),
    },
)
class LastTurnSupersedeView(_OwnConversationMixin, ApiView):
    def post(self, request, conversation_id):
        conversation = self.get_conversation()
        try:
            question = last_turn_supersede(conversation=conversation)
        except TurnBusy:
            raise errors.ApiError(MSG_TURN_BUSY, code=TURN_BUSY, status=409) from None
        except NoTurn:
            raise errors.ApiError(MSG_NO_TURN, code=NO_TURN, status=409) from None
        return Response({"question": question.content, "message_id": str(question.id)})


@extend_schema(tags=["conversations"], summary="对话中的消息（按时间正序，分页）")
class MessageListView(_OwnConversationMixin, ApiView, generics.ListAPIView):
    serializer_class = MessageSerializer
    pagination_class = MessagePages

    def get_queryset(self):
        # Each with the status of the caller's report of it (null: not reported), so a page or
        # an app shows an answer as reported after a reload.
        return message_list(conversation=self.get_conversation()).annotate(
            report_status=report_status_of(user=self.request.user)
        )


@extend_schema_view(
    get=extend_schema(summary="我对这个回答的评价", responses={200: FeedbackSerializer, 404: ErrorSerializer}),
    put=extend_schema(
        summary="评价回答（赞 / 踩，可附意见；再次提交即替换）",
        request=FeedbackSerializer,
        responses={200: FeedbackSerializer, 400: ErrorSerializer, 404: ErrorSerializer},
    ),
    delete=extend_schema(summary="撤销评价", responses={204: None, 404: ErrorSerializer}),
)
@extend_schema(tags=["feedback"])
class AnswerFeedbackView(ApiView):
    serializer_class = FeedbackSerializer

    def _answer(self):
        answer = answer_get(user=self.request.user, message_id=self.kwargs["message_id"])
        if answer is None:
            raise errors.ApiError(MSG_ANSWER_NOT_FOUND, code=errors.NOT_FOUND, status=404)
        return answer

    def get(self, request, message_id):
        feedback = feedback_get(user=request.user, message=self._answer())
        if feedback is None:
            raise errors.ApiError(MSG_FEEDBACK_NOT_FOUND, code=errors.NOT_FOUND, status=404)
        return Response(FeedbackSerializer(feedback).data)

    def put(self, request, message_id):
        answer = self._answer()
        body = FeedbackSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        feedback = feedback_set(user=request.user, message=answer, **body.validated_data)
        return Response(FeedbackSerializer(feedback).data)

    def delete(self, request, message_id):
        feedback_clear(user=request.user, message=self._answer())
        return Response(status=status.HTTP_204_NO_CONTENT)
