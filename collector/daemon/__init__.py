"""What the two daemons (`wattbit agent`, `wattbit collector`) share: their common
configuration and how they are served."""
