"""Every package of the project that holds tests is in pytest.ini's `testpaths`: CI runs
`pytest` without paths, so a new app left out of that list has its tests never run (audit_app's
and safety_app's were, for one landing)."""
import configparser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.no_database


def test_every_package_with_tests_is_collected():
    config = configparser.ConfigParser()
    config.read(ROOT / "pytest.ini")
    collected = set(config["pytest"]["testpaths"].split())
    with_tests = {path.parts[len(ROOT.parts)] for path in ROOT.glob("*/**/test_*.py")
                  if not path.relative_to(ROOT).parts[0].startswith(".")}
    assert with_tests - collected == set()
