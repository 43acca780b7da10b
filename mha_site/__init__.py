"""The build code of the mha site, one package: MkDocs loads it as the plugin ``mha-site``
(``mha_site.plugin``), and the root ``conftest.py``, the checkers and the tests import it like any
package.

- ``plugin``: the one MkDocs plugin; ``STEPS`` lists the build steps below in their order.
- ``languages``, ``markdown``: what every step shares (the site's languages, a page's language, the
  labels in each language; the Markdown patterns: fences, hidden blocks, includes, Chinese
  characters, the snippet options).
- build steps: ``i18n_language``, ``mathml``, ``math_font``, ``cjk_breaks``, ``markers`` (pictures
  and benchmark tables: ``pictures`` with its generators ``pictures_flow``, ``pictures_heatmaps``,
  ``pictures_memory``, ``pictures_perf`` and their style ``picture_style``), ``search_dictionary``,
  ``search_language``, ``include_language``, ``docstring_language``, ``runnable``, ``explorer``.
- ``checkers``: the consistency checkers (``make check``); ``scaffold``: a new chapter's twin pages.
"""
