"""The command line: the Typer app (posenc.cli.app), its argument checks before any work and the Hydra entry
(imports torch lazily, per command)."""
