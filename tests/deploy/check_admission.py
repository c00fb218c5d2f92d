#!/usr/bin/env python3
"""Evaluates the ValidatingAdmissionPolicies of a manifest file (deploy/manifests/previewd.yaml,
from deploy/chart/templates/admission.yaml) with cel-python (an independent implementation of
CEL, the language the API server runs) on the requests given as JSON: each {"name", "user", "object", "oldObject" (an UPDATE's object before it; absent
for a CREATE), "operation" (optional: "DELETE" with the deleted object as "oldObject" and no
"object"), "admitted": true|false}. Prints one line per case and "N passed, M failed".
The request is built as the API server builds it: `request.userInfo.username`,
`request.operation`, `request.kind` (group, version and kind of the object's apiVersion and
kind), `request.namespace`, `object` (null for a DELETE), and `oldObject` (null for a
CREATE). Matching follows the API server: a policy applies when one of its
matchConstraints.resourceRules names the operation, the group and the resource (the kind's
plural, or "*"), and every matchCondition is true; variables are evaluated in order; every
validation must hold.
Usage: check_admission.py MANIFESTS.yaml CASES.json (its other kinds are ignored)"""
import json
import sys

import celpy
import yaml


def evaluate(env, expression, activation):
    """The expression's value; an evaluation error raises, as it denies the request on the API
    server (failurePolicy: Fail). cel-python returns errors as values, which are truthy, or
    raises them."""
    program = env.program(env.compile(expression))
    try:
        value = program.evaluate(activation)
    except celpy.evaluation.CELEvalError as e:
        raise RuntimeError("%s: %s" % (expression, e)) from e
    if isinstance(value, celpy.evaluation.CELEvalError):
        raise RuntimeError("%s: %s" % (expression, value))
    return value


def request(user, obj, old, operation=None):
    """The admission request the API server would evaluate the policies on."""
    subject = obj if obj is not None else old
    group, _, version = subject.get("apiVersion", "v1").rpartition("/")
    return {
        "userInfo": {"username": user},
        "operation": operation or ("CREATE" if old is None else "UPDATE"),
        "kind": {"group": group, "version": version, "kind": subject.get("kind", "")},
        "namespace": subject.get("metadata", {}).get("namespace", ""),
    }


def plural(kind):
    """The resource of a kind, as Kubernetes names its built-in ones (Ingress: ingresses,
    NetworkPolicy: networkpolicies)."""
    lower = kind.lower()
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in "aeiou":
        return lower[:-1] + "ies"
    return lower + "s"


def matches(spec, req):
    """Whether the policy's matchConstraints.resourceRules name this request."""
    rules = (spec.get("matchConstraints") or {}).get("resourceRules") or []
    resource = plural(req["kind"]["kind"])
    return any(
        req["operation"] in r.get("operations", []) or "*" in r.get("operations", [])
        for r in rules
        if (req["kind"]["group"] in r.get("apiGroups", []) or "*" in r.get("apiGroups", []))
        and (resource in r.get("resources", []) or "*" in r.get("resources", []))
    )


def admitted(policies, user, obj, old=None, operation=None):
    env = celpy.Environment()
    req = request(user, obj, old, operation)
    base = {"request": celpy.json_to_cel(req), "object": celpy.json_to_cel(obj),
            "oldObject": celpy.json_to_cel(old)}
    for policy in policies:
        spec = policy["spec"]
        if not matches(spec, req):
            continue
        if not all(bool(evaluate(env, c["expression"], base)) for c in spec.get("matchConditions") or []):
            continue
        variables = celpy.celtypes.MapType({})
        for v in spec.get("variables") or []:
            value = evaluate(env, v["expression"], dict(base, variables=variables))
            variables = celpy.celtypes.MapType({**variables, celpy.celtypes.StringType(v["name"]): value})
        activation = dict(base, variables=variables)
        for validation in spec["validations"]:
            if not bool(evaluate(env, validation["expression"], activation)):
                return False, policy["metadata"]["name"]
    return True, None


def main():
    docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
    policies = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert policies, "no ValidatingAdmissionPolicy in %s" % sys.argv[1]
    assert {d["spec"]["policyName"] for d in bindings} == {p["metadata"]["name"] for p in policies}, "every policy is bound"
    assert all(d["spec"]["validationActions"] == ["Deny"] for d in bindings), "with Deny"
    passed = failed = 0
    for case in json.load(open(sys.argv[2])):
        try:
            ok, by = admitted(policies, case["user"], case.get("object"), case.get("oldObject"),
                              case.get("operation"))
        except RuntimeError as e:  # an evaluation error denies
            ok, by = False, "an evaluation error (%s)" % e
        good = ok == case["admitted"]
        passed, failed = passed + good, failed + (not good)
        print("%s %s: %s%s" % ("ok  " if good else "FAIL", case["name"], "admitted" if ok else "denied",
                               " by " + by if by else ""))
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
