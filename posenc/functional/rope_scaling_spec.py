"""What an evaluation asks of RoPE context extension: a method of :data:`ROPE_SCALING`, its factor and its
options, validated as Hugging Face validates ``rope_scaling`` and resolved per evaluation length."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

from torch import Tensor

from posenc.functional.rope_scaling import ROPE_SCALING

__all__ = ["RopeScaling", "method_options", "ORIGINAL_LENGTH"]

#: The option every method takes beside its own: the original context ``L`` the frequencies were trained for
#: (Hugging Face's ``original_max_position_embeddings``); by default the run's training length.
ORIGINAL_LENGTH = "original_max_position_embeddings"

OptionValue = float | int | bool


def method_options(method: str) -> dict[str, OptionValue | None]:
    """The options ``method`` takes, with their defaults (``None``: the training length): its function's
    keyword-only parameters and :data:`ORIGINAL_LENGTH`."""
    params = inspect.signature(ROPE_SCALING[method]).parameters.values()
    options: dict[str, OptionValue | None] = {
        p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    if method != "none":  # "none" reads no L
        options[ORIGINAL_LENGTH] = None
    return options


@dataclass(frozen=True)
class RopeScaling:
    """A RoPE extension method, its factor and options, resolved per evaluation length.

    Args:
        method: a key of :data:`ROPE_SCALING`.
        factor: the extension factor ``s``; ``None`` follows the evaluation length, ``max(1, L'/L)``.
            ``dynamic_ntk`` already follows the length by itself, so for it ``None`` means ``factor = 1``
            (its base is then ``base * (L'/L)**(d/(d-2))`` past ``L``: Hugging Face's formula, not
            ``(L'/L)**2 - L'/L + 1`` that feeding it ``L'/L`` would give). See :meth:`factor_for`.
        options: ``(name, value)`` pairs of the method's options (:func:`method_options`), e.g.
            ``(("beta_fast", 16.0),)`` for YaRN; validated like Hugging Face's ``rope_scaling`` config
            (unknown names, wrong types and out-of-range values raise ``ValueError``). ``L``, where the
            methods read it, is ``original_max_position_embeddings`` when given, else the training length.
    """

    method: str = "none"
    factor: float | None = None
    options: tuple[tuple[str, OptionValue], ...] = ()

    def validate(self) -> RopeScaling:
        """Return ``self``; an unknown method, a bad factor or a bad option raises :class:`ValueError`."""
        if self.method not in ROPE_SCALING:
            known = ", ".join(ROPE_SCALING)
            raise ValueError(f"unknown rope scaling method {self.method!r}; known methods: {known}")
        if self.factor is not None and (
            isinstance(self.factor, bool)
            or not isinstance(self.factor, int | float)
            or not (self.factor > 0 and math.isfinite(self.factor))
        ):
            raise ValueError(
                "rope scaling factor must be a number > 0, or None to follow the evaluation length; "
                f"got {self.factor!r}"
            )
        allowed = method_options(self.method)
        for name, value in self.options:
            if name not in allowed:
                raise ValueError(f"{self.method} has no option {name!r}; its options: {', '.join(allowed)}")
            want = type(allowed[name]) if allowed[name] is not None else int
            if type(value) is not want and not (want is float and type(value) is int):
                raise ValueError(f"{self.method}: option {name} must be of type {want.__name__}, got {value!r}")
            if want is not bool and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{self.method}: option {name} must be a finite number > 0, got {value!r}")
        return self

    def original_length(self, train_length: int) -> int:
        """``L``: the ``original_max_position_embeddings`` option when given, else ``train_length``."""
        return int(dict(self.options).get(ORIGINAL_LENGTH, train_length))

    def factor_for(self, train_length: int, length: int) -> float:
        """The ``factor`` passed to the method for an evaluation at ``length`` tokens (see the class doc)."""
        if self.factor is not None:
            return float(self.factor)
        if self.method == "dynamic_ntk":
            return 1.0
        return max(1.0, length / self.original_length(train_length))

    def resolve(self, head_dim: int, base: float, train_length: int, length: int) -> tuple[Tensor, float]:
        """``(inv_freq [head_dim // 2] float64, attention_scale)`` for a sequence of ``length`` tokens."""
        self.validate()
        factor = self.factor_for(train_length, length)
        own = {name: value for name, value in self.options if name != ORIGINAL_LENGTH}
        return ROPE_SCALING[self.method](head_dim, base, factor, self.original_length(train_length), length, **own)

    def label(self) -> str:
        """``"yarn"``, ``"yarn:4"`` (a fixed factor), ``"yarn(beta_fast=16,beta_slow=1)"`` (options)."""
        text = self.method if self.factor is None else f"{self.method}:{self.factor:g}"
        if self.options:
            text += "(" + ",".join(f"{k}={_option_text(v)}" for k, v in self.options) + ")"
        return text


def _option_text(value: OptionValue) -> str:
    return str(value).lower() if isinstance(value, bool) else f"{value:g}"
