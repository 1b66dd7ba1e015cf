"""Gateway adapters: what the harness reads from a gateway, as data.

Users bring their own gateway (LiteLLM, Envoy AI Gateway, Kong, their own). An adapter says
where its liveness probe is (and with which headers and timeout), how it says which upstream
served a request (a response header, and a map from its values to the stack's hops), how it
marks a fallback answer, and where its breaker, ejection or cooldown state shows in its metrics.
That last one is the gateway's *claim* about itself: checks that use it say so in their result.

Built-in adapters: ``drills`` (the embedded gateway), ``litellm`` (LiteLLM proxy) and
``envoy`` (Envoy's outlier detection). Third-party packages add theirs through the entry-point
group ``drills.gateways`` (each entry point loads a ``GatewayAdapter``); ``register`` adds one
at run time. A scenario's attach section names one (``adapter: litellm``) and may override any
field (``adapter: {use: litellm, health: {path: /health/readiness}}``).
"""

from __future__ import annotations

from importlib.metadata import EntryPoint
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from drills.common.plugins import Group, PluginError
from drills.common.units import Duration

__all__ = [
    "BUILTIN",
    "BreakerSignal",
    "GatewayAdapter",
    "Health",
    "UpstreamHeader",
    "adapter",
    "known_adapters",
    "merged",
    "register",
    "served_by",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Health(_Model):
    path: str = Field(default="/health", pattern=r"^/")
    """The liveness path (no model call: a probe that calls every deployment is too slow)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Sent with the probe (``${NAME}`` read from the environment)."""
    timeout: Duration = 5.0
    expect_status: list[int] = Field(default_factory=lambda: [200], min_length=1)


class UpstreamHeader(_Model):
    header: str
    """The response header naming the upstream that served a request. A value that lists
    several (a gateway that retried names each upstream it tried, as nginx's
    ``$upstream_addr`` does: ``"10.0.0.1:80, 10.0.0.2:80"``, groups separated by ``" : "``)
    counts for the last one, the one that answered."""
    map: dict[str, str] = Field(default_factory=dict)
    """Header value -> hop name; a value not in the map is kept as it is."""

    def hop_of(self, value: str | None) -> str | None:
        """The hop that served a request, from the header's value."""
        return served_by(value, self.map)

    @model_validator(mode="after")
    def _values(self) -> UpstreamHeader:
        empty = [k for k, v in self.map.items() if not v]
        if empty:
            raise ValueError(f"map: {empty[0]!r} maps to no hop; give the hop's name")
        return self


class BreakerSignal(_Model):
    """Where the gateway's breaker (ejection, cooldown) state shows in its metrics."""

    metric: str = Field(min_length=1)
    label: str
    """The label that names the upstream."""
    map: dict[str, str] = Field(default_factory=dict)
    """Label value -> hop name (LiteLLM names deployments by id, Envoy by cluster)."""
    kind: Literal["opened_at", "state", "counter"]
    """``opened_at``: the value is the epoch time of the last opening; ``state``: the value
    says open or not (``open_values``); ``counter``: it counts openings."""
    open_values: list[float] = Field(default_factory=list)
    """``state``: the values that mean open (any value above the largest closed one)."""
    match: dict[str, str] = Field(default_factory=dict)
    """Other labels a sample must carry (``to: open`` on a transitions counter)."""

    @model_validator(mode="after")
    def _state_values(self) -> BreakerSignal:
        if self.kind == "state" and not self.open_values:
            raise ValueError("a 'state' breaker signal needs open_values")
        return self

    def hop_of(self, labels: dict[str, str]) -> str | None:
        value = labels.get(self.label)
        if value is None or any(labels.get(k) != v for k, v in self.match.items()):
            return None
        return self.map.get(value, value)


def served_by(value: str | None, hops: dict[str, str]) -> str | None:
    """The hop named by an upstream header's ``value`` (``UpstreamHeader``): the last of the
    upstreams it lists, mapped through ``hops``; ``None`` for no value."""
    if not value:
        return None
    last = value.replace(" : ", ",").split(",")[-1].strip()
    return hops.get(last, last) or None


class GatewayAdapter(_Model):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,40}$")
    description: str = ""
    health: Health = Field(default_factory=Health)
    metrics_path: str | None = Field(default="/metrics", pattern=r"^/")
    """Where the gateway publishes its Prometheus metrics; ``none`` (or null): it publishes
    none, so nothing is scraped and the checks say the gateway makes no claim."""
    route: str | None = None
    """A response header naming the route taken (``primary``, ``backup``, ``fallback``)."""
    upstream: UpstreamHeader | None = None
    fallback_header: str | None = None
    """A header whose value marks a fallback answer (``fallback_values``)."""
    fallback_values: list[str] = Field(default_factory=list)
    breaker_opened: BreakerSignal | None = None
    """When a breaker opened (``opened_at`` or ``state``): ``breaker_opened_within``."""
    breaker_opens: BreakerSignal | None = None
    """How often it opened (``counter``, or ``state`` counted by transitions)."""

    @model_validator(mode="before")
    @classmethod
    def _no_metrics(cls, data: Any) -> Any:
        path = data.get("metrics_path") if isinstance(data, dict) else None
        if isinstance(path, str) and path.lower() == "none":
            data = {**data, "metrics_path": None}
        return data


BUILTIN: dict[str, GatewayAdapter] = {
    "drills": GatewayAdapter(
        name="drills",
        description="the embedded gateway (stack/gateway)",
        health=Health(path="/health"),
        route="x-drills-route",
        upstream=UpstreamHeader(header="x-drills-upstream"),
        fallback_header="x-drills-route",
        fallback_values=["fallback"],
        breaker_opened=BreakerSignal(
            metric="drills_gateway_breaker_opened_timestamp_seconds",
            label="upstream",
            kind="opened_at",
        ),
        breaker_opens=BreakerSignal(
            metric="drills_gateway_breaker_transitions_total",
            label="upstream",
            kind="counter",
            match={"to": "open"},
        ),
    ),
    "litellm": GatewayAdapter(
        name="litellm",
        description="LiteLLM proxy: deployments by model_info.id, cooldowns in its metrics",
        # /health calls every deployment (about 13 s here) and needs the key; this one neither.
        health=Health(path="/health/liveliness"),
        upstream=UpstreamHeader(header="x-litellm-model-id"),
        breaker_opened=BreakerSignal(
            metric="litellm_deployment_state",
            label="model_id",
            kind="state",
            open_values=[2.0],  # 0 healthy, 1 partial outage, 2 complete outage (cooled down)
        ),
        breaker_opens=BreakerSignal(
            metric="litellm_deployment_cooled_down_total",
            label="model_id",
            kind="counter",
        ),
    ),
    "envoy": GatewayAdapter(
        name="envoy",
        description="Envoy (AI Gateway): outlier detection ejects hosts of a cluster",
        health=Health(path="/ready"),
        metrics_path="/stats/prometheus",
        upstream=UpstreamHeader(header="x-envoy-upstream-host-address"),
        breaker_opened=BreakerSignal(
            metric="envoy_cluster_outlier_detection_ejections_active",
            label="envoy_cluster_name",
            kind="state",
            open_values=[1.0],
        ),
        breaker_opens=BreakerSignal(
            metric="envoy_cluster_outlier_detection_ejections_enforced_total",
            label="envoy_cluster_name",
            kind="counter",
        ),
    ),
}
"""The built-in adapters, in one place."""

_EXTRA: dict[str, GatewayAdapter] = {}


def register(item: GatewayAdapter) -> None:
    """Add (or replace) an adapter in this process; a built-in name is refused."""
    if item.name in BUILTIN:
        raise ValueError(f"{item.name!r} is a built-in gateway adapter; give yours another name")
    _EXTRA[item.name] = item


def _accept(entry: EntryPoint, item: object) -> GatewayAdapter:
    return PLUGINS.typed(entry, item, GatewayAdapter, "name")


PLUGINS: Group[GatewayAdapter] = Group(
    "drills.gateways", "gateway adapter", lambda: BUILTIN, _accept
)
"""The ``drills.gateways`` entry points (``drills.common.plugins``: one loader, one set of
rules for every group)."""


def known_adapters() -> dict[str, GatewayAdapter]:
    """Every adapter that can be used: built in, from entry points (broken ones left out, see
    ``PLUGINS.broken()``), registered in this process."""
    return {**BUILTIN, **PLUGINS.load_all(), **_EXTRA}


def adapter(name: str) -> GatewayAdapter:
    """The adapter called ``name``; ``ValueError`` naming the known ones (and any broken
    plugin's error) otherwise."""
    try:
        clash = PLUGINS.clash(name)
        if clash is not None:
            raise clash
        found = _EXTRA.get(name) or BUILTIN.get(name) or PLUGINS.load(name)
    except PluginError as exc:
        raise ValueError(str(exc)) from None
    if found is None:
        broken = "".join(f"; {e}" for e in PLUGINS.broken())
        raise ValueError(
            f"unknown gateway adapter {name!r}; expected one of: "
            f"{', '.join(known_adapters())}{broken}"
        )
    return found


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def merged(spec: str | dict[str, Any]) -> GatewayAdapter:
    """An adapter by name, or ``{use: NAME, FIELD: override, ...}`` over a known one."""
    if isinstance(spec, str):
        return adapter(spec)
    spec = dict(spec)
    base = adapter(str(spec.pop("use", "drills")))
    data = _deep_merge(base.model_dump(mode="json"), spec)
    return GatewayAdapter.model_validate(data)
