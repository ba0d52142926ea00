"""`wattbit demo`: placeholder replaced below."""
