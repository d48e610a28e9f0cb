"""``python -m posenc`` is the ``posenc`` command."""

from posenc.cli import app

app(prog_name="posenc")
