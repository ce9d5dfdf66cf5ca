"""The product's name and version, as it introduces itself to other systems (the MCP servers it
calls see them as the client's `clientInfo`; the API schema carries the version)."""

PRODUCT_NAME = "campus-agent"
PRODUCT_TITLE = "Campus Agent"
VERSION = "1.0.0"
