#!/usr/bin/env bash
# Install what wattbit's tests and demo need on a Debian 12 machine, as root. Idempotent:
# a second run installs nothing and only re-checks.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages. python3-bpfcc is bcc (never PyPI's unrelated "bcc"); prometheus brings
# promtool; bpftrace is the comparison point in bench/blockio_overhead; smartmontools is the
# smartctl the agent's smart exporter runs; clang and libbpf-dev compile the core blockio
# program once here (scripts/build-bpf.sh), libbpf1 loads it at run time. victoria-metrics
# (with vmagent and vmalert) is the long-term store the sites remote-write to
# (docs/longterm-store.md): the fleet and sharding tests start its binaries on free ports with
# their own data directories; the package's own service is not used by anything here.
# freeipmi-tools is the BMC poller's IPMI DCMI client (ipmi-raw, exporters/bmc/ipmi.py);
# ipmitool is the independent reader its tests compare with, openipmi's ipmi_sim the IPMI
# simulator without DCMI. prometheus-snmp-exporter is the comparison point in bench/pdu_poll/
# (its own service is not used). The package tier (docs/install.md): rpm (rpmbuild for the EL9
# RPM), lintian, mmdebstrap and zstd (the cached Debian 12 roots), ansible (Debian's, for
# community.general's chroot connection; ansible-core alone has none), cpio. tcpdump reads
# the IPv6 flow label on the wire against the tcp exporter's SciTags labels.
PKGS=(python3-bpfcc bpftrace prometheus fio python3-venv python3-dev iproute2 kmod openssl ethtool iperf3
      util-linux bpftool snmp chromium fonts-liberation prometheus-alertmanager fuse3 libfuse2
      prometheus-node-exporter docker-compose smartmontools clang libbpf-dev libbpf1 victoria-metrics
      freeipmi-tools ipmitool openipmi prometheus-snmp-exporter
      rpm lintian mmdebstrap zstd ansible cpio tcpdump)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# Kernel headers for bcc: the exact package on a stock kernel, otherwise the newest Debian
# headers linked in place (tracepoint programs only read the tracepoint's own format, so the
# nearest headers are enough).
kver=$(uname -r)
if [ ! -e "/lib/modules/$kver/build/include" ]; then
  if apt-cache show "linux-headers-$kver" >/dev/null 2>&1; then
    missing+=("linux-headers-$kver")
  else
    dpkg-query -W -f='${Status}' linux-headers-amd64 2>/dev/null | grep -q "install ok installed" \
      || missing+=(linux-headers-amd64)
  fi
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -e "/lib/modules/$kver/build/include" ]; then
  hdr=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1 || true)
  common=$(ls -d /usr/src/linux-headers-*-common 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$hdr" ]; then
    echo "bootstrap: no headers package for kernel $kver; linking $hdr"
    mkdir -p "/lib/modules/$kver"
    ln -sfn "$hdr" "/lib/modules/$kver/build"
    [ -n "$common" ] && ln -sfn "$common" "/lib/modules/$kver/source"
  else
    echo "bootstrap: WARNING no kernel headers found; the agent will fall back to /proc/diskstats" >&2
  fi
fi

# bcc attaches to tracepoints through tracefs; some minimal systems do not mount it.
if [ ! -d /sys/kernel/tracing/events ]; then
  mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true
fi
if [ ! -d /sys/kernel/debug/tracing ] && ! mountpoint -q /sys/kernel/debug; then
  mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || true
fi

bash scripts/build-bpf.sh

# The virtualenv sees system site-packages so that Debian's bcc is importable.
if [ ! -x .venv/bin/python ]; then
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
stamp=.venv/.wattbit-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi
echo "bootstrap: ready"
