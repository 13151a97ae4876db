"""PLayer-FL (Elhussein & Gürsoy) at a site: layer sensitivity, training, the site's local state, and each method's
site behaviour (`methods/`).

Plain functions on torch modules, unit-tested without FLARE; `site_agent.tasks.playerfl` is the FLARE glue.
"""
