"""drf-spectacular extension: documents JwtAuthentication as HTTP bearer auth."""
from drf_spectacular.extensions import OpenApiAuthenticationExtension


class JwtAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "chat_app.authentication.JwtAuthentication"
    name = "jwtAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}


class SessionAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "chat_app.authentication.SessionAuthentication"
    name = "cookieAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": "sessionid", "description": "页面的 Django 会话（POST 需 X-CSRFToken）"}
