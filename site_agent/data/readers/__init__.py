"""The format readers: one path (a DICOM series folder, a NIfTI file) to a validated `Image` (`reader`), DICOM's
series, headers and frames, NIfTI, and the registry every case reader tries in order (`volume_readers`)."""
