// The cache explorer of the chapter "How big is the cache?" (`.mha-cache-size`, written in the
// page's Markdown with its messages in the page's language, as data- attributes). The reader sets
// a context length, a batch size and a dtype; each published configuration's row shows the KiB one
// position adds to its cache (every layer together), the positions the cache holds, and the GiB in
// all. The configurations are not written here: the build puts mha_site/cache_size.py's MODELS in
// the page as JSON, and this is its formula again (cached_layers, sliding_layers,
// values_per_layer, held_positions, held_text, cache_bytes, rows), rounding half up as _round
// does. tests/test_cache_size.py sets values in a real browser and compares every cell with
// rows() in Python.
// Mounted, and its sizes read, by window.mha (mha.js).
(() => {
  const { readPositiveInt, widget } = window.mha;
  const round = (value, places) => {
    const scale = 10 ** places;
    return Math.floor(value * scale + 0.5) / scale;
  };

  const cachedLayers = (m) => (m.attention_layers === null ? m.layers : m.attention_layers);
  const slidingLayers = (m) =>
    m.window === null && m.chunk === null
      ? 0
      : m.window_layers === null
        ? cachedLayers(m)
        : m.window_layers;
  const valuesPerLayer = (m) =>
    m.kind === "mla" ? m.kv_rank + m.rope_dims : 2 * m.kv_heads * m.head_size;
  // A chunked layer (Llama 4's) empties its cache at each chunk boundary: chunk - 1 at most.
  const heldPositions = (m, context) =>
    m.window !== null
      ? Math.min(context, m.window - 1)
      : m.chunk !== null
        ? Math.min(context, m.chunk - 1)
        : context;
  const heldText = (m, context) => {
    const held = String(heldPositions(m, context));
    const slide = slidingLayers(m);
    return slide > 0 && slide < cachedLayers(m) ? `${held} / ${context}` : held;
  };
  const cacheBytes = (m, context, batch, bytes) => {
    const slide = slidingLayers(m);
    const positions = slide * heldPositions(m, context) + (cachedLayers(m) - slide) * context;
    return valuesPerLayer(m) * bytes * positions * batch;
  };

  const mount = (box, data, text) => {
    const inputs = ["context", "batch_size"].map((name) => box.querySelector(`input[name="${name}"]`));
    const dtype = box.querySelector('select[name="dtype"]');
    const status = box.querySelector(".mha-explorer__status");
    const table = box.querySelector(".mha-explorer__table");
    const body = table.tBodies[0];

    const row = (cells) => {
      const tr = document.createElement("tr");
      cells.forEach((content, i) => {
        const cell = document.createElement(i === 0 ? "th" : "td");
        if (i === 0) cell.scope = "row";
        cell.textContent = content;
        tr.append(cell);
      });
      return tr;
    };

    const update = () => {
      const parsed = inputs.map((input) => readPositiveInt(input, text));
      const bad = parsed.find((r) => r.error);
      for (const input of inputs) input.removeAttribute("aria-invalid");
      if (bad) {
        inputs[parsed.indexOf(bad)].setAttribute("aria-invalid", "true");
        box.dataset.state = "error";
        status.textContent = bad.error;
        body.replaceChildren();
        table.hidden = true;
        return;
      }
      const [context, batch] = parsed.map((r) => r.value);
      const bytes = data.dtypes[dtype.value];
      body.replaceChildren(
        ...data.models.map((m) => {
          const perPosition = cachedLayers(m) * valuesPerLayer(m) * bytes;
          return row([
            m.name,
            round(perPosition / 1024, 1).toFixed(1),
            heldText(m, context),
            round(cacheBytes(m, context, batch, bytes) / 2 ** 30, 2).toFixed(2),
          ]);
        }),
      );
      table.hidden = false;
      box.dataset.state = "ok";
      status.textContent = "";
    };

    box.querySelector("form").addEventListener("submit", (event) => event.preventDefault());
    box.querySelector("form").addEventListener("input", update);
    box.querySelector("form").addEventListener("change", update);
    update();
  };

  widget({
    selector: ".mha-cache-size",
    dataId: "__mha-cache-size-models",
    what: "cache explorer",
    mount,
  });
})();
