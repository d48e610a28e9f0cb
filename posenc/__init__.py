"""posenc: compare positional encodings for transformers on length extrapolation."""

__version__ = "0.1.0"
