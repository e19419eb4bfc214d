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

stop_operator() {
  if [[ -f "$oppid" ]] && tr '\0' ' ' < "/proc/$(cat "$oppid")/cmdline" 2>/dev/null | grep -q "glm_operator.handlers"; then
    kill -TERM "$(cat "$oppid")" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$(cat "$oppid")" 2>/dev/null || break; sleep 0.2; done
    log "stopped the operator (pid $(cat "$oppid"))"
  fi
  rm -f "$oppid"
}

if [[ "${1:-}" == "down" ]]; then
  stop_operator
  "$root/cluster/down.sh"
  exit 0
fi

export KUBECONFIG
KUBECONFIG="$("$root/cluster/up.sh" | tail -n 1 | sed 's/^export KUBECONFIG=//')"
kc() { "$(bin_dir)/kubectl" "$@"; }

kc apply --server-side --force-conflicts -f "$root/crds" >/dev/null
kc wait --for=condition=Established crd/glmdeployments.glmops.dev --timeout=60s >/dev/null

stop_operator
log "starting the operator (log: $state/logs/operator.log)"
GLMOPS_WEBHOOK_ADDR=127.0.0.1 GLMOPS_WEBHOOK_HOST=127.0.0.1 GLMOPS_WEBHOOK_PORT=19443 \
GLMOPS_WEBHOOK_CERT="$state/certs/webhook.crt" GLMOPS_WEBHOOK_KEY="$state/certs/webhook.key" \
GLMOPS_WEBHOOK_CA="$state/certs/ca.crt" \
  setsid "$root/.venv/bin/kopf" run --standalone --all-namespaces -m glm_operator.handlers \
  --liveness=http://127.0.0.1:18080/healthz >"$state/logs/operator.log" 2>&1 < /dev/null &
echo $! > "$oppid"
wait_for "operator liveness" 60 curl -fsS http://127.0.0.1:18080/healthz
wait_for "operator admission webhooks" 60 kc get validatingwebhookconfiguration glmops.dev

kc create namespace "$ns" --dry-run=client -o yaml | kc apply -f - >/dev/null
echo
echo "== Applying samples to namespace $ns"
accepted=(); refused=()
for f in "$root"/samples/*.yaml; do
  name="$(basename "$f" .yaml)"
  if out="$(kc apply -n "$ns" -f "$f" 2>&1)"; then
    accepted+=("$name"); printf '  %-34s accepted  %s\n' "$name" "$(grep -m1 -o 'warning.*' <<<"$out" || true)"
  else
    refused+=("$name"); printf '  %-34s REFUSED   %s\n' "$name" "$(head -n 3 <<<"$out" | tr '\n' ' ')"
  fi
done

observed() {
  local want="${#accepted[@]}" got
  got=$(kc get glmd -n "$ns" -o jsonpath='{range .items[*]}{.status.parallelism}{"\n"}{end}' | grep -c . || true)
  (( got >= want ))
}
wait_for "operator to observe ${#accepted[@]} GLMDeployments" 90 observed

echo
echo "== Fake GPU fleet"
kc get nodes -L glmops.dev/accelerator,nvidia.com/gpu.product,amd.com/gpu.device-id --no-headers \
  | awk '{print $6}' | sort | uniq -c | awk '{printf "  %-14s %s nodes\n", ($2==""?"cpu":$2), $1}'
settled() {
  local want="${#accepted[@]}" got
  got=$(kc get glmd -n "$ns" -o jsonpath='{range .items[*]}{.status.plan.commandHash}{"\n"}{end}' | grep -c . || true)
  (( got >= want ))
}
wait_for "operator to deploy ${#accepted[@]} GLMDeployments" 90 settled
sleep 3  # let kwok start the scheduled pods

echo
echo "== GLMDeployments"
kc get glmd -n "$ns" -o wide
echo
echo "== What the operator runs (pods wait on their glmops.dev/canary readiness gate)"
kc get deploy,sts -n "$ns" -o custom-columns='KIND:.kind,NAME:.metadata.name,REPLICAS:.spec.replicas,IMAGE:.spec.template.spec.containers[0].image'
kc get pods -n "$ns" -o custom-columns='POD:.metadata.name,NODE:.spec.nodeName,PHASE:.status.phase,GATE:.status.conditions[?(@.type=="glmops.dev/canary")].status,READY:.status.conditions[?(@.type=="Ready")].status'
echo
repairs=$(kc get glmd -n "$ns" -o jsonpath='{range .items[*]}{.status.remediations[*].rule}{"\n"}{end}' | grep -c . || true)
running=$(kc get pods -n "$ns" --field-selector=status.phase=Running --no-headers 2>/dev/null | wc -l)
pending=$(kc get pods -n "$ns" --field-selector=status.phase=Pending --no-headers 2>/dev/null | wc -l)
echo "Summary: ${#accepted[@]} samples accepted (${repairs} repaired by admission), ${#refused[@]} refused with the rule and fix;"
echo "         ${running} vLLM pods running on fake GPU nodes, ${pending} pending (no free GPUs of their type);"
echo "         none is Ready: each waits on its glmops.dev/canary readiness gate."
echo "Operator log: $state/logs/operator.log   KUBECONFIG=$KUBECONFIG"
echo "Stop everything with: make down"
