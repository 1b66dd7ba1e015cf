"""Prometheus: its text exposition, read with prometheus_client's own parser, and its HTTP
API (a team's Prometheus, which the ``promql`` checks query)."""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["PrometheusAPI", "PrometheusQueryError", "parse_samples"]


def parse_samples(text: str) -> list[dict[str, Any]]:
    """Every sample except histogram buckets and ``_created`` stamps (they bloat the journal)."""
    samples = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith(("_bucket", "_created")):
                continue
            samples.append(
                {"name": sample.name, "labels": dict(sample.labels), "value": float(sample.value)}
            )
    return samples


class PrometheusQueryError(Exception):
    """Prometheus refused a query: ``kind`` is its ``errorType`` (``bad_data``: the PromQL does
    not parse), the message its own."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class PrometheusAPI:
    """The HTTP API of a Prometheus (``/api/v1``), read-only: readiness, instant and range
    queries. Network errors are ``httpx.HTTPError``; a refused query is
    ``PrometheusQueryError`` with Prometheus's own message."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, timeout: float = 10.0):
        self.url = url.rstrip("/")
        self.client = httpx.Client(headers=headers or {}, timeout=timeout)

    def __enter__(self) -> PrometheusAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    def build(self) -> dict[str, Any]:
        """Its build information (version, revision): what answers at this URL is a
        Prometheus, and it is up."""
        data: dict[str, Any] = self._get("/api/v1/status/buildinfo", {})
        return data

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result (its vector, scalar or string as Prometheus gives it)."""
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        data = self._get("/api/v1/query", params)
        result: list[dict[str, Any]] = data.get("result") or []
        return result

    def alert_rules(self) -> set[str]:
        """The names of the alerting rules it has loaded (``/api/v1/rules``)."""
        data = self._get("/api/v1/rules", {"type": "alert"})
        return {
            str(rule.get("name"))
            for group in data.get("groups") or []
            for rule in group.get("rules") or []
            if rule.get("type", "alerting") == "alerting"
        }

    def query_range(
        self, expr: str, start: float, end: float, step: float
    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """Each series of a range query: its labels and its ``(time, value)`` points, NaN
        points left out."""
        params = {
            "query": expr,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step:g}",
        }
        data = self._get("/api/v1/query_range", params)
        out = []
        for series in data.get("result") or []:
            points = [(float(t), float(v)) for t, v in series.get("values", [])]
            out.append((series.get("metric", {}), [p for p in points if p[1] == p[1]]))
        return out

    def _get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        data = self.get_data(path, params)
        return data if isinstance(data, dict) else {}

    def get_data(self, path: str, params: dict[str, str]) -> Any:
        """The ``data`` of any API answer (a list for label values, a map for metadata)."""
        response = self.client.get(f"{self.url}{path}", params=params)
        try:
            body = response.json()
        except ValueError:
            response.raise_for_status()
            raise PrometheusQueryError(
                "not_prometheus", f"{path} answered HTTP {response.status_code}, not JSON"
            ) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            raise PrometheusQueryError(
                str(body.get("errorType", "error")) if isinstance(body, dict) else "error",
                str(body.get("error", f"HTTP {response.status_code}"))
                if isinstance(body, dict)
                else f"HTTP {response.status_code}",
            )
        return body.get("data")
