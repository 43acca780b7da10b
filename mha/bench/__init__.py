"""Benchmark: time, peak memory and achieved FLOP rate of each MHA implementation, side by side
with ``nn.MultiheadAttention``.

Run ``python -m mha.bench`` (about 10-20 minutes on 2 cores) or ``python -m mha.bench --quick``
(tiny sizes, seconds). It writes the measurements to ``--out`` (``bench-results.json`` in the
current folder by default; ``make bench`` writes the site's ``docs/assets/bench/results.json``)
and prints a report with the targets. ``--into FILE --case NAME`` measures one case again into an
existing results file (``--memory-into FILE`` for the memory case).

What it measures, all in one process and in one run so that the ratios compare like with like
(one module per case in ``mha.bench.cases``, each documented there):

- ``forward``: forward time of ``annotated``, ``pure``, ``full-fast`` (``mha.full.MHA(fast=True)``),
  ``full-math`` (``fast=False``) and ``torch`` (``nn.MultiheadAttention`` built by
  ``mha.interop.to_torch`` from the same weights, called with ``need_weights=False``), plain and
  causal, and the achieved FLOP rate as a fraction of a reference GEMM rate (the median of
  three ``[m, hidden] @ [hidden, hidden]`` shapes) timed in the same rounds; the
  implementations run interleaved after a warm-up, and the median is reported with its ratio to
  ``torch``'s;
- ``parts``: where ``full-fast``'s time goes (the SDPA kernel alone, the projections alone);
- ``backward``: forward + backward time;
- ``decode``: one position with a ``KVCache`` against recomputing the causal forward;
- ``generate``: the chapter *Use it in a model*'s decoder generating with its ``ModelCache`` against
  running the whole sequence at each step, in tokens per second;
- ``gqa``: grouped-query attention's cache bytes and time;
- ``options``: what an option SDPA cannot express costs (``softcap`` runs the written-out path);
- ``memory``: peak memory growth of one forward, each in a fresh process (``mha.bench.memory``),
  with and without a padding mask;
- ``rounding``: not a timing: how far apart float32 lands for two computations of the same
  function on this machine, at 1 thread and at its thread count (the figures the pages *KV cache*,
  *The fast path* and *Pitfalls* show as measured and bound by assertion).

The package, by concern: ``config`` (the ``FULL`` and ``QUICK`` presets), ``implementations``
(the one list of what is compared, with its labels), ``timing``, ``memory`` (the fresh process),
``cases``, ``results`` (the file's layout: measurements only), ``targets`` (evaluated where they
are shown), ``report``, and the command line in ``__main__``.

Add a benchmark case:

1. Write ``mha/bench/cases/NAME.py`` with ``SECTIONS`` (the results sections it fills, each
   with its row ``TypedDict``), ``steps(config)`` (its progress steps), ``run(context)`` (the
   sections, measured: time with ``timing.round_robin``, build models with
   ``implementations.build_models``, record a stopped implementation with ``context.stop``) and
   ``report(results)`` (its lines of the printed report). New sizes go into ``Config`` with a value
   in both presets.
2. Add it to ``CASES`` in ``mha/bench/cases/__init__.py``.
3. Optional: a target in ``TARGETS`` (``mha/bench/targets.py``), with its name and reason in
   English and Chinese; a table on the performance page: a function in ``TABLES``
   (``mha_site/pictures_perf.py``) and its marker ``<!-- bench-table: NAME -->`` in
   ``docs/en/performance.md`` and ``docs/zh/performance.md``.
4. ``make bench`` (10-20 minutes) to measure the site's file again.

What the tests enforce: a run raises if a case takes other than its declared steps or returns
other sections than it declares; ``tests/test_bench.py`` runs ``--quick`` and checks the file
against the layout (``results.problems``: every section non-empty, every key typed, names from
``IMPLEMENTATIONS``), that every target is evaluated, and that the committed file follows the
layout and comes from a full run; ``tests/test_perf_page.py`` checks that both pages ask for the
same tables and that every table in ``TABLES`` is shown.

中文:
    基准测试：各个多头注意力实现的时间、内存和达到的浮点运算速率。运行 ``python -m mha.bench``
    （2 核上约 10-20 分钟）或 ``python -m mha.bench --quick``（很小的尺寸，几秒）；结果默认写到
    当前目录的 ``bench-results.json``，``make bench`` 写网站用的
    ``docs/assets/bench/results.json``。
"""

from mha.bench.implementations import IMPLEMENTATIONS, build_models, call
from mha.bench.results import load
from mha.bench.targets import TARGETS, evaluate

__all__ = ["IMPLEMENTATIONS", "TARGETS", "build_models", "call", "evaluate", "load"]
