"""wattbit: the CLI, the one config loader, and the processes and jobs (agent, site collector,
runs, report, demo, pdu tools) with the HTTP endpoint they share."""
