{{/*
Chart name, truncated to 63 characters (the DNS label limit of names and label values).
*/}}
{{- define "authority.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: <release>-<chart>, or the release name alone when it already contains the chart
name. Truncated to 52 so that suffixes such as "-injector" still fit in 63.
*/}}
{{- define "authority.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
chart label value: name-version.
*/}}
{{- define "authority.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels on every resource.
*/}}
{{- define "authority.labels" -}}
helm.sh/chart: {{ include "authority.chart" . }}
{{ include "authority.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: authority
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels shared by every component; each workload adds app.kubernetes.io/component.
*/}}
{{- define "authority.selectorLabels" -}}
app.kubernetes.io/name: {{ include "authority.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Selector labels of one component. Call with (dict "ctx" $ "component" "server").
*/}}
{{- define "authority.componentSelectorLabels" -}}
{{ include "authority.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
Labels of one component's resources. Call with (dict "ctx" $ "component" "server").
*/}}
{{- define "authority.componentLabels" -}}
{{ include "authority.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
ServiceAccount used by the authority service and the injector.
*/}}
{{- define "authority.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "authority.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Names of the other components.
*/}}
{{- define "authority.injectorName" -}}
{{- printf "%s-injector" (include "authority.fullname" .) }}
{{- end }}

{{- define "authority.redisName" -}}
{{- printf "%s-redis" (include "authority.fullname" .) }}
{{- end }}

{{/*
The image reference: repository@digest, or repository:tag (tag defaults to appVersion).
*/}}
{{- define "authority.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The injected sidecar's image: sidecar.image.* falling back to the main image.
*/}}
{{- define "authority.sidecarImage" -}}
{{- if or .Values.sidecar.image.repository .Values.sidecar.image.tag }}
{{- printf "%s:%s" (default .Values.image.repository .Values.sidecar.image.repository) (default (default .Chart.AppVersion .Values.image.tag) .Values.sidecar.image.tag) }}
{{- else }}
{{- include "authority.image" . }}
{{- end }}
{{- end }}

{{/*
In-cluster URL of the authority Service (what sidecars use as AUTHORITY_URL by default).
*/}}
{{- define "authority.internalUrl" -}}
{{- printf "http://%s.%s.svc.cluster.local:%d" (include "authority.fullname" .) .Release.Namespace (int .Values.authority.service.port) }}
{{- end }}

{{/*
Whether any Redis is configured: "true" or "".
*/}}
{{- define "authority.redisConfigured" -}}
{{- if or .Values.redis.enabled .Values.redis.externalUrl .Values.redis.existingSecret }}true{{- end }}
{{- end }}

{{/*
A plain Redis URL (bundled or externalUrl); empty when the URL lives only in a Secret.
*/}}
{{- define "authority.redisUrl" -}}
{{- if .Values.redis.enabled }}
{{- printf "redis://%s.%s.svc.cluster.local:6379/0" (include "authority.redisName" .) .Release.Namespace }}
{{- else if .Values.redis.externalUrl }}
{{- .Values.redis.externalUrl }}
{{- end }}
{{- end }}

{{/*
Name of the injector's serving-certificate Secret.
*/}}
{{- define "authority.injectorTlsSecret" -}}
{{- if .Values.injector.certManager.enabled }}
{{- printf "%s-tls" (include "authority.injectorName" .) }}
{{- else }}
{{- required "injector.tls.existingSecret is required when injector.certManager.enabled is false" .Values.injector.tls.existingSecret }}
{{- end }}
{{- end }}

{{/*
The restricted container securityContext (shared by every workload of the chart).
*/}}
{{- define "authority.containerSecurityContext" -}}
{{- toYaml .Values.containerSecurityContext }}
{{- end }}

{{/*
Whether the authority keeps key rings under its own KEK (the embedded mode): "true" or "".
In crypto and managed modes the crypto service holds every key and the pod gets no KEK.
*/}}
{{- define "authority.embeddedKeys" -}}
{{- if eq .Values.authority.policyProtection.mode "embedded" }}true{{- end }}
{{- end }}

{{/*
The chart's crypto service (decision 2601): deployed in crypto and managed modes unless
cryptoService.enabled=false; "true" or "".
*/}}
{{- define "authority.cryptoServiceDeployed" -}}
{{- if and .Values.cryptoService.enabled (not (include "authority.embeddedKeys" .)) }}true{{- end }}
{{- end }}

{{- define "authority.cryptoName" -}}
{{- printf "%s-crypto" (include "authority.fullname" .) }}
{{- end }}

{{/*
The crypto service the authority calls: authority.cryptoUrl, else the chart's own; empty keeps
the service's default.
*/}}
{{- define "authority.cryptoUrl" -}}
{{- if .Values.authority.cryptoUrl }}
{{- .Values.authority.cryptoUrl }}
{{- else if include "authority.cryptoServiceDeployed" . }}
{{- printf "http://%s.%s.svc.cluster.local:8082" (include "authority.cryptoName" .) .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
The Secret with the service identity's credentials at the chart's crypto service (api_key,
access_key, secret_key): the operator's, or the one the chart generates.
*/}}
{{- define "authority.serviceIdentitySecret" -}}
{{- default (printf "%s-service-identity" (include "authority.cryptoName" .)) .Values.cryptoService.serviceIdentity.existingSecret }}
{{- end }}

{{/*
Mount directories of the key-custody files (the env vars name the files inside them).
*/}}
{{- define "authority.credentialsDir" -}}/var/run/authority/crypto-credentials{{- end }}
{{- define "authority.managedCaDir" -}}/var/run/authority/managed-ca{{- end }}

{{/*
Checks of the key custody (authority.policyProtection, authority.kek).
*/}}
{{- define "authority.validateKeyCustody" -}}
{{- $p := .Values.authority.policyProtection }}
{{- $ca := $p.managedCa }}
{{- if include "authority.embeddedKeys" . }}
{{- if or $p.credentialsSecret $p.tokenUrl $ca.existingSecret $ca.existingConfigMap }}
{{- fail "authority.policyProtection.credentialsSecret, tokenUrl and managedCa are for mode crypto or managed, but authority.policyProtection.mode is embedded (key rings under the authority's own KEK): set the mode you mean" }}
{{- end }}
{{- if and (ne .Values.authority.store.backend "sqlite") (not .Values.authority.kek.existingSecret) }}
{{- fail (printf "authority.policyProtection.mode=embedded on store.backend=%s needs authority.kek.existingSecret: replicas sharing a store share one KEK, which is never generated for a shared store (or use mode crypto or managed: no KEK at all)" .Values.authority.store.backend) }}
{{- end }}
{{- else }}
{{- if include "authority.cryptoServiceDeployed" . }}
{{- if $p.credentialsSecret }}
{{- fail "authority.policyProtection.credentialsSecret is for a crypto service of your own: with the chart's (cryptoService.enabled) the chart provisions the service identity and joins it with authority.policyProtection.serviceAccountSecret; set cryptoService.enabled=false to use yours" }}
{{- end }}
{{- if .Values.authority.cryptoUrl }}
{{- fail "authority.cryptoUrl names a crypto service of your own, but cryptoService.enabled deploys the chart's: set cryptoService.enabled=false, or leave authority.cryptoUrl empty" }}
{{- end }}
{{- else if not $p.credentialsSecret }}
{{- fail (printf "authority.policyProtection.mode=%s with cryptoService.enabled=false needs authority.policyProtection.credentialsSecret: an existing Secret with the service identity's credentials JSON (username, password, api_key, access_key, secret_key) for your crypto service at authority.cryptoUrl" $p.mode) }}
{{- end }}
{{- if .Values.authority.kek.existingSecret }}
{{- fail (printf "authority.policyProtection.mode=%s holds no key-encryption key (the crypto service keeps every key): remove authority.kek.existingSecret" $p.mode) }}
{{- end }}
{{- if and $ca.existingSecret $ca.existingConfigMap }}
{{- fail "authority.policyProtection.managedCa: set existingSecret or existingConfigMap, not both" }}
{{- end }}
{{- if and (or $ca.existingSecret $ca.existingConfigMap) (ne $p.mode "managed") }}
{{- fail "authority.policyProtection.managedCa is the CA of the managed crypto API: only for mode managed" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Values with no working default: without them the chart would install pods that pull an image
nobody built or sidecars that ask a token of an issuer that is not there (and never become
ready). The schema lets them be empty so that these messages, not a pattern error, are shown.
*/}}
{{- define "authority.validateRequired" -}}
{{- if not .Values.image.repository }}
{{- fail (printf "image.repository is required: build and push the image (docs/deployment.md \"The image\"), then set image.repository (and image.tag or image.digest; the tag defaults to the chart's appVersion %s)" .Chart.AppVersion) }}
{{- end }}
{{- if not .Values.authority.issuer }}
{{- fail "authority.issuer is required: the URL of the OIDC issuer of bearer tokens (e.g. https://login.example.com), reachable from every pod; the sidecars get their own token at <issuer>/oauth2/token unless sidecar.idpTokenUrl is set" }}
{{- end }}
{{- end }}

{{/*
Checks that fail the render with a clear message (the schema checks shapes; these check
combinations that need names computed here).
*/}}
{{- define "authority.validate" -}}
{{- include "authority.validateRequired" . }}
{{- include "authority.validateKeyCustody" . }}
{{- if and (gt (int .Values.authority.replicaCount) 1) (eq .Values.authority.store.backend "sqlite") }}
{{- fail "authority.replicaCount > 1 needs authority.store.backend=postgres or redis: SQLite is one file in one pod" }}
{{- end }}
{{- if and (eq .Values.authority.store.backend "postgres") (not .Values.authority.store.postgres.existingSecret) }}
{{- fail "authority.store.backend=postgres needs authority.store.postgres.existingSecret: an existing Secret in the release namespace holding the PostgreSQL URL (postgres://user:password@host:5432/database)" }}
{{- end }}
{{- if and (eq .Values.authority.store.backend "redis") (not (include "authority.redisConfigured" .)) }}
{{- fail "authority.store.backend=redis needs redis.enabled, redis.externalUrl or redis.existingSecret" }}
{{- end }}
{{- if and (eq .Values.authority.store.backend "redis") .Values.redis.enabled }}
{{- fail "authority.store.backend=redis with redis.enabled: the bundled Redis (one pod, no replica, no backup) is never the system of record. Use authority.store.backend=postgres (an existing PostgreSQL) or an external Redis (redis.externalUrl / redis.existingSecret); the bundled Redis stays the sidecars' cache and change channel" }}
{{- end }}
{{- if and .Values.redis.enabled (or .Values.redis.externalUrl .Values.redis.existingSecret) }}
{{- fail "redis.enabled (bundled) and redis.externalUrl/existingSecret are exclusive" }}
{{- end }}
{{- if and .Values.redis.existingSecret (not .Values.sidecar.redisUrlSecret.name) }}
{{- fail "redis.existingSecret is in the release namespace, which sidecars cannot read: set sidecar.redisUrlSecret.name to a Secret present in every injected namespace" }}
{{- end }}
{{- range $name, $port := .Values.sidecar.ports }}
{{- if has (int $port) (list 15000 15001 15004 15006 15008 15009 15020 15021 15053 15090) }}
{{- fail (printf "sidecar.ports.%s is %d, a port Istio's sidecar owns (15000, 15001, 15004, 15006, 15008, 15009, 15020, 15021, 15053, 15090): choose another port" $name (int $port)) }}
{{- end }}
{{- end }}
{{- if and .Values.injector.enabled (not .Values.injector.certManager.enabled) (not .Values.injector.tls.caBundle) }}
{{- fail "injector.tls.caBundle is required when injector.certManager.enabled is false" }}
{{- end }}
{{- end }}
