"""What the site reads: each data kind's contract (`brats_case`, `isic`: the records a job reads, `split`: the seeded
split, `pipeline`: MONAI transforms), what `site-agent check` learns of a folder (`inspection`), DICOM SEG output
(`dicom_seg`), the format readers (`readers/`) and the demo-data generators (`demo/`)."""
