"""Admission as far as the CRD decides it, without an API server: defaults, the OpenAPI schema
(jsonschema) and every ``x-kubernetes-validations`` CEL rule, evaluated with ``cel-python``.

KMock runs none of this, and CEL rules are where the CRDs refuse what cannot work (shared storage
without ReadWriteMany, flags the operator owns...), so they are evaluated here the way the API server
does: defaults first, then each rule with ``self`` bound to the value at the rule's node.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml

CRDS = Path(__file__).resolve().parents[2] / "crds"


def schema(plural: str) -> dict[str, Any]:
    """The CRD's schema (a copy: a test may change it)."""
    return copy.deepcopy(_schema(plural))


@functools.cache
def _schema(plural: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / f"{plural}.serving.naiad.dev.yaml").read_text())
    result: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return result


@functools.cache
def _validator(plural: str) -> jsonschema.protocols.Validator:
    """The schema's validator, the schema checked once (``jsonschema.validate`` checks it against
    its metaschema on every call: a third of a second for these CRDs)."""
    root = _schema(plural)
    cls = jsonschema.validators.validator_for(root)
    cls.check_schema(root)
    return cls(root)


_ENVIRONMENT = celpy.Environment()


@functools.cache
def _program(rule: str) -> celpy.Runner:
    """A rule compiled once per test process: parsing CEL with cel-python's grammar takes tens of
    milliseconds a rule, and the CRDs' rules are checked against every spec the tests admit."""
    return _ENVIRONMENT.program(_ENVIRONMENT.compile(rule))


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


def _violations(node: dict[str, Any], value: Any) -> list[str]:
    messages: list[str] = []
    for rule in node.get("x-kubernetes-validations") or []:
        if not bool(_program(rule["rule"]).evaluate({"self": celpy.json_to_cel(value)})):
            messages.append(rule.get("message") or rule["rule"])
    if isinstance(value, dict):
        for key, sub in (node.get("properties") or {}).items():
            if key in value:
                messages += _violations(sub, value[key])
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for item in value:
            messages += _violations(node["items"], item)
    return messages


def admit(plural: str, obj: dict[str, Any]) -> list[str]:
    """What the API server would say about creating ``obj``: [] when admitted, else the messages."""
    root = _schema(plural)
    value = defaulted(root, obj)
    error = jsonschema.exceptions.best_match(_validator(plural).iter_errors(value))
    if error is not None:  # the one error ``jsonschema.validate`` would raise
        return [f"schema: {error.message}"]
    return _violations(root, value)
