"""The data summary's site side: what each case or image is counted as (`glioma.py`, `isic.py`), the release under
the site's policy (`release.py`), the privacy officer's export (`export.py`, `cli.py`)."""
