"""The JSON Schema of a scenario file (``drills schema scenario``), for editors and tools: the
scenario model's own schema, with every fault kind known now (plugins' included) in place of the
open ``inject`` items, and the check names and gateway adapters enumerated so that an editor
completes them, and
each family's fields (those it requires, and those only other families take) so that one
marks a check that lacks or misplaces one."""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field, create_model

from drills.model.check_families import GATED, CheckFamily, accepts, families
from drills.model.faults import fault_models
from drills.model.gateways import known_adapters
from drills.model.scenario import Phase, Scenario

__all__ = ["scenario_schema"]


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file, with every fault kind known now (plugins'
    included) in place of the open ``inject`` items."""
    union: Any = Annotated[Union[fault_models()], Field(discriminator="kind")]  # noqa: UP007
    phase = create_model(
        "Phase",
        __base__=Phase,
        inject=(list[union], Field(default_factory=list)),
    )
    scenario = create_model(
        "Scenario",
        __base__=Scenario,
        phases=(list[phase], Field(min_length=1)),  # type: ignore[valid-type]
    )
    schema = scenario.model_json_schema(by_alias=True)
    # The loader takes ``stack: {attach: {...}}`` as well as ``stack: {...}`` (_unwrap_attach).
    stack = schema["properties"]["stack"]
    stack["oneOf"].append(
        {
            "type": "object",
            "properties": {"attach": {"$ref": "#/$defs/Attach"}},
            "required": ["attach"],
            "additionalProperties": False,
        }
    )
    _enumerate_names(schema["$defs"])
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "drills scenario"
    return schema


def _expand(pattern: str) -> list[str] | None:
    """Every string a name pattern matches, for the simple patterns check families use
    (literals, ``\\.``, and groups of alternatives: ``(ttft|e2e)\\.p(50|99)``); ``None``
    for any other pattern."""

    def seq(i: int) -> tuple[list[str], int]:
        out = [""]
        while i < len(pattern) and pattern[i] not in "|)":
            char = pattern[i]
            if char == "(":
                alts, i = group(i + 1)
                out = [a + b for a in out for b in alts]
                continue
            if char == "\\" and i + 1 < len(pattern) and pattern[i + 1] in ".-_":
                char, i = pattern[i + 1], i + 1
            elif not (char.isalnum() or char in "_-"):
                raise ValueError(char)
            out, i = [a + char for a in out], i + 1
        return out, i

    def group(i: int) -> tuple[list[str], int]:
        alts: list[str] = []
        while True:
            part, i = seq(i)
            alts += part
            if i >= len(pattern):
                raise ValueError("unclosed group")
            if pattern[i] == ")":
                return alts, i + 1
            i += 1

    try:
        names, end = seq(0)
    except ValueError:
        return None
    return names if end == len(pattern) else None


def _family_fields(family: CheckFamily, defs: dict[str, Any]) -> dict[str, Any] | None:
    """A check of ``family`` gives the fields it requires and none of the fields only other
    families take (``GATED``, and ``params`` where it has none), its ``params`` as its model
    has them, as an ``if``/``then`` on its name; ``None`` when there is nothing to say."""
    required = [f for f in family.fields if f != "within" or family.within is not None]
    refused = [f for f in (*GATED, "params") if not accepts(family, f)]
    params: dict[str, Any] | None = None
    if family.params is not None:
        params = family.params.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(params.pop("$defs", {}))
    name: dict[str, Any] = (
        {"pattern": f"^(?:{family.pattern})$"}
        if family.pattern is not None
        else {"enum": list(family.names)}
    )
    then: dict[str, Any] = {}
    if params is not None:
        then["properties"] = {"params": params}
    if required:
        then["required"] = required
    if refused:
        then["not"] = {"anyOf": [{"required": [f]} for f in refused]}
    return {"if": {"properties": {"check": name}, "required": ["check"]}, "then": then}


def _enumerate_names(defs: dict[str, Any]) -> None:
    """The schema's check names and gateway adapters as the values they may take (plugins'
    included), so that an editor completes them: ``check`` from every check family (a name
    pattern expanded, or kept as a pattern), ``adapter`` from every known adapter."""
    names: set[str] = set()
    patterns: list[str] = []
    for family in families():
        names.update(family.names)
        if family.pattern is not None:
            expanded = _expand(family.pattern)
            if expanded is None:
                patterns.append(f"^(?:{family.pattern})$")
            else:
                names.update(expanded)
    check = defs["Check"]["properties"]["check"]
    choices: list[dict[str, Any]] = [{"type": "string", "enum": sorted(names)}]
    choices += [{"type": "string", "pattern": p} for p in patterns]
    defs["Check"]["properties"]["check"] = {
        "title": check.get("title", "Check"),
        "description": "The check: a name of one of the check families (built in or a plugin's).",
        "anyOf": choices,
    }
    defs["Check"]["allOf"] = [rule for f in families() if (rule := _family_fields(f, defs))]
    adapters = sorted(known_adapters())
    adapter = defs["Attach"]["properties"]["adapter"]
    adapter["anyOf"] = [
        {"type": "string", "enum": adapters},
        {
            "type": "object",
            "properties": {"use": {"type": "string", "enum": adapters}},
            "additionalProperties": True,
        },
    ]
