"""Site side of 3D brain-tumour segmentation as plain functions (no FLARE): data, training, validation, DP.

`site_agent.tasks.segmentation` wraps these for FLARE; benchmarks and tests call them directly.
"""
