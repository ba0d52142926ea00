"""`wattbit pdu`: commands for someone adding a PDU or writing a profile."""
