"""JUnit XML of checks, the format every CI server shows as a test report.

Written with the standard library's ElementTree: the format is a handful of elements, and the
maintained junit packages add nothing this needs."""
from pathlib import Path
from xml.etree import ElementTree

from insights_app.models import RoutingCheck

QUESTION_NAME_CHARS = 60


def _suite(check: RoutingCheck) -> ElementTree.Element:
    outcomes = list(check.outcomes.all())
    suite = ElementTree.Element("testsuite", {
        "name": f"routing.{check.agent.slug}",
        "tests": str(len(outcomes)),
        "failures": str(sum(not o.passed for o in outcomes)),
        "errors": "0",
        "time": f"{check.duration_ms / 1000:.3f}",
        "timestamp": check.started_at.isoformat(timespec="seconds"),
    })
    properties = ElementTree.SubElement(suite, "properties")
    for name, value in (("mode", check.mode), ("model", check.model), ("fingerprint", check.fingerprint),
                        ("repeat", check.repeat), ("pass_rate", check.pass_rate), ("regressed", check.regressed)):
        ElementTree.SubElement(properties, "property", {"name": name, "value": str(value)})
    for outcome in outcomes:
        question = " ".join(outcome.question.split())[:QUESTION_NAME_CHARS]
        case = ElementTree.SubElement(suite, "testcase", {
            "classname": f"routing.{check.agent.slug}",
            "name": f"#{outcome.case_id} {question}",
        })
        if not outcome.passed:
            reasons = sorted({f for run in outcome.detail for f in run.get("failures", [])})
            label = "新失败" if outcome.change == outcome.Change.REGRESSED else "失败"
            failure = ElementTree.SubElement(case, "failure", {
                "message": f"{label}：{outcome.passes}/{outcome.runs} 次选对",
                "type": outcome.change,
            })
            failure.text = "\n".join(reasons)
    return suite


def junit_write(*, checks: list[RoutingCheck], path: str | Path) -> None:
    root = ElementTree.Element("testsuites", {"name": "routing_check"})
    for check in checks:
        root.append(_suite(check))
    ElementTree.indent(root)
    ElementTree.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
