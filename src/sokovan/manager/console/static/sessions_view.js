// #/sessions (recent sessions by status, with why each waits) and #/sessions/<id> (its kernels,
// its history as a timeline and its retry chain).

import { badge, h, pageHead, setBadge, setData, setFacts, setText, shortId, slotsText, syncList, table, when } from "./dom.js";
import { isTerminal } from "./store.js";

const ORDER = ["PENDING", "SCHEDULED", "PREPARING", "PULLING", "PREPARED", "CREATING", "RUNNING", "TERMINATING", "TERMINATED", "ERROR", "CANCELLED"];

// A history row that changed the status (a row with a side missing counts as one).
function moved(item) {
  return !item.from_status || !item.to_status || item.from_status !== item.to_status;
}

// A history message in words: rows written before the stale message was fixed carry Python's
// enum reprs ("expected [<SessionStatus.TERMINATING: 'TERMINATING'>]"), shown as their values.
const ENUM_REPR = /<[A-Za-z_][\w.]*\.([A-Za-z_]\w*): '[^']*'>/g;
const EXPECTED_LIST = /expected \[([^\]]*)\]/g;

function cleanMessage(message) {
  if (message === null || message === undefined) return "";
  const names = (list) => list.split(",").map((n) => n.trim().replace(/^['"]|['"]$/g, "")).filter(Boolean);
  return String(message)
    .replace(ENUM_REPR, "$1")
    .replace(EXPECTED_LIST, (_, list) => `expected ${names(list).join(" or ")}`);
}

// An estimated start as people read it: "in 2m 05s (14:03:20)", or "now" once it is due.
function startText(iso) {
  const at = new Date(iso);
  const seconds = Math.round((at.getTime() - Date.now()) / 1000);
  const clock = at.toLocaleTimeString();
  if (seconds <= 0) return `now (${clock})`;
  const minutes = Math.floor(seconds / 60);
  const rest = String(seconds % 60).padStart(2, "0");
  return minutes ? `in ${minutes}m ${rest}s (${clock})` : `in ${seconds}s (${clock})`;
}

// Why a session is where it is: the reason it waits (and when it should start), or what ended it.
function why(session) {
  const info = session.status_info || {};
  if (session.status === "PENDING") {
    const reason = info.pending_reason || "waiting for the next placement cycle";
    return info.estimated_start_at ? `${reason} · expected to start ${startText(info.estimated_start_at)}` : reason;
  }
  const parts = [info.cause, info.message].filter(Boolean);
  return parts.join(": ");
}

export class SessionsView {
  constructor(store) {
    this.store = store;
    this.filter = null;
  }

  mount(root) {
    this.chips = h("div", { class: "counts" });
    this.rows = h("tbody", { id: "sessions" });
    const head = ["Session", "Status", "Type", "Owner", "Image", "Resources", "Why", "Created"];
    this.more = h("button", { type: "button", class: "quiet", text: "Load more" });
    this.more.addEventListener("click", async () => {
      await this.store.loadMoreSessions();
      this.store.changed();
    });
    this.empty = h("p", { class: "muted", text: "No sessions yet.", hidden: true });
    root.append(
      h("div", { class: "toolbar" }, h("h2", { text: "Sessions" }), this.chips),
      table(head, this.rows),
      this.empty,
      this.more,
    );
  }

  update() {
    const all = [...this.store.sessions.values()].sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
    const counts = new Map();
    for (const s of all) counts.set(s.status, (counts.get(s.status) || 0) + 1);
    const chips = [null, ...ORDER.filter((s) => counts.has(s))];
    syncList(this.chips, chips, (s) => s || "ALL", (s) => this.chip(s), (el, s) => {
      setText(el.querySelector("b"), s ? counts.get(s) : all.length);
      el.classList.toggle("active", this.filter === s);
    });
    const shown = this.filter ? all.filter((s) => s.status === this.filter) : all;
    syncList(this.rows, shown, (s) => s.id, (s) => this.row(s), (el, s) => this.fill(el, s));
    this.empty.hidden = !this.store.loaded.sessions || all.length > 0;
    this.more.hidden = !this.store.sessionsCursor;
  }

  chip(status) {
    const el = h("button", { type: "button", class: "chip" }, status ? badge(status) : "all", " ", h("b"));
    el.addEventListener("click", () => {
      this.filter = this.filter === status ? null : status;
      this.update();
    });
    return el;
  }

  row(session) {
    return h(
      "tr",
      { class: "session", "data-session-id": session.id },
      h("td", {}, h("a", { href: `#/sessions/${session.id}` })),
      h("td", {}, badge(session.status)),
      h("td", { class: "type" }),
      h("td", { class: "owner" }),
      h("td", { class: "image" }),
      h("td", { class: "resources" }),
      h("td", { class: "why" }),
      h("td", { class: "created muted" }),
    );
  }

  fill(el, s) {
    setData(el, "status", s.status);
    setText(el.querySelector("a"), s.name || shortId(s.id));
    setBadge(el.querySelector(".badge"), s.status);
    setText(el.querySelector(".type"), s.type);
    setText(el.querySelector(".owner"), s.owner);
    setText(el.querySelector(".image"), s.image);
    setText(el.querySelector(".resources"), `${s.cluster_size > 1 ? `${s.cluster_size} × ` : ""}${slotsText(s.resources)}`);
    setText(el.querySelector(".why"), why(s));
    setText(el.querySelector(".created"), when(s.created_at));
  }
}

export class SessionView {
  constructor(store, id, flash) {
    this.store = store;
    this.id = id;
    this.flash = flash;
  }

  mount(root) {
    ({ head: this.head, title: this.title, status: this.status } = pageHead("session", "data-session-id", this.id));
    this.terminate = h("button", { type: "button", class: "warn", text: "Terminate", hidden: true });
    this.terminate.addEventListener("click", () => this.onTerminate());
    this.head.append(this.terminate);
    this.facts = h("dl", { class: "facts" });
    this.kernels = h("tbody", { id: "kernels" });
    this.timeline = h("ol", { class: "timeline", id: "history" });
    // Handler runs that moved nothing are hidden unless asked for.
    this.showAll = false;
    this.allToggle = h("input", { type: "checkbox", id: "history-all" });
    this.allToggle.addEventListener("change", () => {
      this.showAll = this.allToggle.checked;
      this.update();
    });
    this.hiddenNote = h("span", { class: "muted", id: "history-hidden" });
    const historyHead = h("label", { class: "muted" }, this.allToggle, " show runs that moved nothing ", this.hiddenNote);
    this.chain = h("ol", { class: "chain", id: "retry-chain" });
    const kernelHead = ["Kernel", "Role", "Status", "Agent", "Exit code"];
    root.append(
      h("p", {}, h("a", { href: "#/sessions", text: "← Sessions" })),
      this.head,
      this.facts,
      h("h3", { text: "Kernels" }),
      table(kernelHead, this.kernels),
      h("div", { class: "columns" },
        h("section", {}, h("h3", { text: "History" }), historyHead, this.timeline),
        h("section", {}, h("h3", { text: "Retry chain" }), this.chain)),
    );
  }

  update() {
    const s = this.store.sessions.get(this.id);
    if (!s) return;
    setText(this.title, s.name || s.id);
    setBadge(this.status, s.status);
    setData(this.head, "status", s.status);
    this.terminate.hidden = isTerminal(s.status);
    const info = s.status_info || {};
    setFacts(this.facts, [
      ["Id", s.id],
      ["Owner", s.owner],
      ["Type", s.type],
      ["Image", s.image],
      ["Command", s.command],
      ["Resources", `${s.cluster_size} × ${slotsText(s.resources)} (${s.cluster_mode})`],
      ["Scaling group", s.scaling_group],
      ["Priority", `${s.priority}${s.preemptible ? ", preemptible" : ""}`],
      ["Result", s.result],
      ["Why", why(s)],
      ["Attempt", s.retry_state],
      ["Created", when(s.created_at)],
      ["Status since", when(s.status_changed_at)],
      ["Ended", when(s.terminated_at)],
    ]);
    if (info.preempted_by) this.facts.append(h("dt", { text: "Preempted by" }), h("dd", {}, h("a", { href: `#/sessions/${info.preempted_by}`, text: shortId(info.preempted_by) })));
    syncList(this.kernels, s.kernels, (k) => k.id, (k) => h("tr", { "data-kernel-id": k.id }, h("td", { class: "id" }), h("td", { class: "role" }), h("td", {}, badge(k.status)), h("td", { class: "agent" }), h("td", { class: "exit" })), (el, k) => {
      setData(el, "status", k.status);
      setText(el.querySelector(".id"), shortId(k.id));
      setText(el.querySelector(".role"), k.cluster_role);
      setBadge(el.querySelector(".badge"), k.status);
      setText(el.querySelector(".agent"), k.agent_id || "—");
      setText(el.querySelector(".exit"), k.exit_code ?? "");
    });
    const history = this.store.history.get(this.id) || [];
    const shown = this.showAll ? history : history.filter(moved);
    const hidden = history.length - history.filter(moved).length;
    setText(this.hiddenNote, hidden && !this.showAll ? `(${hidden} hidden)` : "");
    this.timeline.replaceChildren(...shown.map((item) => this.step(item)));
    const attempts = this.store.attempts.get(this.id) || [];
    this.chain.replaceChildren(...attempts.map((a, i) => h(
      "li",
      { class: a.id === this.id ? "current" : "", "data-session-id": a.id, "data-status": a.status },
      h("a", { href: `#/sessions/${a.id}`, text: `attempt ${i + 1} · ${shortId(a.id)}` }), " ", badge(a.status),
      a.cause || a.retry_cause ? h("span", { class: "muted", text: ` ${a.cause || `retry of ${a.retry_cause}`}` }) : null,
    )));
    if (!attempts.length) this.chain.append(h("li", { class: "muted", text: "no retries" }));
  }

  step(item) {
    const moved = item.from_status !== item.to_status && item.to_status;
    return h(
      "li",
      { "data-result": item.result },
      h("time", { class: "muted", text: when(item.created_at) }),
      h("div", {}, h("b", { text: item.handler }), " ", h("span", { class: "result", text: item.result }),
        moved ? h("span", { class: "move", text: ` ${item.from_status || "—"} → ${item.to_status}` }) : null),
      item.message ? h("div", { class: "muted", text: cleanMessage(item.message) }) : null,
    );
  }

  async onTerminate() {
    this.terminate.disabled = true;
    try {
      await this.store.terminate(this.id);
      this.flash(`terminating ${shortId(this.id)}`);
    } catch (err) {
      this.flash(`terminate failed: ${err.message}`, true);
    } finally {
      this.terminate.disabled = false;
    }
  }
}
