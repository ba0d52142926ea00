"""Servers' input power from their BMCs over Redfish or IPMI DCMI: the clients and parsers of
both protocols, the poller and the exporter."""
