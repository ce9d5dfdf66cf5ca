"""/api/v1/… routes (chat stream, auth, REST)."""

urlpatterns: list = []
