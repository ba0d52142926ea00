"""`wattbit agent`: the host agent (blockio, nic, smart, power, pcie and the opt-in cpu exporter)
and its configuration."""
