"""What sites and the server agree on: wire formats, task protocols, layer naming, label maps, class lists, metric
keys, the model registry and the local-config loader, and the job launcher both sides' kits use (`job_launcher`). It
imports neither side (`site_agent`, `server_app`)."""
