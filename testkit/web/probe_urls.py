"""A URLconf for tests: an async view that reports how it was reached."""
import asyncio
import os
import sys
import threading

from django.http import JsonResponse
from django.urls import path

from campus_agent.base.request_id import request_id_get

_ASGIREF_SYNC = os.path.join("asgiref", "sync.py")


def _frames():
    frame = sys._getframe(1)
    while frame is not None:
        yield frame.f_code.co_filename, frame.f_code.co_name
        frame = frame.f_back


async def probe(request):
    """`via_async_to_sync` is true when something synchronous sits in front of this view: Django
    then runs the sync part in a thread and re-enters the event loop through asgiref's
    AsyncToSync, whose `main_wrap` coroutine is at the bottom of this view's stack."""
    via_async_to_sync = any(name == "main_wrap" and file.endswith(_ASGIREF_SYNC) for file, name in _frames())
    return JsonResponse(
        {
            "thread": threading.current_thread().name,
            "loop_running": asyncio.get_running_loop().is_running(),
            "via_async_to_sync": via_async_to_sync,
            "request_id": request_id_get(),
        }
    )


class SyncOnlyMiddleware:
    """What the project must never have in front of async views (used as a control)."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)


urlpatterns = [path("probe", probe)]
