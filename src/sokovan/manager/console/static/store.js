// What the page knows, and how each event of /v2/events changes it.
//
// An event is applied at once from its own fields (a status moves on the page immediately), and
// what the event does not carry (occupancy, kernels, a pending reason, history) is re-read with a
// throttle per thing: at most one request per `THROTTLE_MS` for a session, a deployment or a list,
// and one re-read of the fleet's agents per `FLEET_THROTTLE_MS`, however many events arrive.
// Nothing is re-read without an event.

const THROTTLE_MS = 250;
// The fleet (up to thousands of cards, re-read page by page) at most once a second: under load
// every kernel event dirties an agent, and a grid no one reads faster gains nothing from more.
const FLEET_THROTTLE_MS = 1000;
const TERMINAL = new Set(["TERMINATED", "ERROR", "CANCELLED"]);
// Past this many agents waiting for a re-read, one list read is cheaper than one read each.
const AGENT_BATCH = 20;

export class Store {
  constructor(api, me, onChange) {
    this.api = api;
    this.me = me;
    this.onChange = onChange;
    this.agents = new Map();
    this.sessions = new Map();
    this.sessionsCursor = null;
    this.deployments = new Map();
    this.history = new Map(); // session id → history items (newest first)
    this.attempts = new Map(); // session id → attempts (oldest first)
    this.routes = new Map(); // deployment id → routes
    this.loaded = { agents: false, sessions: false, deployments: false };
    this.timers = new Map();
    this.dirtyAgents = new Set();
    this.focus = { session: null, deployment: null };
  }

  get isAdmin() {
    return this.me.role === "admin";
  }

  changed() {
    this.onChange();
  }

  // Runs `fn` once within `ms` of the first call for `key`; later calls in that time join it.
  throttle(key, fn, ms = THROTTLE_MS) {
    if (this.timers.has(key)) return;
    this.timers.set(
      key,
      setTimeout(async () => {
        this.timers.delete(key);
        try {
          await fn();
        } catch (err) {
          if (err && err.status === 404) return;
          console.warn(`console: re-reading ${key} failed`, err);
        }
        this.changed();
      }, ms),
    );
  }

  // -- reads ---------------------------------------------------------------------------------

  async loadAgents() {
    const items = await this.api.all("/v2/agents");
    this.agents = new Map(items.map((a) => [a.id, a]));
    this.loaded.agents = true;
  }

  async loadSessions() {
    const page = await this.api.get("/v2/sessions?limit=100");
    const fresh = new Map(page.items.map((s) => [s.id, s]));
    // Keep what "Load more" brought in; the newest page replaces its own part.
    for (const [id, s] of this.sessions) if (!fresh.has(id) && this.loaded.sessions) fresh.set(id, s);
    this.sessions = fresh;
    if (!this.loaded.sessions) this.sessionsCursor = page.next_cursor;
    this.loaded.sessions = true;
  }

  async loadMoreSessions() {
    if (!this.sessionsCursor) return;
    const page = await this.api.get(`/v2/sessions?limit=100&cursor=${encodeURIComponent(this.sessionsCursor)}`);
    for (const s of page.items) this.sessions.set(s.id, s);
    this.sessionsCursor = page.next_cursor;
  }

  async loadSession(id) {
    const [session, history, attempts] = await Promise.all([
      this.api.get(`/v2/sessions/${id}`),
      this.api.get(`/v2/sessions/${id}/history?limit=500&all=true`), // the timeline hides the no-op runs itself
      this.api.get(`/v2/sessions/${id}/attempts`),
    ]);
    this.sessions.set(id, session);
    this.history.set(id, history.items);
    this.attempts.set(id, attempts.items);
  }

  async loadDeployments() {
    const items = await this.api.all("/v2/deployments");
    this.deployments = new Map(items.map((d) => [d.id, d]));
    this.loaded.deployments = true;
  }

  async loadDeployment(id) {
    const [deployment, routes] = await Promise.all([
      this.api.get(`/v2/deployments/${id}`),
      this.api.all(`/v2/deployments/${id}/routes`),
    ]);
    this.deployments.set(id, deployment);
    this.routes.set(id, routes);
  }

  // What the current view shows, read again (on navigation and after the stream reconnects).
  async reload(route) {
    const reads = [];
    if (route.name === "agents") reads.push(this.loadAgents());
    if (route.name === "sessions") reads.push(this.loadSessions());
    if (route.name === "session") reads.push(this.loadSession(route.id));
    if (route.name === "deployments") reads.push(this.loadDeployments());
    if (route.name === "deployment") reads.push(this.loadDeployment(route.id));
    await Promise.all(reads);
  }

  // -- events --------------------------------------------------------------------------------

  apply(name, event) {
    if (name.startsWith("agent.")) this.onAgent(event);
    else if (name.startsWith("kernel.")) this.onKernel(event);
    else if (name.startsWith("session.")) this.onSession(name, event);
    else if (name.startsWith("deployment.") || name.startsWith("route.")) this.onDeployment(event);
    this.changed();
  }

  onAgent(event) {
    if (!event.agent_id) return;
    const agent = this.agents.get(event.agent_id);
    if (agent && event.to) {
      agent.status = event.to;
      agent.status_changed_at = event.at;
    }
    if (this.loaded.agents) this.refreshAgent(event.agent_id);
  }

  onKernel(event) {
    if (event.agent_id && this.loaded.agents) this.refreshAgent(event.agent_id);
    if (event.session_id && this.focus.session === event.session_id) this.refreshSession(event.session_id);
  }

  onSession(name, event) {
    const id = event.session_id;
    if (!id) return;
    const session = this.sessions.get(id);
    if (session && name === "session.status" && event.to) {
      session.status = event.to;
      session.status_changed_at = event.at;
    }
    if (session && name === "session.pending_reason") {
      session.status_info = { ...session.status_info, pending_reason: event.detail?.pending_reason };
    }
    if (this.focus.session === id || (event.preempted_by && this.focus.session === event.preempted_by)) {
      this.refreshSession(this.focus.session);
    }
    if (this.loaded.sessions) {
      // A new session, or one whose status left something on it the event does not carry.
      const stale = !session || name !== "session.pending_reason";
      if (stale) this.throttle("sessions", () => this.loadSessions());
    }
  }

  onDeployment(event) {
    const id = event.deployment_id;
    if (this.loaded.deployments) this.throttle("deployments", () => this.loadDeployments());
    if (id && this.focus.deployment === id) this.throttle(`deployment:${id}`, () => this.loadDeployment(id));
  }

  refreshAgent(id) {
    this.dirtyAgents.add(id);
    this.throttle("agents", async () => {
      const ids = [...this.dirtyAgents];
      this.dirtyAgents.clear();
      if (ids.length > AGENT_BATCH) {
        await this.loadAgents();
        return;
      }
      const agents = await Promise.all(ids.map((a) => this.api.get(`/v2/agents/${encodeURIComponent(a)}`).catch(() => null)));
      for (const agent of agents) if (agent) this.agents.set(agent.id, agent);
    }, FLEET_THROTTLE_MS);
  }

  refreshSession(id) {
    this.throttle(`session:${id}`, () => this.loadSession(id));
  }

  // -- actions -------------------------------------------------------------------------------

  async agentAction(id, action) {
    const agent = await this.api.post(`/v2/agents/${encodeURIComponent(id)}/${action}`, {});
    this.agents.set(agent.id, agent);
    this.changed();
    return agent;
  }

  async scale(id, replicas) {
    const deployment = await this.api.patch(`/v2/deployments/${id}`, { replicas });
    this.deployments.set(deployment.id, deployment);
    this.changed();
    return deployment;
  }

  async terminate(id) {
    await this.api.del(`/v2/sessions/${id}`);
    this.refreshSession(id);
  }
}

export function isTerminal(status) {
  return TERMINAL.has(status);
}
