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
#   are never committed. etcd is taken from PATH (Debian: apt-get install -y etcd-server) when it
#   is new enough for kube-apiserver's consistent reads from its watch cache, else from the next
#   Debian release's etcd-server package (below).
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

# etcd. kube-apiserver serves a consistent LIST (no resourceVersion) from its watch cache only
# when every etcd endpoint answers watch progress requests correctly: 3.4.31+ or 3.5.13+
# (kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/storage/feature/
# feature_support_checker.go); with an older one it reads etcd and decodes every object under
# the prefix, whatever the selector (docs/benchmarks.md, "the live read"). Real clusters run
# newer: kubeadm refuses an external etcd older than 3.5.24 (cmd/kubeadm/app/constants/
# constants.go MinExternalEtcdVersion). Debian bookworm's etcd-server is 3.4.23, so when the
# etcd on PATH is too old, the etcd-server package of the next Debian release
# ($KONTINUE_ETCD_DEBIAN_SUITE, default trixie: 3.5.16) is downloaded by name through apt from
# the Debian archive this machine already uses, and unpacked into DEST; nothing is installed.
etcd_version() { "$1" --version 2>/dev/null | awk '/^etcd Version:/ {print $3; exit}'; }

etcd_serves_progress() {
    local v major minor patch
    v="$(etcd_version "$1")"
    [[ "$v" =~ ^([0-9]+)\.([0-9]+)\.([0-9]+) ]] || return 1
    major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}" patch="${BASH_REMATCH[3]}"
    ((major > 3 || (major == 3 && (minor >= 6 || (minor == 5 && patch >= 13) || (minor == 4 && patch >= 31)))))
}

debian_archive() {
    # The Debian archive this machine's apt already uses (its URI is never written here).
    {
        # shellcheck disable=SC2016 # apt's own $(FIELD) template, not the shell's
        apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 2>/dev/null |
            awk '$2 !~ /security|updates|backports/ {print $1}'
        sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | tr ' ' '\n'
        awk '$1 == "deb" && $2 ~ /^[a-z]+:/ {print $2}' /etc/apt/sources.list 2>/dev/null
    } | grep -v -e security -e '^$' | head -n 1
}

fetch_etcd() {
    local suite="${KONTINUE_ETCD_DEBIAN_SUITE:-trixie}" archive work status=1
    command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || return 1
    archive="$(debian_archive)"
    [[ -n "$archive" ]] || return 1
    work="$(mktemp -d)"
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
    printf 'deb %s %s main\n' "$archive" "$suite" >"$work/sources.list"
    # A private sources list, index and cache: the machine's own apt state is not touched.
    local apt=(-qq -o "Dir::Etc::sourcelist=$work/sources.list" -o Dir::Etc::sourceparts=-
        -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o Debug::NoLocking=1
        -o APT::Sandbox::User=root)
    if apt-get "${apt[@]}" update >&2 && (cd "$work" && apt-get "${apt[@]}" download etcd-server >&2) &&
        dpkg-deb -x "$work"/etcd-server_*.deb "$work/unpacked" &&
        etcd_serves_progress "$work/unpacked/usr/bin/etcd"; then
        partial="$(mktemp "$dest/.etcd.XXXXXX")"
        cp "$work/unpacked/usr/bin/etcd" "$partial"
        chmod 755 "$partial"
        mv -f "$partial" "$dest/etcd"
        status=0
    fi
    rm -rf "$work"
    return "$status"
}

etcd_path="$(command -v etcd || true)"
if [[ -x "$dest/etcd" ]] && etcd_serves_progress "$dest/etcd"; then
    : # prepared before
elif [[ -n "$etcd_path" ]] && etcd_serves_progress "$etcd_path"; then
    ln -sf "$etcd_path" "$dest/etcd"
elif fetch_etcd; then
    echo "prepare-assets: etcd $(etcd_version "$dest/etcd") from Debian's etcd-server" >&2
elif [[ -n "$etcd_path" ]]; then
    ln -sf "$etcd_path" "$dest/etcd"
    echo "prepare-assets: WARNING: etcd $(etcd_version "$etcd_path") is older than 3.5.13;" \
        "kube-apiserver will read every consistent LIST from etcd" >&2
elif [[ ! -x "$dest/etcd" ]]; then
    echo "prepare-assets: no etcd on PATH (Debian: apt-get install -y etcd-server)" >&2
    exit 1
fi
echo "$dest"
