"""Rack PDU telemetry over SNMP: vendor profiles as data, a pysnmp poller, the metrics."""
