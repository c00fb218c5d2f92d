#!/usr/bin/env python3
"""previewd's own chart (deploy/chart) with the real Helm library (helm-python-sdk): renders it
as `helm install` would (values.schema.json first, then the templates), validates every object
against the Kubernetes and CRD schemas (tests/chart/check_chart.py's `validate`), lints it, and
writes the plain manifests generated from it.

Usage: chart.py CHART [-f VALUES]... [--set K=V]... [--release NAME] [--namespace NS]
                [--dump OBJECTS.json] [--notes NOTES.txt] [--lint]
                [--manifests OUT.yaml] [--expect-error TEXT]

  -f, --set        values files and `helm --set` expressions, applied in order over the
                   chart's defaults (maps merge, anything else replaces)
  --dump           the rendered objects as a JSON list, in manifest order
  --notes          the rendered NOTES.txt
  --lint           also `helm lint --strict` with these values; every message is printed
                   as `lint: SEVERITY path: message`, then `lint: N warnings or errors`
  --manifests      the rendered objects as one YAML stream in an order `kubectl apply -f`
                   takes in one step (ORDER), each document as its template wrote it
  --expect-error   the values must be refused (by the schema or a template's `fail`) with a
                   message containing TEXT; exit 0 only then

Last line: `validated N objects, M failed`. Exit 0 only when nothing failed.
"""
import argparse
import copy
import json
import re
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "chart"))
from check_chart import validate  # noqa: E402

# The order of the plain manifests: the Namespace first, the admission policies before
# anything previewd could write with, what the pod mounts and runs as before the Deployment,
# the projects before previewd checks them at start. A kind not listed is an error.
ORDER = [
    "Namespace",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ServiceAccount",
    "ConfigMap",
    "PersistentVolumeClaim",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "AppProject",
    "NetworkPolicy",
    "Service",
    "PodDisruptionBudget",
    "Deployment",
    "Ingress",
    "ServiceMonitor",
]
SEVERITY = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}
DOCUMENT_SEPARATOR = re.compile(r"^---[ \t]*$", re.MULTILINE)


def merge(base, over):
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for key, value in over.items():
            out[key] = merge(out[key], value) if key in out else copy.deepcopy(value)
        return out
    return copy.deepcopy(over)


def documents(rendered):
    """(template, text, object) for every document, in template order."""
    out = []
    for template in sorted(rendered):
        if template.endswith("NOTES.txt"):
            continue
        for text in DOCUMENT_SEPARATOR.split(rendered[template]):
            obj = yaml.safe_load(text)
            if obj:
                out.append((template, text.strip("\n"), obj))
    return out


def ordered(docs):
    unknown = sorted({obj["kind"] for _, _, obj in docs} - set(ORDER))
    if unknown:
        raise SystemExit(f"chart.py: no place in ORDER for {', '.join(unknown)}")
    return sorted(docs, key=lambda doc: ORDER.index(doc[2]["kind"]))


def manifests(docs, release, namespace, files, sets):
    root = Path(__file__).resolve().parent.parent.parent
    named = [str(Path(f).resolve().relative_to(root)) if Path(f).resolve().is_relative_to(root) else f
             for f in files]
    head = (
        "# previewd's plain manifests: deploy/chart rendered with its default values"
        + "".join(f" and -f {f}" for f in named)
        + "".join(f" and --set {s}" for s in sets)
        + f"\n# (release {release}, namespace {namespace}), in an order `kubectl apply -f` takes in one step.\n"
        "# Generated: do not edit. Change the chart, then regenerate with\n"
        "#   UPDATE_DEPLOY=1 cargo test --test deploy_chart\n"
    )
    body = "".join(f"---\n# Source: {template}\n{text}\n" for template, text, _ in docs)
    return head + body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("chart")
    ap.add_argument("-f", "--values", action="append", default=[])
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--release", default="previewd")
    ap.add_argument("--namespace", default="previewd-system")
    ap.add_argument("--dump")
    ap.add_argument("--notes")
    ap.add_argument("--lint", action="store_true")
    ap.add_argument("--manifests")
    ap.add_argument("--expect-error")
    args = ap.parse_args()

    import helm_python as helm

    values = {}
    for path in args.values:
        values = merge(values, yaml.safe_load(Path(path).read_text()) or {})
    for expression in args.set:
        values = merge(values, helm.parse_set_string(expression))

    chart = helm.Chart.load(args.chart)
    with chart:
        try:
            rendered = chart.render(values=values, name=args.release, namespace=args.namespace)
        except helm.HelmError as e:
            message = " ".join(str(e).split())
            if args.expect_error and args.expect_error in message:
                print(f"refused as expected: {message[:600]}")
                return 0
            print(f"refused: {message[:2000]}")
            return 2
    if args.expect_error:
        print(f"expected the values to be refused ({args.expect_error!r}), but the chart rendered")
        return 1

    docs = ordered(documents(rendered))
    objects = [obj for _, _, obj in docs]
    if args.dump:
        Path(args.dump).write_text(json.dumps(objects, indent=1))
    if args.notes:
        notes = [text for template, text in rendered.items() if template.endswith("NOTES.txt")]
        Path(args.notes).write_text("".join(notes))
    if args.manifests:
        Path(args.manifests).write_text(manifests(docs, args.release, args.namespace, args.values, args.set))

    failed = 0
    if args.lint:
        report = helm.lint(args.chart, values, strict=True, namespace=args.namespace)
        problems = 0
        for message in report["messages"]:
            severity = message["severity"]
            problems += severity >= 2
            print(f"lint: {SEVERITY.get(severity, severity)} {message['path']}: {message['error']}")
        for error in report["errors"]:
            problems += 1
            print(f"lint: ERROR {error}")
        print(f"lint: {problems} warnings or errors")
        failed += problems
    failed += validate(objects)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
