"""Utilities every floor may use: errors, units, YAML loading, atomic files, subprocesses."""
