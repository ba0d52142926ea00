#!/usr/bin/env bash
# Compile the agent's BPF programs once, at install: Debian's clang, libbpf's headers
# (libbpf-dev), and the committed CO-RE type declarations; no kernel headers. The objects run
# on any kernel with BTF (libbpf relocates them at load), so the agent needs neither LLVM nor
# headers at run time. Idempotent: rebuilds only when a source is newer than its object.
# exporters/blockio/core/blockio.bpf.o: the block I/O tracer; exporters/tcp/core/
# flowlabel.bpf.o: the TCP sockets' IPv6 flow labels (an iter/tcp program); egresslabel.bpf.o:
# the labels outgoing IPv6 TCP packets leave with (tp_btf/net_dev_start_xmit).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
arch=$(uname -m)
case "$arch" in
  x86_64) target=x86 ;;
  aarch64) target=arm64 ;;
  *) target=$arch ;;
esac

# build DIR NAME DEPENDENCIES...: DIR/NAME.bpf.o from DIR/NAME.bpf.c when older than any
build() {
  local dir=$1 name=$2
  shift 2
  local out="$dir/$name.bpf.o" dep
  if [ -f "$out" ]; then
    local stale=0
    for dep in "$dir/$name.bpf.c" "$@"; do
      [ "$out" -nt "$dep" ] || stale=1
    done
    [ "$stale" = 0 ] && return 0
  fi
  (cd "$dir" && clang -O2 -g -target bpf -D"__TARGET_ARCH_$target" -I. -I.. -Wall -Werror \
    -c "$name.bpf.c" -o "$name.bpf.o.tmp" && mv "$name.bpf.o.tmp" "$name.bpf.o")
  echo "build-bpf: built ${out#"$root"/}"
}

core="$root/exporters/blockio/core"
build "$core" blockio "$core/blockio_types.h" "$core/../wattbit_buckets.h" "$core/../stat_val.h"
tcp="$root/exporters/tcp/core"
build "$tcp" flowlabel "$tcp/tcp_types.h"
build "$tcp" egresslabel "$tcp/tcp_types.h"
