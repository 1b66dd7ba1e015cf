"""JUnit XML: one test suite per drill, one test case per check (and one for the fault reverts)."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from drills.model.journal import Journal, RunStatus

__all__ = ["junit_suite", "render_junit", "render_junit_suites", "twin_suite"]

XML_HEADER = '<?xml version="1.0" encoding="utf-8"?>\n'


def render_junit(journal: Journal) -> str:
    suite = junit_suite(journal)
    ET.indent(suite)
    return XML_HEADER + ET.tostring(suite, encoding="unicode")


def render_junit_suites(name: str, journals: list[Journal]) -> str:
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


def junit_suite(journal: Journal) -> ET.Element:
    if journal.twin is not None:
        return twin_suite(journal)
    checks = journal.checks
    failed = journal.rollbacks.left
    stopped = journal.status in (RunStatus.ABORTED, RunStatus.INTERRUPTED)
    suite = ET.Element(
        "testsuite",
        name=f"drill:{journal.drill}",
        tests=str(len(checks) + 1),
        failures=str(sum(not c.passed for c in checks) + (1 if failed else 0)),
        errors="1" if stopped else "0",
        time=f"{journal.ended_at - journal.started_at:.3f}",
        timestamp=str(journal.started_at),
    )
    props = ET.SubElement(suite, "properties")
    for key in ("run_id", "status", "verdict", "scenario_path"):
        ET.SubElement(props, "property", name=key, value=str(getattr(journal, key)))
    classname = f"drills.{journal.drill}"
    for check in checks:
        case = ET.SubElement(suite, "testcase", classname=classname, name=check.label)
        if not check.passed:
            text = (
                f"{check.label}: observed {check.observed_text}, expected "
                f"{check.expected} ({check.reason})"
            )
            if check.runbook or journal.runbook:
                text += f"\nrunbook: {check.runbook or journal.runbook}"
            failure = ET.SubElement(
                case, "failure", message=text.splitlines()[0], type="CheckFailed"
            )
            failure.text = text
    revert = ET.SubElement(suite, "testcase", classname=classname, name="every fault reverted")
    if failed:
        failure = ET.SubElement(
            revert, "failure", message="a fault was left in force", type="RevertFailed"
        )
        failure.text = "\n".join(failed)
    if stopped:
        status = journal.status.value
        error = ET.SubElement(revert, "error", message=f"drill {status}", type=status)
        error.text = str(journal.aborted or status)
    if journal.load is not None and journal.load.mode == "open":
        delivered = ET.SubElement(
            suite, "testcase", classname=classname, name="the load was delivered"
        )
        suite.set("tests", str(int(suite.get("tests", "0")) + 1))
        if journal.load.short:
            short = ET.SubElement(
                delivered, "failure", message="the load fell short", type="LoadShort"
            )
            short.text = journal.load.short
            suite.set("failures", str(int(suite.get("failures", "0")) + 1))
    return suite


def twin_suite(journal: Journal) -> ET.Element:
    """A run on a twin: a case per check, which passes when the check did what the twin says
    (failed when it must fail, passed when it must pass), and one for the twin as a whole."""
    twin = journal.twin
    assert twin is not None
    classname = f"drills.{journal.drill}.twin.{twin.name}"
    suite = ET.Element(
        "testsuite",
        name=f"twin:{journal.drill}:{twin.name}",
        time=f"{journal.ended_at - journal.started_at:.3f}",
        timestamp=str(journal.started_at),
    )
    props = ET.SubElement(suite, "properties")
    for key, value in (
        ("run_id", journal.run_id),
        ("status", journal.status.value),
        ("twin_held", str(twin.held)),
        ("twin_stack", twin.stack),
        ("scenario_path", str(journal.scenario_path)),
    ):
        ET.SubElement(props, "property", name=key, value=value)
    failures = 0
    for check in journal.checks:
        case = ET.SubElement(suite, "testcase", classname=classname, name=check.label)
        wrong = (check.label in twin.missed) or (check.label in twin.unnamed)
        if wrong:
            failures += 1
            should = "fail" if check.label in twin.must_fail else "pass"
            text = (
                f"{check.label} must {should} on the twin {twin.name}: observed "
                f"{check.observed_text}, expected {check.expected} ({check.reason})"
            )
            failure = ET.SubElement(case, "failure", message=text, type="TwinNotAsDeclared")
            failure.text = text
    held = ET.SubElement(suite, "testcase", classname=classname, name="the twin held")
    if not twin.held:
        failures += 1
        failure = ET.SubElement(held, "failure", message=twin.summary(), type="TwinNotHeld")
        failure.text = twin.summary()
    if journal.rollbacks.left:
        failures += 1
        failure = ET.SubElement(
            held, "failure", message="a fault was left in force", type="RevertFailed"
        )
        failure.text = "\n".join(journal.rollbacks.left)
    suite.set("tests", str(len(journal.checks) + 1))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    return suite
