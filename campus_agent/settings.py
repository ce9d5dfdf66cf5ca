"""Settings for Campus Agent, all read from the environment (and `.env` when present).

Every variable is documented in `.env.example`; each has a default that runs the product on a
fresh machine (SQLite, no model configured, no Redis).
"""
import ipaddress
import os
import re
import sys
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from campus_agent.base.hosts import hosts_local_only
from campus_agent.base.tracing import tracing_exporters
from campus_agent.base.version import VERSION

BASE_DIR = Path(__file__).resolve().parent.parent

# Every variable these settings read, filled as they read it: a catalog file may never read one
# of them, whatever CATALOG_ENV_ALLOWED says (docs/security.md, "Catalog files and environment
# variables"). A live set, so a setting read further down is in it too.
SETTINGS_ENV_NAMES: set[str] = set()


class _Env(environ.Env):
    def get_value(self, var, *args, **kwargs):
        SETTINGS_ENV_NAMES.add(var)
        return super().get_value(var, *args, **kwargs)


env = _Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

# --- core -------------------------------------------------------------------------------------
DEBUG = env.bool("DEBUG", default=False)
# The default key only serves a local demo; production sets SECRET_KEY.
DEV_SECRET_KEY = "dev-insecure-campus-agent-change-me-0123456789abcdef"
SECRET_KEY = env.str("SECRET_KEY", default=DEV_SECRET_KEY)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", "testserver"])
# The key also signs the API's JWTs: a published key served to other machines would let anyone
# mint a token for any user. The README's local defaults (loopback hosts) keep working.
if SECRET_KEY == DEV_SECRET_KEY and not DEBUG and not hosts_local_only(ALLOWED_HOSTS):
    raise ImproperlyConfigured(
        "SECRET_KEY is the published development default while DEBUG is off and ALLOWED_HOSTS "
        f"names other machines ({', '.join(ALLOWED_HOSTS)}). Set SECRET_KEY to a long random value "
        "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))')."
    )
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
# A failed CSRF check as JSON under the API prefixes, the site's page elsewhere (campus_agent/refusals.py).
CSRF_FAILURE_VIEW = "campus_agent.refusals.csrf_failure"

# --- HTTPS (production: TLS ends at nginx; docs/production.env.example sets all of these) ------
# The defaults serve the local run on http://127.0.0.1; `manage.py check --deploy` with the
# production file shows no warning (campus_agent/tests/test_deploy_check.py).
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
# Load balancers and monitors probe the workers over plain HTTP: /healthz answers them instead
# of a redirect to an https:// URL they cannot follow. It holds no secret and sets no cookie.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=False)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=False)
SECURE_REFERRER_POLICY = env.str("SECURE_REFERRER_POLICY", default="same-origin")
# "HTTP_X_FORWARDED_PROTO,https": trust nginx's X-Forwarded-Proto to tell HTTPS from HTTP. Only
# behind a proxy that always sets the header (ours does); else a client could claim HTTPS.
_proxy_ssl_header = env.list("SECURE_PROXY_SSL_HEADER", default=[])
if _proxy_ssl_header and len(_proxy_ssl_header) != 2:
    raise ImproperlyConfigured("SECURE_PROXY_SSL_HEADER is a header and a value, e.g. HTTP_X_FORWARDED_PROTO,https")
SECURE_PROXY_SSL_HEADER = tuple(_proxy_ssl_header) or None

# daphne's app, first, makes `manage.py runserver` (scripts/run.sh) daphne's ASGI server. Only
# there: importing it installs Twisted's reactor (0.3 s of start-up) in every process that loads the
# settings, the uvicorn and daphne workers, the other manage.py commands and the tests included.
_RUNSERVER = sys.argv[1:2] == ["runserver"]

INSTALLED_APPS = [
    *(["daphne"] if _RUNSERVER else []),
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc served from our static files: docs work offline
    "csp",
    "channels",
    "simple_history",  # the catalog's history: old values, diff and rollback in admin
    "django_cas_ng",  # CAS login: its ticket ↔ session table serves single logout (chat_app/accounts/cas.py)
    "campus_agent",
    "safety_app",  # the moderation word lists: chat_app checks questions with them
    "knowledge_app",  # the knowledge base: collections of documents the agent searches and cites
    "subagents_app",
    "agents_app",
    "chat_app",
    # Staff insight (routing cases, usage reports): depends on the apps above, none on it.
    "insights_app",
    # The audit log (who signed in, changed, exported, decided): the other apps call it, it calls none.
    "audit_app",
    "demo_app",  # the keyless demo (load_demo; served only with DEMO_ENABLED): no app depends on it
]

# Every middleware here is async-capable, so async views run without a thread hop.
# campus_agent.middleware's classes are Django's (and django-csp's), with their hooks run in the
# event loop under ASGI instead of a thread hop per hook. Security, sessions, CSRF and X-Frame-Options
# stay Django's own: `check --deploy` looks for them by these names (and skips the HSTS, cookie
# and CSRF checks when it does not find them).
MIDDLEWARE = [
    "campus_agent.middleware.RequestIdMiddleware",
    # Under the API prefixes every error is JSON, whoever answered it (campus_agent/refusals.py).
    "campus_agent.middleware.ApiErrorShapeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "campus_agent.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The student's language: the page's switch (a cookie, saved per user too), else Accept-Language.
    "campus_agent.middleware.LocaleMiddleware",
    "campus_agent.middleware.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "campus_agent.middleware.AuthenticationMiddleware",
    # sync and async: records the staff member as the history user of a catalog save
    "simple_history.middleware.HistoryRequestMiddleware",
    "campus_agent.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "campus_agent.urls"
ASGI_APPLICATION = "campus_agent.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- database ---------------------------------------------------------------------------------
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
_db = DATABASES["default"]
if _db["ENGINE"] == "django.db.backends.sqlite3" and _db["NAME"] not in ("", ":memory:"):
    # `sqlite:///db.sqlite3` means the project's file, whatever directory manage.py runs from.
    _db["NAME"] = str(BASE_DIR / _db["NAME"])
# Under ASGI a long CONN_MAX_AGE leaks connections (Django #33497, #35059): close per request.
DATABASES["default"]["CONN_MAX_AGE"] = 0
if _db["ENGINE"] == "django.db.backends.sqlite3":
    _db.setdefault("OPTIONS", {}).update(
        {
            # Streams write from several tasks at once; wait for the lock instead of failing.
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            # WAL lets readers run beside the writer, and synchronous=NORMAL drops the fsync per
            # commit (a crash may lose the last commits, never corrupt the file): storing a
            # chat message costs far less than with the rollback journal. The log is copied back
            # by each worker's run supervisor; 10,000 pages is only the backstop
            # (campus_agent.base.sqlite_wal.AUTOCHECKPOINT_PAGES).
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint=10000;",
        }
    )
# Read whatever the engine (so SETTINGS_ENV_NAMES holds them), used with PostgreSQL.
_db_pool = {
    "min_size": env.int("DB_POOL_MIN", default=2),
    "max_size": env.int("DB_POOL_MAX", default=20),
    # How long a request waits for a connection (all busy, or the server down) before
    # it fails: short, so /healthz and the API answer instead of hanging.
    "timeout": env.float("DB_POOL_TIMEOUT", default=5.0),
}
if _db["ENGINE"] == "django.db.backends.postgresql":
    # psycopg's own pool (Django ≥ 5.1): a connection "closed" after a request or a stream's
    # database call goes back to the pool instead of being torn down, so no connect per call.
    _db.setdefault("OPTIONS", {}).setdefault("pool", _db_pool)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- channels and cache (several workers share Redis when REDIS_URL is set) ------------------
REDIS_URL = env.str("REDIS_URL", default="")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
    }
    # The per-user chat limits count in the cache: shared, they hold across workers.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    # The per-user limits of this one process: sized for a campus, expired entries dropped first
    # (Django's default keeps 300 entries, fewer than the slots of a burst; campus_agent/base/local_cache.py).
    CACHES = {"default": {"BACKEND": "campus_agent.base.local_cache.LocalCache",
                          "OPTIONS": {"MAX_ENTRIES": env.int("LOCAL_CACHE_MAX_ENTRIES", default=100_000)}}}
# A worker's asyncio connections to Redis (campus_agent/base/redis_clients.py): commands (the limits,
# the frames' copies, stop signals) and the blocking reads of the runs followed here; a command
# past them waits up to REDIS_POOL_WAIT_SEC for a free connection.
REDIS_MAX_CONNECTIONS = env.int("REDIS_MAX_CONNECTIONS", default=100)
REDIS_MAX_READ_CONNECTIONS = env.int("REDIS_MAX_READ_CONNECTIONS", default=1000)
REDIS_POOL_WAIT_SEC = env.float("REDIS_POOL_WAIT_SEC", default=10.0)

# --- auth, i18n, static -----------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "zh-hans"
# The page and what the agent is told to answer in (docs/design.md#cross-cutting-rules); admin stays Chinese for staff.
LANGUAGES = [("zh-hans", "简体中文"), ("en", "English")]
LANGUAGE_COOKIE_AGE = 365 * 24 * 3600
LANGUAGE_COOKIE_SAMESITE = "Lax"
TIME_ZONE = env.str("TIME_ZONE", default="Asia/Shanghai")
USE_I18N = True
# Our own catalogs, merged over Django's (locale/zh_Hans/LC_MESSAGES/djangojs.po fills the admin
# selector strings Django's zh_Hans JavaScript catalog lacks).
LOCALE_PATHS = [BASE_DIR / "locale"]
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024  # docs/design.md#cross-cutting-rules: body ≤ 64 KB

# --- Content-Security-Policy (django-csp), on every response -----------------------------------
# Model and sub-agent text is rendered in the page (sanitized by static/js/markdown.js); this is
# the second wall: no inline script or style, nothing loaded, fetched or posted anywhere but this
# origin. `data:` images are for the admin's and Swagger UI's own CSS icons (the sanitizer drops
# them from model output). The pages keep all code and style in static files; the API docs use
# drf-spectacular's split view, whose init script is a URL. Django's DEBUG 404/500 pages
# (inline script) are left without the header by django-csp.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    },
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    # JSON in and out only: one body parser for every endpoint (size, depth, UTF-8, object; a
    # form or text/plain body is a 415) and every answer, errors included, as JSON.
    "DEFAULT_PARSER_CLASSES": ["campus_agent.base.json_body.JsonObjectParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "chat_app.gateways.api.base.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Campus Agent API",
    "DESCRIPTION": "校园小智 chat gateway: streaming chat, conversations, agents, auth.",
    "VERSION": VERSION,
    "SERVE_INCLUDE_SCHEMA": False,
    # Not the jsDelivr CDN: campus networks and offline demos cannot always reach it.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No badge image from validator.swagger.io (it would also hand it our schema's URL).
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    # The chat stream and the run endpoints are plain async views, which drf-spectacular cannot
    # read: chat_app.gateways.api.schema adds them. drf-spectacular's default enum hook runs after it, so
    # their choices become enum components like every serializer's.
    "POSTPROCESSING_HOOKS": [
        "chat_app.gateways.api.schema.async_views_describe",
        "drf_spectacular.hooks.postprocess_schema_enums",
    ],
    # A report's status is named once, wherever it appears (a report, a message's report_status),
    # apart from the other `status` enums of the API.
    "ENUM_NAME_OVERRIDES": {"ReportStatusEnum": "safety_app.models.AnswerReport.Status"},
}

# --- LLM (the main agent) ---------------------------------------------------------------------
LLM_BASE_URL = env.str("LLM_BASE_URL", default="")  # empty: no model configured
LLM_API_KEY = env.str("LLM_API_KEY", default="")
LLM_MODEL = env.str("LLM_MODEL", default="qwen-plus")
LLM_TIMEOUT = env.float("LLM_TIMEOUT", default=60.0)
LLM_MAX_TOKENS = env.int("LLM_MAX_TOKENS", default=2048)
# The default provider's kind (how thinking is switched in a request): dashscope, vllm, openai,
# ollama or other (sends nothing). Providers in admin have their own (docs/runtime.md, "Providers").
LLM_KIND = env.str("LLM_KIND", default="other")
# A tool round's reasoning sent back to the LLM_* provider as `reasoning_content` (DeepSeek V4 and
# Kimi K2 in thinking mode require it); false for a server that refuses the field.
LLM_REASONING_BACK = env.bool("LLM_REASONING_BACK", default=True)
# Retries of one provider before the first token (429, 5xx, connection, timeout), then the next
# provider of the agent's chain; the wait doubles from LLM_RETRY_BASE_SEC, or is the answer's
# Retry-After, and is never longer than LLM_RETRY_MAX_WAIT_SEC nor past the turn's budget.
LLM_RETRIES = env.int("LLM_RETRIES", default=2)
LLM_RETRY_BASE_SEC = env.float("LLM_RETRY_BASE_SEC", default=0.5)
LLM_RETRY_MAX_WAIT_SEC = env.float("LLM_RETRY_MAX_WAIT_SEC", default=10.0)
# Seconds the admin's 「测试连接」 waits for a provider's GET /models.
LLM_PROBE_TIMEOUT = env.float("LLM_PROBE_TIMEOUT", default=5.0)
# The secret the providers' API keys are encrypted with in the database (Fernet, key derived from
# this text). Empty: derived from SECRET_KEY, so rotating SECRET_KEY means re-entering the keys.
PROVIDER_KEY_SECRET = env.str("PROVIDER_KEY_SECRET", default="")

# --- app knobs (read here once; tests override with override_settings) ------------------------
MAX_HISTORY = env.int("MAX_HISTORY", default=20)
# Attachments (docs/design.md#attachments, chat_app/conversations/uploads.py): where they are stored is Django's
# storage (MEDIA_ROOT on this disk by default; STORAGES names another backend).
MEDIA_ROOT = env.str("MEDIA_ROOT", default="") or str(BASE_DIR / "media")
# S3-compatible campus storage instead (django-storages): a bucket, its endpoint and keys. The
# files stay private: each is served by the API to its owner, never by a public bucket URL.
UPLOAD_S3_BUCKET = env.str("UPLOAD_S3_BUCKET", default="")
_s3 = {  # read with or without a bucket, so SETTINGS_ENV_NAMES holds the keys
    "endpoint_url": env.str("UPLOAD_S3_ENDPOINT_URL", default="") or None,
    "access_key": env.str("UPLOAD_S3_ACCESS_KEY_ID", default="") or None,
    "secret_key": env.str("UPLOAD_S3_SECRET_ACCESS_KEY", default="") or None,
    "region_name": env.str("UPLOAD_S3_REGION", default="") or None,
}
if UPLOAD_S3_BUCKET:
    STORAGES = {
        "default": {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": {
            "bucket_name": UPLOAD_S3_BUCKET, **_s3,
            "default_acl": "private", "file_overwrite": False, "querystring_auth": True,
        }},
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
UPLOAD_MAX_BYTES = env.int("UPLOAD_MAX_BYTES", default=10 * 1024 * 1024)
UPLOAD_USER_MAX_BYTES = env.int("UPLOAD_USER_MAX_BYTES", default=200 * 1024 * 1024)
UPLOAD_RATE_PER_MINUTE = env.int("UPLOAD_RATE_PER_MINUTE", default=20)
UPLOAD_TEXT_MAX_CHARS = env.int("UPLOAD_TEXT_MAX_CHARS", default=20000)
UPLOAD_PDF_MAX_PAGES = env.int("UPLOAD_PDF_MAX_PAGES", default=100)

# --- the knowledge base (docs/knowledge.md) ---------------------------------------------------------
# One document's file: a handbook of a few hundred pages as a PDF is a few MB; a scan is larger.
KNOWLEDGE_FILE_MAX_BYTES = env.int("KNOWLEDGE_FILE_MAX_BYTES", default=50 * 1024 * 1024)
# One upload in admin, its files together (campus_agent/intake.py refuses more before reading it).
KNOWLEDGE_UPLOAD_MAX_BYTES = env.int("KNOWLEDGE_UPLOAD_MAX_BYTES", default=100 * 1024 * 1024)
UPLOAD_MAX_PER_MESSAGE = env.int("UPLOAD_MAX_PER_MESSAGE", default=5)
# An image's width × height, read from its header (docs/security.md#documents-parsed-under-limits):
# a 48 MP phone photo (8000 × 6000) passes; a few kilobytes declaring 20,000 × 20,000 do not.
UPLOAD_IMAGE_MAX_PIXELS = env.int("UPLOAD_IMAGE_MAX_PIXELS", default=50_000_000)
# A PDF or DOCX is parsed in a child process under these limits (campus_agent/base/documents,
# docs/security.md#documents-parsed-under-limits): CPU seconds, address space, wall-clock seconds
# (waiting for a turn included), and children at once per worker process.
DOCUMENT_PARSE_CPU_SEC = env.int("DOCUMENT_PARSE_CPU_SEC", default=10)
DOCUMENT_PARSE_MEMORY_MB = env.int("DOCUMENT_PARSE_MEMORY_MB", default=512)
DOCUMENT_PARSE_TIMEOUT_SEC = env.float("DOCUMENT_PARSE_TIMEOUT_SEC", default=20.0)
DOCUMENT_PARSE_MAX_CONCURRENT = env.int("DOCUMENT_PARSE_MAX_CONCURRENT", default=2)
# A knowledge-base document past these is refused, not cut (knowledge_app/parsing.py,
# docs/knowledge.md#how-documents-are-read-and-cut): a 1,000-page handbook passes.
KNOWLEDGE_MAX_PAGES = env.int("KNOWLEDGE_MAX_PAGES", default=2000)
KNOWLEDGE_MAX_CHARS = env.int("KNOWLEDGE_MAX_CHARS", default=5_000_000)
# A document left `indexing` this long by a process that died is indexed again (knowledge_app.indexing).
KNOWLEDGE_INDEX_STALE_SEC = env.int("KNOWLEDGE_INDEX_STALE_SEC", default=600)
# How many passages a knowledge collection's search gives the model (each numbered, with its source).
KNOWLEDGE_SEARCH_PASSAGES = env.int("KNOWLEDGE_SEARCH_PASSAGES", default=5)
# Read every collection's questions with the campus synonym list too (国奖 → 国家奖学金, 查卷 →
# 成绩复核; knowledge_app/data/campus_synonyms.txt) beside the collection's own synonyms.
KNOWLEDGE_CAMPUS_SYNONYMS = env.bool("KNOWLEDGE_CAMPUS_SYNONYMS", default=True)
# Whether the model of LLM_* (an agent with no provider of its own) reads images (image_url parts).
LLM_ACCEPTS_IMAGES = env.bool("LLM_ACCEPTS_IMAGES", default=False)
MAX_TOOL_ROUNDS = env.int("MAX_TOOL_ROUNDS", default=5)
TURN_BUDGET_SEC = env.float("TURN_BUDGET_SEC", default=180.0)
SSE_PING_SEC = env.float("SSE_PING_SEC", default=15.0)
CHAT_MAX_CONCURRENT_STREAMS = env.int("CHAT_MAX_CONCURRENT_STREAMS", default=3)
CHAT_RATE_PER_MINUTE = env.int("CHAT_RATE_PER_MINUTE", default=20)
# New reports of answers a student may file an hour (docs/safety.md#reports-举报); 429 past it.
REPORTS_PER_HOUR = env.int("REPORTS_PER_HOUR", default=20)
KEYWORD_FALLBACK_ENABLED = env.bool("KEYWORD_FALLBACK_ENABLED", default=True)
# The OpenAI-compatible API (docs/clients.md): a client sends its whole history with each question,
# so its body may be larger than the 64 KB of the other endpoints; and no more messages than this.
OPENAI_API_BODY_MAX_BYTES = env.int("OPENAI_API_BODY_MAX_BYTES", default=1024 * 1024)
OPENAI_API_MESSAGES_MAX = env.int("OPENAI_API_MESSAGES_MAX", default=1000)
# A client history that continues no stored conversation opens a new one: its latest user /
# assistant messages, at most this many and this many bytes of text (docs/clients.md).
OPENAI_API_OPENING_MAX = env.int("OPENAI_API_OPENING_MAX", default=20)
OPENAI_API_OPENING_BYTES_MAX = env.int("OPENAI_API_OPENING_BYTES_MAX", default=32 * 1024)
# --- caps on what the model and tools send (issue 20, docs/runtime.md "Caps") -----------------
# Tool calls run per model round; further calls are not run and the model is told.
MAX_TOOL_CALLS_PER_ROUND = env.int("MAX_TOOL_CALLS_PER_ROUND", default=16)
# UTF-8 bytes of one call's arguments; a longer call is not run and the model is told.
MAX_TOOL_ARGS_BYTES = env.int("MAX_TOOL_ARGS_BYTES", default=64 * 1024)
# UTF-8 bytes of one tool result the model reads (and the row stores); cut with a marker.
MAX_TOOL_RESULT_BYTES = env.int("MAX_TOOL_RESULT_BYTES", default=64 * 1024)
# UTF-8 bytes of text the model may send in one turn (all rounds; 8 times that on the wire);
# past it the stream is cut and the reply is stored as interrupted.
LLM_MAX_REPLY_BYTES = env.int("LLM_MAX_REPLY_BYTES", default=1024 * 1024)
# UTF-8 bytes of a stored tool row (and of a stored call's arguments) sent back as history.
MAX_HISTORY_TOOL_BYTES = env.int("MAX_HISTORY_TOOL_BYTES", default=64 * 1024)
# An MCP service's tool list: the most tools kept, and the UTF-8 bytes of one tool's description
# and of its input schema (JSON); a tool over a cap is dropped (logged, and shown in admin).
MCP_TOOLS_MAX = env.int("MCP_TOOLS_MAX", default=128)
MCP_TOOL_DESCRIPTION_MAX_BYTES = env.int("MCP_TOOL_DESCRIPTION_MAX_BYTES", default=8 * 1024)
MCP_TOOL_SCHEMA_MAX_BYTES = env.int("MCP_TOOL_SCHEMA_MAX_BYTES", default=16 * 1024)
# --- end of the runtime caps -----------------------------------------------------------------
# Tokens (prompt + completion) one user may spend per day (local date); 0 = no quota. 429 past it.
USER_DAILY_TOKEN_QUOTA = env.int("USER_DAILY_TOKEN_QUOTA", default=0)
# Routing checks (docs/staff.md): runs per case, the share of runs that must choose right for the
# case to pass, and how many model requests a check makes at once.
ROUTING_CHECK_REPEAT = env.int("ROUTING_CHECK_REPEAT", default=3)
ROUTING_CHECK_PASS_RATE = env.float("ROUTING_CHECK_PASS_RATE", default=0.66)
ROUTING_CHECK_CONCURRENCY = env.int("ROUTING_CHECK_CONCURRENCY", default=4)
# The whole check's deadline: runs not answered by then are recorded as failed (超时), however
# the model behaves (a stream that never ends included).
ROUTING_CHECK_DEADLINE_SEC = env.float("ROUTING_CHECK_DEADLINE_SEC", default=60.0)
# Runs (docs/design.md#runs): a turn's frames are kept RUN_LOG_RETAIN_SEC after it ends for clients that
# re-attach (at most RUN_LOG_MAX_FRAMES in Redis); each worker heart-beats its runs and
# checkpoints their text every RUN_HEARTBEAT_SEC; a run silent for RUN_STALE_SEC lost its worker.
RUN_LOG_RETAIN_SEC = env.float("RUN_LOG_RETAIN_SEC", default=600.0)
RUN_LOG_MAX_FRAMES = env.int("RUN_LOG_MAX_FRAMES", default=10000)
# With REDIS_URL, a run's frames are copied to Redis in one batch at most this often (followers on
# other workers are this much behind; chat_app.runs.redis_bus, docs/benchmarks.md).
RUN_MIRROR_BATCH_SEC = env.float("RUN_MIRROR_BATCH_SEC", default=0.1)
RUN_HEARTBEAT_SEC = env.float("RUN_HEARTBEAT_SEC", default=2.0)
RUN_STALE_SEC = env.float("RUN_STALE_SEC", default=10.0)
# Approval (docs/design.md#runs): how long a tool call that needs the student's approval waits before it
# counts as rejected (the run holds no stream slot meanwhile).
APPROVAL_TIMEOUT_SEC = env.float("APPROVAL_TIMEOUT_SEC", default=600.0)
# Circuit breaker per sub-agent and MCP service (campus_agent/base/circuit.py), shared through the
# cache: CIRCUIT_FAILURES consecutive failures within CIRCUIT_WINDOW_SEC open it; it refuses
# calls at once for CIRCUIT_COOLDOWN_SEC, then lets one probe call through.
CIRCUIT_FAILURES = env.int("CIRCUIT_FAILURES", default=3)
CIRCUIT_WINDOW_SEC = env.int("CIRCUIT_WINDOW_SEC", default=60)
CIRCUIT_COOLDOWN_SEC = env.int("CIRCUIT_COOLDOWN_SEC", default=30)
# Caps on what one sub-agent call may send (issue 20; subagents_app/limits.py). Past any of them
# the call ends: what arrived is kept, cut with a marker the model and the student read.
# Seed contract (SSE): bytes of the whole answer, bytes of one SSE line (one frame's JSON), frames.
SUBAGENT_STREAM_MAX_BYTES = env.int("SUBAGENT_STREAM_MAX_BYTES", default=4 * 1024 * 1024)
SUBAGENT_SSE_LINE_MAX_BYTES = env.int("SUBAGENT_SSE_LINE_MAX_BYTES", default=2 * 1024 * 1024)
SUBAGENT_STREAM_MAX_FRAMES = env.int("SUBAGENT_STREAM_MAX_FRAMES", default=10_000)
# A2A: bytes of the send's HTTP answer, bytes of one of its lines, the artifact + status text
# kept, and events. (The Agent Card has its own fixed cap: 256 KB, subagents_app/a2a_card.py.)
A2A_STREAM_MAX_BYTES = env.int("A2A_STREAM_MAX_BYTES", default=4 * 1024 * 1024)
A2A_LINE_MAX_BYTES = env.int("A2A_LINE_MAX_BYTES", default=2 * 1024 * 1024)
A2A_TEXT_MAX_BYTES = env.int("A2A_TEXT_MAX_BYTES", default=1024 * 1024)
A2A_MAX_EVENTS = env.int("A2A_MAX_EVENTS", default=10_000)
# The demo sub-agents (/demo/subagents/…: unauthenticated, bundled data) are mounted only when
# this is on: scripts/run.sh turns it on for the local demo; a deployment leaves it off.
DEMO_ENABLED = env.bool("DEMO_ENABLED", default=False)
# Where `load_demo` points the demo sub-agents (served by this same server, issue #6); set it
# when the server listens elsewhere than 127.0.0.1:$PORT. Each gets <DEMO_BASE_URL>/<name>.
DEMO_BASE_URL = env.str("DEMO_BASE_URL", default="") or (
    f"http://127.0.0.1:{env.int('PORT', default=8000)}/demo/subagents"
)

# --- auth tokens ------------------------------------------------------------------------------
JWT_TTL_HOURS = env.int("JWT_TTL_HOURS", default=24)
JWT_ISSUER = env.str("JWT_ISSUER", default="campus-agent")
# The chat stream remembers a checked JWT session this many seconds (chat_app/accounts/session_cache.py): a
# revocation made on another worker reaches a new stream within this time. 0 = read every time.
AUTH_SESSION_CACHE_SEC = env.float("AUTH_SESSION_CACHE_SEC", default=5.0)
# Personal API keys (docs/design.md#other-clients): live keys one user may hold at once.
API_KEYS_PER_USER_MAX = env.int("API_KEYS_PER_USER_MAX", default=20)
# Days a conversation is kept after its last exchange (manage.py purge_conversations, for cron);
# 0: kept until its owner deletes it.
RETENTION_DAYS = env.int("RETENTION_DAYS", default=0)
# The service provider's name or code in the implicit label of every AI answer (GB 45438-2025's
# `ContentProducer`: the data export, /v1, MCP and A2A answers; safety_app/labels.py, docs/safety.md).
AIGC_CONTENT_PRODUCER = env.str("AIGC_CONTENT_PRODUCER", default="campus-agent")
# Days an audit row is kept (manage.py audit_purge, for cron; docs/operations.md#the-audit-log).
# Never under six months (Cybersecurity Law art. 21): a shorter setting stops the start.
AUDIT_RETENTION_DAYS_MIN = 180
AUDIT_RETENTION_DAYS = env.int("AUDIT_RETENTION_DAYS", default=180)
if AUDIT_RETENTION_DAYS < AUDIT_RETENTION_DAYS_MIN:
    raise ImproperlyConfigured(
        f"AUDIT_RETENTION_DAYS is {AUDIT_RETENTION_DAYS}: the audit log is kept at least "
        f"{AUDIT_RETENTION_DAYS_MIN} days (six months, Cybersecurity Law art. 21)."
    )
# GET /metrics (Prometheus) answers only `Authorization: Bearer <METRICS_TOKEN>`; unset: no endpoint (404).
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
# An empty PROMETHEUS_MULTIPROC_DIR means "one process" (campus_agent.base.metrics); prometheus_client
# would take it as the current directory and write its files there. Settings load before it.
if "PROMETHEUS_MULTIPROC_DIR" in os.environ and not os.environ["PROMETHEUS_MULTIPROC_DIR"].strip():
    del os.environ["PROMETHEUS_MULTIPROC_DIR"]
CAMPUS_SSO_USERINFO_URL = env.str("CAMPUS_SSO_USERINFO_URL", default="")
# Campus login on the page with OpenID Connect (chat_app/accounts/oidc.py): off unless OIDC_ISSUER and
# OIDC_CLIENT_ID are set. Register <site>/login/campus/callback/ as the redirect URI.
OIDC_ISSUER = env.str("OIDC_ISSUER", default="")
OIDC_CLIENT_ID = env.str("OIDC_CLIENT_ID", default="")
OIDC_CLIENT_SECRET = env.str("OIDC_CLIENT_SECRET", default="")
# client_secret_basic | client_secret_post | none (a public client: PKCE alone)
OIDC_TOKEN_AUTH_METHOD = env.str("OIDC_TOKEN_AUTH_METHOD", default="client_secret_basic")
OIDC_SCOPES = env.str("OIDC_SCOPES", default="openid profile offline_access")
OIDC_TIMEOUT = env.float("OIDC_TIMEOUT", default=10.0)
OIDC_LOGIN_LABEL = env.str("OIDC_LOGIN_LABEL", default="用校园账号登录")
# Campus login with CAS 2.0/3.0, 统一身份认证 (chat_app/accounts/cas.py): off unless CAS_SERVER_URL is
# set, the CAS server's root (https://cas.example.edu.cn/cas/; /login, /p3/serviceValidate … are
# below it). Allow <site>/accounts/cas/login/ as the service at the CAS server.
CAS_SERVER_URL = env.str("CAS_SERVER_URL", default="")
if CAS_SERVER_URL:
    if not CAS_SERVER_URL.startswith(("https://", "http://")):
        # django-cas-ng would complete a relative URL with the request's Host: a client could then
        # name the server that vouches for its ticket.
        raise ImproperlyConfigured("CAS_SERVER_URL is an absolute http(s) URL, e.g. https://cas.example.edu.cn/cas/")
    CAS_SERVER_URL = CAS_SERVER_URL.rstrip("/") + "/"  # the endpoints are joined to it
CAS_VERSION = env.str("CAS_VERSION", default="3")  # 2 or 3 (3: attributes in /p3/serviceValidate)
if CAS_VERSION not in ("2", "3"):
    raise ImproperlyConfigured("CAS_VERSION is 2 or 3")
CAS_TIMEOUT = env.float("CAS_TIMEOUT", default=10.0)
# Which CAS attribute holds what (field=attribute, comma-separated). number: the student / staff
# number the user is linked by and named after (empty: the CAS user itself); name, college,
# identity_type: shown in admin, and identity_type is what group mappings usually read.
CAS_ATTRIBUTE_MAP = {
    "number": "", "name": "cn", "college": "college", "identity_type": "userType",
    **env.dict("CAS_ATTRIBUTE_MAP", default={}),
}
# The site's public root as the CAS server sees it (https://xiaozhi.example.edu.cn). Empty: the
# request's scheme and Host, which behind nginx needs Host passed on and SECURE_PROXY_SSL_HEADER.
CAS_ROOT_PROXIED_AS = env.str("CAS_ROOT_PROXIED_AS", default="")
CAS_STORE_NEXT = True  # django-cas-ng: the service URL without `next`; it waits in the session
# Failed logins (password or campus token; API, page and admin) counted in the cache, per
# username and per client address, within a fixed window: past a limit, 429 (docs/api.md).
LOGIN_MAX_FAILURES_PER_USERNAME = env.int("LOGIN_MAX_FAILURES_PER_USERNAME", default=5)
LOGIN_MAX_FAILURES_PER_IP = env.int("LOGIN_MAX_FAILURES_PER_IP", default=20)
LOGIN_FAILURE_WINDOW_SEC = env.int("LOGIN_FAILURE_WINDOW_SEC", default=900)

# --- the MCP server ----------------------------------------------------------------------
# The MCP server at /mcp (chat_app/gateways/mcp_server.py, docs/clients.md "MCP clients"). Its public URL
# (the `resource` of its metadata document; empty: the request's scheme and Host), the largest
# JSON-RPC body it reads (413 past it), and how often a streaming answer reports its progress.
MCP_RESOURCE_URL = env.str("MCP_RESOURCE_URL", default="")
MCP_DOCUMENTATION_URL = env.str("MCP_DOCUMENTATION_URL", default="")
MCP_MAX_BODY_BYTES = env.int("MCP_MAX_BODY_BYTES", default=256 * 1024)
MCP_PROGRESS_INTERVAL_SEC = env.float("MCP_PROGRESS_INTERVAL_SEC", default=0.5)

# --- catalog files (manage.py import_catalog, docs/staff.md) ----------------------------------
# The environment variables a catalog file's `${ENV:NAME}` may read: names, or prefixes ending in
# "*" (the default: the MCP_<SERVICE>_<KEY> names export suggests). Never the server's own settings
# nor a model provider's key variable, even when listed (docs/security.md, "Catalog files and
# environment variables").
CATALOG_ENV_ALLOWED = [item.strip() for item in env.list("CATALOG_ENV_ALLOWED", default=["MCP_*"]) if item.strip()]
if bad := [item for item in CATALOG_ENV_ALLOWED if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\*?", item)]:
    raise ImproperlyConfigured(f"CATALOG_ENV_ALLOWED: {', '.join(map(repr, bad))}: each entry is a variable name "
                               "or a prefix ending in * (e.g. MCP_*); a bare * would let a file read any variable")

# --- logging (configured by campus_agent.base.logging at start-up, see apps.py) -------------------
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
# The level from which 2026-07-28 MCP servers send their log (`notifications/message`) with each
# call, into ours (agents_app/mcp/notifications.py); empty: they send none. Handshake-era servers
# send what they choose.
# MCP services each student authorizes with their own account (config `oauth`, agents_app/mcp/oauth.py):
# where the authorization server sends the student back (register it with pre-registered clients),
# and the gateway's client ID metadata document (https://<site>/mcp/oauth/client-metadata.json,
# which the gateway then serves; empty: the gateway registers itself dynamically where the server
# allows, else staff pre-register a client).
MCP_OAUTH_REDIRECT_URL = env.str("MCP_OAUTH_REDIRECT_URL", default="http://127.0.0.1:8000/mcp/oauth/callback/")
MCP_OAUTH_CLIENT_METADATA_URL = env.str("MCP_OAUTH_CLIENT_METADATA_URL", default="")
# How long the authorization page a student was sent to stays good (their answer is taken until then).
MCP_OAUTH_PENDING_SEC = env.int("MCP_OAUTH_PENDING_SEC", default=900)
# Networks (CIDR) the gateway may send a request into when a remote party chose the address (an
# MCP service's OAuth discovery beyond the service's own origin): loopback, private and link-local
# addresses are refused unless listed here (campus_agent/base/addresses.py, docs/security.md).
OUTBOUND_PRIVATE_NETWORKS = env.list("OUTBOUND_PRIVATE_NETWORKS", default=[])
for _network in OUTBOUND_PRIVATE_NETWORKS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError:
        raise ImproperlyConfigured(f"OUTBOUND_PRIVATE_NETWORKS: {_network!r} is not a network such as 10.0.0.0/8") from None
MCP_SERVER_LOG_LEVEL = env.str("MCP_SERVER_LOG_LEVEL", default="info").strip().lower()
if MCP_SERVER_LOG_LEVEL not in ("", "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"):
    raise ImproperlyConfigured(f"MCP_SERVER_LOG_LEVEL={MCP_SERVER_LOG_LEVEL!r}: debug, info, notice, warning, error, "
                               "critical, alert, emergency or empty")
LOG_DIR = BASE_DIR / env.str("LOG_DIR", default="logs")  # a relative LOG_DIR is inside the project
LOGGING_CONFIG = None  # loguru owns logging; stdlib loggers are bridged into it

# --- tracing (OpenTelemetry; docs/operations.md, "Tracing") -----------------------------------
# Off unless OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER names an exporter; the
# exporter itself reads the other standard OTEL_* variables. Started in apps.py.
TRACING_EXPORTERS = tracing_exporters(os.environ)

# --- issue 20, chat_app edges: caps and deadlines (docs/operations.md, "Caps") -----------------
# Followers (GET /api/v1/runs/<id>/events) one user may hold at once, on every worker (counted in
# the cache, like stream slots: with Redis across workers); 429 42905 past it.
RUN_MAX_FOLLOWERS_PER_USER = env.int("RUN_MAX_FOLLOWERS_PER_USER", default=10)

# --- issue 45, the knowledge base: embeddings (docs/knowledge.md#vectors-optional) -------------
# An OpenAI-compatible `POST /v1/embeddings` (DashScope's text-embedding-v4, bge-m3 behind vLLM or
# TEI). Off while EMBEDDINGS_BASE_URL is empty: the keyword index alone serves. Changing the model
# or the dimensions means indexing the documents again (vectors of another size are not searched).
EMBEDDINGS_BASE_URL = env.str("EMBEDDINGS_BASE_URL", default="").rstrip("/")  # ends in /v1
EMBEDDINGS_API_KEY = env.str("EMBEDDINGS_API_KEY", default="")
EMBEDDINGS_MODEL = env.str("EMBEDDINGS_MODEL", default="")
# The length of every vector the model answers (1024 for bge-m3 and text-embedding-v4's default);
# an answer of another length is refused. Up to 2000: pgvector's HNSW index takes no longer vector.
EMBEDDINGS_DIMENSIONS = env.int("EMBEDDINGS_DIMENSIONS", default=1024)
# Ask the model for EMBEDDINGS_DIMENSIONS (the `dimensions` parameter: text-embedding-v4 and other
# Matryoshka models); a model of one size (bge-m3 on TEI or vLLM) may refuse the parameter.
EMBEDDINGS_SEND_DIMENSIONS = env.bool("EMBEDDINGS_SEND_DIMENSIONS", default=False)
EMBEDDINGS_TIMEOUT_SEC = env.float("EMBEDDINGS_TIMEOUT_SEC", default=30.0)  # one request, whole answer read
EMBEDDINGS_BATCH_SIZE = env.int("EMBEDDINGS_BATCH_SIZE", default=10)  # texts per request (DashScope takes 10)
if not 1 <= EMBEDDINGS_DIMENSIONS <= 2000:
    raise ImproperlyConfigured(f"EMBEDDINGS_DIMENSIONS={EMBEDDINGS_DIMENSIONS}: from 1 to 2000")
if not 1 <= EMBEDDINGS_BATCH_SIZE <= 2048:
    raise ImproperlyConfigured(f"EMBEDDINGS_BATCH_SIZE={EMBEDDINGS_BATCH_SIZE}: from 1 to 2048")
if EMBEDDINGS_BASE_URL and not EMBEDDINGS_MODEL:
    raise ImproperlyConfigured("EMBEDDINGS_BASE_URL is set: EMBEDDINGS_MODEL names the embedding model")

# --- issue 45, the knowledge base: a reranker (docs/knowledge.md#reranker-optional) ------------
# The Jina/Cohere rerank API (vLLM's /v1/rerank, DashScope's compatible-mode …/reranks): the
# passages the indexes found are scored again against the question. Off while RERANK_BASE_URL is
# empty; a reranker that fails leaves the indexes' order (the search goes on without it).
RERANK_BASE_URL = env.str("RERANK_BASE_URL", default="").rstrip("/")  # ends in /v1, or the endpoint itself
RERANK_API_KEY = env.str("RERANK_API_KEY", default="")
RERANK_MODEL = env.str("RERANK_MODEL", default="")
RERANK_TIMEOUT_SEC = env.float("RERANK_TIMEOUT_SEC", default=10.0)  # one request, whole answer read
# How many of the fused passages the reranker scores (at least the passages asked for): more finds
# an answer the indexes ranked low, each costs the reranker's time. One request sends them all.
RERANK_CANDIDATES = env.int("RERANK_CANDIDATES", default=20)
if not 1 <= RERANK_CANDIDATES <= 100:
    raise ImproperlyConfigured(f"RERANK_CANDIDATES={RERANK_CANDIDATES}: from 1 to 100")
if not 0 < RERANK_TIMEOUT_SEC <= 300:
    raise ImproperlyConfigured(f"RERANK_TIMEOUT_SEC={RERANK_TIMEOUT_SEC}: more than 0, at most 300")
if RERANK_BASE_URL and not RERANK_MODEL:
    raise ImproperlyConfigured("RERANK_BASE_URL is set: RERANK_MODEL names the rerank model")
