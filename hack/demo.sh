#!/usr/bin/env bash
# The demo: local control plane up, operator running, every sample applied, a summary of what happened.
# Safe to run twice (the cluster is reused, the operator restarted, samples re-applied).
# Usage: hack/demo.sh [down]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=cluster/lib.sh
source "$root/cluster/lib.sh"
ns=glmops-demo
state="$(state_dir)"
oppid="$state/pids/operator.pid"
simpid="$state/pids/sim-fleet.pid"
gsm8k="$root/../shared/data/gsm8k/test.jsonl"

# stop_recorded PIDFILE CMDLINE-PATTERN WHAT: stop a process this script started, by its recorded pid,
# only if that pid still runs our command (never a reused pid).
stop_recorded() {
  local pidfile="$1" pattern="$2" what="$3"
  if [[ -f "$pidfile" ]] && tr '\0' ' ' < "/proc/$(cat "$pidfile")/cmdline" 2>/dev/null | grep -q "$pattern"; then
    kill -TERM "$(cat "$pidfile")" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.2; done
    log "stopped $what (pid $(cat "$pidfile"))"
  fi
  rm -f "$pidfile"
}
stop_sims() { stop_recorded "$simpid" "sim-fleet" "the simulators"; }
stop_operator() { stop_recorded "$oppid" "glm_operator.handlers" "the operator"; }

if [[ "${1:-}" == "down" ]]; then
  stop_sims
  stop_operator
  "$root/cluster/down.sh"
  exit 0
fi

export KUBECONFIG
KUBECONFIG="$("$root/cluster/up.sh" | tail -n 1 | sed 's/^export KUBECONFIG=//')"
# GLMOPS_LWS=1: the real LeaderWorkerSet controller too (cluster/lws.sh), so samples spanning nodes run as LWS groups
# instead of the StatefulSet fallback.
if [[ "${GLMOPS_LWS:-}" == 1 ]]; then "$root/cluster/lws.sh" up; fi
kc() { "$(bin_dir)/kubectl" "$@"; }

kc apply --server-side --force-conflicts -f "$root/crds" >/dev/null
wait_established kc 60 glmdeployments.glmops.dev glmimages.glmops.dev

stop_sims
stop_operator
gsm8k_args=()
if [[ -f "$gsm8k" ]]; then export GLMOPS_GSM8K_PATH="$gsm8k"; gsm8k_args=(--gsm8k "$gsm8k"); fi
# kwok pods run no process: a vLLM simulator answers on each serving pod's (loopback) IP, launched
# with that pod's command line, env, GPU and image, so the canaries meet what was really deployed.
log "starting the vLLM simulators (log: $state/logs/sim-fleet.log)"
setsid "$root/.venv/bin/glmctl" sim-fleet "${gsm8k_args[@]}" >"$state/logs/sim-fleet.log" 2>&1 < /dev/null &
echo $! > "$simpid"
# On a second run the demo's pods are still there: their simulators answer before the operator starts, or its
# first re-checks of their stored verdicts would find nobody answering and take them out of service.
sims_serving() {
  local ip
  for ip in $(kc get pods -n "$ns" -l glmops.dev/serving=true -o jsonpath='{.items[*].status.podIP}'); do
    curl -fsS -m 2 "http://$ip:8000/v1/models" >/dev/null || return 1
  done
}
wait_for "sim-fleet serving the demo's existing pods" 180 sims_serving
log "starting the operator (log: $state/logs/operator.log)"
GLMOPS_WEBHOOK_ADDR=127.0.0.1 GLMOPS_WEBHOOK_HOST=127.0.0.1 GLMOPS_WEBHOOK_PORT=19443 \
GLMOPS_WEBHOOK_CERT="$state/certs/webhook.crt" GLMOPS_WEBHOOK_KEY="$state/certs/webhook.key" \
GLMOPS_WEBHOOK_CA="$state/certs/ca.crt" GLMOPS_METRICS_PORT=18081 \
  setsid "$root/.venv/bin/kopf" run --standalone --all-namespaces -m glm_operator.handlers \
  --liveness=http://127.0.0.1:18080/healthz >"$state/logs/operator.log" 2>&1 < /dev/null &
echo $! > "$oppid"
wait_for "operator liveness" 60 curl -fsS http://127.0.0.1:18080/healthz
wait_for "operator admission webhooks" 60 kc get validatingwebhookconfiguration glmops.dev

kc create namespace "$ns" --dry-run=client -o yaml | kc apply -f - >/dev/null
# Room for every sample at once (render/fleet.py DEMO_FLEET; tests/unit/test_demo_fleet.py packs them onto it),
# applied here too so a cluster started earlier with the tests' smaller fleet grows to it.
"$root/.venv/bin/glmctl" fleet --shape demo > "$state/demo-fleet.yaml"
kc apply -f "$state/demo-fleet.yaml" >/dev/null
want_nodes=$(grep -c '^kind: Node' "$state/demo-fleet.yaml")
wait_for "$want_nodes demo fleet nodes Ready" 90 nodes_ready "$want_nodes"
# What the samples ask a platform team to provide: a pull Secret, a ServiceAccount, a PriorityClass, a volume.
kc apply -n "$ns" -f "$root/hack/demo/prerequisites.yaml" -f "$root/hack/demo/model-cache-volume.yaml" >/dev/null
# A claim deleted since the last run (the namespace or the cached sample removed) leaves the volume Released, bound
# to the old claim's uid; forget that uid so the claim made now binds, as an administrator re-using a volume does.
if [[ "$(kc get pv glmops-demo-model-cache -o jsonpath='{.status.phase}')" == Released ]]; then
  kc patch pv glmops-demo-model-cache --type json \
    -p '[{"op": "remove", "path": "/spec/claimRef/uid"}, {"op": "remove", "path": "/spec/claimRef/resourceVersion"}]' >/dev/null
fi

echo
echo "== Applying samples to namespace $ns"
outcomes="$state/demo-outcomes.tsv"; : > "$outcomes"
manifests=("$root"/samples/*.yaml "$root/hack/demo/unknown-failure.yaml")
accepted=(); refused=()
for f in "${manifests[@]}"; do
  name="$(basename "$f" .yaml)"
  # A broken sample meets admission on every run: one stored by an earlier run interrupted while no webhook was
  # registered (the operator stopped mid-demo) would make `kubectl apply` send nothing and report it unchanged.
  if [[ "$f" == *-broken.yaml ]]; then kc delete -n "$ns" -f "$f" --ignore-not-found --timeout=60s >/dev/null; fi
  if out="$(kc apply -n "$ns" -f "$f" 2>&1)"; then
    accepted+=("$name"); printf '  %-34s accepted  %s\n' "$name" "$(grep -m1 -o 'warning.*' <<<"$out" || true)"
    printf '%s\taccepted\t%s\n' "$(basename "$f")" "$(tr '\n\t' '  ' <<<"$out")" >> "$outcomes"
  else
    refused+=("$name"); printf '  %-34s REFUSED   %s\n' "$name" "$(head -n 3 <<<"$out" | tr '\n' ' ')"
    printf '%s\trefused\t%s\n' "$(basename "$f")" "$(tr '\n\t' '  ' <<<"$out")" >> "$outcomes"
  fi
done
echo "  (unknown-failure is admitted; its simulator drops every MTP draft, a failure no rule knows)"

echo
echo "== Fake GPU fleet"
kc get nodes -L glmops.dev/accelerator --no-headers \
  | awk '{print $6}' | sort | uniq -c | awk '{printf "  %-14s %s nodes\n", ($2==""?"cpu":$2), $1}'

# The demo's promises (hack/demo_check.py): refusals name their rule, repairs are recorded, no pod waits for
# room, every accepted deployment serves after its canaries but the one broken on purpose. Waited for, then shown.
check() {
  kc get glmd -n "$ns" -o json > "$state/demo-glmds.json"
  kc get pods -n "$ns" -o json > "$state/demo-pods.json"
  "$root/.venv/bin/python" "$root/hack/demo_check.py" "$outcomes" "$state/demo-glmds.json" "$state/demo-pods.json" \
    "${manifests[@]}"
}
deadline=$(( $(date +%s) + ${GLMOPS_DEMO_WAIT:-420} ))
log "waiting for the operator to deploy ${#accepted[@]} GLMDeployments and their canaries to judge every pod"
until check >/dev/null 2>&1 || (( $(date +%s) >= deadline )); do sleep 3; done

echo
echo "== GLMDeployments"
kc get glmd -n "$ns" -o wide
echo
echo "== What the operator runs (a pod is Ready only once its canaries pass: glmops.dev/canary)"
kc get deploy,sts,job -n "$ns" -o custom-columns='KIND:.kind,NAME:.metadata.name,REPLICAS:.spec.replicas,IMAGE:.spec.template.spec.containers[0].image'
kc get pods -n "$ns" -o custom-columns='POD:.metadata.name,NODE:.spec.nodeName,PHASE:.status.phase,GATE:.status.conditions[?(@.type=="glmops.dev/canary")].status,READY:.status.conditions[?(@.type=="Ready")].status'
echo
echo "== Canary verdicts"
kc get glmd -n "$ns" -o jsonpath='{range .items[*]}{.metadata.name}{range .status.canary.pods.*}{"\t"}{.passed}{"\t"}{.message}{end}{"\n"}{end}' \
  | awk -F'\t' 'NF>1 {printf "  %-34s %s  %s\n", $1, ($2=="true"?"pass":"FAIL"), substr($3,1,110)}'
echo
repairs=$(kc get glmd -n "$ns" -o jsonpath='{range .items[*]}{.status.remediations[*].rule}{"\n"}{end}' | grep -c . || true)
running=$(kc get pods -n "$ns" --field-selector=status.phase=Running --no-headers 2>/dev/null | wc -l)
pending=$(kc get pods -n "$ns" --field-selector=status.phase=Pending --no-headers 2>/dev/null | wc -l)
ready=$(kc get glmd -n "$ns" -o jsonpath='{range .items[*]}{.status.readyReplicas}{"\n"}{end}' | awk '$1>0' | wc -l)
echo "Summary: ${#accepted[@]} manifests accepted (${repairs} repaired by admission), ${#refused[@]} refused with the rule and fix;"
echo "         ${running} vLLM pods running on fake GPU nodes, ${pending} pending;"
echo "         ${ready} GLMDeployments serve after passing their canaries; the unknown failure stays out."
echo "Operator log: $state/logs/operator.log   metrics: http://127.0.0.1:18081/metrics   KUBECONFIG=$KUBECONFIG"
echo "Stop everything with: make down"
echo
check
