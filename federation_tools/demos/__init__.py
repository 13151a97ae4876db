"""`fl-demo`'s jobs, one module per job kind that has a demo, each listing its DemoJob entries as `DEMOS`: how each
site makes its data, what the admin submits, what is printed at the end. A tool, not part of a kind's spec."""

MODULES = ("data_summary", "fedavg_linear", "segmentation", "evaluation", "playerfl", "fedkt_csd")
