"""Fixtures every app's tests build on."""
import pytest
from django.contrib.auth import get_user_model


@pytest.fixture
def password() -> str:
    return "s3cret-Pass!"


@pytest.fixture
def user(db, password):
    return get_user_model().objects.create_user(username="20230001", password=password, first_name="小明")


@pytest.fixture
def staff_user(db, password):
    return get_user_model().objects.create_user(username="teacher", password=password, is_staff=True, is_superuser=True)
