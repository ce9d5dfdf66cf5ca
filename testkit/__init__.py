"""Test doubles, fake servers and fixtures (docs/testing.md): outside INSTALLED_APPS, and never
imported by product code (campus_agent/tests/test_import_graph.py holds it)."""
