// The console's shell: sign-in, the hash router, the one event stream and render coalescing.
//
// The token is kept in this tab's sessionStorage only (never in a URL, never in localStorage),
// and sent in the Authorization header of every request, the stream included.

import { Api, ApiError, EventStream } from "./api.js";
import { AgentsView } from "./agents_view.js";
import { DeploymentView, DeploymentsView } from "./deployments_view.js";
import { setData, setText } from "./dom.js";
import { SessionView, SessionsView } from "./sessions_view.js";
import { Store } from "./store.js";

const TOKEN_KEY = "sokovan.token";
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
// Renders asked for within this many milliseconds are done once.
const RENDER_COALESCE_MS = 30;

export function parseRoute(hash) {
  const [section, id] = hash.replace(/^#\/?/, "").split("/");
  if (section === "sessions") return id ? { name: "session", id, nav: "sessions" } : { name: "sessions", nav: "sessions" };
  if (section === "deployments") return id ? { name: "deployment", id, nav: "deployments" } : { name: "deployments", nav: "deployments" };
  return { name: "agents", nav: "agents" };
}

const $ = (id) => document.getElementById(id);

class Console {
  constructor() {
    this.store = null;
    this.stream = null;
    this.view = null;
    this.route = null;
    this.renderTimer = null;
    this.flashTimer = null;
    $("signin").addEventListener("submit", (e) => {
      e.preventDefault();
      this.signIn($("token").value.trim());
    });
    $("signout").addEventListener("click", () => this.signOut());
    window.addEventListener("hashchange", () => this.navigate());
  }

  start() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) this.signIn(token);
    else this.showSignIn();
  }

  showSignIn(error) {
    $("app").hidden = true;
    $("signin-view").hidden = false;
    const box = $("signin-error");
    box.hidden = !error;
    setText(box, error || "");
    $("token").value = "";
    $("token").focus();
  }

  async signIn(token) {
    if (!token) return;
    const api = new Api(token);
    let me;
    try {
      me = await api.get("/v2/whoami");
    } catch (err) {
      sessionStorage.removeItem(TOKEN_KEY);
      const unauthorized = err instanceof ApiError && err.status === 401;
      this.showSignIn(unauthorized ? "That token is not valid." : `Could not reach the manager: ${err.message}`);
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    this.store = new Store(api, me, () => this.scheduleRender());
    setText($("whoami"), `${me.user} · ${me.project} · ${me.role}`);
    document.body.dataset.role = me.role;
    $("signin-view").hidden = true;
    $("app").hidden = false;
    this.stream = new EventStream(token, {
      onEvent: (name, event) => this.store.apply(name, event),
      onOpen: () => this.reload(),
      onState: (state) => {
        setData($("stream-state"), "state", state);
        setText($("stream-state"), state);
      },
      onUnauthorized: () => this.signOut("The token is no longer valid."),
    });
    if (!location.hash) history.replaceState(null, "", "#/agents");
    this.navigate();
    this.stream.start();
  }

  signOut(error) {
    if (this.stream) this.stream.stop();
    this.stream = null;
    this.store = null;
    this.view = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $("view").replaceChildren();
    setText($("whoami"), "");
    delete document.body.dataset.role;
    this.showSignIn(error);
  }

  navigate() {
    if (!this.store) return;
    const route = parseRoute(location.hash);
    this.route = route;
    for (const link of document.querySelectorAll("[data-nav]")) {
      if (link.dataset.nav === route.nav) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    const root = $("view");
    root.replaceChildren();
    if (route.id && !UUID.test(route.id)) {
      this.view = null;
      root.append(notFound(`"${route.id}" is not an id.`));
      return;
    }
    this.view = this.makeView(route);
    this.store.focus = {
      session: route.name === "session" ? route.id : null,
      deployment: route.name === "deployment" ? route.id : null,
    };
    this.view.mount(root);
    document.title = `Sokovan · ${route.name}${route.id ? ` ${route.id.slice(0, 8)}` : ""}`;
    this.reload();
  }

  makeView(route) {
    const flash = (text, isError) => this.flash(text, isError);
    if (route.name === "sessions") return new SessionsView(this.store);
    if (route.name === "session") return new SessionView(this.store, route.id, flash);
    if (route.name === "deployments") return new DeploymentsView(this.store, flash);
    if (route.name === "deployment") return new DeploymentView(this.store, route.id, flash);
    return new AgentsView(this.store, flash);
  }

  // Reads what the current view shows (on navigation and on every (re)connect of the stream).
  async reload() {
    const { store, route } = this;
    if (!store || !route || (route.id && !UUID.test(route.id))) return;
    try {
      await store.reload(route);
    } catch (err) {
      if (store !== this.store || route !== this.route) return;
      if (err instanceof ApiError && err.status === 401) {
        this.signOut("The token is no longer valid.");
        return;
      }
      if (err instanceof ApiError && err.status === 404 && route.id) {
        this.view = null;
        $("view").replaceChildren(notFound(`No ${route.name} ${route.id} (or it is not yours).`));
        return;
      }
      this.flash(`Reading ${route.name} failed: ${err.message}`, true);
    }
    this.scheduleRender();
  }

  scheduleRender() {
    if (this.renderTimer !== null) return;
    this.renderTimer = setTimeout(() => {
      this.renderTimer = null;
      if (this.view) this.view.update();
    }, RENDER_COALESCE_MS);
  }

  flash(text, isError = false) {
    const box = $("flash");
    setText(box, text);
    setData(box, "kind", isError ? "error" : "info");
    box.hidden = false;
    clearTimeout(this.flashTimer);
    this.flashTimer = setTimeout(() => (box.hidden = true), isError ? 8000 : 4000);
  }
}

function notFound(text) {
  const p = document.createElement("p");
  p.className = "error";
  p.textContent = text;
  return p;
}

new Console().start();
