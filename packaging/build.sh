#!/usr/bin/env bash
# `make package`: from this tree into dist/ — the wheel (with the prebuilt CO-RE object),
# the Debian 12 package and the EL9 RPM (docs/install.md). Needs the .venv of `make bootstrap`,
# clang (once, for the BPF object), dpkg-deb and rpmbuild; PyPI or pip's cache for the wheels
# of the dependencies. DEB_REVISION (default 1) sets the Debian revision, e.g. for an upgrade
# test; PACKAGES="wheel deb rpm" chooses what to build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PACKAGES=${PACKAGES:-wheel deb rpm}
VERSION=$($PY -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
WHEEL=dist/wattbit-$VERSION-py3-none-any.whl
WHEELHOUSE=build/wheelhouse

bash scripts/build-bpf.sh
mkdir -p dist
# a stale build/lib could carry modules deleted since: build from scratch. Of dist/, only
# what this run builds again is removed: PACKAGES="wheel deb" leaves an RPM built before.
rm -rf build/lib build/bdist.* ./*.egg-info dist/wattbit-*.whl
for p in $PACKAGES; do
  case $p in
    deb) rm -f dist/wattbit_*.deb ;;
    rpm) rm -f dist/wattbit-*.rpm ;;
  esac
done
$PY -m pip wheel -q --no-deps -w dist .
$PY - "$WHEEL" <<'PYEOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for need in ("exporters/blockio/core/blockio.bpf.o", "exporters/tcp/core/flowlabel.bpf.o",
             "exporters/tcp/core/egresslabel.bpf.o",
             "exporters/pdu/profiles/apc_rpdu2.yaml"):
    if need not in names:
        sys.exit(f"package: {sys.argv[1]} lacks {need}")
PYEOF
echo "package: $WHEEL"

# The dependencies as wheels only (no compiler anywhere), for CPython 3.11 on glibc >= 2.28:
# Debian 12 has 2.36, EL9 2.34 — a wheel for a newer glibc would install here and fail there.
rm -rf "$WHEELHOUSE"
$PY -m pip download -q -d "$WHEELHOUSE" --only-binary=:all: \
  --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any "$WHEEL"

for p in $PACKAGES; do
  case $p in
    wheel) ;;
    deb) bash packaging/deb/build-deb.sh "$VERSION" "$WHEELHOUSE" ;;
    rpm) bash packaging/rpm/build-rpm.sh "$VERSION" "$WHEELHOUSE" ;;
    *) echo "package: unknown $p" >&2; exit 2 ;;
  esac
done
