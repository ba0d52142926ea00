"""Runs: the registry the site collector keeps, its HTTP API, and the `wattbit run` client."""

# The API's path and write-token header, shared by the server (api.py) and the client (cli.py):
# here, so that the client imports neither pydantic nor the server (issue #35).
API_PREFIX = "/api/v1/runs"
TOKEN_HEADER = "X-Wattbit-Token"  # for sites whose web config puts basic auth in Authorization
