"""Settings of the loopback CAS server (django-cas-server) the CAS login tests sign in at: its own
Django project, its own SQLite database, the accounts of a JSON file (TESTKIT_CAS_DB,
TESTKIT_CAS_ACCOUNTS; testkit/cas/server.py sets them)."""

import os

SECRET_KEY = "testkit-cas-server-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",  # its login page's CSS and script, for the browser test
    "cas_server",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
ROOT_URLCONF = "testkit.cas.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ.get("TESTKIT_CAS_DB", ":memory:")}}
USE_TZ = True
STATIC_URL = "/static/"
# Its own cookie name: the gateway and this server share 127.0.0.1, and cookies ignore ports.
SESSION_COOKIE_NAME = "cas_sessionid"
CSRF_COOKIE_NAME = "cas_csrftoken"

CAS_AUTH_CLASS = "testkit.cas.accounts.FileAuthUser"
CAS_NEW_VERSION_HTML_WARNING = False  # it would ask pypi.org
CAS_NEW_VERSION_EMAIL_WARNING = False
CAS_SHOW_POWERED = False
CAS_INFO_MESSAGES_ORDER = []
# Nothing leaves loopback: no CSS or script from a CDN; jQuery is a stub its inline script can call.
CAS_COMPONENT_URLS = {
    **{name: "data:text/javascript," for name in ("bootstrap3_js", "bootstrap4_js", "html5shiv", "respond")},
    "bootstrap3_css": "data:text/css,",
    "bootstrap4_css": "data:text/css,",
    "jquery": "data:text/javascript,window.jQuery=window.%24=function(){}",
}
