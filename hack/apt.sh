#!/usr/bin/env bash
# Sourced by the scripts that install system packages: glmops_apt_install PKG... installs the given packages
# with apt-get (as root, or with sudo), or says which are missing where there is no apt-get. Nothing to do
# when called with none. Progress goes to stderr, so callers may print results on stdout.
glmops_apt_install() {
  (($#)) || return 0
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "missing system packages: $*; install them with your package manager" >&2
    return 1
  fi
  local sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "installing system packages: $*" >&2
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >&2
}
