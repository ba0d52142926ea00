"""wattbit: the CLI, configuration, HTTP endpoint and processes (agent, collector)."""
