"""The names of the server's aggregation rules, which jobs choose by name (server_app.aggregation implements them)."""

AGGREGATION_RULES = ("median", "trimmed_mean", "weighted_mean")
