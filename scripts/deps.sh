#!/usr/bin/env bash
# Installs what building, testing and the demo need, idempotently:
# Debian packages (only the missing ones) and the Go modules.
set -euo pipefail

# protobuf-compiler + libprotobuf-dev (the well-known .proto files): make proto.
# systemd (systemd-analyze) and man-db: the package test (deploy/) verifies the units and man pages.
# chromium: the status page test (headless, driven with chromedp).
# etcd-server + etcd-client: the cluster config store of the tests and the lab.
pkgs=(clang llvm libbpf-dev bpftool iproute2 ethtool python3 bird2 tcpdump protobuf-compiler libprotobuf-dev systemd man-db chromium etcd-server etcd-client)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing packages ${missing[*]}; run as root or install them" >&2
		exit 1
	fi
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# bird2's and etcd-server's packages start system daemons we do not use
# (tests and the lab start their own); keep them out of the way.
for svc in bird etcd; do
	if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
		systemctl stop "$svc" || true
		systemctl disable "$svc" >/dev/null 2>&1 || true
	fi
done
go mod download
# Build the pinned protoc plugins (go.mod tools) once, so make proto is quick.
go tool -n protoc-gen-go >/dev/null
go tool -n protoc-gen-go-grpc >/dev/null
