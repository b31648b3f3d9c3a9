"""What a run tells: metrics and reports, the manifest, replica checksums, start-up phases."""
