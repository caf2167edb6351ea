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

{{/* The second scheduler's image: legacy.scheduler.image, else registry.k8s.io/kube-scheduler at the cluster's
own version (vMAJOR.MINOR.PATCH of the API server helm talks to; a vendor suffix such as -gke.100 or +k3s1
dropped, as registry.k8s.io tags only upstream releases), so the scheduler follows the control plane. */}}
{{- define "carve.schedulerImage" -}}
{{- if .Values.legacy.scheduler.image -}}
{{- .Values.legacy.scheduler.image -}}
{{- else -}}
{{- $v := regexFind "^v?[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version | trimPrefix "v" -}}
{{- printf "%s:v%s" .Values.legacy.scheduler.repository $v -}}
{{- end -}}
{{- end -}}
