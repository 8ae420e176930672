{{/* Names: everything derives from the release, so releases coexist in a namespace. */}}
{{- define "courier.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "courier.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "courier.selectorLabels" -}}
app.kubernetes.io/name: {{ include "courier.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "courier.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "courier.selectorLabels" . }}
app.kubernetes.io/version: {{ include "courier.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/component: consumer
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "courier.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "courier.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The consumer group: config.kafka.group_id, else the release's full name. */}}
{{- define "courier.groupId" -}}
{{- $k := .Values.config.kafka | default dict -}}
{{- default (include "courier.fullname" .) $k.group_id -}}
{{- end -}}

{{/* The image tag: image.tag, else the chart's appVersion; never "latest". */}}
{{- define "courier.imageTag" -}}
{{- $tag := toString (default .Chart.AppVersion .Values.image.tag) -}}
{{- if or (eq $tag "latest") (eq $tag "") -}}
{{- fail (printf "image.tag %q: name a version (default: the chart's appVersion %s); `latest` is not allowed" $tag .Chart.AppVersion) -}}
{{- end -}}
{{- $tag -}}
{{- end -}}

{{- define "courier.image" -}}
{{- if .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .Values.image.digest) -}}
{{- fail (printf "image.digest %q: expected sha256:<64 hex digits>" .Values.image.digest) -}}
{{- end -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (include "courier.imageTag" .) -}}
{{- end -}}
{{- end -}}

{{/* The metrics port, from config.metrics.listen ("0.0.0.0:9464"). */}}
{{- define "courier.metricsPort" -}}
{{- $m := .Values.config.metrics | default dict -}}
{{- $listen := toString (default "" $m.listen) -}}
{{- if not (regexMatch "^(0\\.0\\.0\\.0|\\[::\\]):[0-9]+$" $listen) -}}
{{- fail (printf "config.metrics.listen %q: must be 0.0.0.0:<port> (or [::]:<port>): the probes, the Service and Prometheus reach Courier there" $listen) -}}
{{- end -}}
{{- regexFind "[0-9]+$" $listen -}}
{{- end -}}

{{/*
A humantime duration ("15s", "1m 30s", "250ms", "2h") in seconds, as a float.
*/}}
{{- define "courier.durationSeconds" -}}
{{- $v := toString . | trim -}}
{{- $units := dict "ns" 1e-9 "nsec" 1e-9 "us" 1e-6 "usec" 1e-6 "ms" 0.001 "msec" 0.001 "s" 1.0 "sec" 1.0 "secs" 1.0 "second" 1.0 "seconds" 1.0 "m" 60.0 "min" 60.0 "mins" 60.0 "minute" 60.0 "minutes" 60.0 "h" 3600.0 "hr" 3600.0 "hrs" 3600.0 "hour" 3600.0 "hours" 3600.0 "d" 86400.0 "day" 86400.0 "days" 86400.0 -}}
{{- $parts := regexFindAll "[0-9]+(\\.[0-9]+)?\\s*[a-z]+" $v -1 -}}
{{- if or (not $parts) (ne (regexReplaceAll "[0-9]+(\\.[0-9]+)?\\s*[a-z]+|\\s" $v "") "") -}}
{{- fail (printf "%q is not a duration (e.g. \"15s\", \"1m 30s\", \"500ms\")" $v) -}}
{{- end -}}
{{- $total := 0.0 -}}
{{- range $parts -}}
{{- $unit := regexFind "[a-z]+$" . -}}
{{- if not (hasKey $units $unit) -}}
{{- fail (printf "%q: unknown duration unit %q" $v $unit) -}}
{{- end -}}
{{- $total = addf $total (mulf (float64 (regexFind "^[0-9]+(\\.[0-9]+)?" .)) (get $units $unit)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds: Courier's pipeline.shutdown_grace (or the previous
release's shutdown_grace_ms; default 15 s) rounded up, plus terminationGraceMarginSeconds.
*/}}
{{- define "courier.terminationGracePeriod" -}}
{{- $p := .Values.config.pipeline | default dict -}}
{{- $grace := 15.0 -}}
{{- if hasKey $p "shutdown_grace" -}}
{{- $grace = include "courier.durationSeconds" $p.shutdown_grace | float64 -}}
{{- else if hasKey $p "shutdown_grace_ms" -}}
{{- $grace = divf (float64 $p.shutdown_grace_ms) 1000.0 -}}
{{- end -}}
{{- add (int64 (ceil $grace)) (int64 .Values.terminationGraceMarginSeconds) -}}
{{- end -}}

{{/*
TOML: a table's keys (scalars and arrays first, then sub-tables, as TOML requires).
Argument: (dict "table" MAP "path" "section.sub"). A null value is left out (Courier's
default applies). Numbers from YAML arrive as float64: a whole number is written as an
integer (Courier's integer fields refuse 512.0; its float fields accept 50).
*/}}
{{- define "courier.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{ . }}{{- else -}}{{ toJson . }}{{- end -}}
{{- end -}}

{{- define "courier.tomlValue" -}}
{{- $v := . -}}
{{- if kindIs "string" $v -}}{{ toJson $v }}
{{- else if kindIs "bool" $v -}}{{ $v }}
{{- else if or (kindIs "float64" $v) (kindIs "float32" $v) -}}
{{- if eq $v (floor $v) -}}{{ int64 $v }}{{- else -}}{{ $v }}{{- end -}}
{{- else if or (kindIs "int" $v) (kindIs "int64" $v) -}}{{ $v }}
{{- else if kindIs "slice" $v -}}[{{- range $i, $e := $v -}}{{ if $i }}, {{ end }}{{ include "courier.tomlValue" $e }}{{- end -}}]
{{- else if kindIs "map" $v -}}{ {{- $first := true -}}{{- range $k, $e := $v -}}{{- if not (kindIs "invalid" $e) -}}{{ if not $first }}, {{ else }} {{ end }}{{ include "courier.tomlKey" $k }} = {{ include "courier.tomlValue" $e }}{{- $first = false -}}{{- end -}}{{- end -}} }
{{- else -}}{{ fail (printf "config: cannot write %v (%s) as TOML" $v (kindOf $v)) }}
{{- end -}}
{{- end -}}

{{- define "courier.tomlTable" -}}
{{- $t := .table -}}
{{- $path := .path -}}
{{- range $k, $v := $t }}
{{- if and (not (kindIs "invalid" $v)) (not (kindIs "map" $v)) }}
{{ include "courier.tomlKey" $k }} = {{ include "courier.tomlValue" $v }}
{{- end }}
{{- end }}
{{- range $k, $v := $t }}
{{- if kindIs "map" $v }}
{{- $sub := printf "%s.%s" $path (include "courier.tomlKey" $k) }}

[{{ $sub }}]
{{- include "courier.tomlTable" (dict "table" $v "path" $sub) }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
courier.toml from .Values.config, with the derived fields: kafka.group_id.
*/}}
{{- define "courier.toml" -}}
{{- $config := deepCopy (.Values.config | default dict) -}}
{{- $kafka := get $config "kafka" | default dict -}}
{{- $_ := set $kafka "group_id" (include "courier.groupId" .) -}}
{{- $_ := set $config "kafka" $kafka -}}
# Rendered by the courier Helm chart from the release's values (config.*).
{{- range $section, $table := $config }}
{{- if not (kindIs "map" $table) }}
{{- fail (printf "config.%s must be a table (a section of courier.toml)" $section) }}
{{- end }}

[{{ include "courier.tomlKey" $section }}]
{{- include "courier.tomlTable" (dict "table" $table "path" (include "courier.tomlKey" $section)) }}
{{- end }}
{{ end -}}

{{/*
Environment variables named by the config's `*_env` fields (any section, any depth):
"field.path=VARIABLE" lines.
*/}}
{{- define "courier.namedEnv" -}}
{{- include "courier.namedEnvIn" (dict "table" .Values.config "path" "") -}}
{{- end -}}

{{- define "courier.namedEnvIn" -}}
{{- $path := .path -}}
{{- range $k, $v := .table -}}
{{- $field := ternary $k (printf "%s.%s" $path $k) (eq $path "") -}}
{{- if kindIs "map" $v -}}
{{- include "courier.namedEnvIn" (dict "table" $v "path" $field) -}}
{{- else if and (hasSuffix "_env" $k) (kindIs "string" $v) $v -}}
{{ printf "%s=%s" $field $v }}
{{ end -}}
{{- end -}}
{{- end -}}

{{/*
Files named by the config's `*_file` fields (any section, any depth):
"field.path=/the/path" lines.
*/}}
{{- define "courier.namedFiles" -}}
{{- include "courier.namedFilesIn" (dict "table" .Values.config "path" "") -}}
{{- end -}}

{{- define "courier.namedFilesIn" -}}
{{- $path := .path -}}
{{- range $k, $v := .table -}}
{{- $field := ternary $k (printf "%s.%s" $path $k) (eq $path "") -}}
{{- if kindIs "map" $v -}}
{{- include "courier.namedFilesIn" (dict "table" $v "path" $field) -}}
{{- else if and (hasSuffix "_file" $k) (kindIs "string" $v) $v -}}
{{ printf "%s=%s" $field $v }}
{{ end -}}
{{- end -}}
{{- end -}}

{{/* Where secrets.files are mounted (one projected volume, read-only). */}}
{{- define "courier.secretsDir" -}}
/var/run/secrets/courier
{{- end -}}

{{/* The Secret the chart reads by default: secrets.existingSecret, else "<full name>-secrets". */}}
{{- define "courier.secretName" -}}
{{- default (printf "%s-secrets" (include "courier.fullname" .)) .Values.secrets.existingSecret -}}
{{- end -}}
