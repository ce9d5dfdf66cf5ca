"""Routes of the server-rendered student page (/, login, logout)."""

urlpatterns: list = []
