{{/* Names, labels and derived paths shared by the templates. */}}

{{- define "carve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "carve.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "carve.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "carve.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "carve.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "carve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "carve.pluginSelectorLabels" -}}
app.kubernetes.io/name: {{ include "carve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: kubelet-plugin
{{- end -}}

{{- define "carve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "%s-kubelet-plugin" (include "carve.fullname" .)) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* image.tag may be a number (`--set image.tag=1`): toString before defaulting. */}}
{{- define "carve.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion (toString (.Values.image.tag | default ""))) -}}
{{- end -}}

{{/* The strategy rules (--strategy): plugin.strategyRules joined with commas when set (the list form needs no
`\,` under --set), else plugin.strategy. */}}
{{- define "carve.strategy" -}}
{{- if .Values.plugin.strategyRules -}}
{{- $rules := list -}}
{{- range .Values.plugin.strategyRules }}{{ $rules = append $rules (toString . | trim) }}{{ end -}}
{{- join "," $rules -}}
{{- else -}}
{{- toString .Values.plugin.strategy -}}
{{- end -}}
{{- end -}}

{{/* Whether to render a ServiceMonitor/PodMonitor: metrics.serviceMonitor.enabled true, or "auto" and the
cluster serves monitoring.coreos.com/v1 (the Prometheus Operator's CRDs). */}}
{{- define "carve.monitor" -}}
{{- $m := .Values.metrics.serviceMonitor.enabled -}}
{{- if or (eq (toString $m) "true") (and (eq (toString $m) "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) -}}true{{- end -}}
{{- end -}}

{{/* --plugin-dir: default /var/lib/kubelet/plugins/<driverName>. */}}
{{- define "carve.pluginDir" -}}
{{- default (printf "/var/lib/kubelet/plugins/%s" .Values.driverName) .Values.plugin.pluginDir | clean -}}
{{- end -}}

{{/* --run-dir: default /run/carve, the plugin's own default (per boot: the claims' directories under
claims/; a tmpfs on every distribution). */}}
{{- define "carve.runDir" -}}
{{- default "/run/carve" .Values.plugin.runDir | clean -}}
{{- end -}}

{{/* --limiter-dir: default <plugin-dir>/lib, the plugin's own default made explicit. */}}
{{- define "carve.limiterDir" -}}
{{- default (printf "%s/lib" (include "carve.pluginDir" .)) .Values.plugin.limiterDir | clean -}}
{{- end -}}

{{/* "true" when the limiter dir lies outside the mounted plugin dir and needs its own volume. */}}
{{- define "carve.limiterNeedsVolume" -}}
{{- $pluginDir := include "carve.pluginDir" . -}}
{{- if not (hasPrefix (printf "%s/" (trimSuffix "/" $pluginDir)) (include "carve.limiterDir" .)) -}}true{{- end -}}
{{- end -}}

{{- define "carve.fakeGpus" -}}
{{- if hasPrefix "fake:" .Values.plugin.gpus -}}true{{- end -}}
{{- end -}}

{{/* Where the container looks for the host's libnvidia-ml.so.1. A driver root other than / is mounted at its
own path, so the paths the plugin writes into CDI specs are host paths. For a driver root of / the host's
/usr is mounted at /host/usr (the container's own / cannot be the host's), only to find NVML. */}}
{{- define "carve.driverRootInContainer" -}}
{{- if eq (clean .Values.plugin.driverRoot) "/" -}}/host{{- else -}}{{ clean .Values.plugin.driverRoot }}{{- end -}}
{{- end -}}

{{- define "carve.driverRootVolumePath" -}}
{{- if eq (clean .Values.plugin.driverRoot) "/" -}}/host/usr{{- else -}}{{ clean .Values.plugin.driverRoot }}{{- end -}}
{{- end -}}

{{/* Library directories searched for libnvidia-ml.so.1 under the driver root (the plugin's
driver/plugin/container/driverfiles.py LIBRARY_SEARCH_DIRS, the container toolkit's list). */}}
{{- define "carve.nvmlLibDirs" -}}
usr/lib64 usr/lib/x86_64-linux-gnu usr/lib/aarch64-linux-gnu usr/lib/x86_64-linux-gnu/nvidia/current usr/lib/aarch64-linux-gnu/nvidia/current lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu lib/x86_64-linux-gnu/nvidia/current lib/aarch64-linux-gnu/nvidia/current usr/lib
{{- end -}}

{{/* Host directories of a host-installed driver, besides /usr, that the plugin reads (volume name: path). */}}
{{- define "carve.hostDriverExtras" -}}
driver-persistenced: /run/nvidia-persistenced
driver-fabricmanager: /run/nvidia-fabricmanager
driver-firmware: /lib/firmware/nvidia
{{- end -}}

{{/* The strategy controller's service account (controller.yaml). */}}
{{- define "carve.controllerServiceAccountName" -}}
{{- if .Values.controller.serviceAccount.create -}}
{{- default (printf "%s-controller" (include "carve.fullname" .)) .Values.controller.serviceAccount.name -}}
{{- else -}}
{{- required "controller.serviceAccount.name is required when controller.serviceAccount.create is false" .Values.controller.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "carve.controllerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "carve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}
