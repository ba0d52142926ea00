"""`wattbit agent --check` and `wattbit collector --check`: what will work here, and what to fix."""
