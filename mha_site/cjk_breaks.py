"""Build step: a line break inside Chinese text is not a space.

Markdown keeps a paragraph's line breaks, and the browser shows each as a space: right between
two English words, wrong inside a Chinese sentence (``本站在原文 基础上``, ``批大小 2， 4 个头``).
So authors can wrap Chinese prose like any other, this hook removes the line break (and the
indentation around it) where Chinese meets Chinese, and after full-width punctuation. Code, math
and scripts are left alone; a break next to an English word or inline code stays a space.
"""

from __future__ import annotations

import re

from mha_site.markdown import CHINESE_TEXT

CJK = CHINESE_TEXT
BETWEEN_CJK = re.compile(f"(?<=[{CJK}])[ \\t]*\\n[ \\t]*(?=[{CJK}])")
AFTER_PUNCTUATION = re.compile("(?<=[\uff0c\u3002\u3001\uff1b\uff1a\uff01\uff1f])[ \\t]*\\n[ \\t]*")
PROTECTED = re.compile(r"(<(pre|code|script|style|math|svg|textarea)\b.*?</\2>)", re.DOTALL)


def join_cjk_lines(html: str) -> str:
    parts = PROTECTED.split(html)
    # split() with two groups yields: text, protected, tag name, text, protected, tag name, ...
    out = []
    for index, part in enumerate(parts):
        kind = index % 3
        if kind == 0:
            out.append(AFTER_PUNCTUATION.sub("", BETWEEN_CJK.sub("", part)))
        elif kind == 1:
            out.append(part)
    return "".join(out)


def on_page_content(html: str, **kwargs) -> str:
    return join_cjk_lines(html)
