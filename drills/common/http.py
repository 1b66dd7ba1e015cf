"""One checked HTTP call for the API clients of this layer (Docker, Kubernetes).

A component that cannot be reached, or answers 4xx/5xx, raises the client's ``APIError``
subclass with the status code, method and path set, and the component's own message."""

from __future__ import annotations

from typing import Any

import httpx

from drills.common.errors import APIError

__all__ = ["checked_call"]


def checked_call(
    http: httpx.Client,
    error: type[APIError],
    method: str,
    path: str,
    *,
    where: str,
    **kwargs: Any,
) -> httpx.Response:
    """``http.request(method, path, **kwargs)``; raise ``error`` unless it answered < 400.
    ``where`` names the component for a person (``"Docker at unix:///run/docker.sock"``)."""
    try:
        response = http.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        raise error(f"{where} is not reachable: {exc}", method=method, url=path) from None
    if response.status_code >= 400:
        try:
            message = response.json().get("message", response.text)
        except (ValueError, AttributeError):
            message = response.text
        raise error(
            f"{method} {path}: HTTP {response.status_code}: {message}",
            status_code=response.status_code,
            method=method,
            url=path,
        )
    return response
