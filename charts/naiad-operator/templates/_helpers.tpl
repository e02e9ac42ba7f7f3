{{/*
Names. Kubernetes object names (and label values) stop at 63 characters, so every name is cut there and a
trailing "-" left by the cut is dropped.
*/}}
{{- define "naiad-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "naiad-operator.fullname" -}}
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

{{- define "naiad-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; the selector labels are the subset that never changes across upgrades. */}}
{{- define "naiad-operator.labels" -}}
helm.sh/chart: {{ include "naiad-operator.chart" . }}
{{ include "naiad-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: naiad
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "naiad-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "naiad-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "naiad-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "naiad-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
An image reference from {registry, repository, tag, digest}: a digest wins over the tag (it cannot move).
Call with (dict "image" .Values.image "tag" "default-tag").
*/}}
{{- define "naiad-operator.imageRef" -}}
{{- $repository := .image.repository -}}
{{- if .image.registry -}}
{{- $repository = printf "%s/%s" (trimSuffix "/" .image.registry) .image.repository -}}
{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .tag .image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "naiad-operator.image" -}}
{{- include "naiad-operator.imageRef" (dict "image" .Values.image "tag" .Chart.AppVersion) -}}
{{- end -}}

{{/* The server image: the default tag is appVersion for the GPU target and appVersion-cpu for the CPU one. */}}
{{- define "naiad-operator.serverImage" -}}
{{- $server := .Values.operator.serverImage -}}
{{- $tag := ternary (printf "%s-cpu" .Chart.AppVersion) .Chart.AppVersion (eq $server.variant "cpu") -}}
{{- include "naiad-operator.imageRef" (dict "image" $server "tag" $tag) -}}
{{- end -}}

{{/*
RBAC: exactly what the operator does, no more. tests/packaging/test_chart.py records the operator's API
traffic against an emulated API server (a full ModelRepository and InferenceService lifecycle) and
requires these rules to equal it, verb for verb.

Namespaced rules, granted cluster-wide or per watched namespace:
- our resources: kopf lists and watches them and patches them (finalizers, its annotations); the
  operator reads each one fresh and writes status through the status subresource only;
- children, pods and sync Jobs are listed and watched (kopf indexes): a pass reads them from memory, and
  "get" is the fallback for an object the watch has not delivered yet;
- children are written with server-side apply, which needs "create" for an object that does not exist
  yet besides "patch"; "get" reads them back to write only on drift; "delete" only for what can go away
  (the HPA and PDB when switched off; a claim under retentionPolicy Delete is owned by its repository
  and garbage collection deletes it);
- sync Jobs are created once and read, and deleted when the spec changes (or suspend is set) while one
  runs; pods are listed (server pods by label, a Job's pod for its termination message), read fresh and
  their status patched for the readiness gate the operator keeps on server pods (its own condition
  only); no Secrets at all: a sync Job gets its Secret by name (envFrom), never read here;
- Events: created through kopf.event, and listed (by involvedObject) for a pod that waits for its
  volumes, since FailedMount and Multi-Attach are said only there;
- "update" on our resources' finalizers: children carry ownerReferences with blockOwnerDeletion, which
  the OwnerReferencesPermissionEnforcement admission plugin (on in OpenShift) allows only to whoever
  may set finalizers on the owner.
*/}}
{{- define "naiad-operator.namespacedRules" -}}
- apiGroups: ["serving.naiad.dev"]
  resources: ["modelrepositories", "inferenceservices"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["serving.naiad.dev"]
  resources: ["modelrepositories/status", "inferenceservices/status"]
  verbs: ["patch"]
- apiGroups: ["serving.naiad.dev"]
  resources: ["modelrepositories/finalizers", "inferenceservices/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "list"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "delete"]
{{- /* the sync Job's right to write its listing ConfigMap: its own account, a Role and a RoleBinding */}}
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "create", "patch"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "create", "patch"]
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- end -}}

{{/*
Cluster-scoped reads of kopf itself: it watches CustomResourceDefinitions (to notice ours being
installed or upgraded) and, when it watches a list of namespaces, the Namespaces (to notice them being
created or deleted). Without them kopf works from its start-up scan and logs a warning.
*/}}
{{- define "naiad-operator.clusterRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- /* storage.mode nodeCache: one node-local (local:) volume per repository; never deleted */}}
- apiGroups: [""]
  resources: ["persistentvolumes"]
  verbs: ["get", "create", "patch"]
{{- if .Values.operator.watchNamespaces }}
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- end }}
{{- end -}}

{{/*
Checks across values that the schema cannot express; each returns a message or nothing, and all the
messages fail the render together (bitnami's validateValues pattern).
*/}}
{{- define "naiad-operator.validateValues.serviceAccount" -}}
{{- if and (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) -}}
serviceAccount.name: name the existing ServiceAccount the operator runs as when serviceAccount.create is false
{{- end -}}
{{- end -}}

{{- define "naiad-operator.validateValues.watchNamespaces" -}}
{{- $namespaces := .Values.operator.watchNamespaces -}}
{{- if ne (len $namespaces) (len (uniq $namespaces)) -}}
operator.watchNamespaces: {{ toJson $namespaces }} lists a namespace twice
{{- end -}}
{{- end -}}

{{- define "naiad-operator.validateValues.timeouts" -}}
{{- if lt (float64 .Values.operator.loadTimeout) (float64 .Values.operator.serverTimeout) -}}
operator.loadTimeout ({{ .Values.operator.loadTimeout }}) must not be shorter than operator.serverTimeout ({{ .Values.operator.serverTimeout }}): a load does more than an index call
{{- end -}}
{{- end -}}

{{- define "naiad-operator.validateValues.replicaCount" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.operator.leaderElection.enabled) -}}
replicaCount: {{ .Values.replicaCount }} replicas need operator.leaderElection.enabled, or they all act
{{- end -}}
{{- end -}}

{{- define "naiad-operator.validateValues" -}}
{{- $messages := list -}}
{{- $messages = append $messages (include "naiad-operator.validateValues.replicaCount" .) -}}
{{- $messages = append $messages (include "naiad-operator.validateValues.serviceAccount" .) -}}
{{- $messages = append $messages (include "naiad-operator.validateValues.watchNamespaces" .) -}}
{{- $messages = append $messages (include "naiad-operator.validateValues.timeouts" .) -}}
{{- $messages = without $messages "" -}}
{{- $message := join "\n" $messages -}}
{{- if $message -}}
{{- printf "\nVALUES VALIDATION:\n%s" $message | fail -}}
{{- end -}}
{{- end -}}
