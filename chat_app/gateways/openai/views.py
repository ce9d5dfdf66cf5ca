"""The OpenAI-compatible API at `/v1` (docs/design.md#other-clients, docs/clients.md): `GET /v1/models`,
`GET /v1/models/<id>`, `POST /v1/chat/completions` (stream and not).

A completion is one turn run through chat_app.gateways.inbound, like every inbound protocol's: the same
admission (limits, quota), the question stored before the model is called, the reply stored when
the run ends. The wire format is chat_app.gateways.openai.wire. Plain async Django views, not DRF (DRF
would buffer the stream), served without a thread per request (campus_agent.stream_handler).

Unlike `POST /api/v1/chat`, a client of this API has no way back into a run: when it hangs up
(Django cancels the view, or closes the stream's generator) the run is stopped, and its reply
so far is stored as interrupted. An answer that waits for a person's approval is the one
exception: the client is told to decide on the page, and the run waits there.
"""
import asyncio
import time
from contextlib import aclosing

import filetype
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import JsonResponse, StreamingHttpResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from loguru import logger

from agents_app.access import agent_for, agents_for, audience_of
from campus_agent.base import errors
from campus_agent.base.asyncdb import db_call
from campus_agent.base.json_body import JsonBodyRefused, json_object_read
from campus_agent.base.sse import PING_FRAME
from campus_agent.base.tasks import background
from chat_app.accounts.authentication import Caller, bearer_token, chat_caller_cached
from chat_app.conversations.services import conversation_for_client_history
from chat_app.conversations.uploads import upload_store
from chat_app.gateways.catalog import turn_tool_labels
from chat_app.gateways.inbound import PING, InboundTurn, bearer_caller, inbound_turn_start
from chat_app.gateways.openai import wire
from chat_app.runs.chat_input import ChatInput
from safety_app.labels import aigc_label


async def _stop(turn: InboundTurn, why: str) -> None:
    logger.debug("openai client {}: stopping run={}", why, turn.run_id)
    await turn.stop("client_gone")


def _method_not_allowed(allowed: str) -> JsonResponse:
    response = wire.error_response(wire.OpenAiError(errors.MSG_METHOD, status=405, code="method_not_allowed"))
    response["Allow"] = allowed
    return response


async def _caller(request) -> Caller:
    """The Bearer's caller: a JWT checked a moment ago is trusted without I/O, as by the chat
    stream (chat_app.accounts.session_cache); an API key is checked on its row every time (revoked: refused
    at once)."""
    return chat_caller_cached(request) or await bearer_caller(bearer_token(request))


def _model(agent) -> dict:
    return {"id": agent.slug, "object": "model", "created": int(agent.created_at.timestamp()),
            "owned_by": wire.OWNED_BY}


def _models_list(user) -> list[dict]:
    return [_model(agent) for agent in agents_for(audience=audience_of(user=user))]


def _model_get(slug: str, user) -> dict | None:
    agent = agent_for(audience=audience_of(user=user), slug=slug)
    return _model(agent) if agent is not None else None


@csrf_exempt  # Bearer only: no cookie is looked at (a DELETE was a CSRF failure, not a 405)
async def models(request):
    """`GET /v1/models`: the enabled agents the caller's groups may use (agents_app.access), the
    default first."""
    if request.method != "GET":
        return _method_not_allowed("GET")
    try:
        caller = await _caller(request)
    except errors.ApiError as exc:
        return wire.error_response(exc)
    return JsonResponse({"object": "list", "data": await db_call(_models_list, caller.user)},
                        json_dumps_params={"ensure_ascii": False})


@csrf_exempt
async def model_detail(request, model_id: str):
    """`GET /v1/models/<id>`: one of them, or 404 (the SDK's `models.retrieve`), as for one the
    caller's groups may not use."""
    if request.method != "GET":
        return _method_not_allowed("GET")
    try:
        caller = await _caller(request)
        found = await db_call(_model_get, model_id[:256], caller.user)
        if found is None:
            raise wire.model_not_found(model_id)
    except errors.ApiError as exc:
        return wire.error_response(exc)
    return JsonResponse(found, json_dumps_params={"ensure_ascii": False})


def _request_read(request) -> wire.CompletionRequest:
    try:
        body = json_object_read(request, max_bytes=settings.OPENAI_API_BODY_MAX_BYTES)
    except JsonBodyRefused as exc:
        raise errors.ApiError(exc.message, code=exc.code, status=exc.status) from None
    return wire.completion_request_parse(body=body, conversation_header=request.META.get(wire.CONVERSATION_META))


IMAGE_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif"}


def _images_store(*, user, images: tuple[bytes, ...]) -> tuple:
    """The question's images kept as the caller's uploads, as `POST /api/v1/uploads` keeps a file
    (the same checks, rate and quota: chat_app.conversations.uploads), named 图片1.png …; their
    ids, the question's attachments."""
    ids = []
    for number, data in enumerate(images, start=1):
        extension = IMAGE_EXTENSIONS.get(filetype.guess_mime(data), "img")
        ids.append(upload_store(user=user, uploaded=SimpleUploadedFile(f"图片{number}.{extension}", data)).id)
    return tuple(ids)


def _stop_when_started(task: asyncio.Task) -> None:
    if task.cancelled() or task.exception() is not None:
        return  # nothing was admitted
    background(_stop(task.result(), "left during admission"))


async def _start(caller: Caller, chat: ChatInput, request_id: str) -> InboundTurn:
    """Admission runs to its end even when the client leaves meanwhile (its thread cannot be
    stopped half-way); a turn admitted so is stopped at once: nobody will read it."""
    starting = asyncio.ensure_future(inbound_turn_start(caller=caller, chat=chat, request_id=request_id))
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        starting.add_done_callback(_stop_when_started)
        raise


class _Answer:
    """One completion being written: the run's frames through a wire.Translation. Whoever sees
    the client go before the answer is complete calls `abandon()` (once is enough)."""

    def __init__(self, *, request, turn: InboundTurn, asked: wire.CompletionRequest, created: int):
        self.turn = turn
        self.complete = False
        self._abandoned = False
        self._loop = asyncio.get_running_loop()
        self.completion_id = f"chatcmpl-{turn.run.id.hex}"
        self.created, self.model = created, asked.model
        page = reverse("chat-conversation", kwargs={"conversation_id": turn.conversation_id})
        self.translation = wire.Translation(page_url=request.build_absolute_uri(page))
        self._labels_loaded = False

    def label(self) -> dict:
        """The answer's implicit label: its stored message, and who answered once `done` said."""
        return aigc_label(produce_id=self.turn.message_id, provider=self.translation.provider,
                          model=self.translation.model)

    def abandon(self) -> None:
        """Nobody will read the rest: the run is stopped (in the background; from any thread)."""
        if self.complete or self._abandoned:
            return
        self._abandoned = True
        self._loop.call_soon_threadsafe(background, _stop(self.turn, "hung up"))

    async def pieces(self, *, pings: bool):
        """(kind, text) pieces of the answer until it is complete; with `pings`, None for a
        keep-alive."""
        async with aclosing(self.turn.frames(pings=pings)) as frames:
            async for frame in frames:
                if frame is PING:
                    yield None
                    continue
                if frame["type"] == "tool_call" and not self._labels_loaded:
                    self._labels_loaded = True  # the names staff gave the tools, read once per answer
                    self.translation.labels = await db_call(turn_tool_labels)
                for piece in self.translation.feed(frame):
                    yield piece
                if self.translation.ended:
                    return


class _CompletionStream(StreamingHttpResponse):
    """The stream's response. Django closes every response it sent, also when the client went
    before the body's first chunk (its generator then never started, so the generator's own
    `finally` never ran): an answer not complete by then is abandoned."""

    def __init__(self, answer: _Answer, *, include_usage: bool):
        super().__init__(_stream(answer, include_usage=include_usage), content_type="text/event-stream; charset=utf-8")
        self.answer = answer
        self["Cache-Control"] = "no-cache"
        self["X-Accel-Buffering"] = "no"

    def close(self) -> None:
        super().close()
        self.answer.abandon()


async def _stream(answer: _Answer, *, include_usage: bool):
    encoder = wire.ChunkEncoder(completion_id=answer.completion_id, created=answer.created, model=answer.model)
    try:
        yield encoder.role()
        async with aclosing(answer.pieces(pings=True)) as pieces:
            async for piece in pieces:
                yield PING_FRAME if piece is None else encoder.piece(*piece)
        answer.complete = True
        yield encoder.finish(answer.translation.finish_reason, aigc=answer.label(), sources=answer.translation.sources)
        if include_usage:
            yield encoder.usage(answer.translation.usage)
        yield wire.DONE_FRAME
    finally:
        answer.abandon()  # cancelled (the client hung up) or closed before the end; else nothing


async def _complete(answer: _Answer) -> JsonResponse:
    content, reasoning = [], []
    try:
        async with aclosing(answer.pieces(pings=False)) as pieces:
            async for kind, text in pieces:
                (content if kind == "content" else reasoning).append(text)
        answer.complete = True
    finally:
        answer.abandon()  # cancelled: the client hung up
    body = wire.completion_body(
        completion_id=answer.completion_id, created=answer.created, model=answer.model, content="".join(content),
        reasoning="".join(reasoning), finish_reason=answer.translation.finish_reason,
        usage=answer.translation.usage, conversation_id=answer.turn.conversation_id, aigc=answer.label(),
        sources=answer.translation.sources,
    )
    return JsonResponse(body, json_dumps_params={"ensure_ascii": False})


@csrf_exempt  # Bearer only: no cookie is looked at
async def chat_completions(request):
    """`POST /v1/chat/completions`: 401 → 413/415/400 (the body, read only once the caller is
    known) → 429 / 404 (limits, conversation, model) → the answer."""
    if request.method != "POST":
        return _method_not_allowed("POST")
    created = int(time.time())
    asked = None
    try:
        caller = await _caller(request)
        asked = _request_read(request)
        conversation_id = asked.conversation_id
        if conversation_id is None and asked.earlier_questions:
            conversation_id = await db_call(
                conversation_for_client_history, user=caller.user, questions=list(asked.earlier_questions),
                answers=list(asked.earlier_answers), question=asked.question,
            )
        # A history that continues no stored conversation opens the new one: the model keeps the
        # client's context (an edited or branched chat, one started elsewhere).
        opening = wire.client_opening(asked.earlier) if conversation_id is None else ()
        attachments = await db_call(_images_store, user=caller.user, images=asked.images) if asked.images else ()
        chat = ChatInput(message=asked.question, conversation_id=conversation_id, agent=asked.model, hint_domain=None,
                         opening=opening, attachments=attachments)
        turn = await _start(caller, chat, request.request_id)
    except errors.ApiError as exc:
        if asked is not None and exc.message == errors.MSG_AGENT_UNKNOWN:
            exc = wire.model_not_found(asked.model)
        return wire.error_response(exc)
    answer = _Answer(request=request, turn=turn, asked=asked, created=created)
    if asked.stream:
        response = _CompletionStream(answer, include_usage=asked.include_usage)
    else:
        response = await _complete(answer)
    response[wire.CONVERSATION_HEADER] = turn.conversation_id
    return response
