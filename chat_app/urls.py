"""chat_app's routes, mounted at the site's root by campus_agent/urls.py: the API (`/api/v1/…`),
the OpenAI-compatible API (`/v1/…`) and the student page."""
from django.urls import include, path

urlpatterns = [
    path("api/v1/", include("chat_app.gateways.api.urls")),
    path("v1/", include("chat_app.gateways.openai.urls")),  # the OpenAI-compatible API (docs/clients.md)
    path("", include("chat_app.gateways.page.urls")),
]
