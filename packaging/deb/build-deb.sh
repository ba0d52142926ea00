#!/usr/bin/env bash
# The Debian 12 package, with a plain dpkg-deb (no dh-virtualenv: docs/install.md says why):
# a virtualenv of Debian's /usr/bin/python3.11 under /opt/wattbit with wattbit and its
# dependencies from the wheels of packaging/build.sh (Debian 12's pydantic and aiohttp are too
# old), /usr/bin/wattbit, the units, the conffiles, the helpers and the maintainer scripts.
# Usage: build-deb.sh VERSION WHEELHOUSE   (from the repository root)
set -euo pipefail
VERSION=$1
WHEELHOUSE=$(realpath "$2")
REVISION=${DEB_REVISION:-1}
HERE=packaging
STAGE=$(realpath -m build/deb/root)
OPT=$STAGE/opt/wattbit
OUT=dist/wattbit_${VERSION}-${REVISION}_amd64.deb

rm -rf "$STAGE"
mkdir -p "$STAGE/DEBIAN"
# The venv is made where it is staged and moved into /opt by dpkg: its interpreter is a link
# to /usr/bin/python3 (the same 3.11 on the target, a Depends), and the paths of the staging
# directory left in its scripts are rewritten below.
/usr/bin/python3 -m venv "$OPT"
"$OPT/bin/python" -m pip install -q --no-compile --no-index --find-links "$WHEELHOUSE" \
  "wattbit==$VERSION"
rm -f "$OPT"/bin/activate* "$OPT"/bin/Activate.ps1
sed -i "s|$STAGE||g" "$OPT/pyvenv.cfg"  # its "command =" line names the staging path
find "$OPT" -name __pycache__ -prune -exec rm -rf {} +
find "$OPT" -name .DS_Store -delete  # shipped inside pysnmp's wheel
# console scripts of the dependencies: wattbit runs none of them
for f in "$OPT"/bin/*; do
  case ${f##*/} in wattbit | pip | pip3 | pip3.11 | python | python3 | python3.11) ;; *) rm -f "$f" ;; esac
done
# the extension modules as Debian strips them (dh_strip): the symbols no one links against
find "$OPT" -name '*.so*' -type f -exec strip --strip-unneeded --remove-section=.comment \
  --remove-section=.note {} +
for f in "$OPT"/bin/*; do
  [ -L "$f" ] && continue
  if head -c 2 "$f" | grep -q '#!'; then
    sed -i "1s|^#!.*python.*\$|#!/opt/wattbit/bin/python3|" "$f"
  fi
done
if grep -rlI --exclude='*.pyc' "$STAGE" "$OPT" >/dev/null; then
  echo "build-deb: the staging path is left in:" >&2
  grep -rlI "$STAGE" "$OPT" >&2
  exit 1
fi
# Compiled once here, with the paths as installed, so that the read-only /opt never needs
# writing and no start recompiles (issue #35). unchecked-hash: Python uses each .pyc without
# comparing the source's mtime, which a reproducible build (SOURCE_DATE_EPOCH clamps the
# archive's mtimes) or a copy could change; the package replaces sources and .pyc together and
# `dpkg --verify` shows an edit (https://peps.python.org/pep-0552/).
/usr/bin/python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash -s "$STAGE" -p / \
  "$OPT/lib" >/dev/null

install -d "$STAGE/usr/bin" "$STAGE/lib/systemd/system" "$STAGE/usr/lib/wattbit" \
  "$STAGE/etc/wattbit" "$STAGE/usr/share/doc/wattbit" "$STAGE/usr/share/lintian/overrides"
ln -s /opt/wattbit/bin/wattbit "$STAGE/usr/bin/wattbit"
install -m 0644 "$HERE"/systemd/* "$STAGE/lib/systemd/system/"
install -m 0755 "$HERE"/libexec/* "$STAGE/usr/lib/wattbit/"
install -m 0644 "$HERE"/etc/agent.yml "$HERE"/etc/collector.yml "$STAGE/etc/wattbit/"
install -m 0644 "$HERE/deb/copyright" "$STAGE/usr/share/doc/wattbit/copyright"
for doc in install configuration privileges; do  # privileges.md: the privilege work's page
  if [ -f "docs/$doc.md" ]; then install -m 0644 "docs/$doc.md" "$STAGE/usr/share/doc/wattbit/"; fi
done
sed "s/@VERSION@/$VERSION-$REVISION/; s/@DATE@/$(date -R -d @"${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}")/" \
  "$HERE/deb/changelog.in" | gzip -9n > "$STAGE/usr/share/doc/wattbit/changelog.Debian.gz"
install -m 0644 "$HERE/deb/lintian-overrides" "$STAGE/usr/share/lintian/overrides/wattbit"
for s in postinst prerm postrm; do install -m 0755 "$HERE/deb/$s" "$STAGE/DEBIAN/$s"; done
install -m 0644 "$HERE/deb/conffiles" "$STAGE/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
sed "s/@VERSION@/$VERSION-$REVISION/; s/@SIZE@/$size/" "$HERE/deb/control.in" > "$STAGE/DEBIAN/control"
(cd "$STAGE" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z \
  | xargs -0 md5sum > DEBIAN/md5sums)
chmod 0644 "$STAGE/DEBIAN/md5sums"
# gzip, not xz: a third of the build time on a loaded 2-core machine for a package ~15 % larger
dpkg-deb --root-owner-group -Zgzip -z9 --build "$STAGE" "$OUT" >/dev/null
echo "package: $OUT"
