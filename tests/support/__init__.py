"""Test support: real parts (with the demo's loop disks, ports and waits), SNMP agents, net-snmp
text, FUSE delay."""
