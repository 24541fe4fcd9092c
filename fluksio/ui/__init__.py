"""The run explorer: runs, metric curves, comparisons and machines in a browser (`fluksio ui`, and under
``/fluksio/`` of `fluksio flower`). Needs Tornado (``pip install 'fluksio[ui]'``; Flower brings it too).

A front door like the client and the command line: it may import them and everything below; nothing but the
command line imports it.
"""

from fluksio.ui.context import Explorer

__all__ = ["Explorer"]
