#!/usr/bin/env python3
"""Runs the Lua health checks of deploy/patches/argocd-cm.yaml as Argo CD does (a global `obj`, the
script returns a table with `status` and `message`) with lupa's Lua, on the objects given as
JSON: each {"name", "group", "kind", "object", "status"}, the check being the key
resource.customizations.health.<group>_<kind>. Prints one line per case and "N passed, M
failed". Usage: check_health.py ARGOCD-CM.yaml CASES.json"""
import json
import sys

import lupa
import yaml


def to_lua(lua, value):
    if isinstance(value, dict):
        return lua.table_from({k: to_lua(lua, v) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([to_lua(lua, v) for v in value])
    return value


def main():
    cm = yaml.safe_load(open(sys.argv[1]))
    passed = failed = 0
    for case in json.load(open(sys.argv[2])):
        key = "resource.customizations.health.%s_%s" % (case["group"], case["kind"])
        lua = lupa.LuaRuntime(unpack_returned_tuples=True)
        lua.globals().obj = to_lua(lua, case["object"])
        result = lua.execute(cm["data"][key])
        got = result["status"]
        good = got == case["status"] and bool(result["message"])
        passed, failed = passed + good, failed + (not good)
        print("%s %s: %s (%s)" % ("ok  " if good else "FAIL", case["name"], got, result["message"]))
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
