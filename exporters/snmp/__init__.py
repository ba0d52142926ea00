"""The SNMP client: v2c over our own socket and BER codec, v3 through pysnmp, walks, OIDs."""
