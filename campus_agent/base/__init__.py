"""The shared base every app may use (docs/design.md#layout-and-layers): errors, SSE, JSON bodies,
database threads, the circuit breaker, tracing, logging, request ids, redaction, text, crypto,
Redis clients, the local cache, metrics, the catalog's history and admin helpers, documents' text
read under limits. It imports no
app; the start-up (settings, URLs, ASGI, the stream handler, middleware) is campus_agent's top."""
