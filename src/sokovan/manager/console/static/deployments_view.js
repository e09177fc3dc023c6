// #/deployments (each with its replicas' health) and #/deployments/<id> (its routes).

import { badge, h, pageHead, setBadge, setData, setFacts, setText, shortId, syncList, table, when } from "./dom.js";

// A number input and a Scale button (admins only): PATCH replicas.
function scaleControl(store, deployment, flash) {
  const input = h("input", { type: "number", min: "0", max: "100", class: "replicas", "aria-label": "replicas", value: deployment.replicas });
  input.addEventListener("input", () => (input.dataset.dirty = "1"));
  const button = h("button", { type: "button", text: "Scale" });
  button.addEventListener("click", async () => {
    const replicas = Number.parseInt(input.value, 10);
    if (!Number.isInteger(replicas) || replicas < 0) {
      flash("replicas must be a whole number, 0 or more", true);
      return;
    }
    button.disabled = true;
    try {
      const done = await store.scale(deployment.id, replicas);
      delete input.dataset.dirty;
      flash(`${done.name}: ${done.replicas} replicas`);
    } catch (err) {
      flash(`scale failed: ${err.message}`, true);
    } finally {
      button.disabled = false;
    }
  });
  return h("span", { class: "scale" }, input, button);
}

function syncScale(box, deployment) {
  const input = box.querySelector("input");
  if (input && !input.dataset.dirty && document.activeElement !== input) input.value = String(deployment.replicas);
}

export class DeploymentsView {
  constructor(store, flash) {
    this.store = store;
    this.flash = flash;
  }

  mount(root) {
    this.rows = h("tbody", { id: "deployments" });
    this.empty = h("p", { class: "muted", text: "No deployments.", hidden: true });
    const head = ["Deployment", "Status", "Replicas (healthy / target)", "Owner", "Endpoint", "Scaling group", ""];
    root.append(
      h("div", { class: "toolbar" }, h("h2", { text: "Deployments" })),
      table(head, this.rows),
      this.empty,
    );
  }

  update() {
    const items = [...this.store.deployments.values()].sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
    this.empty.hidden = !this.store.loaded.deployments || items.length > 0;
    syncList(this.rows, items, (d) => d.id, (d) => h(
      "tr",
      { class: "deployment", "data-deployment-id": d.id },
      h("td", {}, h("a", { href: `#/deployments/${d.id}` })),
      h("td", {}, badge(d.status)),
      h("td", { class: "replicas-text" }),
      h("td", { class: "owner" }),
      h("td", { class: "endpoint" }),
      h("td", { class: "sgroup" }),
      h("td", { class: "actions" }, this.store.isAdmin ? scaleControl(this.store, d, this.flash) : null),
    ), (el, d) => {
      setData(el, "status", d.status);
      setText(el.querySelector("a"), d.name);
      setBadge(el.querySelector(".badge"), d.status);
      setText(el.querySelector(".replicas-text"), `${d.ready_replicas} / ${d.replicas}`);
      setText(el.querySelector(".owner"), d.owner);
      setText(el.querySelector(".endpoint"), d.endpoint || "—");
      setText(el.querySelector(".sgroup"), d.scaling_group);
      syncScale(el.querySelector(".actions"), d);
    });
  }
}

export class DeploymentView {
  constructor(store, id, flash) {
    this.store = store;
    this.id = id;
    this.flash = flash;
  }

  mount(root) {
    ({ head: this.head, title: this.title, status: this.status } = pageHead("deployment", "data-deployment-id", this.id));
    this.facts = h("dl", { class: "facts" });
    this.routes = h("tbody", { id: "routes" });
    const head = ["Route", "Status", "Endpoint", "Health", "Last probe", "Replica session"];
    root.append(
      h("p", {}, h("a", { href: "#/deployments", text: "← Deployments" })),
      this.head,
      this.facts,
      h("h3", { text: "Routes" }),
      table(head, this.routes),
    );
  }

  update() {
    const d = this.store.deployments.get(this.id);
    if (!d) return;
    if (this.store.isAdmin && !this.head.querySelector(".scale")) this.head.append(scaleControl(this.store, d, this.flash));
    if (this.store.isAdmin) syncScale(this.head, d);
    setText(this.title, d.name);
    setBadge(this.status, d.status);
    setData(this.head, "status", d.status);
    setFacts(this.facts, [
      ["Id", d.id],
      ["Owner", d.owner],
      ["Replicas", `${d.ready_replicas} healthy of ${d.replicas}`],
      ["Endpoint", d.endpoint],
      ["Image", d.definition?.image],
      ["Scaling group", d.scaling_group],
      ["Why", d.status_info?.pending_reason],
      ["Created", when(d.created_at)],
    ]);
    const routes = this.store.routes.get(this.id) || [];
    syncList(this.routes, routes, (r) => r.id, (r) => h(
      "tr",
      { class: "route", "data-route-id": r.id },
      h("td", { class: "id" }),
      h("td", {}, badge(r.status)),
      h("td", { class: "endpoint" }),
      h("td", { class: "health" }),
      h("td", { class: "probe muted" }),
      h("td", { class: "session" }),
    ), (el, r) => {
      setData(el, "status", r.status);
      setText(el.querySelector(".id"), shortId(r.id));
      setBadge(el.querySelector(".badge"), r.status);
      setText(el.querySelector(".endpoint"), r.endpoint || "—");
      const hl = r.health || {};
      setText(el.querySelector(".health"), `✓ ${hl.consecutive_successes ?? 0} · ✗ ${hl.consecutive_failures ?? 0}${hl.last_status ? ` · ${hl.last_status}` : ""}`);
      setText(el.querySelector(".probe"), when(hl.last_checked_at));
      const cell = el.querySelector(".session");
      if (r.session_id && !cell.firstChild) cell.append(h("a", { href: `#/sessions/${r.session_id}`, text: shortId(r.session_id) }));
    });
  }
}
