#!/usr/bin/env bash
# The EL9 RPM from this tree with rpmbuild (Debian's `rpm` package here; EL9's on EL9).
# Usage: build-rpm.sh VERSION WHEELHOUSE   (from the repository root)
set -euo pipefail
VERSION=$1
WHEELHOUSE=$(realpath "$2")
TOP=$(realpath -m build/rpm)
rm -rf "$TOP"
mkdir -p "$TOP"/{BUILD,RPMS,SOURCES,SPECS,SRPMS,BUILDROOT}
rpmbuild -bb --quiet --define "_topdir $TOP" --define "wb_version $VERSION" \
  --define "wb_tree $PWD" --define "wb_wheelhouse $WHEELHOUSE" --define "dist .el9" \
  --define "_build_id_links none" --define "_binary_payload w6.gzdio" packaging/rpm/wattbit.spec
cp "$TOP"/RPMS/x86_64/wattbit-"$VERSION"-1.el9.x86_64.rpm dist/
echo "package: dist/wattbit-$VERSION-1.el9.x86_64.rpm"
