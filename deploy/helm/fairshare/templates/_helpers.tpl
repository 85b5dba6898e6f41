{{/* The release's base name: the release name, cut to 52 characters (room for "-scheduler"). */}}
{{- define "fairshare.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fairshare.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; (dict "root" $ "component" "api") */}}
{{- define "fairshare.labels" -}}
helm.sh/chart: {{ include "fairshare.chart" .root }}
{{ include "fairshare.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: fairshare
{{- end -}}

{{- define "fairshare.selectorLabels" -}}
app.kubernetes.io/name: fairshare
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "fairshare.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* Whether Kafka is reached with SASL credentials. */}}
{{- define "fairshare.kafkaSasl" -}}
{{- if hasPrefix "SASL_" (upper .Values.kafka.securityProtocol) -}}true{{- end -}}
{{- end -}}

{{/* The Secret of a service's SASL credentials; (dict "root" $ "component" "api") */}}
{{- define "fairshare.saslSecret" -}}
{{- $own := get .root.Values.kafka.sasl.secrets .component | default "" -}}
{{- $own | default .root.Values.kafka.sasl.existingSecret | required (printf "kafka.securityProtocol %s needs kafka.sasl.secrets.%s or kafka.sasl.existingSecret (a Secret with username and password)" .root.Values.kafka.securityProtocol .component) -}}
{{- end -}}

{{/* The signing key file of a service in the signing keys' Secret ("" when it signs nothing). */}}
{{- define "fairshare.signingKey" -}}
{{- if and .root.Values.signingKeys.enabled (ne .component "projector") -}}
{{- if eq .component "agent" -}}
agent-{{ .root.Values.agent.cluster }}.key
{{- else -}}
{{ .component }}.key
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The command's first words: fairshare and its global options. */}}
{{- define "fairshare.command" -}}
- fairshare
{{- if .Values.logJson }}
- --log-json
{{- end }}
{{- end -}}

{{/* The options every service is given the same way. */}}
{{- define "fairshare.commonArgs" -}}
- --kafka-config
- /run/fairshare/kafka.properties
{{- end -}}

{{/* --metrics-port and --metrics-host, when metrics are on. */}}
{{- define "fairshare.metricsArgs" -}}
{{- if .Values.metrics.enabled }}
- --metrics-port
- {{ .Values.metrics.port | quote }}
- --metrics-host
- 0.0.0.0
{{- end }}
{{- end -}}

{{/* The environment every service gets; (dict "root" $ "component" "api") */}}
{{- define "fairshare.env" -}}
- name: FAIRSHARE_KAFKA_BOOTSTRAP
  value: {{ .root.Values.kafka.bootstrap | required "kafka.bootstrap is required" | quote }}
- name: FAIRSHARE_TOPIC_PREFIX
  value: {{ .root.Values.kafka.topicPrefix | quote }}
- name: FAIRSHARE_LOG_LEVEL
  value: {{ .root.Values.logLevel | quote }}
# the CLI's default data directory, off the read-only root filesystem (nothing is kept there)
- name: FAIRSHARE_DATA_DIR
  value: /tmp/fairshare
- name: HOME
  value: /tmp
{{- if include "fairshare.signingKey" . }}
- name: FAIRSHARE_SIGNING_KEY
  value: /run/fairshare/signing.key
{{- end }}
{{- end -}}

{{/*
The init container that prepares a pod's private files in /run/fairshare (memory, owner-only):
the Kafka properties (the ConfigMap's settings and, with SASL, the service's credentials) and
its signing key (and the API's TLS key), copied out of their Secrets with mode 0600, since the
services refuse a key file that others may read and a Secret volume is group-readable.
(dict "root" $ "component" "api" "tls" true)
*/}}
{{- define "fairshare.prepare" -}}
- name: prepare
  image: {{ include "fairshare.image" .root | quote }}
  imagePullPolicy: {{ .root.Values.image.pullPolicy }}
  command:
    - sh
    - -ec
    - |
      umask 077
      cp /etc/fairshare/kafka/client.properties /run/fairshare/kafka.properties.tmp
      if [ -n "${KAFKA_SASL_USERNAME:-}" ]; then
        printf 'sasl.username=%s\nsasl.password=%s\n' "$KAFKA_SASL_USERNAME" "$KAFKA_SASL_PASSWORD" \
          >>/run/fairshare/kafka.properties.tmp
      fi
      mv /run/fairshare/kafka.properties.tmp /run/fairshare/kafka.properties
      for name in signing.key tls.crt tls.key; do
        if [ -f "/etc/fairshare/secrets/$name" ]; then
          cp "/etc/fairshare/secrets/$name" "/run/fairshare/$name"
          chmod 0600 "/run/fairshare/$name"
        fi
      done
  {{- if include "fairshare.kafkaSasl" .root }}
  {{- $secret := include "fairshare.saslSecret" . }}
  env:
    - name: KAFKA_SASL_USERNAME
      valueFrom:
        secretKeyRef:
          name: {{ $secret }}
          key: username
    - name: KAFKA_SASL_PASSWORD
      valueFrom:
        secretKeyRef:
          name: {{ $secret }}
          key: password
  {{- end }}
  securityContext:
    {{- toYaml .root.Values.securityContext | nindent 4 }}
  resources:
    requests:
      cpu: 10m
      memory: 16Mi
    limits:
      memory: 64Mi
  volumeMounts:
    - name: run
      mountPath: /run/fairshare
    - name: kafka-settings
      mountPath: /etc/fairshare/kafka
      readOnly: true
    {{- if or (include "fairshare.signingKey" .) .tls }}
    - name: secrets
      mountPath: /etc/fairshare/secrets
      readOnly: true
    {{- end }}
{{- end -}}

{{/* The volumes of a pod; (dict "root" $ "component" "api" "tls" true) */}}
{{- define "fairshare.volumes" -}}
- name: run
  emptyDir:
    medium: Memory
    sizeLimit: 16Mi
- name: tmp
  emptyDir:
    sizeLimit: 1Gi
- name: kafka-settings
  configMap:
    name: {{ include "fairshare.fullname" .root }}-kafka
{{- if .root.Values.kafka.ca.existingSecret }}
- name: kafka-ca
  secret:
    secretName: {{ .root.Values.kafka.ca.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ .root.Values.kafka.ca.key }}
        path: ca.crt
{{- end }}
{{- $key := include "fairshare.signingKey" . }}
{{- if or $key .tls }}
- name: secrets
  projected:
    defaultMode: 0440
    sources:
      {{- if $key }}
      - secret:
          name: {{ .root.Values.signingKeys.existingSecret | required "signingKeys.existingSecret is required with signingKeys.enabled" }}
          items:
            - key: {{ $key }}
              path: signing.key
      {{- end }}
      {{- if .tls }}
      - secret:
          name: {{ .root.Values.api.tls.existingSecret }}
          items:
            - key: tls.crt
              path: tls.crt
            - key: tls.key
              path: tls.key
      {{- end }}
{{- end }}
{{- end -}}

{{/* The main container's mounts of those volumes. */}}
{{- define "fairshare.volumeMounts" -}}
- name: run
  mountPath: /run/fairshare
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if .root.Values.kafka.ca.existingSecret }}
- name: kafka-ca
  mountPath: /etc/fairshare/kafka-ca
  readOnly: true
{{- end }}
{{- end -}}

{{/* Pod-level settings shared by every Deployment. */}}
{{- define "fairshare.podSpec" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/* Pod template metadata; (dict "root" $ "component" "api") */}}
{{- define "fairshare.podMetadata" -}}
labels:
  {{- include "fairshare.labels" . | nindent 2 }}
  {{- with .root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  # a new rollout when the Kafka settings change
  checksum/kafka: {{ include (print .root.Template.BasePath "/kafka-configmap.yaml") .root | sha256sum }}
  {{- with .root.Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/* Liveness on the metrics port, for the services without an HTTP API. */}}
{{- define "fairshare.metricsProbes" -}}
{{- if .Values.metrics.enabled }}
ports:
  - name: metrics
    containerPort: {{ .Values.metrics.port }}
    protocol: TCP
# The process exits non-zero on what it cannot recover from (Kubernetes restarts it); this
# catches a process that hangs. Generous: a long catch-up on the log is not a hang.
livenessProbe:
  httpGet:
    path: /metrics
    port: metrics
  initialDelaySeconds: 30
  periodSeconds: 20
  timeoutSeconds: 5
  failureThreshold: 6
{{- end }}
{{- end -}}
