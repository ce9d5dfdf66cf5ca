"""ASGI entry point; runs under daphne (`manage.py runserver`, `daphne`) and uvicorn alike."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "campus_agent.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402  (needs Django set up first)

from chat_app.runs.supervisor import supervisor_ensure  # noqa: E402


async def http_app(scope, receive, send):
    # The composition root starts each worker's run supervisor with its first request, so a
    # restarted worker finishes the runs its predecessor left (DESIGN §4a). A dict lookup after that.
    supervisor_ensure()
    await django_asgi_app(scope, receive, send)


application = ProtocolTypeRouter({"http": http_app})
