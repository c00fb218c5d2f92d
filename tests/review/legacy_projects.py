"""Review repro: a preview created before names were recorded keeps its legacy namespace
(Names::legacy: `acme-shop-<6 hex>-pr-7`), but deploy/appprojects.yaml (what
`previewd render --projects` prints) admits only `pv-*-<16 hex>-pr-*`. Checked with the
faithful twin's own model of Argo CD's project checks (argocd_twin.py)."""
import hashlib, sys, yaml
sys.path.insert(0, "/work/shared/tools")
import argocd_twin as twin

docs = [d for d in yaml.safe_load_all(open("deploy/appprojects.yaml")) if d]
helpers = next(d for d in docs if d["metadata"]["name"] == "previews")
apps = next(d for d in docs if d["metadata"]["name"] == "preview-apps")
repo = "acme/shop"
legacy = "acme-shop-%s-pr-7" % hashlib.sha256(repo.encode()).hexdigest()[:6]
new = "pv-acme-shop-%s-pr-7" % hashlib.sha256(repo.encode()).hexdigest()[:16]
server = "https://kubernetes.default.svc"
for ns in (new, legacy):
    print(ns,
          "helpers destination:", twin.project_destination_permitted(helpers, server, "in-cluster", ns),
          "| apps destination:", twin.project_destination_permitted(apps, server, "in-cluster", ns),
          "| Namespace object:", twin._in_list("", "Namespace", helpers["spec"]["clusterResourceWhitelist"], ns))

# The AppProjects the previous version generated (git show ae08fea^:src/naming.rs namespaces_of:
# "*-<6 hex>-pr-*") admit the legacy namespaces but not the new ones: there is no set of
# AppProjects under which both a pre-upgrade and a post-upgrade preview run.
import copy, subprocess
old = subprocess.run(["git", "show", "ae08fea^:deploy/appprojects.yaml"], capture_output=True, text=True).stdout
old_docs = [d for d in yaml.safe_load_all(old) if d]
old_helpers = next(d for d in old_docs if d["metadata"]["name"] == "previews")
print("previous version's helpers project destinations:", [d["namespace"] for d in old_helpers["spec"]["destinations"]])
for ns in (new, legacy):
    print(ns, "under the previous AppProjects:", twin.project_destination_permitted(old_helpers, server, "in-cluster", ns))
