#!/usr/bin/env bash
# Compile the core blockio program once, at install: Debian's clang, libbpf's headers
# (libbpf-dev), and the committed CO-RE type declarations; no kernel headers. The object runs
# on any kernel with BTF (libbpf relocates it at load), so the agent needs neither LLVM nor
# headers at run time. Idempotent: rebuilds only when a source is newer than the object.
set -euo pipefail
cd "$(dirname "$0")/../exporters/blockio/core"
out=blockio.bpf.o
if [ -f "$out" ] && [ "$out" -nt blockio.bpf.c ] && [ "$out" -nt blockio_types.h ] \
   && [ "$out" -nt ../wattbit_buckets.h ] && [ "$out" -nt ../stat_val.h ]; then
  exit 0
fi
arch=$(uname -m)
case "$arch" in
  x86_64) target=x86 ;;
  aarch64) target=arm64 ;;
  *) target=$arch ;;
esac
clang -O2 -g -target bpf -D"__TARGET_ARCH_$target" -I. -I.. -Wall -Werror \
  -c blockio.bpf.c -o "$out.tmp"
mv "$out.tmp" "$out"
echo "build-bpf: built exporters/blockio/core/$out"
