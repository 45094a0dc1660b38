#!/usr/bin/env bash
# Builds the real kube-apiserver and etcd that the Kubernetes tests run
# (internal/testenv/kubeenv), each from its own Go module under tools/kube,
# into a cache keyed by version, and does nothing when both are there:
#
#   $XLB_KUBE_CACHE/kube-apiserver/<version>/kube-apiserver
#   $XLB_KUBE_CACHE/etcd/<version>/etcd
#
# XLB_KUBE_CACHE defaults to /var/cache/xlb/kube. The versions are the ones
# tools/kube/apiserver/go.mod and tools/kube/etcd/go.mod require. The first
# build is paid once per machine: the API server takes about 13 minutes
# and 4 GB of module and build cache on two cores.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${XLB_KUBE_CACHE:-/var/cache/xlb/kube}
go=${GO:-go}

# required MODULE GOMOD: the version GOMOD requires of MODULE.
required() {
	local v
	v=$(awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$2")
	if [ -z "$v" ]; then
		echo "kube-bin: $2 requires no $1" >&2
		exit 1
	fi
	echo "$v"
}

# build NAME VERSION MODDIR PACKAGE LDFLAGS: builds PACKAGE in MODDIR into
# the cache unless it is there; the binary appears whole or not at all.
build() {
	local name=$1 version=$2 moddir=$3 pkg=$4 ldflags=$5
	local dir=$cache/$name/$version
	if [ -x "$dir/$name" ]; then
		return 0
	fi
	mkdir -p "$dir" || { echo "kube-bin: cannot create $dir (set XLB_KUBE_CACHE to a writable directory)" >&2; exit 1; }
	echo "kube-bin: building $name $version into $dir (the first time takes minutes)"
	local start=$SECONDS tmp
	tmp=$(mktemp "$dir/.$name.XXXXXX")
	trap 'rm -f "$tmp"' EXIT
	(cd "$moddir" && nice -n 10 "$go" build -mod=readonly -buildvcs=false -trimpath -ldflags "-s -w $ldflags" -o "$tmp" "$pkg")
	chmod 0755 "$tmp"
	mv "$tmp" "$dir/$name"
	trap - EXIT
	echo "kube-bin: $name $version built in $((SECONDS - start)) s"
}

# One build at a time per cache: work trees on one machine share it, and
# a second build would only double the wait.
mkdir -p "$cache" || { echo "kube-bin: cannot create $cache (set XLB_KUBE_CACHE to a writable directory)" >&2; exit 1; }
exec 9>"$cache/.lock"
flock 9

kube=$(required k8s.io/kubernetes "$root/tools/kube/apiserver/go.mod")
etcd=$(required go.etcd.io/etcd/server/v3 "$root/tools/kube/etcd/go.mod")
minor=${kube#v1.}
minor=${minor%%.*}
cv=k8s.io/component-base/version
build etcd "$etcd" "$root/tools/kube/etcd" . ""
build kube-apiserver "$kube" "$root/tools/kube/apiserver" k8s.io/kubernetes/cmd/kube-apiserver \
	"-X $cv.gitVersion=$kube -X $cv.gitMajor=1 -X $cv.gitMinor=$minor -X $cv.gitTreeState=clean"
