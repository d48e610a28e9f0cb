"""posenc: compare positional encodings for transformers on length extrapolation."""

__version__ = "0.1.0"

from posenc.plugins import register_encoder, register_task  # noqa: E402 - your own encoders and tasks

__all__ = ["__version__", "register_encoder", "register_task"]
