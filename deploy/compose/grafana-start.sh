#!/bin/sh
# Grafana's start in docker-compose.yml: with its admin password, or not at all.
#
# The image's own start (/run.sh) turns GF_*__FILE variables into values with
#   export "$VAR_NAME"="$(cat "${FILE}")"
# and the status of `export` hides cat's: a password file Grafana (uid 472) cannot read gives
# an empty password, and Grafana starts with its default admin/admin
# (https://github.com/grafana/grafana/blob/main/packaging/docker/run.sh). Here an unreadable
# or empty file stops the start instead. deploy/compose/init-secrets.sh makes the file 0600,
# owned by uid 472; docs/deploy.md, "Secrets".
set -eu
file=${GRAFANA_ADMIN_PASSWORD_FILE:-/run/secrets/grafana_admin_password}
if ! password=$(cat -- "$file" 2>/dev/null) || [ -z "$password" ]; then
    echo "grafana: cannot read an admin password from $file as uid $(id -u); not starting" \
         "with the default one (the file must be owned by uid 472 or readable by it and not" \
         "empty: deploy/compose/init-secrets.sh)" >&2
    exit 1
fi
GF_SECURITY_ADMIN_PASSWORD=$password
export GF_SECURITY_ADMIN_PASSWORD
unset password
exec "${GRAFANA_RUN:-/run.sh}" "$@"
