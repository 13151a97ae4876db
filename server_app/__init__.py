"""Server-side controllers and aggregation. Sees only what sites chose to send; never reads patient data."""
