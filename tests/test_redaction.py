"""Nothing secret in journals or reports: credentials in endpoint URLs and in request headers
are masked everywhere a run writes (model output escaping is tested with the HTML report)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from drills.common.redact import redact, redact_url, sensitive_key
from tests.conftest import RunningStack, drills_cli, isolated_env
from tests.helpers import anchored

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "scenarios" / "tiny.yaml"


def test_urls_lose_passwords_and_secret_query_values() -> None:
    assert redact_url("https://ops:hunter2@gw.example:8443/v1?api_key=abc&x=1") == (
        "https://ops:***@gw.example:8443/v1?api_key=***&x=1"
    )
    assert redact_url("http://tokenonly@gw/") == "http://***@gw/"
    assert redact_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080"


def test_secret_keys_are_masked_but_counts_stay_readable() -> None:
    for key in ("Authorization", "X-Api-Key", "api_key", "access_token", "Cookie", "password"):
        assert sensitive_key(key), key
    for key in ("tokens", "max_tokens", "keyboard", "route", "author"):
        assert not sensitive_key(key), key
    data = {
        "load": {"headers": {"Authorization": "Bearer abc", "X-Team": "sre"}, "max_tokens": 8},
        "records": [{"tokens": 4, "error": "GET http://u:pw@h/x failed"}],
    }
    assert redact(data) == {
        "load": {"headers": {"Authorization": "***", "X-Team": "sre"}, "max_tokens": 8},
        "records": [{"tokens": 4, "error": "GET http://u:***@h/x failed"}],
    }


@pytest.mark.stack
def test_a_run_with_credentials_writes_none_of_them(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    password, token = "pw-5f1c9e", "tok-0a7d33b2"
    scenario = tmp_path / "secret.yaml"
    scenario.write_text(
        anchored(TINY.read_text(), TINY.parent).replace(
            "load: {users: 1,",
            "load: {headers: {Authorization: 'Bearer ${DRILLS_TEST_TOKEN}', X-Team: sre}, "
            "users: 1,",
        )
    )
    gateway = stack.gateway_url.replace("http://", f"http://ops:{password}@")
    result = subprocess.run(
        drills_cli(
            "run",
            str(scenario),
            "--gateway",
            gateway,
            "--toxiproxy",
            stack.toxiproxy_url,
            "--out",
            str(tmp_path / "runs"),
        ),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path, DRILLS_TEST_TOKEN=token),
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    written = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"journal.json", "index.html", "junit.xml", "summary.md"}
    for path in written:
        text = path.read_text(errors="replace")
        assert password not in text and token not in text, path
    assert password not in result.stdout + result.stderr
    journal = (tmp_path / "runs").rglob("journal.json").__next__().read_text()
    # The journal is compact JSON (format 3): no space after the colon.
    assert "ops:***@127.0.0.1" in journal and '"Authorization":"***"' in journal
    assert '"X-Team":"sre"' in journal
    # Without the variable the file is refused before anything starts, naming it.
    missing = subprocess.run(
        drills_cli("validate", str(scenario)),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
    )
    assert missing.returncode == 2
    assert "load.headers.Authorization: refers to ${DRILLS_TEST_TOKEN}, which is not set" in (
        missing.stderr
    )
