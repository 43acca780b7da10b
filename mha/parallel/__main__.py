"""``python -m mha.parallel`` and ``torchrun --nproc-per-node 2 -m mha.parallel``: see ``main``."""

from mha.parallel import main

main()
