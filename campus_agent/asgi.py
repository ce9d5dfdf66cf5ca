"""ASGI entry point; runs under daphne (`manage.py runserver`, `daphne`) and uvicorn alike."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "campus_agent.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402  (needs Django set up first)
from django.conf import settings  # noqa: E402

from chat_app.runs.supervisor import supervisor_ensure  # noqa: E402
from subagents_app.demo.library_a2a import LIBRARY_PATH, library_app  # noqa: E402


async def http_app(scope, receive, send):
    # The composition root starts each worker's run supervisor with its first request, so a
    # restarted worker finishes the runs its predecessor left (DESIGN §4a). A dict lookup after that.
    supervisor_ensure()
    if settings.DEMO_ENABLED and scope["path"].startswith(LIBRARY_PATH + "/"):
        # The demo A2A agent is an a2a-sdk (Starlette) app, served beside Django as the demo
        # seed-contract sub-agents are under the same /demo/subagents/ prefix.
        await library_app()(scope, receive, send)
        return
    await django_asgi_app(scope, receive, send)


application = ProtocolTypeRouter({"http": http_app})
