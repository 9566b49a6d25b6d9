"""satbed analysis: tcptrace metrics, time-sequence graphs and HTML reports for a run directory."""
