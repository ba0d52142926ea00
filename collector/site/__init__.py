"""`wattbit collector`: the site collector (PDU and BMC pollers, run registry) and its
configuration."""
