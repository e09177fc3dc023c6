// #/agents: every agent as a card coloured by its status, with its occupancy per slot.

import { amount, badge, h, setBadge, setData, setText, syncList, when } from "./dom.js";

const DRAINABLE = new Set(["READY", "DEGRADED"]);
const UNDRAINABLE = new Set(["DRAINING", "DRAINED"]);
const ORDER = ["READY", "DEGRADED", "DRAINING", "DRAINED", "BOOTING", "UNKNOWN", "DOWN", "FAILED"];

// "in use of cpu 1 / 4 · mem 64 MiB / 4.0 GiB" over the agents that take work (READY, DEGRADED).
function capacity(agents) {
  const used = new Map();
  const total = new Map();
  for (const a of agents) {
    if (!DRAINABLE.has(a.status)) continue;
    for (const [slot, value] of Object.entries(a.available_slots || {})) {
      total.set(slot, (total.get(slot) || 0) + Number(value));
      used.set(slot, (used.get(slot) || 0) + Number((a.occupied_slots || {})[slot] || 0));
    }
  }
  const parts = [...total.keys()].sort().map((s) => `${s} ${amount(s, used.get(s))} / ${amount(s, total.get(s))}`);
  return parts.length ? `in use: ${parts.join(" · ")}` : "";
}

export class AgentsView {
  constructor(store, flash) {
    this.store = store;
    this.flash = flash;
  }

  mount(root) {
    this.counts = h("div", { class: "counts" });
    this.totals = h("span", { class: "totals muted", id: "capacity" });
    this.grid = h("div", { class: "grid agents", id: "agents" });
    this.empty = h("p", { class: "muted", text: "No agent has registered yet.", hidden: true });
    root.append(h("div", { class: "toolbar" }, h("h2", { text: "Agents" }), this.counts, this.totals), this.empty, this.grid);
  }

  update() {
    const agents = [...this.store.agents.values()].sort((a, b) => a.id.localeCompare(b.id));
    this.empty.hidden = !this.store.loaded.agents || agents.length > 0;
    const byStatus = new Map();
    for (const a of agents) byStatus.set(a.status, (byStatus.get(a.status) || 0) + 1);
    const statuses = ORDER.filter((s) => byStatus.has(s));
    syncList(
      this.counts,
      statuses,
      (s) => s,
      (s) => h("span", { class: "count" }, badge(s), h("b")),
      (el, s) => setText(el.querySelector("b"), byStatus.get(s)),
    );
    setText(this.totals, capacity(agents));
    syncList(this.grid, agents, (a) => a.id, (a) => this.card(a), (el, a) => this.fill(el, a));
  }

  card(agent) {
    return h(
      "article",
      { class: "agent card", "data-agent-id": agent.id },
      h("header", {}, h("span", { class: "name" }), badge(agent.status)),
      h("div", { class: "meta" }),
      h("div", { class: "bars" }),
      h("div", { class: "devices" }),
      h("div", { class: "reason muted" }),
      h("footer", {}, h("span", { class: "beat muted" }), h("span", { class: "actions" })),
    );
  }

  fill(el, agent) {
    setData(el, "status", agent.status);
    setText(el.querySelector(".name"), agent.id);
    setBadge(el.querySelector(".badge"), agent.status);
    setText(
      el.querySelector(".meta"),
      `${agent.scaling_group} · ${agent.running_kernels} kernel${agent.running_kernels === 1 ? "" : "s"}`,
    );
    const slots = Object.keys(agent.available_slots || {}).sort();
    syncList(
      el.querySelector(".bars"),
      slots,
      (s) => s,
      (s) => h("div", { class: "bar" }, h("span", { class: "slot", text: s }), h("span", { class: "track" }, h("span", { class: "fill" })), h("span", { class: "value" })),
      (bar, s) => this.bar(bar, s, agent),
    );
    syncList(
      el.querySelector(".devices"),
      agent.devices || [],
      (d) => d.uuid,
      () => h("span", { class: "device" }),
      (chip, d) => {
        setData(chip, "state", d.status);
        setText(chip, d.status === "healthy" ? `${d.id} ${d.model}` : `${d.id} unhealthy: ${d.reason || "?"}`);
        chip.title = `${d.uuid} · ${d.temperature ?? "?"} °C · ${d.utilization ?? "?"} %`;
      },
    );
    const info = agent.status_info || {};
    const by = info.by && !String(info.reason || "").includes(info.by) ? ` (by ${info.by})` : "";
    setText(el.querySelector(".reason"), info.reason ? `${info.reason}${by}` : "");
    setText(el.querySelector(".beat"), agent.last_heartbeat_at ? `heartbeat ${when(agent.last_heartbeat_at)}` : "no heartbeat yet");
    this.actions(el.querySelector(".actions"), agent);
  }

  bar(bar, slot, agent) {
    const total = Number(agent.available_slots[slot]);
    const used = Number((agent.occupied_slots || {})[slot] || 0);
    const share = total > 0 ? Math.min(1, used / total) : 0;
    const fill = bar.querySelector(".fill");
    const width = `${Math.round(share * 100)}%`;
    if (fill.style.width !== width) fill.style.width = width;
    setData(fill, "level", share >= 0.9 ? "high" : share >= 0.6 ? "mid" : "low");
    setText(bar.querySelector(".value"), `${amount(slot, used)} / ${amount(slot, total)}`);
  }

  actions(box, agent) {
    if (!this.store.isAdmin) return;
    const wanted = DRAINABLE.has(agent.status) ? "Drain" : UNDRAINABLE.has(agent.status) ? "Undrain" : null;
    const current = box.querySelector("button");
    if ((current ? current.textContent : null) === wanted) return;
    box.replaceChildren();
    if (!wanted) return;
    const button = h("button", { type: "button", class: wanted === "Drain" ? "warn" : "", text: wanted });
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        const done = await this.store.agentAction(agent.id, wanted.toLowerCase());
        this.flash(`${agent.id}: ${done.status}`);
      } catch (err) {
        button.disabled = false;
        this.flash(`${wanted} ${agent.id} failed: ${err.message}`, true);
      }
    });
    box.append(button);
  }
}
