"""mha: multi-head attention, explained line by line in 中文 and English, every shape verified.

- :mod:`mha.annotated` -- the design post's ``MHA``, every line commented, every shape checked.
- :mod:`mha.pure` -- the same class, minimal (纯享版).
- :mod:`mha.interop` -- exact conversion to and from ``torch.nn.MultiheadAttention``.
- :mod:`mha.checks` -- the argument checks they share.
"""

__version__ = "0.1.0"
