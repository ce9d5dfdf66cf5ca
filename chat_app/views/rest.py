"""REST reads and deletes: agents, the caller's conversations and their messages."""
from drf_spectacular.utils import extend_schema
from rest_framework import generics
from rest_framework.pagination import PageNumberPagination

from chat_app import api_errors as errors
from chat_app.selectors import agent_list, conversation_get, conversation_list, message_list
from chat_app.serializers import AgentSerializer, ConversationSerializer, MessageSerializer
from chat_app.services.conversations import conversation_delete
from chat_app.views.base import ApiView


class Pages(PageNumberPagination):
    page_size = 20
    page_size_query_param = "page_size"
    max_page_size = 100


class MessagePages(Pages):
    page_size = 100
    max_page_size = 500


@extend_schema(tags=["agents"], summary="可用的智能体（默认的排在最前）")
class AgentListView(ApiView, generics.ListAPIView):
    serializer_class = AgentSerializer
    pagination_class = None

    def get_queryset(self):
        return agent_list()


@extend_schema(tags=["conversations"], summary="我的对话（最近更新的在前，分页）")
class ConversationListView(ApiView, generics.ListAPIView):
    serializer_class = ConversationSerializer
    pagination_class = Pages

    def get_queryset(self):
        return conversation_list(user=self.request.user)


class _OwnConversationMixin:
    def get_conversation(self):
        conversation = conversation_get(user=self.request.user, conversation_id=self.kwargs["conversation_id"])
        if conversation is None:
            raise errors.not_found()  # another user's conversation looks exactly like a missing one
        return conversation


@extend_schema(tags=["conversations"])
class ConversationDetailView(_OwnConversationMixin, ApiView, generics.RetrieveDestroyAPIView):
    serializer_class = ConversationSerializer

    def get_object(self):
        return self.get_conversation()

    def perform_destroy(self, instance):
        conversation_delete(conversation=instance)


@extend_schema(tags=["conversations"], summary="对话中的消息（按时间正序，分页）")
class MessageListView(_OwnConversationMixin, ApiView, generics.ListAPIView):
    serializer_class = MessageSerializer
    pagination_class = MessagePages

    def get_queryset(self):
        return message_list(conversation=self.get_conversation())
