"""Admission as far as the CRD decides it, without an API server: defaults, the OpenAPI schema
(jsonschema) and every ``x-kubernetes-validations`` CEL rule, evaluated with ``cel-python``.

KMock runs none of this, and CEL rules are where the CRDs refuse what cannot work (shared storage
without ReadWriteMany, flags the operator owns...), so they are evaluated here the way the API server
does: defaults first, then each rule with ``self`` bound to the value at the rule's node.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml

CRDS = Path(__file__).resolve().parents[2] / "crds"


def schema(plural: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / f"{plural}.serving.naiad.dev.yaml").read_text())
    result: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return result


def defaulted(node: dict[str, Any], value: Any) -> Any:
    """Apply ``default``s as the API server does: for absent properties of present objects."""
    value = copy.deepcopy(value)
    if isinstance(value, dict) and "properties" in node:
        for key, sub in node["properties"].items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = defaulted(sub, value[key])
    elif isinstance(value, list) and "items" in node:
        value = [defaulted(node["items"], v) for v in value]
    return value


def rules(node: dict[str, Any], path: str = "") -> list[tuple[str, str, str]]:
    """Every (path, rule, message) in a schema."""
    found = [(path, r["rule"], r.get("message", "")) for r in node.get("x-kubernetes-validations") or []]
    for key, sub in (node.get("properties") or {}).items():
        found += rules(sub, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        found += rules(node["items"], f"{path}[]")
    return found


def _violations(node: dict[str, Any], value: Any, env: celpy.Environment) -> list[str]:
    messages: list[str] = []
    for rule in node.get("x-kubernetes-validations") or []:
        program = env.program(env.compile(rule["rule"]))
        if not bool(program.evaluate({"self": celpy.json_to_cel(value)})):
            messages.append(rule.get("message") or rule["rule"])
    if isinstance(value, dict):
        for key, sub in (node.get("properties") or {}).items():
            if key in value:
                messages += _violations(sub, value[key], env)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for item in value:
            messages += _violations(node["items"], item, env)
    return messages


def admit(plural: str, obj: dict[str, Any]) -> list[str]:
    """What the API server would say about creating ``obj``: [] when admitted, else the messages."""
    root = schema(plural)
    value = defaulted(root, obj)
    try:
        jsonschema.validate(value, root)
    except jsonschema.ValidationError as exc:
        return [f"schema: {exc.message}"]
    return _violations(root, value, celpy.Environment())
