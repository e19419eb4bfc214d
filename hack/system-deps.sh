#!/usr/bin/env bash
# Installs the system packages glmops' build, tests and demo need, when they are missing.
# Debian/Ubuntu (apt-get); as root or with sudo. Safe to run twice: present packages are skipped.
set -euo pipefail
need=()
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v make >/dev/null 2>&1 || need+=(make)
command -v git >/dev/null 2>&1 || need+=(git)
# promtool (Debian package prometheus): tests/unit/test_alerts.py checks and unit-tests the shipped alert rules.
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
((${#need[@]})) || exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing system packages: ${need[*]}; install them with your package manager" >&2
  exit 1
fi
sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
echo "installing system packages: ${need[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
