"""Demo-data generators (`site-agent demo-data`, `demo_cli`): the reference linear sites, synthetic glioma cases as
NIfTI or DICOM, synthetic ISIC folders; deterministic by seed, never patient data."""
