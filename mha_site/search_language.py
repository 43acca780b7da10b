"""Build step: one search index per language, so search stays in the reader's language.

mkdocs-static-i18n builds the default language at the site's root and each other language under
``<locale>/``, then writes a single ``search/search_index.json`` holding every language's pages:
its README says "there can only be one search index for the whole build". Material's search fetches
``search/search_index.json`` relative to ``base`` in the page's ``__config`` (the site root), so a
Chinese reader searching 步长 got English pages too (they hold Chinese glossary terms and code
comments), and an English reader searching stride got Chinese ones.

This hook gives every language its own index and makes its pages load it:

- ``on_post_build`` runs after the i18n plugin's (priority -200 < -100). In the build of a
  non-default language (the i18n plugin runs it from inside the default build's
  ``on_post_build``), the search plugin has just written that language's pages alone: the hook
  writes them to ``<locale>/search/search_index.json``, with locations relative to ``<locale>/``.
  At the end of the default build, the i18n plugin has written every language's pages to the root
  index: the hook keeps the default language's.
- ``on_post_page`` points ``base`` in the ``__config`` of a non-default language's pages at
  ``<locale>/``. Material 9.x reads ``base`` to find the index and to resolve the locations of the
  results. Its other readers do not run here: ``navigation.instant`` and versions are off, and the
  sitemap-based language switch returns before reading it, since the default language's root
  holds every URL of the site.

Both work the same under ``mkdocs build`` and ``mkdocs serve``. ``tests/test_search.py`` checks the
index files and searches in a browser.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
from pathlib import Path

from mkdocs.plugins import event_priority

from mha_site.languages import DEFAULT, LANGUAGES, building

log = logging.getLogger("mkdocs.plugins.mha_site.search_language")

CONFIG = re.compile(r'(<script id="__config" type="application/json">)(.*?)(</script>)', re.S)
BASE = re.compile(r'("base":\s*)"([^"\\]*)"')
WHITESPACE = re.compile(r"\s{2,}")
# jieba's word breaks (U+200B) next to a character that breaks words anyway (whitespace, the
# punctuation of the search separator in mkdocs.yml) or at either end: the same words without
# them, and each is 3 bytes. Not beside a tag: search drops the tags, and the break may be all
# that is left between two words.
_BREAKS = '\\s\u3000\\-,:;!?=\\[\\]()"`/、。，．？！；：（）“”‘’《》'
REDUNDANT_BREAK = re.compile(f"\u200b+(?=[{_BREAKS}])|(?<=[{_BREAKS}])\u200b+|^\u200b+|\u200b+$")
# Inline code in the text ("<code>x</code>"), not a code block's ("<pre><code>"): search drops the
# tags before it splits the words, so unwrapped the words are the same, 13 bytes less each (9% of
# the zh index); a result shows the code as plain text.
INLINE_CODE = re.compile(r"(?<!<pre>)<code>(.*?)</code>", re.S)
# A code block is indexed by the words a reader searches it for, each once, in their order: its
# names (``masked_fill``, ``KVCache``), and the words of its comments and strings (a docstring, in
# the page's language, cut by jieba). The code itself, mostly the package's included source, was
# 39% of the zh index and would put the heaviest page over its weight budget
# (tests/test_page_weight.py).
CODE_BLOCK = re.compile(r"<pre><code>(.*?)</code></pre>", re.S)
ENTITY = re.compile(r"&\w+;")  # &gt;, &amp;: the HTML of ">", "&"
NOT_A_WORD = re.compile(r"[\W\u200b]+")  # punctuation, a space, jieba's word break


def code_words(block: re.Match) -> str:
    """A code block as its words, each once: names of two letters or more, every Chinese word."""
    text = ENTITY.sub(" ", block.group(1))
    words = [w for w in NOT_A_WORD.split(text) if len(w) > 1 or not w.isascii()]
    return "<pre><code>" + " ".join(dict.fromkeys(words)) + "</code></pre>"


def languages(config) -> tuple[str | None, list[str]]:
    """The default language and the others (None, [] without the i18n plugin)."""
    if config.plugins.get("i18n") is None:
        return None, []
    return DEFAULT, [language for language in LANGUAGES if language != DEFAULT]


def language_of(location: str, others: list[str]) -> str | None:
    """The non-default locale whose folder holds ``location``, or None for the default language."""
    return next((lang for lang in others if location.startswith(f"{lang}/")), None)


@event_priority(-200)  # after the search plugin wrote the index, and after the i18n plugin
def on_post_build(config, **kwargs):
    default, others = languages(config)
    index_path = Path(config.site_dir) / "search" / "search_index.json"
    if default is None or not others or not index_path.is_file():
        return
    index = json.loads(index_path.read_text(encoding="utf-8"))
    i18n = config.plugins.get("i18n")
    language = building(config) if i18n.building else default
    if language != default:
        # This language's build: the index holds its pages alone.
        prefix = f"{language}/"
        docs = [d for d in index["docs"] if language_of(d["location"], others) == language]
        for doc in docs:
            doc["location"] = doc["location"][len(prefix) :]
        target = Path(config.site_dir) / language / "search" / "search_index.json"
    else:
        # The end of the whole build: the i18n plugin merged every language into the root index.
        docs = [d for d in index["docs"] if language_of(d["location"], others) is None]
        target = index_path
    target.parent.mkdir(parents=True, exist_ok=True)
    for doc in docs:
        # The text keeps the HTML's indentation ("   <code>"); search splits words on any run of
        # whitespace, so one space says the same in fewer bytes (2% of the index); a code block
        # keeps its names and comments (CODE_BLOCK); inline code is unwrapped (INLINE_CODE); and
        # a word break beside a separator is dropped
        # (REDUNDANT_BREAK, 10% of the zh index).
        text = INLINE_CODE.sub(r"\1", WHITESPACE.sub(" ", CODE_BLOCK.sub(code_words, doc["text"])))
        doc["text"] = REDUNDANT_BREAK.sub("", text)
        doc["title"] = REDUNDANT_BREAK.sub("", doc["title"])
    data = {**index, "docs": docs}
    # UTF-8 as it is, not \uXXXX escapes: a Chinese character takes 3 bytes instead of 6, and the
    # zh index (jieba's words joined by U+200B) shrinks by a third. JSON is read as UTF-8.
    text = json.dumps(data, separators=(",", ":"), default=str, ensure_ascii=False)
    target.write_text(text, encoding="utf-8")
    log.debug("search index for '%s': %d entries in %s", language, len(docs), target)


def on_post_page(output: str, page, config, **kwargs):
    default, others = languages(config)
    language = building(config)
    if language == default or language not in others:
        return output

    def rebase(config_script: re.Match) -> str:
        body = BASE.sub(
            lambda m: f'{m.group(1)}"{posixpath.join(m.group(2), language)}/"',
            config_script.group(2),
            count=1,
        )
        return config_script.group(1) + body + config_script.group(3)

    return CONFIG.sub(rebase, output, count=1)
