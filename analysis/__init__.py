"""satbed analysis: tcptrace metrics, time-sequence graphs and HTML reports for a run directory."""

import os

# Debian's numpy runs on OpenBLAS, which starts a thread per core and keeps it
# spinning for work after every BLAS call (matplotlib's transforms make such
# calls): drawing a 2 MB run's graphs took 9.1 CPU-s with it, 5.4 without
# (docs/benchmarks/matrix.md). Nothing here multiplies matrices large enough to
# gain from threads. OpenBLAS reads the variable once, when numpy loads it; the
# entry points (satbed.cli, satbed.worker) load this package before numpy
# (tests/test_layers.py). A value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
