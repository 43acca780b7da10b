// The shape explorer of the walkthrough (`.mha-explorer`, written in the page's Markdown with its
// labels and messages in the page's language, as data- attributes). The reader sets batch_size,
// seq_len, hidden_size and heads_num; every step of mha.annotated.MHA.forward is listed with its
// shape, its strides, whether it is contiguous, and whether it is a view, a copy or a new tensor,
// in the order mha.trace.record gives them. The steps are not written here: the build records a
// real forward pass (mha_site/explorer.py) and puts them in the page as JSON, each shape as
// dimension names, each stride as the names whose sizes multiply to it, contiguity and kind as
// recorded, with what changes where some sizes are 1 (`ones`).
// tests/test_explorer.py sets random sizes in a real browser and checks every row against
// mha.trace.record for the same sizes.
// Mounted, and its sizes read, by window.mha (mha.js); on a phone the table scrolls sideways.
(() => {
  const { fill, focusWhileScrolling, readPositiveInt, widget } = window.mha;
  const NAMES = ["batch_size", "seq_len", "hidden_size", "heads_num"];
  const ENGLISH = {
    divisible:
      "hidden_size ({hidden_size}) must be divisible by heads_num ({heads_num}); " +
      "{hidden_size} % {heads_num} = {remainder}",
    summary: "{steps} steps; the output has shape {output}.",
    view: "view", copy: "copy", new: "new", yes: "yes", no: "no",
  };
  const CELLS = ["expression", "shape", "stride", "contiguous", "kind"];

  // Shapes and strides as the site writes them, [2, 4, 3, 5]: each dimension a size by its name,
  // or a stride by the names whose sizes it multiplies ([] is 1).
  const written = (items, value) => `[${items.map(value).join(", ")}]`;
  const shape = (names, sizes) => written(names, (name) => sizes[name]);
  const stride = (products, sizes) =>
    written(products, (names) => names.reduce((n, name) => n * sizes[name], 1));

  const mount = (box, data, text) => {
    const inputs = NAMES.map((name) => box.querySelector(`input[name="${name}"]`));
    const status = box.querySelector(".mha-explorer__status");
    const table = box.querySelector(".mha-explorer__table");
    const scroll = box.querySelector(".mha-explorer__scroll");
    const body = table.tBodies[0];

    const row = (step, sizes) => {
      const tr = document.createElement("tr");
      tr.dataset.kind = step.kind;
      tr.dataset.contiguous = String(step.contiguous);
      const cells = [
        (step.target ? `${step.target} = ` : "") + step.expression,
        shape(step.shape, sizes),
        stride(step.stride, sizes),
        text(step.contiguous ? "yes" : "no"),
        text(step.kind),
      ];
      cells.forEach((content, i) => {
        const cell = document.createElement(i === 0 ? "th" : "td");
        if (i === 0) cell.scope = "row";
        if (i < 3) {
          const code = document.createElement("code");
          code.textContent = content;
          cell.append(code);
        } else {
          cell.textContent = content;
        }
        cell.className = `mha-explorer__${CELLS[i]}`;
        tr.append(cell);
      });
      return tr;
    };

    const update = () => {
      const parsed = inputs.map((input) => readPositiveInt(input, text));
      const bad = parsed.find((r) => r.error);
      let error = bad && bad.error;
      const [b, s, d, h] = parsed.map((r) => r.value);
      if (!error && d % h !== 0) {
        error = fill(text("divisible"), { hidden_size: d, heads_num: h, remainder: d % h });
      }
      for (const input of inputs) input.removeAttribute("aria-invalid");
      if (error) {
        if (bad) inputs[parsed.indexOf(bad)].setAttribute("aria-invalid", "true");
        else inputs.slice(2).forEach((input) => input.setAttribute("aria-invalid", "true"));
        box.dataset.state = "error";
        status.textContent = error;
        body.replaceChildren();
        table.hidden = true;
        focusWhileScrolling(scroll);
        return;
      }
      const sizes = { batch_size: b, seq_len: s, hidden_size: d, heads_num: h, head_size: d / h };
      // What was recorded where some sizes are 1 replaces what was recorded with none of them 1.
      const ones = data.sizes.filter((name) => sizes[name] === 1).join(",");
      const at = (step) => ({ ...step, ...(step.ones && step.ones[ones]) });
      body.replaceChildren(...data.steps.map((step) => row(at(step), sizes)));
      table.hidden = false;
      focusWhileScrolling(scroll);
      box.dataset.state = "ok";
      status.textContent = fill(text("summary"), {
        steps: data.steps.length, output: shape(data.steps[data.steps.length - 1].shape, sizes),
      });
    };

    const form = box.querySelector("form");
    form.addEventListener("submit", (event) => event.preventDefault());
    form.addEventListener("input", update);
    update();
  };

  widget({
    selector: ".mha-explorer",
    dataId: "__mha-explorer-steps",
    what: "shape explorer",
    english: ENGLISH,
    mount,
  });
})();
