#!/usr/bin/env bash
# Writes the control files into ROOT and builds the package with dpkg-deb:
#   scripts/deb.sh ROOT GIT_VERSION OUTDIR
# GIT_VERSION is `git describe` (v1.2.3-4-gabc, or a bare commit when the
# repository has no tag, or empty without git); it becomes a Debian
# version: 1.2.3+4.gabc, 0~git.abc, 0~unknown. No maintainer scripts: the
# package starts and enables nothing.
set -euo pipefail
root=$1 gitver=$2 out=$3

debver() {
	local v=${1#v}
	case $v in
	"") echo 0~unknown ;;
	[0-9]*) echo "$v" | sed 's/-/+/; s/-/./g' ;;
	*) echo "0~git.$v" | sed 's/-/./g' ;;
	esac
}
version=$(debver "$gitver")
arch=$(dpkg --print-architecture)
mkdir -p "$root/DEBIAN" "$out"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: xlb
Version: $version
Architecture: $arch
Maintainer: xlb developers <xlb@localhost>
Installed-Size: $size
Section: net
Priority: optional
Description: Maglev-style L4 load balancer with an XDP forwarder
 xlbd loads and attaches the XDP forwarder, health-checks backends,
 announces VIPs over BGP and serves a gRPC API and Prometheus metrics;
 xlbctl operates it; xlb-decap strips the encapsulation on backends.
 Needs Linux 5.18 or later (xlbd --check-kernel).
CONTROL
(cd "$root" && find etc -type f | sed 's|^|/|') >"$root/DEBIAN/conffiles"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
deb="$out/xlb_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
