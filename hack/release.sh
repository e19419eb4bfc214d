#!/usr/bin/env bash
# make release: every artifact of one glmops version, built from this tree, into one directory with its checksums
# and changelog entry (docs/releasing.md says how to publish them and under which tags).
#
#   glmops-<v>.tgz                            the Helm chart (helm package), version and appVersion <v>
#   glmops-operator-<v>.tar                   the operator image <image.repository>:<v> (docker archive: podman load,
#                                             docker load, skopeo copy docker-archive:...)
#   glm_operator-<v>-py3-none-any.whl         the operator package and glmctl
#   glmops_vllm_patches-<v>-py3-none-any.whl  the vLLM plugin: the build context of the patched vLLM images
#   docker-bake.json                          the patched vLLM images and the operator, tagged as the catalog names them
#   crds.yaml                                 every CRD of crds/ (glmops' and kopf's peering), for `kubectl apply
#                                             --server-side -f` before a chart upgrade
#   CHANGELOG.md                              this version's entry of the repository's CHANGELOG.md
#   release.json, SHA256SUMS                  what was built from which commit; sha256sum -c SHA256SUMS checks it all
#
# The version is pyproject.toml's; the chart, the plugin and glm_operator.__version__ must carry the same one
# (tests/unit/test_release.py keeps them equal). A version without a CHANGELOG.md entry gets a draft entry written
# from the commits since the last release tag, and the release stops until it is reviewed and committed.
# Environment: GLMOPS_RELEASE_DIR (default dist/release/<v>), GLMOPS_RELEASE_ALLOW_DIRTY=1 to build from a tree
# with uncommitted changes (release.json records it; never publish such a build), GLMOPS_CHANGELOG (default
# CHANGELOG.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=cluster/lib.sh
source cluster/lib.sh
py=.venv/bin/python
die() { echo "release: $*" >&2; exit 1; }

# Every step packages files git would track, untracked ones included (the image's context, setuptools' package
# search, helm package), so an untracked file counts as a change: a release holds exactly its commit.
commit=$(git rev-parse HEAD)
dirty=false
changes=$(git status --porcelain)
if [[ -n "$changes" ]]; then
  [[ "${GLMOPS_RELEASE_ALLOW_DIRTY:-}" == 1 ]] || die "the tree differs from commit $commit (uncommitted or untracked files: $(head -c 300 <<<"$changes" | tr '\n' ' ')); commit or remove them (a release is built from a commit), or set GLMOPS_RELEASE_ALLOW_DIRTY=1 for a build never to publish"
  dirty=true
fi

version=$("$py" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
"$py" - "$version" <<'PY' || die "versions disagree (see above): set them all to pyproject.toml's, then run again"
import sys, tomllib, yaml
from glm_operator import __version__
version = sys.argv[1]
chart = yaml.safe_load(open("charts/glmops/Chart.yaml"))
plugin = tomllib.load(open("images/vllm-patches/pyproject.toml", "rb"))["project"]["version"]
found = {"charts/glmops/Chart.yaml version": chart["version"], "charts/glmops/Chart.yaml appVersion": chart["appVersion"],
         "images/vllm-patches/pyproject.toml version": plugin, "glm_operator.__version__": __version__}
wrong = {where: v for where, v in found.items() if str(v) != version}
for where, v in wrong.items():
    print(f"{where}: {v}, but pyproject.toml says {version}", file=sys.stderr)
sys.exit(1 if wrong else 0)
PY


changelog="${GLMOPS_CHANGELOG:-CHANGELOG.md}"
entry=$(awk -v v="$version" '$0 ~ "^## " v "( |$)" {on=1; print; next} on && /^## / {exit} on {print}' "$changelog" 2>/dev/null || true)
if [[ -z "$entry" ]]; then
  last=$(git describe --tags --abbrev=0 --match 'v*' 2>/dev/null || true)
  draft=$(mktemp)
  { echo "## $version"; echo; git log --no-merges --format='- %s' ${last:+"$last..HEAD"}; echo; } > "$draft"
  if [[ -f "$changelog" ]]; then
    awk -v draft="$draft" 'NR == 1 && /^# / {print; print ""; while ((getline l < draft) > 0) print l; next} {print}' \
      "$changelog" > "$changelog.new" && mv "$changelog.new" "$changelog"
  else
    { echo "# Changelog"; echo; cat "$draft"; } > "$changelog"
  fi
  rm -f "$draft"
  die "$changelog has no entry for $version: a draft from the commits since ${last:-the first commit} is written at its top; edit it, commit it and run make release again"
fi

out="${GLMOPS_RELEASE_DIR:-dist/release/$version}"
rm -rf "$out"; mkdir -p "$out"
echo "$entry" > "$out/CHANGELOG.md"

"$(bin_dir)/helm" package charts/glmops --version "$version" --app-version "$version" --destination "$out" >/dev/null
# setuptools builds through build/lib and never removes what left the sources: start both builds from nothing.
rm -rf build images/vllm-patches/build
"$py" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$out" . images/vllm-patches >/dev/null 2>&1 ||
  "$py" -m pip wheel --quiet --no-deps --wheel-dir "$out" . images/vllm-patches
rm -rf build images/vllm-patches/build
images=$(hack/build-images.sh)
image=$(sed -n 's/^image=//p' <<<"$images")
cp "$(sed -n 's/^archive=//p' <<<"$images")" "$out/glmops-operator-$version.tar"
cp images/docker-bake.json "$out/docker-bake.json"
for crd in crds/*.yaml; do echo "---"; cat "$crd"; done > "$out/crds.yaml"

(cd "$out" && sha256sum -- *.tgz *.tar *.whl docker-bake.json crds.yaml CHANGELOG.md > SHA256SUMS)
"$py" - "$out" "$version" "$commit" "$dirty" "$image" <<'PY'
import json, pathlib, sys
out, version, commit, dirty, image = sys.argv[1:]
sums = dict(reversed(line.split(None, 1)) for line in (pathlib.Path(out) / "SHA256SUMS").read_text().splitlines())
bake = json.loads((pathlib.Path(out) / "docker-bake.json").read_text())
tags = sorted(t for target in bake["target"].values() for t in target.get("tags", []))
release = {"version": version, "commit": commit, "dirty": dirty == "true", "operatorImage": image,
           "imageTags": tags, "artifacts": {name.strip(): digest for name, digest in sums.items()}}
(pathlib.Path(out) / "release.json").write_text(json.dumps(release, indent=2) + "\n")
PY
note=""; [[ $dirty == true ]] && note=", with uncommitted changes: not for publishing"
echo "release $version ($commit$note) in $out:"
(cd "$out" && ls -1)
