#!/usr/bin/env bash
# Installs the system packages glmops' build, tests and demo need, when they are missing.
# Debian/Ubuntu (apt-get); as root or with sudo. Safe to run twice: present packages are skipped.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
need=()
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v make >/dev/null 2>&1 || need+=(make)
command -v git >/dev/null 2>&1 || need+=(git)
# promtool (Debian package prometheus): tests/unit/test_alerts.py checks and unit-tests the shipped alert rules.
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
glmops_apt_install ${need[@]+"${need[@]}"}
