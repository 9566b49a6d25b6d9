"""satbed analysis: tcptrace metrics, time-sequence graphs and HTML reports for a run directory."""

import os

# Debian's numpy runs on OpenBLAS, which starts a thread per core and keeps it
# spinning for work after every BLAS call (matplotlib's transforms make such
# calls): drawing a 2 MB run's graphs took 8.7 CPU-s with it, 5.1 without
# (docs/benchmarks/matrix.md). Nothing here multiplies matrices large enough to
# gain from threads. OpenBLAS reads the variable once, when numpy loads it, and
# every numpy import of satbed's comes after this package's; a value the user
# set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
