"""`python -m demo_app.mcp`: serve the demo calendar over stdio."""
from demo_app.mcp.server import server

if __name__ == "__main__":
    server.run("stdio")
