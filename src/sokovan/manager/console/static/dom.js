// Small DOM helpers. Text always goes in as text (never as HTML), so no value from the API can
// inject markup.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// Sets an element's text only when it changed (keeps selections and avoids layout work).
export function setText(el, text) {
  const value = text === undefined || text === null ? "" : String(text);
  if (el.textContent !== value) el.textContent = value;
}

export function setData(el, name, value) {
  const text = value === undefined || value === null ? "" : String(value);
  if (el.dataset[name] !== text) el.dataset[name] = text;
}

// Keeps `container`'s children in the order of `items`, one element per key: new keys get
// `create(item)`, every kept or new element gets `update(el, item)`, keys that are gone are
// removed. Elements survive updates, so an input being typed into is not replaced.
export function syncList(container, items, keyOf, create, update) {
  const existing = new Map();
  for (const child of Array.from(container.children)) {
    if (child.dataset.key !== undefined) existing.set(child.dataset.key, child);
    else child.remove();
  }
  let cursor = container.firstElementChild;
  for (const item of items) {
    const key = String(keyOf(item));
    let el = existing.get(key);
    if (el) existing.delete(key);
    else {
      el = create(item);
      el.dataset.key = key;
    }
    update(el, item);
    if (el !== cursor) container.insertBefore(el, cursor);
    else cursor = cursor.nextElementSibling;
  }
  for (const el of existing.values()) el.remove();
}

export function badge(status) {
  return h("span", { class: "badge", "data-badge": status, text: status });
}

export function setBadge(el, status) {
  setText(el, status);
  setData(el, "badge", status);
}

const UNITS = ["", "Ki", "Mi", "Gi", "Ti", "Pi"];

export function bytes(value) {
  let n = Number(value);
  if (!Number.isFinite(n)) return String(value);
  let unit = 0;
  while (n >= 1024 && unit < UNITS.length - 1) {
    n /= 1024;
    unit += 1;
  }
  return `${n >= 10 || unit === 0 ? Math.round(n) : n.toFixed(1)} ${UNITS[unit]}B`;
}

// A slot amount as a person reads it: memory in binary units, the rest as plain numbers.
export function amount(slot, value) {
  if (slot === "mem" || slot.endsWith(".mem")) return bytes(value);
  const n = Number(value);
  return Number.isFinite(n) ? String(Math.round(n * 100) / 100) : String(value);
}

export function slotsText(slots) {
  if (!slots) return "";
  return Object.entries(slots)
    .map(([slot, value]) => `${slot} ${amount(slot, value)}`)
    .join(", ");
}

export function when(iso) {
  if (!iso) return "";
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return String(iso);
  return at.toLocaleString(undefined, { hour12: false });
}

export function shortId(id) {
  return id ? String(id).slice(0, 8) : "";
}

// A table with a header row of `headings` around `body` (a <tbody>).
export function table(headings, body) {
  return h("table", { class: "table" }, h("thead", {}, h("tr", {}, headings.map((c) => h("th", { text: c })))), body);
}

// The heading of one thing's page: its name, its status badge, and `data-<attr>` = its id.
export function pageHead(kind, attr, id) {
  const title = h("h2");
  const status = badge("…");
  const head = h("div", { class: `toolbar ${kind}-head`, [attr]: id }, title, status, h("span", { class: "spacer" }));
  return { head, title, status };
}

// A <dl> of [label, value] pairs, leaving out the empty ones.
export function setFacts(dl, pairs) {
  const shown = pairs.filter(([, v]) => v !== null && v !== undefined && v !== "");
  dl.replaceChildren(...shown.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { text: v })]));
}
