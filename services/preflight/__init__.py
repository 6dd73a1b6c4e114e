"""Pre-flight: every check a submission will face, without submitting it (`cardflow check`)."""
