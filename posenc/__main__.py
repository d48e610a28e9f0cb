"""``python -m posenc`` is the ``posenc`` command."""

from posenc.cli.app import app

app(prog_name="posenc")
