"""The results store and the run directory's records."""
