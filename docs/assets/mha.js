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
