"""Runs, cells, batches: admission and supervision."""
