"""Admission and privacy at the site: what runs (`site_guard`, `job_contents`: no job-shipped code, the privacy
officer's policy), the policy itself (`policy`), what a job may spend (`accounting`) and the records the privacy
officer reads (`ledger`, `audit`, both `journal` files)."""
