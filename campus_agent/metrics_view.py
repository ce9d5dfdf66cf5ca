"""`GET /metrics` (docs/design.md#cross-cutting-rules): the Prometheus text, only for `Authorization: Bearer <METRICS_TOKEN>`.
Without METRICS_TOKEN the endpoint does not exist (404, as any unknown path); a wrong or missing
token is 404 too, so a scanner learns nothing. The token is compared in constant time."""
from django.conf import settings
from django.http import Http404, HttpResponse
from django.utils.crypto import constant_time_compare
from prometheus_client import CONTENT_TYPE_LATEST

from campus_agent.base.asyncdb import db_call
from campus_agent.base.metrics import metrics_text


def _allowed(request) -> bool:
    expected = settings.METRICS_TOKEN
    if not expected:
        return False
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, token = header.partition(" ")
    return scheme.lower() == "bearer" and constant_time_compare(token.strip(), expected)


async def metrics(request):
    if request.method not in ("GET", "HEAD") or not _allowed(request):
        raise Http404
    # Reading the multiprocess files and the scrape-time gauges (cache, database) is sync work, on
    # the database threads: a thread of asgiref's default executor kept the connection it opened
    # (on PostgreSQL a pool connection checked out for good, one per executor thread).
    body = await db_call(metrics_text)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
