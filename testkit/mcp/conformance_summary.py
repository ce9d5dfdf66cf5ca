"""Pass counts of a conformance run (scripts/mcp-conformance.sh): per leg, and per requirement set.

    python -m testkit.mcp.conformance_summary REQUIREMENTS_DIR LEG=RESULTS_DIR ...

A leg's results directory holds one `<scenario>-<timestamp>/checks.json` per scenario the suite
ran (`auth/…` scenarios one level down). A scenario passes when none of its checks is a FAILURE or a
WARNING, as the suite's own summary (✓) and its expected-failures judgement count them. A requirement set
(`requirements/<revision>.yaml` of the suite's package: the client scenarios a revision requires)
is scored on the leg of the same name, which runs every scenario at that revision's wire.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

_STAMP = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


def leg_results(results: Path) -> dict[str, bool]:
    """scenario -> passed, from a leg's results directory (the latest run of each scenario)."""
    verdicts: dict[str, tuple[str, bool]] = {}
    for checks_file in sorted(results.rglob("checks.json")):
        run = checks_file.parent.relative_to(results).as_posix()
        scenario = _STAMP.sub("", run)
        checks = json.loads(checks_file.read_text(encoding="utf-8"))
        passed = not any(check.get("status") in ("FAILURE", "WARNING") for check in checks)
        if scenario not in verdicts or run > verdicts[scenario][0]:
            verdicts[scenario] = (run, passed)
    return {scenario: passed for scenario, (_, passed) in verdicts.items()}


def required_client_scenarios(requirements: Path, revision: str) -> list[str] | None:
    import yaml

    path = requirements / f"{revision}.yaml"
    if not path.is_file():
        return None
    return list(yaml.safe_load(path.read_text(encoding="utf-8")).get("client") or [])


def summary_lines(requirements: Path, legs: dict[str, Path]) -> list[str]:
    lines = []
    for leg, results in legs.items():
        verdicts = leg_results(results)
        failed = sorted(name for name, passed in verdicts.items() if not passed)
        lines.append(f"leg {leg}: {len(verdicts) - len(failed)}/{len(verdicts)} scenarios passed"
                     + (f"; failing: {', '.join(failed)}" if failed else ""))
        required = required_client_scenarios(requirements, leg)
        if required is not None:
            missing = [name for name in required if name not in verdicts]
            passed = sum(1 for name in required if verdicts.get(name))
            lines.append(f"  requirement set {leg}: {passed}/{len(required)} client scenarios passed"
                         + (f" ({len(missing)} not run: {', '.join(missing)})" if missing else ""))
    return lines


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    legs = dict(arg.split("=", 1) for arg in argv[1:])
    print("\n".join(summary_lines(Path(argv[0]), {leg: Path(path) for leg, path in legs.items()})))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
