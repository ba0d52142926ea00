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
