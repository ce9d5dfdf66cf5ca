from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from campus_agent.health import healthz
from campus_agent.metrics_view import metrics
from chat_app.accounts.login_forms import AdminLoginForm

admin.site.site_header = "校园小智 管理后台"
admin.site.site_title = "校园小智"
admin.site.index_title = "智能体与服务管理"
# Failed staff logins are throttled like every other login (chat_app/accounts/throttle.py).
admin.site.login_form = AdminLoginForm

# Django's own refusals as JSON under the API prefixes, pages elsewhere (campus_agent/refusals.py).
handler400 = "campus_agent.refusals.bad_request"
handler403 = "campus_agent.refusals.permission_denied"
handler404 = "campus_agent.refusals.page_not_found"
handler500 = "campus_agent.refusals.server_error"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
]
if settings.DEMO_ENABLED:
    # Issue #6's demo sub-agents answer anyone, unauthenticated: mounted only where asked for
    # (scripts/run.sh), never by default in a deployment.
    urlpatterns.append(path("demo/subagents/", include("demo_app.subagents.urls")))
urlpatterns.append(path("", include("chat_app.urls")))
