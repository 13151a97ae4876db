"""Research drivers run from a source checkout by tests and bench/, never installed at a site: PLayer-FL's job run
in one process (playerfl_inprocess.py) and its comparison helpers (playerfl_compare.py), and FedKT-CSD's
references on the demo's sites (fedkt_references.py: FedAvg and pooled real images, which need every site's images
in one process, as no federation has them). Not part of the wheel (pyproject.toml's packages leave it out); the
tests import it through pytest's `pythonpath`, bench scripts with the repository root on sys.path."""
