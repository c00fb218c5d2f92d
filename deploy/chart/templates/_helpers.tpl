{{/*
Names. One previewd runs per cluster (its admission policies are cluster-wide), so names
are fixed by the release: `previewd` for a release named previewd.
*/}}
{{- define "previewd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "previewd" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-previewd" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "previewd.labels" -}}
app.kubernetes.io/name: previewd
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "previewd.selectorLabels" -}}
app.kubernetes.io/name: previewd
{{- end -}}

{{- define "previewd.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The address part and the port of a `host:port` listen value. */}}
{{- define "previewd.port" -}}
{{- $port := regexFind "[0-9]+$" . -}}
{{- $host := trimSuffix (printf ":%s" $port) . -}}
{{- if or (not $port) (eq $host .) -}}
{{- fail (printf "config: %q is not an address with a port (e.g. \"0.0.0.0:8080\")" .) -}}
{{- end -}}
{{- if or (hasPrefix "127." $host) (eq $host "localhost") (regexMatch `^\[(0*:)+0*1\]$` $host) -}}
{{- fail (printf "config: %q is a loopback address, which nothing outside the pod reaches: listen on \"0.0.0.0:%s\"" . $port) -}}
{{- end -}}
{{- $port -}}
{{- end -}}

{{/*
What the chart reads from the configuration (`config`, previewd.toml), as JSON:
listenPort, metricsPort ("" without metrics.listen), argocdNamespace, projects (the helpers'
and the apps' AppProject), sealing (each cluster that names a sealing certificate, with the
file's name), databaseMode, postgresql (values state.backend), replicas and leaseName (config
lease.name). It refuses, saying why, a configuration the pod it renders could not run:
secrets in it (they come from existingSecret), files it does not mount, a loopback listen,
a state outside the volume (SQLite) or in config at all (PostgreSQL), what replicas
would not share (PostgreSQL), several replicas of SQLite, a sink other than Kubernetes, and appProjects that are not
`previewd render --projects` of it.
*/}}
{{- define "previewd.settings" -}}
{{- $c := fromToml .Values.config -}}
{{- if hasKey $c "Error" -}}
{{- fail (printf "config is not valid TOML: %s" $c.Error) -}}
{{- end -}}
{{- /* Only what previewd reads: the checks below read sections, so a key such as a quoted
"github.token" at the top must not pass (previewd refuses it too). */ -}}
{{- $known := list "listen" "state" "log" "public_url" "github" "login" "sink" "defaults" "sweep" "api" "metrics" "chart" "database" "tls" "dns" "lease" "clusters" "repos" -}}
{{- range $key, $_ := $c -}}
{{- if not (has $key $known) -}}
{{- fail (printf "config: unknown top-level key %q (a setting of a section goes under [section]; docs/configuration.md lists every key)" $key) -}}
{{- end -}}
{{- end -}}
{{- $github := $c.github | default dict -}}
{{- $api := $c.api | default dict -}}
{{- $tls := $c.tls | default dict -}}
{{- $sink := $c.sink | default dict -}}
{{- $chart := $c.chart | default dict -}}
{{- $database := $c.database | default dict -}}
{{- $metrics := $c.metrics | default dict -}}
{{- $login := $c.login | default dict -}}
{{- $lease := $c.lease | default dict -}}
{{- $keys := .Values.secretKeys -}}
{{- $postgresql := eq .Values.state.backend "postgresql" -}}
{{- range $key, $setting := dict "github.webhook_secret" "secretKeys.webhookSecret" "github.token" "secretKeys.githubToken" -}}
{{- if hasKey $github (trimPrefix "github." $key) -}}
{{- fail (printf "config sets %s: a secret never goes in values; put it in the Secret %q and name its key in %s" $key $.Values.existingSecret $setting) -}}
{{- end -}}
{{- end -}}
{{- range $key, $setting := dict "client_secret" "secretKeys.loginClientSecret" "session_secret" "secretKeys.loginSessionSecret" -}}
{{- if hasKey $login $key -}}
{{- fail (printf "config sets login.%s: a secret never goes in values; put it in the Secret %q and name its key in %s" $key $.Values.existingSecret $setting) -}}
{{- end -}}
{{- end -}}
{{- if hasKey $api "token" -}}
{{- fail (printf "config sets api.token: a secret never goes in values; put it in the Secret %q and name its key in secretKeys.apiToken" .Values.existingSecret) -}}
{{- end -}}
{{- if hasKey $github "private_key_path" -}}
{{- fail "config sets github.private_key_path: the chart mounts the GitHub App's key from existingSecret and sets it; name the key in secretKeys.githubAppPrivateKey instead" -}}
{{- end -}}
{{- if hasKey $github "webhook_secret_file" -}}
{{- fail "config sets github.webhook_secret_file, a file this chart does not mount: the webhook secret comes from existingSecret (secretKeys.webhookSecret)" -}}
{{- end -}}
{{- range $key := list "ca_cert" "ca_key" -}}
{{- if hasKey $tls $key -}}
{{- fail (printf "config sets tls.%s, a file this chart does not mount: put the preview CA's certificate and key in existingSecret and name their keys in secretKeys.tlsCaCert and secretKeys.tlsCaKey (the chart mounts them and sets both paths), or, with the SQLite state, leave them unset and previewd makes the CA beside its state, on the volume" $key) -}}
{{- end -}}
{{- end -}}
{{- if ne (empty $keys.tlsCaCert) (empty $keys.tlsCaKey) -}}
{{- fail "secretKeys.tlsCaCert and secretKeys.tlsCaKey go together: name both keys of existingSecret (the preview CA's certificate and its key), or neither" -}}
{{- end -}}
{{- if and (hasKey $github "app_id") (not $keys.githubAppPrivateKey) -}}
{{- fail "config sets github.app_id: name the key of existingSecret that holds the App's private key (PEM) in secretKeys.githubAppPrivateKey" -}}
{{- end -}}
{{- if and $keys.githubAppPrivateKey (not (hasKey $github "app_id")) -}}
{{- fail "secretKeys.githubAppPrivateKey is set: set github.app_id in config too" -}}
{{- end -}}
{{- if and $keys.githubAppPrivateKey $keys.githubToken -}}
{{- fail "secretKeys.githubToken and secretKeys.githubAppPrivateKey are both set: previewd acts with a token or as a GitHub App, not both" -}}
{{- end -}}
{{- if ne (toString ($sink.kind | default "directory")) "kubernetes" -}}
{{- fail "config: sink.kind must be \"kubernetes\" on a cluster (previewd writes Argo CD Applications)" -}}
{{- end -}}
{{- $state := toString ($c.state | default "") -}}
{{- if contains "://" $state -}}
{{- fail "config sets state to a URL: a PostgreSQL URL holds a password, and a secret never goes in values; set state.backend=postgresql, put the URL in the Secret and name its key in secretKeys.state (it reaches previewd as PREVIEWD_STATE), and remove state from config" -}}
{{- end -}}
{{- $replicas := int (.Values.replicas | default (ternary 2 1 $postgresql)) -}}
{{- if $postgresql -}}
{{- /* What SQLite mode keeps beside the state, on the volume, every replica must share. */ -}}
{{- if hasKey $c "state" -}}
{{- fail (printf "config sets state = %q, but state.backend is postgresql: the PostgreSQL URL comes from the Secret %q (secretKeys.state) as PREVIEWD_STATE; remove state from config" $state .Values.existingSecret) -}}
{{- end -}}
{{- if not $keys.state -}}
{{- fail (printf "state.backend is postgresql: put the URL (postgresql://USER:PASSWORD@HOST:5432/DB?sslmode=verify-full) in the Secret %q and name its key in secretKeys.state" .Values.existingSecret) -}}
{{- end -}}
{{- if not $keys.loginSessionSecret -}}
{{- fail (printf "state.backend is postgresql: every replica must seal sessions and share links with one key, which SQLite mode keeps on the volume; put at least 32 bytes (openssl rand -hex 32) in the Secret %q and name their key in secretKeys.loginSessionSecret" .Values.existingSecret) -}}
{{- end -}}
{{- if and (eq (toString ($tls.mode | default "cert-manager")) "sealed") (not $keys.tlsCaCert) -}}
{{- fail (printf "state.backend is postgresql and tls.mode is sealed: every replica must sign with one preview CA, which SQLite mode keeps on the volume; put its certificate and key in the Secret %q and name their keys in secretKeys.tlsCaCert and secretKeys.tlsCaKey" .Values.existingSecret) -}}
{{- end -}}
{{- if not $c.clusters -}}
{{- fail "state.backend is postgresql and config names no [[clusters]]: previewd would seal for its own cluster with a key pair it keeps beside the state, which replicas do not share; name the cluster in [[clusters]] with its sealing_cert under /etc/previewd/sealing/" -}}
{{- end -}}
{{- if and (hasKey $lease "enabled") (not $lease.enabled) -}}
{{- fail "config sets lease.enabled = false, but state.backend is postgresql: the replicas take turns through the Lease; remove lease.enabled" -}}
{{- end -}}
{{- if not (regexMatch `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$` (toString ($lease.name | default "previewd"))) -}}
{{- fail (printf "config: lease.name = %q is not a Lease name (lower-case letters, digits, '-' and '.')" (toString $lease.name)) -}}
{{- end -}}
{{- if and (hasKey $lease "namespace") (ne (toString $lease.namespace) .Release.Namespace) -}}
{{- fail (printf "config sets lease.namespace = %q: the chart grants the Lease in previewd's own namespace, %s; remove lease.namespace" (toString $lease.namespace) .Release.Namespace) -}}
{{- end -}}
{{- else -}}
{{- if or (not (hasPrefix "/var/lib/previewd/" $state)) (contains ".." $state) -}}
{{- fail (printf "config: state = %q is not on the volume: set it to a file under /var/lib/previewd/ (e.g. \"/var/lib/previewd/previewd.db\")" $state) -}}
{{- end -}}
{{- if gt $replicas 1 -}}
{{- fail (printf "replicas is %d, but state.backend is sqlite: SQLite has one writer, on a ReadWriteOnce volume, so previewd runs 1 replica; several need the PostgreSQL state (state.backend=postgresql, secretKeys.state)" $replicas) -}}
{{- end -}}
{{- if $keys.state -}}
{{- fail "secretKeys.state is set, but state.backend is sqlite: set state.backend=postgresql to keep the state in PostgreSQL, or leave secretKeys.state empty" -}}
{{- end -}}
{{- end -}}
{{- if not (hasKey $c "listen") -}}
{{- fail "config: set listen = \"0.0.0.0:8080\" (the default, 127.0.0.1:8080, is reached from inside the pod only)" -}}
{{- end -}}
{{- $listenPort := include "previewd.port" (toString $c.listen) -}}
{{- $metricsPort := "" -}}
{{- if hasKey $metrics "listen" -}}
{{- $metricsPort = include "previewd.port" (toString $metrics.listen) -}}
{{- if eq $metricsPort $listenPort -}}
{{- fail "config: metrics.listen must use another port than listen" -}}
{{- end -}}
{{- end -}}
{{- $sealing := list -}}
{{- $servers := list -}}
{{- range $c.clusters | default list -}}
{{- $servers = append $servers (toString .server) -}}
{{- if hasKey . "sealing_cert" -}}
{{- $sealing = append $sealing (dict "cluster" .name "file" (base (toString .sealing_cert))) -}}
{{- if ne (dir (toString .sealing_cert)) "/etc/previewd/sealing" -}}
{{- fail (printf "config: cluster %s: sealing_cert %q is not where the chart mounts the ConfigMap sealingCert.configMap: name a file directly under /etc/previewd/sealing/ (one key of that ConfigMap)" .name .sealing_cert) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $settings := dict
  "listenPort" $listenPort
  "metricsPort" $metricsPort
  "argocdNamespace" ($sink.argocd_namespace | default "argocd")
  "projects" (list ($chart.project | default "previews") ($chart.apps_project | default "preview-apps"))
  "sealing" $sealing
  "databaseMode" ($database.mode | default "shared")
  "postgresql" $postgresql
  "replicas" $replicas
  "leaseName" (toString ($lease.name | default "previewd"))
-}}
{{- include "previewd.checkProjects" (dict "Values" .Values "config" $c "settings" $settings "servers" $servers) -}}
{{- toJson $settings -}}
{{- end -}}

{{/*
appProjects as parsed objects, one per YAML document that holds anything but comments
(however its keys are written): what is checked is what the chart emits.
*/}}
{{- define "previewd.projectDocs" -}}
{{- $docs := list -}}
{{- range regexSplit `(?m)^---` (printf "---\n%s" .) -1 -}}
{{- $head := regexFind `^[^\n]*` . -}}
{{- $body := regexReplaceAll `^[^\n]*` . "" -}}
{{- if regexMatch `\S` (regexReplaceAll `#.*` $head "") -}}
{{- $docs = append $docs (dict "Error" "a document on its --- line") -}}
{{- else if regexMatch `(?m)^[ \t]*[^#\s]` $body -}}
{{- $doc := fromYaml $body -}}
{{- /* What is emitted must read back as what was checked: a quoted "<<" key is emitted as a
merge key, and a string that toYaml cannot write comes out empty. */ -}}
{{- if and (not (hasKey $doc "Error")) (ne (toJson $doc) (toYaml $doc | fromYaml | toJson)) -}}
{{- $doc = dict "Error" "a document that does not read back as written (a merge key, a line break toYaml cannot keep)" -}}
{{- end -}}
{{- $docs = append $docs $doc -}}
{{- end -}}
{{- end -}}
{{- toJson $docs -}}
{{- end -}}

{{/*
A check, not a second generator: appProjects must be `previewd render --projects` output for
this config. Their names and namespace, their source repositories, the clusters they reach
and how many destinations each has are compared with what the config says; a mismatch fails
with how to regenerate them.
*/}}
{{- define "previewd.checkProjects" -}}
{{- $c := .config -}}
{{- $s := .settings -}}
{{- $chart := $c.chart | default dict -}}
{{- $legacy := $chart.legacy_names | default false -}}
{{- $servers := .servers | default (list "https://kubernetes.default.svc") -}}
{{- $docs := include "previewd.projectDocs" .Values.appProjects | fromJsonArray -}}
{{- $how := "regenerate appProjects with `previewd --config previewd.toml render --projects` (helm: --set-file appProjects=FILE)" -}}
{{- $names := list -}}
{{- range $docs -}}
{{- if or (hasKey . "Error") (ne (toString .kind) "AppProject") (ne (toString .apiVersion) "argoproj.io/v1alpha1") -}}
{{- fail (printf "appProjects holds something other than AppProjects: %s" $how) -}}
{{- end -}}
{{- $names = append $names .metadata.name -}}
{{- if ne .metadata.namespace $s.argocdNamespace -}}
{{- fail (printf "appProjects: %s is in namespace %v, but sink.argocd_namespace is %s: %s" .metadata.name .metadata.namespace $s.argocdNamespace $how) -}}
{{- end -}}
{{- end -}}
{{- if ne (toJson $names) (toJson $s.projects) -}}
{{- fail (printf "appProjects are %v, but config names the projects %v (chart.project, chart.apps_project): %s" $names $s.projects $how) -}}
{{- end -}}
{{- $helpers := index $docs 0 -}}
{{- $apps := index $docs 1 -}}
{{- $repoUrl := $chart.repo_url | default "https://github.com/previewd/previewd.git" -}}
{{- if ne (toJson $helpers.spec.sourceRepos) (toJson (list $repoUrl)) -}}
{{- fail (printf "appProjects: %s's sourceRepos are %v, but chart.repo_url is %s: %s" $helpers.metadata.name $helpers.spec.sourceRepos $repoUrl $how) -}}
{{- end -}}
{{- $globs := 0 -}}
{{- $appGlobs := 0 -}}
{{- $appSources := list -}}
{{- $repos := $c.repos | default list -}}
{{- if not $repos -}}
{{- $globs = ternary 2 1 $legacy -}}
{{- end -}}
{{- range $repos -}}
{{- $globs = add $globs 1 (ternary 1 0 (.database_template | default false)) (ternary 1 0 $legacy) -}}
{{- if .app_chart -}}
{{- $appGlobs = add $appGlobs 1 (ternary 1 0 $legacy) -}}
{{- $appSources = append $appSources (.app_repo_url | default (printf "https://github.com/%s.git" (lower .name))) -}}
{{- end -}}
{{- end -}}
{{- $perCluster := add $globs (ternary 0 1 (eq $s.databaseMode "off")) -}}
{{- $reached := list -}}
{{- range $helpers.spec.destinations -}}
{{- $reached = append $reached .server -}}
{{- end -}}
{{- if or (ne (toJson ($reached | uniq | sortAlpha)) (toJson ($servers | uniq | sortAlpha))) (ne (len $helpers.spec.destinations) (mul $perCluster (len $servers))) -}}
{{- fail (printf "appProjects: %s's destinations are not those of the config's clusters %v and repos: %s" $helpers.metadata.name $servers $how) -}}
{{- end -}}
{{- if or (ne (toJson ($apps.spec.sourceRepos | default list)) (toJson ($appSources | uniq))) (ne (len ($apps.spec.destinations | default list)) (mul $appGlobs (len $servers))) -}}
{{- fail (printf "appProjects: %s's sources and destinations are not those of the config's repos with an app_chart: %s" $apps.metadata.name $how) -}}
{{- end -}}
{{- end -}}
