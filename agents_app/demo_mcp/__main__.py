"""`python -m agents_app.demo_mcp`: serve the demo calendar over stdio."""
from agents_app.demo_mcp.server import server

if __name__ == "__main__":
    server.run("stdio")
