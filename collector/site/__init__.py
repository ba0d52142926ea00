"""`wattbit collector`: the site collector (PDU poller, run registry) and its configuration."""
