"""Whole-system tools on top of every other package: the `fl-job` command line (export, submit, simulate), the
`fl-demo` loopback demo, FLARE's simulator runner, the loopback-federation launcher and the PLayer-FL comparison.

Layers import downwards only: fl_contract <- site_agent | server_app <- jobs <- provisioning <- federation_tools
(tests/structure/test_layers.py checks it)."""
