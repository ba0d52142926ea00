"""Rack PDU telemetry over SNMP: vendor profiles as data (profiles/*.yaml), profile detection,
the decoder, the poller over exporters/snmp's client, and the metrics."""
