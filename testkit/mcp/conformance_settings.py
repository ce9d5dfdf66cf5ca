"""Settings of the conformance client's process (testkit/mcp/conformance_client.py): the
project's own, with only the apps an MCP call needs installed. The admin of every app (and what
it imports: the runtime's model client, openai's types) costs several seconds of CPU per start,
and the suite starts one client per scenario, all at once."""
from campus_agent.settings import *  # noqa: F403

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "campus_agent",
    "knowledge_app",  # an agent's collections: agents_app's models link them
    "subagents_app",
    "agents_app",
]

# The suite's authorization servers take a client ID metadata document by URL without fetching it
# (auth/basic-cimd checks the URL is used as the client_id): the reference client's URL.
MCP_OAUTH_CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
# The suite's servers, the authorization servers among them, are on this machine (localhost).
OUTBOUND_PRIVATE_NETWORKS = ["127.0.0.0/8", "::1/128"]
