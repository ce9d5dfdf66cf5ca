"""Test doubles of chat_app: a campus OpenID Connect provider on loopback."""
