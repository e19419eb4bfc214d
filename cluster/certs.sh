#!/usr/bin/env bash
# Generates the local cluster's CA, serving and client certificates and the service-account key,
# once per state directory: existing files are kept, missing ones made. Usage: cluster/certs.sh DIR [NODE]
# With NODE (the real node's name, see node.sh) it also makes that kubelet's and kube-proxy's client certificates.
set -euo pipefail
dir="$1"; node="${2:-}"; mkdir -p "$dir"; cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }

if [[ ! -f ca.crt ]]; then
  key ca
  openssl req -x509 -new -key ca.key -subj "/CN=glmops-local-ca" -days 3650 -out ca.crt \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
fi

# The CA of the API server's client certificate for admission webhooks, kept apart from the cluster CA: a webhook
# that trusts it trusts the API server's webhook calls, not every client certificate the cluster CA signs.
if [[ ! -f webhook-client-ca.crt ]]; then
  key webhook-client-ca
  openssl req -x509 -new -key webhook-client-ca.key -subj "/CN=glmops-local-webhook-client-ca" -days 3650 \
    -out webhook-client-ca.crt -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
fi

# [CA=NAME] sign NAME SUBJECT EXTKEYUSAGE [SAN]   (signed by ca.crt unless CA names another)
sign() {
  local name="$1" subj="$2" eku="$3" san="${4:-}" ca="${CA:-ca}"
  [[ -f "$name.crt" ]] && return 0
  key "$name"
  openssl req -new -key "$name.key" -subj "$subj" -out "$name.csr"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [[ -n "$san" ]] && echo "subjectAltName=$san"
  } > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -days 3650 \
    -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

sign apiserver "/CN=kube-apiserver" serverAuth \
  "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
sign admin "/O=system:masters/CN=glmops-admin" clientAuth
sign kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
sign kube-scheduler "/CN=system:kube-scheduler" clientAuth
# kwok plays every kubelet (node status, leases, pod status and deletion): it needs broad rights.
sign webhook "/CN=glmops-webhook" serverAuth "IP:127.0.0.1,DNS:localhost"
sign kwok "/O=system:masters/CN=kwok" clientAuth
# What the API server presents to admission webhooks (admission.yaml, written by up.sh).
CA=webhook-client-ca sign apiserver-webhook-client "/CN=kube-apiserver-webhook-client" clientAuth \
  "DNS:kube-apiserver-webhook-client"
if [[ -n "$node" ]]; then
  # The Node authorizer grants a kubelet its own node's objects by this exact user and group.
  sign "node-$node" "/O=system:nodes/CN=system:node:$node" clientAuth
  # The built-in ClusterRoleBinding system:node-proxier binds this user to what kube-proxy reads.
  sign kube-proxy "/CN=system:kube-proxy" clientAuth
  # The node's cluster DNS (CoreDNS): node.sh binds this user to the ClusterRole kubeadm gives CoreDNS.
  sign coredns "/CN=system:coredns" clientAuth
  # What the API server shows the kubelet for logs and exec; the kubelet asks the API server whether it may.
  sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
fi

if [[ ! -f sa.pub ]]; then
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
  openssl pkey -in sa.key -pubout -out sa.pub
fi
chmod 600 ./*.key
