{{/* Helpers of the legacy shim (legacy-*.yaml, docs/legacy.md). */}}

{{- define "carve.legacyNodeLabel" -}}gpu.carve.dev/legacy{{- end -}}

{{/* The DRA plugin's affinity: plugin.affinity, plus, when the legacy shim is on, "not a legacy node" added to
every node selector term, so a node runs either the DRA plugin or the legacy device plugin, never both. */}}
{{- define "carve.pluginAffinity" -}}
{{- $aff := deepCopy (default dict .Values.plugin.affinity) -}}
{{- if .Values.legacy.enabled -}}
{{- $not := dict "key" (include "carve.legacyNodeLabel" .) "operator" "NotIn" "values" (list "true") -}}
{{- $na := default dict (get $aff "nodeAffinity") -}}
{{- $req := default dict (get $na "requiredDuringSchedulingIgnoredDuringExecution") -}}
{{- $terms := get $req "nodeSelectorTerms" -}}
{{- if not $terms }}{{ $terms = list dict }}{{ end -}}
{{- $new := list -}}
{{- range $terms -}}
{{- $t := deepCopy . -}}
{{- $_ := set $t "matchExpressions" (append (default list (get $t "matchExpressions")) $not) -}}
{{- $new = append $new $t -}}
{{- end -}}
{{- $_ := set $req "nodeSelectorTerms" $new -}}
{{- $_ := set $na "requiredDuringSchedulingIgnoredDuringExecution" $req -}}
{{- $_ := set $aff "nodeAffinity" $na -}}
{{- end -}}
{{- if $aff }}{{ toYaml $aff }}{{ end -}}
{{- end -}}

{{- define "carve.legacySelectorLabels" -}}
app.kubernetes.io/name: {{ include "carve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: legacy-device-plugin
{{- end -}}

{{- define "carve.schedulerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "carve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: legacy-scheduler
{{- end -}}

{{- define "carve.legacyPluginSA" -}}{{ include "carve.fullname" . }}-legacy-device-plugin{{- end -}}
{{- define "carve.legacySchedulerSA" -}}{{ include "carve.fullname" . }}-legacy-scheduler{{- end -}}

{{- define "carve.legacyFakeGpus" -}}
{{- if hasPrefix "fake:" .Values.legacy.devicePlugin.gpus -}}true{{- end -}}
{{- end -}}
