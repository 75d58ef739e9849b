#!/usr/bin/env bash
# Prepare a KUBEBUILDER_ASSETS directory (envtest's convention: one directory holding etcd,
# kube-apiserver, kubectl, ...) for the real-control-plane test tier (tests/realcp/).
#
#   tests/realcp/prepare-assets.sh [SOURCE] [DEST]
#
# SOURCE: a directory with kube-apiserver.xz, kube-controller-manager.xz, kube-scheduler.xz,
#   kubectl.xz and SHA256SUMS (default: $KONTINUE_ENVTEST_SOURCE, else ../shared/envtest next
#   to this repository or to its main git worktree). DEST: where to unpack (default: $KUBEBUILDER_ASSETS, else
#   ${XDG_CACHE_HOME:-~/.cache}/kontinue/envtest/v1.36.2) — outside the repository: binaries
#   are never committed. etcd is taken from PATH (Debian: apt-get install -y etcd-server).
# Prints DEST on the last line; exits non-zero, saying why, when something is missing.
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
default_source="$repo/../shared/envtest"
if [[ ! -d "$default_source" ]] && common="$(git -C "$repo" rev-parse --git-common-dir 2>/dev/null)"; then
    # A git worktree: shared/ sits next to the main checkout, not next to this one.
    default_source="$(cd "$repo" && cd "$(dirname "$common")" && pwd)/../shared/envtest"
fi
source_dir="${1:-${KONTINUE_ENVTEST_SOURCE:-$default_source}}"
dest="${2:-${KUBEBUILDER_ASSETS:-${XDG_CACHE_HOME:-$HOME/.cache}/kontinue/envtest/v1.36.2}}"
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

if [[ ! -f "$source_dir/SHA256SUMS" ]]; then
    echo "prepare-assets: no $source_dir/SHA256SUMS (set KONTINUE_ENVTEST_SOURCE)" >&2
    exit 1
fi
if ! command -v xz >/dev/null; then
    echo "prepare-assets: xz is needed to unpack (apt-get install -y xz-utils)" >&2
    exit 1
fi
mkdir -p "$dest"
for name in "${binaries[@]}"; do
    want="$(awk -v n="$name" '$2 == n {print $1}' "$source_dir/SHA256SUMS")"
    if [[ -z "$want" ]]; then
        echo "prepare-assets: $name is not listed in $source_dir/SHA256SUMS" >&2
        exit 1
    fi
    if [[ -x "$dest/$name" ]] && [[ "$(sha256sum "$dest/$name" | cut -d' ' -f1)" == "$want" ]]; then
        continue
    fi
    # Unpack beside the target and rename: a concurrent run never sees half a binary.
    partial="$(mktemp "$dest/.$name.XXXXXX")"
    xz -dc "$source_dir/$name.xz" >"$partial"
    got="$(sha256sum "$partial" | cut -d' ' -f1)"
    if [[ "$got" != "$want" ]]; then
        rm -f "$partial"
        echo "prepare-assets: $name: checksum $got, SHA256SUMS says $want" >&2
        exit 1
    fi
    chmod 755 "$partial"
    mv -f "$partial" "$dest/$name"
done
if etcd_path="$(command -v etcd)"; then
    ln -sf "$etcd_path" "$dest/etcd"
elif [[ ! -x "$dest/etcd" ]]; then
    echo "prepare-assets: no etcd on PATH (Debian: apt-get install -y etcd-server)" >&2
    exit 1
fi
echo "$dest"
