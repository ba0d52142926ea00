"""Drive health from smartmontools' smartctl --json: parser, runner, exporter."""
