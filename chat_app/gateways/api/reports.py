"""Reports of answers (举报, docs/safety.md#reports-举报): `POST /api/v1/messages/<id>/report`.

The gateway finds the student's answer and copies its turn's text; safety_app files the report.
"""
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.response import Response

from campus_agent.base import errors
from chat_app.conversations.selectors import answer_turn, message_get
from chat_app.gateways.api.base import ApiView
from chat_app.gateways.api.serializers import ErrorSerializer, ReportRequestSerializer, ReportSerializer
from chat_app.models import Message
from safety_app.reports import REPORT_WINDOW_SEC, ReportRateLimited, report_file

NOT_AN_ANSWER = 40002
REPORTS_RATE_LIMITED = 42908
MSG_MESSAGE_NOT_FOUND = _("消息不存在。")
MSG_NOT_AN_ANSWER = _("只能举报 AI 的回答，不能举报提问或工具结果。")
MSG_REPORTS_RATE_LIMITED = _("举报太频繁了（每小时最多 {limit} 次），请稍后再试。")


@extend_schema(
    tags=["feedback"],
    summary="举报回答（违法违规、色情低俗、虚假错误等；再次举报同一回答返回原来的举报）",
    request=ReportRequestSerializer,
    responses={
        201: OpenApiResponse(ReportSerializer, description="新的举报"),
        200: OpenApiResponse(ReportSerializer, description="你已举报过这个回答：原来的举报及其处理状态"),
        400: OpenApiResponse(ErrorSerializer, description="40001 请求体不对；40002 不是 AI 的回答"),
        404: ErrorSerializer,
        429: OpenApiResponse(ErrorSerializer, description="42908 一小时内新举报超过 REPORTS_PER_HOUR"),
    },
)
class AnswerReportView(ApiView):
    def post(self, request, message_id):
        message = message_get(user=request.user, message_id=message_id)
        if message is None:  # another user's message looks exactly like a missing one
            raise errors.ApiError(MSG_MESSAGE_NOT_FOUND, code=errors.NOT_FOUND, status=404)
        if message.role != Message.Role.ASSISTANT:
            raise errors.ApiError(MSG_NOT_AN_ANSWER, code=NOT_AN_ANSWER, status=400)
        body = ReportRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        question, answer = answer_turn(answer=message)
        try:
            filed = report_file(
                user=request.user,
                message_id=message.id,
                conversation_id=message.conversation_id,
                question=question,
                answer=answer,
                agent_name=message.agent_name,
                request=request,
                **body.validated_data,
            )
        except ReportRateLimited as exc:
            raise errors.ApiError(
                format_lazy(MSG_REPORTS_RATE_LIMITED, limit=exc.limit),
                code=REPORTS_RATE_LIMITED,
                status=429,
                headers={"Retry-After": str(REPORT_WINDOW_SEC)},
            ) from None
        return Response(ReportSerializer(filed.report).data, status=201 if filed.created else 200)
