"""Figures as PNG bytes, for every page that draws (run reports, the matrix
report, study pages). matplotlib's headless backend is selected here, before
pyplot loads, so drawing modules import plt from this module."""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")   # no display on the testbed hosts
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.figure import Figure  # noqa: E402

__all__ = ["plt", "png", "data_uri"]


def png(fig: Figure) -> bytes:
    """A figure as PNG bytes, and the figure closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def data_uri(data: bytes) -> str:
    """PNG bytes as a data: URI, so a page stands alone."""
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")
