from asgiref.sync import sync_to_async
from django.db import connection
from django.http import JsonResponse
from loguru import logger


def _database_ping() -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    finally:
        connection.close()


async def healthz(request):
    """200 `{"status": "ok", "db": "ok"}`; 503 when the database does not answer."""
    try:
        await sync_to_async(_database_ping, thread_sensitive=False)()
    except Exception as exc:  # any driver error means "not healthy", never a traceback
        logger.warning("healthz: database unavailable: {}", type(exc).__name__)
        return JsonResponse({"status": "degraded", "db": "unavailable"}, status=503)
    return JsonResponse({"status": "ok", "db": "ok"})
