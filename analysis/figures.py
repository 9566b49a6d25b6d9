"""Figures as PNG bytes, for every page that draws (run reports, the matrix
report, study pages).

matplotlib is loaded by the first figure, not when a drawing module is
imported: its import costs about 0.6 s of CPU, which every `satbed` command
and every matrix cell paid before, whether it drew or not. Drawing modules
call `pyplot()`; type hints name matplotlib's classes under TYPE_CHECKING."""

from __future__ import annotations

import base64
import functools
import io
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["pyplot", "png", "data_uri"]


@functools.cache
def pyplot() -> ModuleType:
    """matplotlib.pyplot on the headless backend (no display on the testbed
    hosts), chosen before pyplot loads. Its namespace also carries the
    classes drawing code needs (Line2D, FuncFormatter, matplotlib.path)."""
    import matplotlib  # deferred on purpose: see the module docstring
    matplotlib.use("Agg")
    import matplotlib.collections  # noqa: F401  (LineCollection, for tsg)
    import matplotlib.path  # noqa: F401
    import matplotlib.pyplot
    return matplotlib.pyplot


def png(fig: Figure) -> bytes:
    """A figure as PNG bytes, and the figure closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    pyplot().close(fig)
    return buf.getvalue()


def data_uri(data: bytes) -> str:
    """PNG bytes as a data: URI, so a page stands alone."""
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")
