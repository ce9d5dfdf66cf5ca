"""Routes of the server-rendered student page (/, a stored conversation, login, logout)."""
from django.contrib.auth import views as auth_views
from django.urls import path

from chat_app import pages

urlpatterns = [
    path("", pages.chat_page, name="chat"),
    path("c/<uuid:conversation_id>/", pages.chat_page, name="chat-conversation"),
    path("login/", pages.LoginPage.as_view(), name="login"),
    # Django 5 logs out on POST only (a GET link could be forged by any page); the sidebar posts a form.
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
]
