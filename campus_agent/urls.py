from django.contrib import admin
from django.urls import include, path

from campus_agent.health import healthz

admin.site.site_header = "校园小智 管理后台"
admin.site.site_title = "校园小智"
admin.site.index_title = "智能体与服务管理"

handler404 = "chat_app.api_errors.page_not_found"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("api/v1/", include("chat_app.api_urls")),
    path("demo/subagents/", include("subagents_app.demo.urls")),  # issue #6: demo sub-agents
    path("", include("chat_app.page_urls")),
]
