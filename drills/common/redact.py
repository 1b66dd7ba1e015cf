"""Keep secrets out of journals and reports.

Users attach drills to staging stacks whose URLs and headers carry credentials
(``https://user:token@gateway``, ``Authorization: Bearer ...``, ``?api_key=...``). Everything
written to a journal passes through ``redact`` first, so no report, JUnit file or summary can
show them.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["MASK", "redact", "redact_url", "sensitive_key"]

MASK = "***"
# Whole name segments, so that ``max_tokens`` or ``tokens`` (counts) stay readable while
# ``access_token`` or ``X-Api-Key`` are masked.
_SECRET_WORDS = {
    "authorization",
    "auth",
    "token",
    "secret",
    "password",
    "passwd",
    "cookie",
    "credential",
    "credentials",
    "apikey",
    "signature",
}
_SECRET_PAIRS = ("api_key", "private_key", "access_key", "secret_key", "set_cookie")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'<>]+", re.IGNORECASE)


def sensitive_key(key: str) -> bool:
    """Whether a header, field or query parameter of this name holds a secret."""
    name = re.sub(r"[-. ]", "_", key.lower())
    return bool(set(name.split("_")) & _SECRET_WORDS) or any(p in name for p in _SECRET_PAIRS)


def redact_url(url: str) -> str:
    """``url`` without the password of its user info or the values of secret query params."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{MASK}@{host}" if ":" in userinfo else f"{MASK}@{host}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            query = urlencode([(k, MASK if sensitive_key(k) else v) for k, v in pairs], safe="*")
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return MASK


def redact(value: Any) -> Any:
    """A copy of ``value`` (JSON-like data) with secrets masked: values under sensitive keys,
    credentials inside URLs anywhere in strings."""
    if isinstance(value, dict):
        return {
            k: (MASK if isinstance(k, str) and sensitive_key(k) and v else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact(v) for v in value)
    if isinstance(value, str) and "://" in value:
        return _URL.sub(lambda m: redact_url(m.group(0)), value)
    return value
