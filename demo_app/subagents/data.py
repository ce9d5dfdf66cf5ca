"""The bundled demo datasets, read once per process."""
import json
from functools import cache
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"


@cache
def demo_data_load(*, name: str) -> dict:
    with (DATA_DIR / f"{name}.json").open(encoding="utf-8") as handle:
        return json.load(handle)
