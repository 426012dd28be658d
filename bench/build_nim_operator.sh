#!/usr/bin/env bash
# Build NVIDIA's NIM operator (github.com/NVIDIA/k8s-nim-operator) for bench/scale_bench.py's
# peer side, from a snapshot of its public repository. Outside CI, by hand:
#
#     bench/build_nim_operator.sh SNAPSHOT
#
# SNAPSHOT is either a bare git directory (what the session tool `fetch
# github:NVIDIA/k8s-nim-operator` returns: /work/.mirror/NVIDIA+k8s-nim-operator/repo) or an
# unpacked source tree. The Go module proxy refuses the module itself (so no `go install
# ...@version`), but the repository vendors every dependency (vendor/), so the build needs no
# network at all; with the vendor directory absent, it falls back to the module proxy
# (GOFLAGS=-mod=mod).
#
# Result, keyed by the snapshot's commit like the cluster's other cached binaries:
#
#     ~/.cache/tritonllm/bin/nim-operator-<commit12>/
#         manager        the operator (cmd/main.go), one static Go binary
#         crds/          its CRDs (config/crd/bases/*.yaml), which the bench installs
#         manifests/     the templates it renders children from (manifests/*.yaml)
#         SOURCE         the commit and how it was built
#
# One change to the source, made in the temporary build tree only: the operator reads its
# templates from the absolute path "/manifests" (where its container image puts them; three
# string literals: cmd/main.go and the standalone and KServe platforms). The bench runs it on the
# host, so the build points those literals at the cached manifests/ above instead of writing
# /manifests on the host. Nothing else is changed; the webhooks stay off unless ENABLE_WEBHOOKS
# is set, and leader election unless --leader-elect is passed (its own defaults).
set -euo pipefail

src=${1:?usage: bench/build_nim_operator.sh SNAPSHOT (bare git dir or source tree)}
cache=${TRITONLLM_CACHE:-$HOME/.cache/tritonllm}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -d "$src/objects" ] && [ -f "$src/HEAD" ]; then  # a bare git directory
    commit=$(git --git-dir="$src" rev-parse HEAD)
    git --git-dir="$src" archive HEAD | tar -x -C "$work"
else
    commit=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)
    cp -a "$src/." "$work/"
fi
out="$cache/bin/nim-operator-${commit:0:12}"
if [ -x "$out/manager" ]; then
    echo "already built: $out/manager"
    exit 0
fi

cd "$work"
if [ -d vendor ]; then
    modflag=-mod=vendor
else
    modflag=-mod=mod  # dependencies from the module proxy
fi
# the version its Makefile stamps into the vendored NVIDIA DRA driver package
dra=$(sed -n 's/^NVIDIA_DRA_DRIVER_GPU_VERSION ?= //p' versions.mk)

stage="$cache/bin/.nim-operator-${commit:0:12}.tmp"
rm -rf "$stage"
mkdir -p "$stage"
cp -a manifests "$stage/manifests"
mkdir "$stage/crds"
cp config/crd/bases/*.yaml "$stage/crds/"
sed -i "s#\"/manifests\"#\"$out/manifests\"#" cmd/main.go \
    internal/controller/platform/standalone/standalone.go \
    internal/controller/platform/kserve/nimservice.go
if grep -rn --include='*.go' '"/manifests"' cmd internal | grep -v _test.go; then
    echo "the manifests path is named somewhere else too; update this script" >&2
    exit 1
fi

echo "building the NIM operator ${commit:0:12} ($modflag, $(go version | cut -d' ' -f3))"
start=$SECONDS
GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0 go build "$modflag" -buildvcs=false -trimpath \
    -ldflags "-X sigs.k8s.io/dra-driver-nvidia-gpu/internal/info.version=$dra" \
    -o "$stage/manager" ./cmd
printf 'commit %s\nbuilt %s with %s %s in %ss\nmanifests path patched to %s\n' \
    "$commit" "$(date -u +%FT%TZ)" "$(go version | cut -d' ' -f3)" "$modflag" \
    "$((SECONDS - start))" "$out/manifests" >"$stage/SOURCE"
rm -rf "$out"
mv "$stage" "$out"
echo "built $out/manager in $((SECONDS - start)) s"
