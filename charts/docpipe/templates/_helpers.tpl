{{/*
Names, labels, images, environment and the checks every template shares.
Helpers that need a component take a dict: (dict "root" $ "component" "api").
*/}}

{{- define "docpipe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "docpipe.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Object name of a component: <fullname>-<component>, at most 63 characters. */}}
{{- define "docpipe.componentName" -}}
{{- printf "%s-%s" (include "docpipe.fullname" .root) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "docpipe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "docpipe.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .pool }}
docpipe.io/pool: {{ . }}
{{- end }}
{{- end }}

{{- define "docpipe.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{ include "docpipe.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: docpipe
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels that every pod of this release carries (NetworkPolicy peers). */}}
{{- define "docpipe.releasePodLabels" -}}
app.kubernetes.io/name: {{ include "docpipe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* <registry>/<name>:<tag> of one of the five docpipe images. */}}
{{- define "docpipe.image" -}}
{{- $image := .root.Values.image }}
{{- printf "%s/%s:%s" (trimSuffix "/" $image.registry) .name (default .root.Chart.AppVersion $image.tag) }}
{{- end }}

{{- define "docpipe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "docpipe.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "docpipe.secretName" -}}
{{- default (include "docpipe.fullname" .) .Values.secrets.existingSecret }}
{{- end }}

{{/* The variable (and Secret key) holding a provider's API key. */}}
{{- define "docpipe.providerKeyEnv" -}}
{{- .api_key_env | default (printf "DOCPIPE_PROVIDER_%s_API_KEY" (.name | upper | replace "-" "_")) }}
{{- end }}

{{- define "docpipe.llmBaseUrl" -}}
{{- if .Values.fakeLlm.enabled }}
{{- printf "http://%s:%d/v1" (include "docpipe.componentName" (dict "root" . "component" "fake-llm")) (int .Values.fakeLlm.port) }}
{{- else if .Values.config.llmBaseUrl }}
{{- .Values.config.llmBaseUrl }}
{{- else if .Values.config.providers }}
{{- /* config.providers names every endpoint */}}
{{- else }}
{{- fail "config.llmBaseUrl is empty: set it to your provider's OpenAI-compatible base URL, or enable fakeLlm for a test cluster" }}
{{- end }}
{{- end }}

{{/*
The time-limit rule, for the global settings or one worker pool:
llm timeout < task soft limit < task hard limit < broker visibility timeout, and
soft limit + llm timeout < hard limit (calls in flight at the soft limit get answered).
Takes (dict "root" $ "soft" 60 "softName" "config.taskSoftTimeLimitSeconds" "hard" 90
"hardName" "workers.batch.taskTimeLimitSeconds"): the names say where a value came from.
*/}}
{{- define "docpipe.checkTimeLimits" -}}
{{- $c := .root.Values.config }}
{{- $chain := list
    (list "config.llmTimeoutSeconds" $c.llmTimeoutSeconds)
    (list .softName .soft)
    (list .hardName .hard)
    (list "config.brokerVisibilityTimeoutSeconds" $c.brokerVisibilityTimeoutSeconds) }}
{{- range $i, $inner := initial $chain }}
{{- $outer := index $chain (add1 $i) }}
{{- if not (lt (float64 (index $inner 1)) (float64 (index $outer 1))) }}
{{- fail (printf "incoherent time limits: %s=%v must be below %s=%v (rule: llm timeout < task soft limit < task hard limit < broker visibility timeout; see docs/reference/settings.md, \"The time-limit rule\")" (index $inner 0) (index $inner 1) (index $outer 0) (index $outer 1)) }}
{{- end }}
{{- end }}
{{- if not (lt (addf .soft $c.llmTimeoutSeconds) (float64 .hard)) }}
{{- fail (printf "%s=%v must exceed %s + config.llmTimeoutSeconds=%v: calls in flight at the soft limit are answered and recorded before the hard limit kills the process" .hardName .hard .softName (addf .soft $c.llmTimeoutSeconds)) }}
{{- end }}
{{- if not (lt (float64 $c.webhookTimeoutSeconds) (float64 .soft)) }}
{{- fail (printf "config.webhookTimeoutSeconds=%v must be below %s=%v: a webhook delivery attempt ends at its own deadline, before the soft limit interrupts it" $c.webhookTimeoutSeconds .softName .soft) }}
{{- end }}
{{- if not (lt (float64 $c.limiterMaxWaitSeconds) (float64 .soft)) }}
{{- fail (printf "config.limiterMaxWaitSeconds=%v must be below %s=%v: a call waiting for the provider limiter hands its step back before the soft limit interrupts it" $c.limiterMaxWaitSeconds .softName .soft) }}
{{- end }}
{{- range $key := list "databaseConnectTimeoutSeconds" "databaseSocketTimeoutSeconds" "databaseStatementTimeoutSeconds" "databasePoolTimeoutSeconds" "redisConnectTimeoutSeconds" "redisSocketTimeoutSeconds" }}
{{- if not (lt (float64 (index $c $key)) (float64 $.soft)) }}
{{- fail (printf "config.%s=%v must be below %s=%v: a client waiting on PostgreSQL or Redis gives up before the soft limit interrupts its step" $key (index $c $key) $.softName $.soft) }}
{{- end }}
{{- end }}
{{- if and (not (kindIs "invalid" $c.ocrPageTimeoutSeconds)) (not (lt (float64 $c.ocrPageTimeoutSeconds) (float64 .soft))) }}
{{- fail (printf "config.ocrPageTimeoutSeconds=%v must be below %s=%v: a page's OCR ends at its own limit, before the soft limit interrupts its step" $c.ocrPageTimeoutSeconds .softName .soft) }}
{{- end }}
{{- if and (not (kindIs "invalid" $c.pdfPageTimeoutSeconds)) (not (lt (float64 $c.pdfPageTimeoutSeconds) (float64 .soft))) }}
{{- fail (printf "config.pdfPageTimeoutSeconds=%v must be below %s=%v: a PDF page ends at its own limit, before the soft limit interrupts its step" $c.pdfPageTimeoutSeconds .softName .soft) }}
{{- end }}
{{- end }}

{{/* Global checks, run once from the ConfigMap. */}}
{{- define "docpipe.checkValues" -}}
{{- $c := .Values.config }}
{{- include "docpipe.checkTimeLimits" (dict "root" . "soft" $c.taskSoftTimeLimitSeconds "softName" "config.taskSoftTimeLimitSeconds" "hard" $c.taskTimeLimitSeconds "hardName" "config.taskTimeLimitSeconds") }}
{{- if gt (mulf 2.0 (float64 $c.heartbeatIntervalSeconds)) (float64 $c.leaseTtlSeconds) }}
{{- fail (printf "config.heartbeatIntervalSeconds=%v must be at most half of config.leaseTtlSeconds=%v, or one late heartbeat loses a live worker's lease" $c.heartbeatIntervalSeconds $c.leaseTtlSeconds) }}
{{- end }}
{{- if gt (float64 $c.databaseLockTimeoutSeconds) (float64 $c.databaseStatementTimeoutSeconds) }}
{{- fail (printf "config.databaseLockTimeoutSeconds=%v must not exceed config.databaseStatementTimeoutSeconds=%v: a lock is waited for inside a statement" $c.databaseLockTimeoutSeconds $c.databaseStatementTimeoutSeconds) }}
{{- end }}
{{- if and (has "*" .Values.api.forwardedAllowIps) (not (and .Values.networkPolicy.enabled .Values.networkPolicy.apiIngressFrom)) }}
{{- fail "api.forwardedAllowIps [\"*\"] trusts every peer to say who the client is and whether it spoke HTTPS: set networkPolicy.apiIngressFrom to the ingress controller (so no other peer reaches the API), or list the ingress's addresses instead" }}
{{- end }}
{{- if gt (float64 $c.ocrMinDpi) (float64 $c.ocrRenderDpi) }}
{{- fail (printf "config.ocrMinDpi=%v must not exceed config.ocrRenderDpi=%v: pages are rendered at most at the render dpi" $c.ocrMinDpi $c.ocrRenderDpi) }}
{{- end }}
{{- if gt (float64 $c.retryBackoffBaseSeconds) (float64 $c.retryBackoffCapSeconds) }}
{{- fail "config.retryBackoffBaseSeconds must not exceed config.retryBackoffCapSeconds" }}
{{- end }}
{{- if and (eq $c.auth "none") (not .Values.api.allowUnauthenticated) }}
{{- fail "config.auth none serves every request without an API key, as tenant \"default\": set api.allowUnauthenticated=true as well to say so (development clusters only), or keep config.auth keys" }}
{{- end }}
{{- if and .Values.secrets.existingSecret (or .Values.postgresql.enabled .Values.redis.enabled) }}
{{- fail "secrets.existingSecret is for external PostgreSQL and Redis: with postgresql.enabled or redis.enabled the chart creates the credentials itself" }}
{{- end }}
{{- if not .Values.secrets.existingSecret }}
{{- if and (not .Values.postgresql.enabled) (not .Values.secrets.databaseUrl) }}
{{- fail "no database: set secrets.databaseUrl (or secrets.existingSecret), or enable the bundled postgresql" }}
{{- end }}
{{- if and (not .Values.redis.enabled) (not .Values.secrets.redisUrl) }}
{{- fail "no broker: set secrets.redisUrl (or secrets.existingSecret), or enable the bundled redis" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A worker pool's effective limits as YAML: soft, hard, softShutdown (seconds) and
terminationGracePeriodSeconds = hard limit + soft shutdown + margin, rounded up.
Takes (dict "root" $ "pool" $pool).
*/}}
{{- define "docpipe.poolLimits" -}}
{{- $c := .root.Values.config }}
{{- $soft := .pool.taskSoftTimeLimitSeconds | default $c.taskSoftTimeLimitSeconds }}
{{- $hard := .pool.taskTimeLimitSeconds | default $c.taskTimeLimitSeconds }}
{{- $shutdown := .pool.softShutdownSeconds | default $c.workerSoftShutdownSeconds }}
{{- $grace := addf (float64 $hard) (float64 $shutdown) (float64 .pool.terminationGraceMarginSeconds) | ceil | int }}
soft: {{ $soft }}
hard: {{ $hard }}
softShutdown: {{ $shutdown }}
terminationGracePeriodSeconds: {{ $grace }}
{{- end }}

{{/* config.<key> -> the DOCPIPE_* variable it is passed as (the ConfigMap's data). */}}
{{- define "docpipe.configEnvNames" -}}
admissionIntervalSeconds: DOCPIPE_ADMISSION_INTERVAL_S
apiKeyRpm: DOCPIPE_API_KEY_RPM
apiKeyCacheSeconds: DOCPIPE_API_KEY_CACHE_S
batchAdmissionWindow: DOCPIPE_BATCH_ADMISSION_WINDOW
batchFairnessMemorySeconds: DOCPIPE_BATCH_FAIRNESS_MEMORY_S
brokerVisibilityTimeoutSeconds: DOCPIPE_BROKER_VISIBILITY_TIMEOUT_S
clientIpRpm: DOCPIPE_CLIENT_IP_RPM
docxMaxPartBytes: DOCPIPE_DOCX_MAX_PART_BYTES
maxDocumentChars: DOCPIPE_MAX_DOCUMENT_CHARS
maxPageChars: DOCPIPE_MAX_PAGE_CHARS
ocrMinDpi: DOCPIPE_OCR_MIN_DPI
pdfMaxMemoryBytes: DOCPIPE_PDF_MAX_MEMORY_BYTES
maxExtractionDeliveries: DOCPIPE_MAX_EXTRACTION_DELIVERIES
maxExtractionSeconds: DOCPIPE_MAX_EXTRACTION_S
maxHeavyRequests: DOCPIPE_MAX_HEAVY_REQUESTS
maxDecisionBytes: DOCPIPE_MAX_DECISION_BYTES
maxEvaluationUploadBytes: DOCPIPE_MAX_EVALUATION_UPLOAD_BYTES
maxEvaluationItems: DOCPIPE_MAX_EVALUATION_ITEMS
maxExpectedOutputBytes: DOCPIPE_MAX_EXPECTED_OUTPUT_BYTES
hstsMaxAgeSeconds: DOCPIPE_HSTS_MAX_AGE_S
databaseConnectTimeoutSeconds: DOCPIPE_DATABASE_CONNECT_TIMEOUT_S
databaseLockTimeoutSeconds: DOCPIPE_DATABASE_LOCK_TIMEOUT_S
databasePoolSize: DOCPIPE_DATABASE_POOL_SIZE
databasePoolTimeoutSeconds: DOCPIPE_DATABASE_POOL_TIMEOUT_S
databaseSocketTimeoutSeconds: DOCPIPE_DATABASE_SOCKET_TIMEOUT_S
databaseStatementTimeoutSeconds: DOCPIPE_DATABASE_STATEMENT_TIMEOUT_S
defaultMaxTokens: DOCPIPE_DEFAULT_MAX_TOKENS
docxMaxExpandedBytes: DOCPIPE_DOCX_MAX_EXPANDED_BYTES
docxMaxExpansionRatio: DOCPIPE_DOCX_MAX_EXPANSION_RATIO
defaultRunBudgetUsd: DOCPIPE_DEFAULT_RUN_BUDGET_USD
eventStreamMaxSeconds: DOCPIPE_EVENT_STREAM_MAX_S
eventStreamsPerKey: DOCPIPE_EVENT_STREAMS_PER_KEY
uiSessionMaxAgeSeconds: DOCPIPE_UI_SESSION_MAX_AGE_S
heartbeatIntervalSeconds: DOCPIPE_HEARTBEAT_INTERVAL_S
leaseTtlSeconds: DOCPIPE_LEASE_TTL_S
limiterDecreaseFactor: DOCPIPE_LIMITER_DECREASE_FACTOR
limiterInteractiveReserve: DOCPIPE_LIMITER_INTERACTIVE_RESERVE
limiterBreakerFailures: DOCPIPE_LIMITER_BREAKER_FAILURES
limiterBreakerProbeSeconds: DOCPIPE_LIMITER_BREAKER_PROBE_S
limiterMaxWaitSeconds: DOCPIPE_LIMITER_MAX_WAIT_S
limiterRecoveryPerSecond: DOCPIPE_LIMITER_RECOVERY_PER_S
llmTimeoutSeconds: DOCPIPE_LLM_TIMEOUT_S
maxBatchBodiesInFlight: DOCPIPE_MAX_BATCH_BODIES_IN_FLIGHT
maxBatchBytes: DOCPIPE_MAX_BATCH_BYTES
maxBatchDocuments: DOCPIPE_MAX_BATCH_DOCUMENTS
maxResultExports: DOCPIPE_MAX_RESULT_EXPORTS
reviewMaxWaitSeconds: DOCPIPE_REVIEW_MAX_WAIT_S
reviewExpireAfterSeconds: DOCPIPE_REVIEW_EXPIRE_AFTER_S
maxDeadlineSeconds: DOCPIPE_MAX_DEADLINE_S
maxDocumentBytes: DOCPIPE_MAX_DOCUMENT_BYTES
maxPdfBytes: DOCPIPE_MAX_PDF_BYTES
maxDocxBytes: DOCPIPE_MAX_DOCX_BYTES
maxImageBytes: DOCPIPE_MAX_IMAGE_BYTES
maxDocumentPages: DOCPIPE_MAX_DOCUMENT_PAGES
maxPagePixels: DOCPIPE_MAX_PAGE_PIXELS
maxFanoutCalls: DOCPIPE_MAX_FANOUT_CALLS
maxRunBudgetUsd: DOCPIPE_MAX_RUN_BUDGET_USD
maxStartDelaySeconds: DOCPIPE_MAX_START_DELAY_S
maxStepAttempts: DOCPIPE_MAX_STEP_ATTEMPTS
ocrLowConfidence: DOCPIPE_OCR_LOW_CONFIDENCE
textLayerMinScore: DOCPIPE_TEXT_LAYER_MIN_SCORE
pageImageMaxPixels: DOCPIPE_PAGE_IMAGE_MAX_PIXELS
poorExtractionShare: DOCPIPE_POOR_EXTRACTION_SHARE
ocrMinTextChars: DOCPIPE_OCR_MIN_TEXT_CHARS
ocrRenderDpi: DOCPIPE_OCR_RENDER_DPI
outboxGraceSeconds: DOCPIPE_OUTBOX_GRACE_S
outboxSweepIntervalSeconds: DOCPIPE_OUTBOX_SWEEP_INTERVAL_S
parkDelaysOverSeconds: DOCPIPE_PARK_DELAYS_OVER_S
providerBatchIntervalSeconds: DOCPIPE_PROVIDER_BATCH_INTERVAL_S
providerBatchMaxWaitSeconds: DOCPIPE_PROVIDER_BATCH_MAX_WAIT_S
providerBatchMinCalls: DOCPIPE_PROVIDER_BATCH_MIN_CALLS
providerBatchRecheckSeconds: DOCPIPE_PROVIDER_BATCH_RECHECK_S
providerBatchMaxAttempts: DOCPIPE_PROVIDER_BATCH_MAX_ATTEMPTS
providerBatchDeadlineMarginSeconds: DOCPIPE_PROVIDER_BATCH_DEADLINE_MARGIN_S
providerBatchWakeLimit: DOCPIPE_PROVIDER_BATCH_WAKE_LIMIT
providerBurst: DOCPIPE_PROVIDER_BURST
providerMaxConcurrency: DOCPIPE_PROVIDER_MAX_CONCURRENCY
providerRpm: DOCPIPE_PROVIDER_RPM
providerTpm: DOCPIPE_PROVIDER_TPM
reaperIntervalSeconds: DOCPIPE_REAPER_INTERVAL_S
redisConnectTimeoutSeconds: DOCPIPE_REDIS_CONNECT_TIMEOUT_S
redisSocketTimeoutSeconds: DOCPIPE_REDIS_SOCKET_TIMEOUT_S
redriveGraceSeconds: DOCPIPE_REDRIVE_GRACE_S
retentionBatchSize: DOCPIPE_RETENTION_BATCH_SIZE
retentionCallLogDays: DOCPIPE_RETENTION_CALL_LOG_DAYS
retentionDocumentsDays: DOCPIPE_RETENTION_DOCUMENTS_DAYS
retentionIntervalSeconds: DOCPIPE_RETENTION_INTERVAL_S
retentionOutboxDays: DOCPIPE_RETENTION_OUTBOX_DAYS
retentionRunsDays: DOCPIPE_RETENTION_RUNS_DAYS
retryBackoffBaseSeconds: DOCPIPE_RETRY_BACKOFF_BASE_S
retryBackoffCapSeconds: DOCPIPE_RETRY_BACKOFF_CAP_S
stepCallConcurrency: DOCPIPE_STEP_CALL_CONCURRENCY
taskSoftTimeLimitSeconds: DOCPIPE_TASK_SOFT_TIME_LIMIT_S
taskTimeLimitSeconds: DOCPIPE_TASK_TIME_LIMIT_S
webhookConcurrency: DOCPIPE_WEBHOOK_CONCURRENCY
webhookMaxAttempts: DOCPIPE_WEBHOOK_MAX_ATTEMPTS
webhookMaxResponseBytes: DOCPIPE_WEBHOOK_MAX_RESPONSE_BYTES
webhookRetryBaseSeconds: DOCPIPE_WEBHOOK_RETRY_BASE_S
webhookSecretRotationWindowSeconds: DOCPIPE_WEBHOOK_SECRET_ROTATION_WINDOW_S
webhookTenantConcurrency: DOCPIPE_WEBHOOK_TENANT_CONCURRENCY
webhookTimeoutSeconds: DOCPIPE_WEBHOOK_TIMEOUT_S
workerMaxMemoryPerChildMb: DOCPIPE_WORKER_MAX_MEMORY_PER_CHILD_MB
workerMaxTasksPerChild: DOCPIPE_WORKER_MAX_TASKS_PER_CHILD
workerPageReads: DOCPIPE_WORKER_PAGE_READS
workerSoftShutdownSeconds: DOCPIPE_WORKER_SOFT_SHUTDOWN_S
{{- end }}

{{/* A number as the library parses it: integral values without an exponent or a ".0". */}}
{{- define "docpipe.number" -}}
{{- if eq (float64 .) (floor .) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- end }}

{{/* DOCPIPE_* settings from the ConfigMap and the Secret, then extra variables. */}}
{{- define "docpipe.envFrom" -}}
- configMapRef:
    name: {{ include "docpipe.fullname" . }}
{{- end }}

{{- define "docpipe.secretEnv" -}}
- name: DOCPIPE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "docpipe.secretName" . }}
      key: DOCPIPE_DATABASE_URL
- name: DOCPIPE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "docpipe.secretName" . }}
      key: DOCPIPE_REDIS_URL
- name: DOCPIPE_LEASE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "docpipe.secretName" . }}
      key: DOCPIPE_LEASE_DATABASE_URL
      optional: true
- name: DOCPIPE_LLM_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "docpipe.secretName" . }}
      key: DOCPIPE_LLM_API_KEY
      optional: true
- name: DOCPIPE_SECRETS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "docpipe.secretName" . }}
      key: DOCPIPE_SECRETS_KEY
      optional: {{ not .Values.config.webhooksEnabled }}
{{- range .Values.config.providers }}
- name: {{ include "docpipe.providerKeyEnv" . }}
  valueFrom:
    secretKeyRef:
      name: {{ include "docpipe.secretName" $ }}
      key: {{ include "docpipe.providerKeyEnv" . }}
      optional: true
{{- end }}
{{- with .Values.config.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Pod annotations that roll the pods when their configuration changes (the Secret's only when
the chart owns it).
*/}}
{{- define "docpipe.checksums" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- if .Values.pipelines }}
checksum/pipelines: {{ include (print .Template.BasePath "/pipelines-configmap.yaml") . | sha256sum }}
{{- end }}
{{- if not .Values.secrets.existingSecret }}
checksum/secret: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
{{- end }}

{{/*
Init container: waits until every migration shipped in `image` is applied (the migrations
Job applies them). Takes (dict "root" $ "image" "...").
*/}}
{{- define "docpipe.waitForSchema" -}}
- name: wait-for-schema
  image: {{ .image }}
  imagePullPolicy: {{ .root.Values.image.pullPolicy }}
  command: ["python", "/opt/docpipe-scripts/wait_for_database.py", "--schema"]
  envFrom:
    {{- include "docpipe.envFrom" .root | nindent 4 }}
  env:
    {{- include "docpipe.secretEnv" .root | nindent 4 }}
    - name: DOCPIPE_WAIT_TIMEOUT_S
      value: {{ .root.Values.migrations.waitTimeoutSeconds | quote }}
  securityContext:
    {{- toYaml .root.Values.containerSecurityContext | nindent 4 }}
  resources:
    {{- toYaml .root.Values.migrations.resources | nindent 4 }}
  volumeMounts:
    - name: scripts
      mountPath: /opt/docpipe-scripts
      readOnly: true
    - name: tmp
      mountPath: /tmp
{{- end }}

{{/*
Exec probe of a worker or beat: the main loop's heartbeat file is younger than maxAge seconds.
A shell and two coreutils, never a Python process per probe.
*/}}
{{- define "docpipe.heartbeatCommand" -}}
exec:
  command:
    - /bin/sh
    - -c
    - test $(( $(date +%s) - $(stat -c %Y "$DOCPIPE_LIVENESS_FILE") )) -lt {{ int . }}
{{- end }}

{{/* Volumes of every docpipe pod: /tmp, the heartbeat file's directory, the scripts. */}}
{{- define "docpipe.volumes" -}}
- name: tmp
  emptyDir: {}
- name: liveness
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
- name: scripts
  configMap:
    name: {{ include "docpipe.componentName" (dict "root" . "component" "scripts") }}
{{- if .Values.pipelines }}
- name: pipelines
  configMap:
    name: {{ include "docpipe.componentName" (dict "root" . "component" "pipelines") }}
{{- end }}
{{- end }}

{{/* Where the pipeline files of .Values.pipelines are mounted (DOCPIPE_PIPELINES_DIR). */}}
{{- define "docpipe.pipelinesDir" -}}/etc/docpipe/pipelines{{- end }}

{{/* The mount of the pipeline files, for every container that loads pipelines. */}}
{{- define "docpipe.pipelinesMount" -}}
{{- if .Values.pipelines }}
- name: pipelines
  mountPath: {{ include "docpipe.pipelinesDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/*
What Helm can check of a pipeline file while rendering: YAML that parses, with a name, a
version and steps. Everything else (the published schema, templates, references, prices,
definitions active runs use) is checked by `docpipe migrate` in the migrations Job, which
fails the release.
*/}}
{{- define "docpipe.checkPipelines" -}}
{{- range $file, $text := .Values.pipelines }}
{{- $parsed := fromYaml $text }}
{{- if hasKey $parsed "Error" }}
{{- fail (printf "pipelines.%s: not valid YAML: %s" $file (get $parsed "Error")) }}
{{- end }}
{{- range $required := list "name" "version" "steps" }}
{{- if not (hasKey $parsed $required) }}
{{- fail (printf "pipelines.%s: a pipeline file needs %s (see docpipe's pipeline-file.schema.json)" $file $required) }}
{{- end }}
{{- end }}
{{- if not (kindIs "slice" $parsed.steps) }}
{{- fail (printf "pipelines.%s: steps must be a list" $file) }}
{{- end }}
{{- end }}
{{- end }}

{{- define "docpipe.imagePullSecrets" -}}
{{- range .Values.image.pullSecrets }}
- name: {{ . }}
{{- end }}
{{- end }}

{{/* Whether the cluster serves the Prometheus Operator's API. */}}
{{- define "docpipe.hasPrometheusOperator" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end }}
{{- end }}

{{/*
The ingress rule of a metrics port (the API's, a worker's, beat's): open to the pods of
networkPolicy.metricsNamespace (narrowed by metricsPodSelector), or to
networkPolicy.metricsIngressFrom when set.
*/}}
{{- define "docpipe.metricsIngress" -}}
{{- $np := .Values.networkPolicy }}
- ports:
    - port: metrics
      protocol: TCP
  from:
    {{- if $np.metricsIngressFrom }}
    {{- toYaml $np.metricsIngressFrom | nindent 4 }}
    {{- else }}
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: {{ $np.metricsNamespace | quote }}
      {{- with $np.metricsPodSelector }}
      podSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    {{- end }}
{{- end }}

{{/*
NetworkPolicy peers for "public addresses only": each of workerEgress.publicCidrs minus the
workerEgress.blockedCidrs of its address family. Takes .Values.networkPolicy.workerEgress.
*/}}
{{- define "docpipe.publicPeers" -}}
{{- $blocked := .blockedCidrs }}
{{- range $cidr := .publicCidrs }}
{{- $v6 := contains ":" $cidr }}
{{- $except := list }}
{{- range $blocked }}
{{- if eq (contains ":" .) $v6 }}
{{- $except = append $except . }}
{{- end }}
{{- end }}
- ipBlock:
    cidr: {{ $cidr | quote }}
    {{- with $except }}
    except:
      {{- range . }}
      - {{ . | quote }}
      {{- end }}
    {{- end }}
{{- end }}
{{- end }}

{{/*
Egress rule to a store: the bundled one's pods, or an external one (its peers, or any peer,
on its port). Takes (dict "root" $ "component" "redis" "bundled" true "port" 6379 "to" [...]
"externalPort" 6379).
*/}}
{{- define "docpipe.storeEgress" -}}
{{- if .bundled }}
- to:
    - podSelector:
        matchLabels:
          {{- include "docpipe.selectorLabels" (dict "root" .root "component" .component) | nindent 10 }}
  ports:
    - port: {{ .port }}
      protocol: TCP
{{- else }}
- ports:
    - port: {{ .externalPort }}
      protocol: TCP
  {{- with .to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}
