"""Test support: real parts, SNMP agents, FUSE delay, waits and ports."""
