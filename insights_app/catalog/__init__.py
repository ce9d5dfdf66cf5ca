"""The whole catalog as one YAML file (`manage.py export_catalog` / `import_catalog`)."""
from insights_app.catalog.fileformat import MAX_FILE_BYTES, CatalogError
from insights_app.catalog.service import (
    CATALOG_VERSION,
    NOTHING_TO_CHANGE,
    CatalogExport,
    ImportReport,
    catalog_export,
    catalog_import,
)

__all__ = [
    "CATALOG_VERSION", "MAX_FILE_BYTES", "NOTHING_TO_CHANGE", "CatalogError", "CatalogExport", "ImportReport",
    "catalog_export", "catalog_import",
]
