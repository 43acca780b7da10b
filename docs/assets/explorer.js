// The shape explorer of the walkthrough (`.mha-explorer`, written in the page's Markdown with its
// labels and messages in the page's language, as data- attributes). The reader sets batch_size,
// seq_len, hidden_size and heads_num; every step of mha.annotated.MHA.forward is listed with its
// shape, in the order mha.trace.record gives them, and whether it is a view, a copy or a new
// tensor. The shapes come from formulas here; tests/test_explorer.py sets random sizes in a real
// browser and checks every row against mha.trace.record for the same sizes.
(() => {
  // [target, expression, shape(b, s, d, h, dh), kind(b, s, d, h)]; kind as mha.trace.Step.kind.
  const NEW = () => "new";
  const VIEW = () => "view";
  const STEPS = [
    ["q", "self.W_q(x)", (b, s, d) => [b, s, d], NEW],
    ["k", "self.W_k(x)", (b, s, d) => [b, s, d], NEW],
    ["v", "self.W_v(x)", (b, s, d) => [b, s, d], NEW],
    ...["q", "k", "v"].map((t) => [
      t, `${t}.view(${t}.size(0), ${t}.size(1), self.heads_num, self.head_size)`,
      (b, s, d, h, dh) => [b, s, h, dh], VIEW,
    ]),
    ...["q", "k", "v"].map((t) => [
      t, `${t}.transpose(1, 2)`, (b, s, d, h, dh) => [b, h, s, dh], VIEW,
    ]),
    ["", "k.transpose(-2, -1)", (b, s, d, h, dh) => [b, h, dh, s], VIEW],
    ["", "torch.matmul(q, k.transpose(-2, -1))", (b, s, d, h) => [b, h, s, s], NEW],
    ["qk", "torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_size)",
      (b, s, d, h) => [b, h, s, s], NEW],
    ["attn", "torch.softmax(qk, dim=-1)", (b, s, d, h) => [b, h, s, s], NEW],
    ["out", "torch.matmul(attn, v)", (b, s, d, h, dh) => [b, h, s, dh], NEW],
    ["", "out.transpose(1, 2)", (b, s, d, h, dh) => [b, s, h, dh], VIEW],
    // The transposed tensor is already contiguous when seq_len or heads_num is 1 (a dimension of
    // size 1 has no order to keep): then .contiguous() returns it unchanged, no copy.
    ["", "out.transpose(1, 2).contiguous()", (b, s, d, h, dh) => [b, s, h, dh],
      (b, s, d, h) => (s > 1 && h > 1 ? "copy" : "view")],
    ["out", "out.transpose(1, 2).contiguous().view(out.size(0), out.size(2), self.hidden_size)",
      (b, s, d) => [b, s, d], VIEW],
    ["out", "self.W_o(out)", (b, s, d) => [b, s, d], NEW],
  ];
  const NAMES = ["batch_size", "seq_len", "hidden_size", "heads_num"];
  const ENGLISH = {
    positive: "{name} must be a positive int, got {value}",
    empty: "{name} must be a positive int, got nothing",
    divisible:
      "hidden_size ({hidden_size}) must be divisible by heads_num ({heads_num}); " +
      "{hidden_size} % {heads_num} = {remainder}",
    summary: "{steps} steps; the output has shape {output}.",
    view: "view", copy: "copy", new: "new",
  };

  const fill = (template, values) =>
    template.replace(/\{(\w+)\}/g, (all, key) => (key in values ? String(values[key]) : all));
  // Shapes as the site writes them: [2, 4, 3, 5].
  const written = (shape) => `[${shape.join(", ")}]`;

  const mount = (box) => {
    if (box.dataset.mhaMounted) return;
    box.dataset.mhaMounted = "1";
    const text = (key) => box.dataset[key] || ENGLISH[key];
    const inputs = NAMES.map((name) => box.querySelector(`input[name="${name}"]`));
    const status = box.querySelector(".mha-explorer__status");
    const table = box.querySelector(".mha-explorer__table");
    const body = table.tBodies[0];

    // A size as the reader typed it: a positive int, or the message that says why not.
    const read = (input) => {
      const raw = input.value.trim();
      if (raw === "") return { error: fill(text("empty"), { name: input.name }) };
      const n = Number(raw);
      if (!/^\+?\d+$/.test(raw) || !Number.isSafeInteger(n) || n < 1) {
        return { error: fill(text("positive"), { name: input.name, value: raw }) };
      }
      return { value: n };
    };

    const row = ([target, expression, shape, kind], sizes) => {
      const tr = document.createElement("tr");
      const k = kind(...sizes);
      tr.dataset.kind = k;
      const cells = [
        (target ? `${target} = ` : "") + expression,
        written(shape(...sizes)),
        text(k),
      ];
      cells.forEach((content, i) => {
        const cell = document.createElement(i === 0 ? "th" : "td");
        if (i === 0) cell.scope = "row";
        if (i < 2) {
          const code = document.createElement("code");
          code.textContent = content;
          cell.append(code);
        } else {
          cell.textContent = content;
        }
        cell.className = ["mha-explorer__expression", "mha-explorer__shape", "mha-explorer__kind"][i];
        tr.append(cell);
      });
      return tr;
    };

    const update = () => {
      const parsed = inputs.map(read);
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
        return;
      }
      const sizes = [b, s, d, h, d / h];
      body.replaceChildren(...STEPS.map((step) => row(step, sizes)));
      table.hidden = false;
      box.dataset.state = "ok";
      status.textContent = fill(text("summary"), {
        steps: STEPS.length, output: written(STEPS[STEPS.length - 1][2](...sizes)),
      });
    };

    const form = box.querySelector("form");
    form.addEventListener("submit", (event) => event.preventDefault());
    form.addEventListener("input", update);
    update();
  };

  const start = () => document.querySelectorAll(".mha-explorer").forEach(mount);
  // Instant navigation is off on this site, but if it is turned on, Material's document$ emits
  // each page it swaps in; without it, the page is ready at DOMContentLoaded.
  if (window.document$) window.document$.subscribe(start);
  else if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
