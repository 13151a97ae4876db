"""Job meta fields that the server writes and sites read."""

RESUMED_FROM_KEY = "resumed_from"
"""In a job the server cloned after a restart (server_app.recovery): the id of the job's first run. Sites keep a
job's state under that id, so a resumed job finds what its earlier run left at the site."""

RESUMABLE_KEY = "resumable"
"""True in jobs whose workflow checkpoints every round, so the server may resume them after a restart; a one-shot
secure aggregation (FedKT-CSD) cannot resume: its keys and masks died with the run."""
