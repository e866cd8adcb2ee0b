{{/* Names and labels shared by every template of the chart. */}}

{{- define "grpo-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "grpo-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "grpo-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "grpo-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "grpo-operator.labels" -}}
{{ include "grpo-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: grpo-operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "grpo-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "grpo-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the operator's status key (GRPO_STATUS_KEY_SECRET), in the release's namespace. */}}
{{- define "grpo-operator.statusKeySecret" -}}
{{- printf "%s-status-key" (include "grpo-operator.fullname" .) -}}
{{- end -}}

{{- define "grpo-operator.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The permissions the operator uses inside a namespace it watches (a ClusterRole's rules when it watches
every namespace, a Role's rules in each watched namespace otherwise). Each rule names the call that needs it;
tests/chart/test_rbac.py proves they are enough for a run to reach Succeeded, and no broader. grpo doctor
checks the installed operator's ServiceAccount against OPERATOR_RULES (cli/doctorchecks/access.py), which
tests/integration/chart/test_doctor_operator_rules.py keeps equal to these rules: change both together.
*/}}
{{- define "grpo-operator.namespacedRules" -}}
# kopf: watch GRPORuns; patch them for its finalizer and its progress annotations (grpo.dev/*). The reconciler:
# get (each reconcile starts from the run as the API server has it now).
- apiGroups: ["grpo.dev"]
  resources: ["grporuns"]
  verbs: ["get", "list", "watch", "patch"]
# kube.patch_status: the operator writes GRPORun.status through the status subresource.
- apiGroups: ["grpo.dev"]
  resources: ["grporuns/status"]
  verbs: ["patch"]
# Children carry an ownerReference with blockOwnerDeletion: clusters that enforce
# OwnerReferencesPermissionEnforcement require update on the owner's finalizers subresource.
- apiGroups: ["grpo.dev"]
  resources: ["grporuns/finalizers"]
  verbs: ["update"]
# kopf.event / kopf.warn: phase transitions and guard warnings as Events on the GRPORun.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# Children, applied with server-side apply (PATCH; creating through apply also needs create).
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["create", "patch"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["create", "patch", "get", "list", "watch"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["create", "patch"]
# The RayCluster: applied, read for its status, deleted when a run ends or is suspended. The RayClusters and
# the reward Deployments are watched (list, watch): a change reconciles the owning run (controller/children.py).
- apiGroups: ["ray.io"]
  resources: ["rayclusters"]
  verbs: ["create", "patch", "get", "delete", "list", "watch"]
# Kueue's Workload of a run's RayCluster while Kueue holds it suspended: its Evicted condition says why (Preempted,
# PodsReadyTimeout, Deactivated, ...), which the run's Suspended status names (edges/kube.py kueue_workloads).
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list"]
# Pod states of a run (image pull errors, unschedulable pods) for its status message, watched (list, watch)
# into an index the reconciles read instead of listing (edges/watchcache.py).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
# kube.ray_auth_token: each run's Ray auth token Secret, made once and read by name, again every 10 resyncs;
# kube.secret_values: the Secrets a run's secretEnv names, read by name when a log is kept, to redact their values
# (RBAC cannot narrow get to names not known in advance). Never list or watch: no Secret is enumerated.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create"]
# kube.pod_template_problems: every rendered pod template is sent with dryRun=All before any child is made,
# so Kubernetes' own pod rules judge it; a dry run stores nothing, and PodTemplates drive no controller.
- apiGroups: [""]
  resources: ["podtemplates"]
  verbs: ["create"]
{{- if gt (int .Values.replicas) 1 }}
# kopf peering between the replicas: each patches its keep-alive into the peering object and watches it.
- apiGroups: ["kopf.dev"]
  resources: [{{ if .Values.watchNamespaces }}"kopfpeerings"{{ else }}"clusterkopfpeerings"{{ end }}]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- if .Values.networkPolicies.enabled }}
# Each run's NetworkPolicies, applied with server-side apply.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["create", "patch"]
{{- end }}
{{- end -}}
