"""Each daemon's port when `listen` (or --listen) names none: no pydantic, for the CLI's help
and the `wattbit run` client (issue #35); everything else takes them from here."""

AGENT_PORT = 9731
COLLECTOR_PORT = 9732
