"""Build step: teach jieba the site's Chinese terms before Material's search segments the pages.

Material's search plugin cuts Chinese text into words with jieba at build time. With jieba's own
dictionary alone, it cuts the site's words badly: the page title 逐行走读 becomes 逐 / 行走 / 读
("walk"), and one-character terms get glued to their neighbours (4 个头 becomes 个头, "height";
各头, 把头, 对值 likewise), so a search for 头 or 值 misses them. The search plugin takes a jieba
user dictionary (``plugins.search.jieba_dict_user``); this hook writes that file, at build time,
from the site's own sources, and points the plugin at it. Its lines are:

- **terms kept whole**: the Chinese terms of the glossary (``docs/zh/glossary.md``, column 中文)
  and the Chinese navigation titles (``nav_translations``, the page titles). A candidate jieba
  already cuts into words of two or more characters (多头注意力 into 多头 / 注意力, 常见陷阱 into
  常见 / 陷阱) is left to jieba, so each part stays searchable on its own: whole, 注意力 inside
  多头注意力 could not be found (search matches the start of a word). A candidate of at most 4
  characters (the length of a term; longer runs are phrases) that jieba cuts into a stray
  character (逐 / 行走 / 读, 线性 / 层) is kept whole, unless a piece is a glossary term itself
  (批 / 维度 stays cut, so 维度 finds 批维度). A glossary term that is also a page's title,
  which jieba cuts into two single characters side by side, is kept whole, however long
  (块 / 内 / 注意力): cut, a search for the title finds first the pages that use its characters
  apart. The headings of the pages are not candidates: their Han runs are phrases (的输入,
  手动从), and kept whole they would hide their words (输入).
- **words split** (frequency 0): a word of jieba's, found in the Chinese pages, that glues a
  one-character term (键, 值, and 头, the glossary's short form of 注意力头) to a numeral,
  classifier, preposition or conjunction (个头, 一个头, 把头), or one jieba's HMM made up around it
  (各头, 按头, 对值). Words of the language that contain the character stay (头数, 数值, 关键字).
  Also split: a word of jieba's in which a glossary term of two or more characters begins, after
  its first character, where the pages write them so: 四维张量 and 小张 (of 一个小张量) for 张量,
  先预 (of 先预填充) for 预填充, 换批 (of 换批大小) for 批大小. Search matches the start of a word,
  so the term would not find the place. A word that is a term itself stays (缓存 begins inside
  高速缓存, 大小为 inside 批大小为). The pages' runs of Chinese are read as a page shows them, with
  Markdown's emphasis and links taken out (叫**预填充** is the run 叫预填充).

The file is generated, never committed: ``jieba_dict_user`` names it relative to mkdocs.yml (in the
git-ignored ``build/``), and the hook hands the plugin its absolute path. ``tests/test_search.py``
checks the dictionary and the index it produces. A reader's query is cut into the same words in
the browser, from the index's own words, by ``docs/assets/search.js``.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
from pathlib import Path

from mkdocs.plugins import event_priority

from mha_site.markdown import HAN, autodoc_identifiers, include_targets

log = logging.getLogger("mkdocs.plugins.mha_site.search_dictionary")

HAN_RUN = re.compile(f"[{HAN}]+")  # a run of Chinese characters
# Markdown's emphasis and links: a page shows 叫**预填充** and 见[旋转位置编码](rope.md) as one
# run of Chinese (叫预填充, 见旋转位置编码), and that run is what jieba cuts for the index.
INLINE_MARKUP = re.compile(r"\*{1,3}|\[|\]\([^)\s]*\)")
TERM_LENGTH = 4  # the longest candidate kept whole: longer Han runs are phrases, not terms
# jieba part-of-speech tags of the characters that glue onto a one-character term: numeral,
# classifier, preposition, conjunction.
GLUE_TAGS = {"m", "q", "p", "c"}

_cache: dict[str, str] = {}


def glossary_terms(glossary: Path) -> list[str]:
    """The 中文 column of the glossary's tables (the column headed 中文)."""
    terms: list[str] = []
    column = None
    for line in glossary.read_text(encoding="utf-8").splitlines():
        if not line.lstrip().startswith("|"):
            column = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if column is None:
            column = cells.index("中文") if "中文" in cells else -1
        elif column >= 0 and column < len(cells) and not set(cells[column]) <= set("-: "):
            terms += HAN_RUN.findall(cells[column])
    return terms


def candidates(config, language_dir: Path, locale: str) -> dict[str, list[str]]:
    """Candidate words by source: the glossary and the navigation titles."""
    i18n = config.plugins.get("i18n")
    titles: list[str] = []
    for language in getattr(i18n, "config", {}).get("languages", []) if i18n else []:
        if language.locale == locale:
            titles = list((language.nav_translations or {}).values())
    glossary = language_dir / "glossary.md"
    return {
        "glossary": glossary_terms(glossary) if glossary.is_file() else [],
        "navigation": [run for title in titles for run in HAN_RUN.findall(title)],
    }


def candidates_key(config, locale: str) -> str:
    i18n = config.plugins.get("i18n")
    languages = getattr(i18n, "config", {}).get("languages", []) if i18n else []
    return repr([lang.nav_translations for lang in languages if lang.locale == locale])


def text_sources(language_dir: Path, root: Path) -> list[Path]:
    """The files whose Chinese the pages show: the pages, the files they include (``--8<--``)
    and the Python files of the packages they document (``::: package.module``)."""
    pages = sorted(language_dir.rglob("*.md"))
    found = dict.fromkeys(pages)
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for included in include_targets(text):
            path = root / included.split(":")[0]
            if path.is_file():
                found[path] = None
        for identifier in autodoc_identifiers(text):
            package = root / identifier.split(".")[0]
            found.update(dict.fromkeys(sorted(package.rglob("*.py")) if package.is_dir() else []))
    return list(found)


def user_dictionary(config, language_dir: Path, locale: str, root: Path) -> str:
    """The text of the jieba user dictionary for the pages under ``language_dir``.

    The same on every call in a process: jieba keeps the words it must split (``del_word``, and
    every ``word 0`` line of a loaded user dictionary) in one global set of its HMM,
    ``jieba.finalseg.Force_Split_Words``, shared by every tokenizer. A second call (a rebuild of
    ``mkdocs serve``, after the search plugin loaded this file) would start with the first call's
    splits: its HMM no longer makes up the glued words, so it would split none of them. The set is
    emptied for the call and restored after it.
    """
    import jieba.finalseg

    forced = jieba.finalseg.Force_Split_Words
    saved = set(forced)
    forced.clear()
    try:
        return _user_dictionary(config, language_dir, locale, root)
    finally:
        forced.clear()
        forced.update(saved)


def _user_dictionary(config, language_dir: Path, locale: str, root: Path) -> str:
    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)
    sources = candidates(config, language_dir, locale)
    glossary = sources["glossary"]
    default = jieba.Tokenizer()  # jieba's dictionary alone; the global one stays untouched
    default.initialize()
    tags = jieba.posseg.dt.word_tag_tab  # the part of speech of each word of that dictionary

    # One-character terms: those of the glossary, and the one-character nouns among the pieces
    # jieba cuts a glossary term into (头 of 注意力头; not 层 or 批, classifiers, nor 的).
    short = {term for term in glossary if len(term) == 1}
    for term in glossary:
        for piece in default.lcut(term, HMM=False):
            if len(piece) == 1 and tags.get(piece) == "n":
                short.add(piece)
    kept: list[str] = []
    for word in dict.fromkeys(w for ws in sources.values() for w in ws):
        pieces = default.lcut(word, HMM=False)
        stray = [p for p in pieces if len(p) == 1 and p not in short]
        terms = [p for p in pieces if p in glossary or p in short]
        # a page's title that is a term, cut into single characters side by side: 块 / 内 / 注意力
        titled_term = word in glossary and word in sources["navigation"]
        in_characters = any(len(a) == len(b) == 1 for a, b in itertools.pairwise(pieces))
        if len(word) > 1 and (
            len(pieces) == 1
            or (len(word) <= TERM_LENGTH and stray and not terms)
            or (titled_term and in_characters)
        ):
            kept.append(word)
    protected = set(glossary) | set(kept) | {p for t in glossary for p in default.lcut(t)}

    # Where a term of two characters or more begins, in a run of the pages' Chinese.
    long_terms = sorted({term for term in glossary if len(term) > 1}, key=len, reverse=True)
    term_start = re.compile("(?=(?:" + "|".join(map(re.escape, long_terms)) + "))")

    def hides_a_term(token: str) -> bool:
        """Whether jieba's ``token`` glues a one-character term (see the module's docstring)."""
        if len(token) < 2 or token in protected or not set(token) & short:
            return False
        made_up = not default.FREQ.get(token)
        return made_up or all(tags.get(c) in GLUE_TAGS for c in token if c not in short)

    def cut_into(run: str, tokens: list[str]) -> list[str]:
        """The words of ``run`` (cut into ``tokens``) that a term begins inside: 四维张量 and
        小张 (of 一个小张量) for 张量, 先预 (of 先预填充) for 预填充."""
        starts = [match.start() for match in term_start.finditer(run)]
        found, at = [], 0
        for token in tokens:
            if token not in protected and any(at < k < at + len(token) for k in starts):
                found.append(token)
            at += len(token)
        return found

    # Split such words until the Chinese pages cut cleanly (a split can make a new one).
    runs = list(
        dict.fromkeys(
            run
            for source in text_sources(language_dir, root)
            for run in HAN_RUN.findall(INLINE_MARKUP.sub("", source.read_text(encoding="utf-8")))
        )
    )
    tokenizer = jieba.Tokenizer()  # a copy of ``default``'s dictionary, not a second load of it
    tokenizer.FREQ, tokenizer.total, tokenizer.initialized = dict(default.FREQ), default.total, True
    for word in kept:
        tokenizer.add_word(word)
    split: list[str] = []
    for _ in range(5):
        cuts = {run: tokenizer.lcut(run) for run in runs}
        tokens = dict.fromkeys(token for cut in cuts.values() for token in cut)
        glued = [token for token in tokens if hides_a_term(token)]
        glued += [token for run, cut in cuts.items() for token in cut_into(run, cut)]
        glued = list(dict.fromkeys(glued))
        if not glued:
            break
        for token in glued:
            tokenizer.del_word(token)
        split += glued
    # jieba reads "word" (a frequency that keeps the word whole) or "word frequency"; no comments.
    return "".join(f"{word}\n" for word in kept) + "".join(f"{word} 0\n" for word in split)


@event_priority(100)  # before the search plugin's on_config, which loads the file
def on_config(config, **kwargs):
    search = config.plugins.get("material/search") or config.plugins.get("search")
    option = getattr(search, "config", {}).get("jieba_dict_user") if search else None
    if not option:
        return config
    root = Path(config.config_file_path).resolve().parent
    path = (root / option).resolve()
    i18n = config.plugins.get("i18n")
    languages = getattr(i18n, "config", {}).get("languages", []) if i18n else []
    locales = [language.locale for language in languages if language.locale.startswith("zh")]
    docs = Path(config.docs_dir)
    sections = []
    for locale in locales or ["zh"]:
        language_dir = docs / locale if (docs / locale).is_dir() else docs
        # Cached per process (mkdocs serve rebuilds), keyed by everything the dictionary reads.
        digest = hashlib.sha256(candidates_key(config, locale).encode())
        for source in text_sources(language_dir, root):
            digest.update(str(source).encode() + b"\0" + source.read_bytes())
        key = digest.hexdigest()
        if key not in _cache:
            _cache[key] = user_dictionary(config, language_dir, locale, root)
        sections.append(_cache[key])
    text = "".join(sections)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        log.debug("Wrote the jieba user dictionary %s", path)
    search.config.jieba_dict_user = str(path)
    return config
