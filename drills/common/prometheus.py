"""Prometheus text exposition, read with prometheus_client's own parser."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["parse_samples"]


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
