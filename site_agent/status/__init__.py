"""The site's status page for site IT and the privacy officer (`site-agent status --serve`): connection, the job
running now, what left the site per job, the privacy budget, the policy in plain words, the audit log and the data
rows of the last check, with the same numbers as Prometheus metrics (`/metrics`)."""
