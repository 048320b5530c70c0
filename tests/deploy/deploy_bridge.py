"""The deploy tests' bridge to Helm's Go SDK, YAML and jsonschema, run in the tools' venv.

helm-python-sdk, PyYAML and jsonschema live in .cache/deploy-venv
(tools/install-deploy-tools.sh), not in the project's test environment, so the tests run
this script with that venv's Python: one JSON job on stdin, one JSON answer on stdout. The
tests themselves only see JSON.

Job keys, each optional, answered under the same key:
  lint       [{chart, values, kube_version}]: Helm's strict lint report for each
  render     [{chart, values, name, namespace}]: {"templates": {path: yaml}, "objects":
             [manifest]} or {"error", "error_type"} (schema or template failure)
  package    {chart, destination}: the archive's path
  load       [path]: the YAML documents of each file
  crd_check  {crds: [path], documents: [manifest]}: for each document, the errors of its
             CRD's openAPIV3Schema, made strict (unknown fields are errors)
"""

from __future__ import annotations

import json
import sys
from typing import Any

import helm_python
import jsonschema
import yaml


def lint(job: dict[str, Any]) -> dict[str, Any]:
    report: dict[str, Any] = helm_python.lint(
        job["chart"], job["values"], strict=True, kube_version=job["kube_version"]
    )
    return report


def render(job: dict[str, Any]) -> dict[str, Any]:
    chart = helm_python.Chart.load(job["chart"])
    try:
        chart.validate_schema(job["values"])
        templates = chart.render(
            job["values"], name=job["name"], namespace=job["namespace"], is_install=True
        )
    except helm_python.HelmError as exc:
        return {"error": str(exc), "error_type": type(exc).__name__}
    objects = [
        document
        for path, text in sorted(templates.items())
        if path.endswith((".yaml", ".yml"))
        for document in yaml.safe_load_all(text)
        if document
    ]
    return {"templates": templates, "objects": objects}


def load(path: str) -> list[Any]:
    with open(path) as f:
        return [document for document in yaml.safe_load_all(f) if document is not None]


def _strict(schema: Any) -> Any:
    """The schema with ``additionalProperties: false`` wherever the CRD lists the properties
    of an object and does not keep unknown fields: a misspelt field then fails."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {key: _strict(value) for key, value in schema.items()}
    if (
        strict.get("type") == "object"
        and isinstance(strict.get("properties"), dict)
        and "additionalProperties" not in strict
        and not strict.get("x-kubernetes-preserve-unknown-fields")
    ):
        strict["additionalProperties"] = False
    return strict


def crd_check(job: dict[str, Any]) -> list[dict[str, Any]]:
    validators: dict[tuple[str, str], jsonschema.Draft7Validator] = {}
    for path in job["crds"]:
        crd = load(path)[0]
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = _strict(version["schema"]["openAPIV3Schema"])
            validators[(f"{group}/{version['name']}", kind)] = jsonschema.Draft7Validator(schema)
    results = []
    for document in job["documents"]:
        key = (document.get("apiVersion", ""), document.get("kind", ""))
        validator = validators.get(key)
        if validator is None:
            errors = [f"no CRD for {key[0]} {key[1]}"]
        else:
            errors = [
                f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
                for error in validator.iter_errors(document)
            ]
        results.append(
            {"kind": key[1], "name": document.get("metadata", {}).get("name"), "errors": errors}
        )
    return results


def main() -> int:
    job = json.load(sys.stdin)
    helm_python.disable_logging()
    answer: dict[str, Any] = {}
    if "lint" in job:
        answer["lint"] = [lint(item) for item in job["lint"]]
    if "render" in job:
        answer["render"] = [render(item) for item in job["render"]]
    if "package" in job:
        answer["package"] = helm_python.package(
            job["package"]["chart"], destination=job["package"]["destination"]
        )
    if "load" in job:
        answer["load"] = [load(path) for path in job["load"]]
    if "crd_check" in job:
        answer["crd_check"] = crd_check(job["crd_check"])
    json.dump(answer, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
