"""PLayer-FL (Elhussein & Gürsoy): layer sensitivity, prefix/suffix partition, training and the site's local state.

Plain functions on torch modules, unit-tested without FLARE; `site_agent.tasks.playerfl` is the FLARE glue.
"""
