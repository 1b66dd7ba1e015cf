"""Faults on a Kubernetes cluster (``kubernetes.*``).

The spec of the family whose injector is ``injectors.kubernetes``: what a scenario may write
(validated by ``drills.model.faults.Fault``), what the family needs of the stack, how it
previews. It imports only the model's base and the low layer."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from drills.common.units import Duration
from drills.model.fault_spec import FaultSpec


class KubernetesFault(FaultSpec):
    """A fault on a Kubernetes cluster. ``target`` is, by kind: a label selector of the pods to
    delete (``app=vllm,role=primary``), the node to cordon or drain, the deployment to scale.
    Namespaces and contexts must be allowed (the scenario's ``kubernetes`` section and the
    safety policy) before anything is called."""

    kills = frozenset({"kubernetes.delete_pod"})
    replaced = frozenset({"kubernetes.delete_pod"})
    orchestrator = "Kubernetes"
    resolves = "pods, nodes or deployments listed below (read from the cluster now)"

    kind: Literal[
        "kubernetes.delete_pod", "kubernetes.cordon", "kubernetes.drain", "kubernetes.scale"
    ]
    namespace: str = Field(default="default", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    gpu: bool = False
    """delete_pod: only pods that request a GPU (``nvidia.com/gpu``)."""
    node: str | None = None
    """delete_pod: only pods running on this node."""
    mode: Literal["one", "all", "count", "percent"] = "one"
    count: int | None = Field(default=None, ge=1)
    percent: float | None = Field(default=None, gt=0, le=100)
    grace: Duration = 0.0
    """delete_pod: the pods' termination grace period."""
    replicas: int | None = Field(default=None, ge=0)
    """scale: the replica count during the fault (restored on revert)."""
    eviction_timeout: Duration = Field(default=60.0, gt=0)
    """drain: how long to keep retrying an eviction that a PodDisruptionBudget refuses (HTTP
    429), as ``kubectl drain`` does; every refusal is in the fault's evidence."""

    @model_validator(mode="after")
    def _coherent(self) -> KubernetesFault:
        if self.mode == "count" and self.count is None:
            raise ValueError("mode 'count' needs 'count'")
        if self.mode == "percent" and self.percent is None:
            raise ValueError("mode 'percent' needs 'percent'")
        if self.kind == "kubernetes.scale" and self.replicas is None:
            raise ValueError("kubernetes.scale needs 'replicas'")
        if self.kind != "kubernetes.delete_pod" and (self.gpu or self.node):
            raise ValueError("'gpu' and 'node' select pods: kubernetes.delete_pod only")
        return self
