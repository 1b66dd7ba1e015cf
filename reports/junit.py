"""JUnit XML: one test suite per drill, one test case per check (and one for the fault reverts)."""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree as ET

__all__ = ["junit_suite", "render_junit", "render_junit_suites"]

XML_HEADER = '<?xml version="1.0" encoding="utf-8"?>\n'


def render_junit(journal: dict[str, Any]) -> str:
    suite = junit_suite(journal)
    ET.indent(suite)
    return XML_HEADER + ET.tostring(suite, encoding="unicode")


def render_junit_suites(name: str, journals: list[dict[str, Any]]) -> str:
    """Several drills (a gate, a game day) in one file: a ``testsuite`` per drill."""
    suites = [junit_suite(j) for j in journals]
    root = ET.Element(
        "testsuites",
        name=name,
        tests=str(sum(int(s.get("tests", "0")) for s in suites)),
        failures=str(sum(int(s.get("failures", "0")) for s in suites)),
        errors=str(sum(int(s.get("errors", "0")) for s in suites)),
    )
    root.extend(suites)
    ET.indent(root)
    return XML_HEADER + ET.tostring(root, encoding="unicode")


def junit_suite(journal: dict[str, Any]) -> ET.Element:
    checks = journal["checks"]
    failures = sum(not c["passed"] for c in checks) + (1 if journal["revert_errors"] else 0)
    suite = ET.Element(
        "testsuite",
        name=f"drill:{journal['drill']}",
        tests=str(len(checks) + 1),
        failures=str(failures),
        errors="1" if journal["status"] in ("aborted", "interrupted") else "0",
        time=f"{journal['ended_at'] - journal['started_at']:.3f}",
        timestamp=str(journal["started_at"]),
    )
    props = ET.SubElement(suite, "properties")
    for key in ("run_id", "status", "verdict", "scenario_path"):
        ET.SubElement(props, "property", name=key, value=str(journal.get(key)))
    for check in checks:
        case = ET.SubElement(
            suite, "testcase", classname=f"drills.{journal['drill']}", name=check["label"]
        )
        if not check["passed"]:
            text = (
                f"{check['label']}: observed {check['observed_text']}, expected "
                f"{check['expected']} ({check['reason']})"
            )
            if check.get("runbook") or journal.get("runbook"):
                text += f"\nrunbook: {check.get('runbook') or journal.get('runbook')}"
            failure = ET.SubElement(
                case, "failure", message=text.splitlines()[0], type="CheckFailed"
            )
            failure.text = text
    revert = ET.SubElement(
        suite, "testcase", classname=f"drills.{journal['drill']}", name="every fault reverted"
    )
    if journal["revert_errors"]:
        failure = ET.SubElement(
            revert, "failure", message="a fault could not be reverted", type="RevertFailed"
        )
        failure.text = "\n".join(journal["revert_errors"])
    if journal["status"] in ("aborted", "interrupted"):
        error = ET.SubElement(
            revert, "error", message=f"drill {journal['status']}", type=journal["status"]
        )
        error.text = str(journal.get("aborted") or journal["status"])
    return suite
