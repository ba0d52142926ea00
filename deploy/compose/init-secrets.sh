#!/usr/bin/env bash
# Create the secret files docker-compose.yml mounts (once per site). Existing files are kept.
#   deploy/compose/init-secrets.sh [DIR]      (default: deploy/compose/secrets)
# Then put the PDUs' real SNMP community in DIR/snmp_community. The files are mode 0600 and
# are listed in .gitignore/.dockerignore: they never enter the image or the repository.
set -euo pipefail
dir=${1:-${WATTBIT_SECRETS_DIR:-$(dirname "$0")/secrets}}
mkdir -p "$dir"
umask 077
new() { [ -s "$dir/$1" ] || { "${@:2}" > "$dir/$1"; echo "created $dir/$1"; }; }
new wattbit_run_token openssl rand -hex 32
new grafana_admin_password openssl rand -base64 24
new snmp_community echo public       # CHANGE to the PDUs' read community
chmod 600 "$dir"/wattbit_run_token "$dir"/grafana_admin_password "$dir"/snmp_community
# Compose bind-mounts a file secret as it is, owner and mode included (its uid/gid/mode keys
# are not implemented for file secrets: docker/compose#9648). The wattbit services run as
# root; Grafana runs as uid 472 and must own its one secret, and only that one. (With
# userns-remap or rootless Docker, set GRAFANA_UID to the host uid that 472 maps to.)
GRAFANA_UID=${GRAFANA_UID:-472}
if [ "$(stat -c %u "$dir/grafana_admin_password")" != "$GRAFANA_UID" ]; then
    if ! chown "$GRAFANA_UID:$GRAFANA_UID" "$dir/grafana_admin_password" 2>/dev/null; then
        echo "cannot chown $dir/grafana_admin_password to uid $GRAFANA_UID (Grafana's):" \
             "run this script as root (sudo), or Grafana will not start" >&2
        exit 1
    fi
fi
