"""The site's one MkDocs plugin: every build step of ``mha_site``, registered in one place.

mkdocs.yml names it last under ``plugins:`` (``- mha-site``, the entry point in pyproject.toml), so
MkDocs imports this package the ordinary way, once, like any other plugin. Each step is a module of
``mha_site`` with MkDocs event functions (``on_config``, ``on_page_markdown``, ...); ``STEPS`` lists
them in the order they run when two of them handle one event at the same priority. A function's own
``@event_priority`` still places it among the other plugins' handlers (the i18n plugin's, search's,
mkdocstrings').

To add a build step: write its module with ``on_*`` functions and add it to ``STEPS``.
"""

from __future__ import annotations

from mkdocs.plugins import BasePlugin, CombinedEvent

from mha_site import (
    cache_size,
    cjk_breaks,
    docstring_language,
    explorer,
    i18n_language,
    include_language,
    markers,
    math_font,
    mathml,
    not_found,
    notation_link,
    rendering,
    runnable,
    search_dictionary,
    search_language,
)

STEPS = (
    i18n_language,  # the theme's language is the one being built (mkdocstrings reads it)
    rendering,  # boxes hold their code, no prose as code, table rows as wide as their header
    mathml,  # LaTeX to MathML
    math_font,  # after the build: the math font cut down to the characters of the site's math
    cjk_breaks,  # no line break inside Chinese prose
    markers,  # after cjk_breaks: pictures (SVG drawn from real runs) and benchmark tables
    search_dictionary,  # jieba's user dictionary, from the glossary and the zh titles
    search_language,  # one search index per language
    include_language,  # included code keeps the comments of the page's language
    docstring_language,  # the API page's docstrings in the page's language
    runnable,  # every snippet's "copy as a runnable script"
    explorer,  # the shape explorer's steps, from a real mha.trace.record run (JSON in the page)
    cache_size,  # the cache explorer's published configurations (JSON in the page)
    notation_link,  # under each page's title, a link to the notation page
    not_found,  # each language's 404 page in its folder, the default one at the root
)


class Site(BasePlugin):
    """Registers every ``on_*`` function of ``STEPS``, each with its own priority."""

    def __init__(self):
        super().__init__()
        handlers: dict[str, list] = {}
        for step in STEPS:
            for name, function in vars(step).items():
                if name.startswith("on_") and callable(function):
                    handlers.setdefault(name, []).append(function)
        # An instance attribute, so MkDocs registers each function as it is (not bound to self).
        for name, functions in handlers.items():
            setattr(self, name, CombinedEvent(*functions))
