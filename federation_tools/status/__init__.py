"""The study lead's page (`fl-job status --serve`, an admin kit): the federation's sites, every job and the
running ones' progress, with the same numbers as Prometheus metrics (`/metrics`)."""
