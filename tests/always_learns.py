"""``python tests/always_learns.py ARGS`` is ``posenc ARGS`` with every mastery check scoring 1.0, so that a
tiny run (a few steps) counts as learned at its first check (``train.check_every``) and is evaluated past its
training length like a real learned run. Used by conftest's ``posenc_cli(..., learns=True)``."""

import sys

import posenc.running.train

posenc.running.train.mastery_check = lambda *args, **kwargs: 1.0

if __name__ == "__main__":
    from posenc.cli.app import app

    sys.argv[0] = "posenc"
    app(prog_name="posenc")
