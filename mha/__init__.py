"""mha: multi-head attention, explained line by line in 中文 and English, every shape verified.

- [`mha.annotated`][mha.annotated] -- the design post's ``MHA``, every line commented and
  every shape checked.
- [`mha.pure`][mha.pure] -- the same class, minimal (纯享版).
- [`mha.interop`][mha.interop] -- conversion to and from ``torch.nn.MultiheadAttention``, the
  weights copied exactly.
- [`mha.checks`][mha.checks] -- the argument checks they share.
"""

__version__ = "0.1.0"
