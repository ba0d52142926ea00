"""BMC poller: servers' input power from their BMCs over Redfish or IPMI DCMI."""
