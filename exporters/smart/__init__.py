"""Drive health from smartmontools' smartctl --json: parser, runner, exporter."""

# The privileged helper's socket (wattbit-smartctl.socket, packaging/systemd): here so that
# the agent's config reads it without importing the runner (issue 35).
HELPER_SOCKET = "/run/wattbit/smartctl.sock"
