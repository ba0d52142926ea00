"""`python -m collector.demo`: what `make demo` runs."""

import sys

from collector.demo.main import entry

sys.exit(entry(sys.argv[1:]))
