"""The whole catalog as one YAML file (`manage.py export_catalog` / `import_catalog`; docs/staff.md).

- `fileformat`: reading YAML safely (size cap, no aliases, nesting cap) and writing it.
- `secrets`: `${ENV:NAME}` references in MCP configs, and what looks like a secret.
- `sections`: what each section of the file holds and how it maps onto its model.
- `service`: `catalog_export()` and `catalog_import()`.
"""
