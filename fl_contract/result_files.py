"""The files a job's server workflow leaves for the admin to download (server_app.results writes them)."""

RESULTS_FILE = "results.json"
GLOBAL_MODEL_FILE = "global_model.pt"
BEST_MODEL_FILE = "best_global_model.pt"
