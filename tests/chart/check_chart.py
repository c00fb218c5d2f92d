#!/usr/bin/env python3
"""Renders helpers-chart with the real Helm library and validates every object.

Usage: check_chart.py CHART VALUES.json [--release NAME] [--dump OUT.json]
       check_chart.py CHART --application APP.yaml [--dump OUT.json]
           (a helper Application as previewd writes it: the Application itself is validated
            against its CRD, then the chart is rendered with its release name and values)
       check_chart.py CHART VALUES.json --expect-schema-error TEXT
       check_chart.py --manifests FILE_OR_DIR [--unschematized KIND]
           (manifests as written, e.g. deploy/; KIND has no schema here and gets only the
            rule checks: name, namespace, labels, annotations)

Built-in kinds are checked against the Kubernetes OpenAPI schemas bundled with
kubernetes-validate (strict: unknown fields fail, as Argo CD's server-side apply does);
custom resources against the CRD schemas in tests/schemas/, made strict the same way;
plus the rules no schema states: object names, label values, hook and wave annotations.
Last line: `validated N objects, M failed`. Exit 0 only when nothing failed.
"""
import argparse
import json
import re
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

KUBE_VERSION = "1.31"
SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
ARGO_HOOKS = {"PreSync", "Sync", "PostSync", "SyncFail", "Skip", "PreDelete", "PostDelete"}
ARGO_DELETE = {"HookSucceeded", "HookFailed", "BeforeHookCreation"}


def strict(schema):
    """CRD schemas allow unknown fields by omission; the API server's strict validation does not."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if (out.get("type") == "object" and "properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def crd_validator(api_version, kind):
    group, _, version = api_version.rpartition("/")
    path = SCHEMAS / f"{group}_{version}_{kind}.json"
    if not path.exists():
        return None
    schema = strict(json.loads(path.read_text()))
    schema["properties"]["metadata"] = {"type": "object"}  # checked by rules below
    return jsonschema.Draft7Validator(schema)


def rule_errors(obj):
    errors = []
    meta = obj.get("metadata") or {}
    name, namespace, kind = meta.get("name", ""), meta.get("namespace"), obj.get("kind")
    # A CronJob's Jobs are named <name>-<11 digits>, which must fit a label: 52 (the API
    # server's batch validation, ValidateCronJobCreate).
    limit = {"Namespace": 63, "Job": 63, "Service": 63, "CronJob": 52}.get(kind, 253)
    pattern = DNS_LABEL if limit <= 63 else DNS_SUBDOMAIN
    if not name or len(name) > limit or not pattern.match(name):
        errors.append(f"metadata.name {name!r} is not a valid {kind} name (<= {limit})")
    if namespace is not None and (len(namespace) > 63 or not DNS_LABEL.match(namespace)):
        errors.append(f"metadata.namespace {namespace!r} is not a DNS label")
    cluster_scoped = ("Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                      "ValidatingAdmissionPolicyBinding")
    if kind not in cluster_scoped and namespace is None:
        errors.append("metadata.namespace is not set (objects must not depend on the release namespace)")
    for key, value in (meta.get("labels") or {}).items():
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            errors.append(f"label {key}={value!r} is not a valid label value")
    annotations = meta.get("annotations") or {}
    for hook in filter(None, annotations.get("argocd.argoproj.io/hook", "").split(",")):
        if hook.strip() not in ARGO_HOOKS:
            errors.append(f"unknown Argo CD hook {hook!r}")
    for policy in filter(None, annotations.get("argocd.argoproj.io/hook-delete-policy", "").split(",")):
        if policy.strip() not in ARGO_DELETE:
            errors.append(f"unknown hook delete policy {policy!r}")
    wave = annotations.get("argocd.argoproj.io/sync-wave")
    if wave is not None and not re.match(r"^-?\d+$", str(wave)):
        errors.append(f"sync-wave {wave!r} is not an integer")
    return errors


def validate(objects, unschematized=()):
    failed = 0
    seen = set()
    for obj in objects:
        label = f"{obj.get('kind')} {(obj.get('metadata') or {}).get('namespace', '')}/{(obj.get('metadata') or {}).get('name')}"
        errors = rule_errors(obj)
        key = (obj.get("apiVersion"), obj.get("kind"), (obj.get("metadata") or {}).get("namespace"), (obj.get("metadata") or {}).get("name"))
        if key in seen:
            errors.append("duplicate object")
        seen.add(key)
        validator = crd_validator(obj.get("apiVersion", ""), obj.get("kind", ""))
        if obj.get("kind") in unschematized:
            pass
        elif validator is not None:
            errors += [f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in validator.iter_errors(obj)]
        else:
            try:
                kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
            except kubernetes_validate.ValidationError as e:
                errors.append(f"{'.'.join(map(str, e.path)) or '(root)'}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError:
                errors.append(f"no schema for {obj.get('apiVersion')} {obj.get('kind')}")
        if errors:
            failed += 1
            print(f"FAIL {label}")
            for e in errors:
                print(f"    - {e[:400]}")
        else:
            print(f"ok   {label}")
    print(f"validated {len(objects)} objects, {failed} failed")
    return failed


def set_value(values, path, text):
    """`helm --set path=text`, as Argo CD passes `helm.parameters` (util/helm/cmd.go): a
    dotted path, the value typed as strvals types it (an integer, true/false, else text)."""
    *parents, last = path.split(".")
    for key in parents:
        values = values.setdefault(key, {})
    if text in ("true", "false"):
        values[last] = text == "true"
    elif re.fullmatch(r"-?[0-9]+", text):
        values[last] = int(text)
    else:
        values[last] = text


def render(chart_dir, values, release):
    import helm_python as helm
    chart = helm.Chart.load(chart_dir)
    with chart:
        chart.validate_schema(values)
        rendered = chart.render(values=values, name=release, namespace=values.get("namespace") or "default")
    objects = []
    for template in sorted(rendered):
        if template.endswith("NOTES.txt"):
            continue
        objects += [doc for doc in yaml.safe_load_all(rendered[template]) if doc]
    return objects


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("chart", nargs="?")
    ap.add_argument("values", nargs="?")
    ap.add_argument("--release", default="preview")
    ap.add_argument("--dump")
    ap.add_argument("--manifests")
    ap.add_argument("--unschematized", action="append", default=[])
    ap.add_argument("--application")
    ap.add_argument("--expect-schema-error")
    args = ap.parse_args()
    if args.manifests:
        path = Path(args.manifests)
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        objects = [doc for f in files for doc in yaml.safe_load_all(f.read_text()) if doc]
        return 1 if validate(objects, args.unschematized) else 0
    prefix = []
    if args.application:
        docs = [doc for doc in yaml.safe_load_all(Path(args.application).read_text()) if doc]
        apps = [d for d in docs if d.get("kind") == "Application"]
        if len(apps) != 1:
            print(f"expected one Application in {args.application}, found {len(apps)}")
            return 2
        prefix = apps
        helm_source = apps[0]["spec"]["source"]["helm"]
        values, args.release = helm_source["valuesObject"], helm_source["releaseName"]
        for parameter in helm_source.get("parameters") or []:
            set_value(values, parameter["name"], parameter["value"])
    else:
        values = json.loads(Path(args.values).read_text())
    try:
        objects = render(args.chart, values, args.release)
    except Exception as e:  # helm's errors carry the schema message
        message = " ".join(str(e).split())
        if args.expect_schema_error and args.expect_schema_error in message:
            print(f"rejected as expected: {message[:300]}")
            return 0
        print(f"render failed: {message[:2000]}")
        return 2
    if args.expect_schema_error:
        print(f"expected the values to be rejected ({args.expect_schema_error!r}), but the chart rendered")
        return 1
    if args.dump:
        Path(args.dump).write_text(json.dumps(objects, indent=1))
    return 1 if validate(prefix + objects) else 0


if __name__ == "__main__":
    sys.exit(main())
