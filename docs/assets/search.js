// Search cuts a Chinese query into the words the index is cut into.
//
// The build cuts the Chinese of every page into words with jieba and its user dictionary
// (mha_site/search_dictionary.py): 旋转位置编码 is indexed as 旋转 / 位置 / 编码, 转置 as one word.
// Material's search worker cuts a query otherwise: each run of Chinese characters is split by the
// longest words of the index found in it, but the run's last character is never part of a word
// (the run is tried up to its second-last character), so 转置 is searched as 转 (and finds 转换 and
// 转成), 旋转位置编码 as 旋转, 位置 and 编 (编译), 步长 as 步. Only a run none of whose beginnings is
// a word of the index is searched whole.
//
// This script cuts each Chinese run of the query itself, before the query reaches the worker: it
// takes, from the left, the longest word of the index (two characters or more) that the run starts
// with, the way the index cut the same characters (tests/test_search.py checks that for every
// term of the glossary). Each word goes to the worker with one more character, END, after it:
// the worker tries the run up to that character, so it finds the word and searches it, as typed,
// by its beginning. A run cut into two or more words (旋转位置编码, 多头潜在注意力) is one term
// for the reader, so each of its words is required (+), as Material does for a quoted phrase:
// a page that says 位置 alone is not a result for 旋转位置编码. Characters where no such word
// starts are left to the worker as they are, and not required (a term being typed: 缓 finds 缓存;
// a single character may be a word search leaves out, such as 的).
//
// The words are read at the first Chinese query, once, from the index itself, which Material's
// page posts to its worker (SETUP); the query is rewritten in the QUERY message.
// Both are Material 9's messages, read from its source (integrations/search/worker/message); if a
// later version changes them, this script changes nothing, and the ranking tests of
// tests/test_search.py fail.
(() => {
  const SETUP = 0;
  const QUERY = 2;
  // A Chinese character no page uses (U+3007, 〇): it makes the worker try the whole word before
  // it, and is itself never searched (a worker that tried the run to its end would find no word
  // of the index that holds it).
  const END = "\u3007";
  const CHINESE = /\p{sc=Han}+/gu;
  const HAS_CHINESE = /\p{sc=Han}/u;

  let worker = null; // Material's search worker, the one the index was posted to
  let index = null; // the posted index: { config, docs }
  let words = null; // the index's Chinese words of two characters or more
  let longest = 0;

  // The index's text is cut already: jieba's words are runs of Chinese characters, each ended by
  // a word break (U+200B) or by any other character.
  const indexWords = () => {
    if (words) return words;
    words = new Set();
    for (const doc of index.docs) {
      for (const field of [doc.title, doc.text]) {
        for (const word of (field || "").match(CHINESE) || []) {
          if (word.length < 2) continue;
          words.add(word);
          longest = Math.max(longest, word.length);
        }
      }
    }
    return words;
  };

  // One run of Chinese characters as the worker is to search it.
  const cutRun = (run) => {
    const known = indexWords();
    const terms = [];
    let rest = ""; // characters that start no word, kept together for the worker
    for (let i = 0; i < run.length; ) {
      let n = Math.min(longest, run.length - i);
      while (n > 1 && !known.has(run.slice(i, i + n))) n -= 1;
      if (n > 1) {
        if (rest) terms.push(rest);
        rest = "";
        terms.push({ word: run.slice(i, i + n) });
      } else {
        rest += run[i];
      }
      i += n;
    }
    if (rest) terms.push(rest);
    const required = terms.length > 1;
    return terms
      .map((t) => (typeof t === "string" ? t : required ? `+${t.word}${END}*` : t.word + END))
      .join(" ");
  };

  const cut = (query) => query.replace(CHINESE, cutRun);

  const post = Worker.prototype.postMessage;
  Worker.prototype.postMessage = function (message, ...options) {
    if (message && message.type === SETUP && message.data && Array.isArray(message.data.docs)) {
      worker = this;
      index = message.data;
      words = null;
    } else if (
      this === worker &&
      message &&
      message.type === QUERY &&
      typeof message.data === "string"
    ) {
      if (HAS_CHINESE.test(message.data)) message = { ...message, data: cut(message.data) };
    }
    return post.call(this, message, ...options);
  };
})();
