"""Charts, tables and study pages, redrawn from stored data."""
