"""The agent version: jobs record the version they were built for and every site runs exactly that version."""

AGENT_VERSION = "0.1.0"
AGENT_VERSION_KEY = "site_agent_version"  # the job meta field that records it
