"""`wattbit agent`: the host agent (blockio and nic exporters) and its configuration."""
