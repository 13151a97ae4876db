"""What sites and the server agree on: wire formats, task protocols, layer naming, label maps, class lists, metric
keys, the model registry and the local-config loader. It imports neither side (`site_agent`, `server_app`); the
process machinery both sides' kits run (the warm job launcher) is `fl_runtime`, below it."""
