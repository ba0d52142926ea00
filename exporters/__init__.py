"""Metric sources, one sub-package each (blockio, nic, pcie, power, cpu, smart, pdu, bmc), and
the rooms they share: ``base`` (the contract), ``hostfs`` (reading /sys and /proc), ``snmp``
(the SNMP client), ``polling`` (the site pollers' schedule), ``strict`` (YAML models). Never
imports ``collector``; no exporter imports another (tests/unit/test_layout.py)."""
