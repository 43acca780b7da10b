"""``python -m mha.parallel`` and ``torchrun --nproc-per-node 2 -m mha.parallel``: see ``main``."""

from mha.parallel.example import main

main()
