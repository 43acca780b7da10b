// The language switch keeps the section the reader is on. Both languages give every heading the
// same anchor (tests/test_docs_parity.py checks it), so /walkthrough/#split-heads switches to
// /zh/walkthrough/#split-heads rather than to the top of the page. The theme's own handler would
// drop the anchor, so on a page with one this listener (capture phase: it runs first) navigates.
document.addEventListener("click", (event) => {
  const link = event.target.closest(".md-select__link[hreflang]");
  if (!link || !location.hash || event.metaKey || event.ctrlKey) return;
  event.preventDefault();
  event.stopPropagation();
  location.assign(link.href.split("#")[0] + location.hash);
}, true);

// "Copy as a runnable script": a second button beside Material's copy button on every Python
// block that the page's tests run. mha_site/runnable.py builds the scripts from the page's Markdown
// (the same parse Sybil runs) and puts each distinct piece once in #__mha-runnable; a block's
// data-mha-runnable lists its pieces, joined by a blank line. The button is one of Material's
// code buttons: same class, place, hover and focus styles, an icon from Material's set (the hook
// adds it), and Material's clipboard handler copies its data-clipboard-text and says "Copied".
(() => {
  const data = document.getElementById("__mha-runnable");
  if (!data) return;
  const { title, pieces } = JSON.parse(data.textContent);
  const script = (ids) => ids.trim().split(/\s+/).map((i) => pieces[Number(i)]).join("\n\n") + "\n";

  const addButton = (block) => {
    const nav = block.querySelector(":scope > pre > nav.md-code__nav");
    if (!nav) return false;
    if (nav.querySelector("[data-mha-type=runnable]")) return true;
    const button = document.createElement("button");
    button.className = "md-code__button";
    button.type = "button";
    button.title = title;
    button.setAttribute("aria-label", title);
    button.dataset.mhaType = "runnable";
    button.dataset.clipboardText = script(block.dataset.mhaRunnable);
    nav.append(button);
    return true;
  };

  // Material adds its button bar to each block when it mounts the page's components; wait for it.
  const whenReady = () => {
    for (const block of document.querySelectorAll("div.highlight[data-mha-runnable]")) {
      if (addButton(block)) continue;
      const observer = new MutationObserver(() => {
        if (addButton(block)) observer.disconnect();
      });
      observer.observe(block, { childList: true, subtree: true });
    }
  };
  if (window.document$) window.document$.subscribe(whenReady);
  else document.addEventListener("DOMContentLoaded", whenReady);
})();

// What the page's widgets share (explorer.js, cache_size.js): how a widget is mounted and how it
// reads what the reader typed. mkdocs.yml lists this file before them in extra_javascript, and
// the pages load them as plain scripts in that order, so window.mha is defined when they run.
window.mha = (() => {
  // "{name} must be ..." with the values put in; a key without a value is left as it is.
  const fill = (template, values) =>
    template.replace(/\{(\w+)\}/g, (all, key) => (key in values ? String(values[key]) : all));

  // The messages of readPositiveInt, as mha's errors word them: a page in another language gives
  // its own in the widget's data- attributes.
  const ENGLISH = {
    positive: "{name} must be a positive int, got {value}",
    empty: "{name} must be a positive int, got nothing",
  };

  // A size as the reader typed it: { value } for a positive int, or { error } saying why not.
  // `text(key)` is the widget's message for key ("positive", "empty").
  const readPositiveInt = (input, text) => {
    const raw = input.value.trim();
    if (raw === "") return { error: fill(text("empty"), { name: input.name }) };
    const n = Number(raw);
    if (!/^\+?\d+$/.test(raw) || !Number.isSafeInteger(n) || n < 1) {
      return { error: fill(text("positive"), { name: input.name, value: raw }) };
    }
    return { value: n };
  };

  // Mounts each element of `selector` once: `mount(box, data, text)`, with `data` the JSON the
  // build put in the page as #dataId (`what` names the widget when it is missing) and `text(key)`
  // the box's data- attribute for key, or `english[key]`, or ENGLISH[key].
  // Instant navigation is off on this site, but if it is turned on, Material's document$ emits
  // each page it swaps in; without it, the page is ready at DOMContentLoaded.
  const widget = ({ selector, dataId, what, english = {}, mount }) => {
    const once = (box) => {
      if (box.dataset.mhaMounted) return;
      box.dataset.mhaMounted = "1";
      const source = document.getElementById(dataId);
      if (!source) throw new Error(`the page has a ${what} but no #${dataId}`);
      const text = (key) => box.dataset[key] || english[key] || ENGLISH[key];
      mount(box, JSON.parse(source.textContent), text);
    };
    const start = () => document.querySelectorAll(selector).forEach(once);
    if (window.document$) window.document$.subscribe(start);
    else if (document.readyState !== "loading") start();
    else document.addEventListener("DOMContentLoaded", start);
  };

  // A wide formula or table scrolls sideways on a narrow screen; while it does, it takes the
  // keyboard focus (tabindex 0) so that a keyboard reader can scroll it too (WCAG 2.1.1: axe's
  // scrollable-region-focusable, checked by tests/test_a11y.py on a phone-sized screen). A widget
  // calls it again whenever it changes what its box holds.
  const focusWhileScrolling = (el) => {
    if (el.scrollWidth > el.clientWidth) el.tabIndex = 0;
    else el.removeAttribute("tabindex");
  };

  return { fill, focusWhileScrolling, readPositiveInt, widget };
})();

(() => {
  // A table wider than the page scrolls sideways, and its columns past the edge do not show:
  // while it does, a line above it says so, in the page's language (tests/test_browser.py checks
  // every table at the desktop's width and the phone's).
  const HINT = {
    en: "This table is wider than the page: scroll it sideways →",
    zh: "这张表比页面宽，可以左右滚动 →",
  };
  const hint = (wrap) => {
    const scrolls = wrap.scrollWidth > wrap.clientWidth + 1;
    let note = wrap.previousElementSibling;
    if (!note || !note.classList.contains("mha-scroll-hint")) {
      if (!scrolls) return;
      note = document.createElement("p");
      note.className = "mha-scroll-hint";
      note.textContent = HINT[document.documentElement.lang] ?? HINT.en;
      wrap.before(note);
    }
    note.hidden = !scrolls;
  };
  const focusable = () => {
    for (const el of document.querySelectorAll(
      ".md-typeset__scrollwrap, .mha-math, .mha-explorer__scroll",
    )) {
      window.mha.focusWhileScrolling(el);
    }
    document.querySelectorAll("article .md-typeset__scrollwrap").forEach(hint);
  };
  window.addEventListener("load", focusable);
  window.addEventListener("resize", focusable);
})();
