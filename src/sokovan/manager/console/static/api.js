// REST v2 and the /v2/events stream, both with the token in the Authorization header.

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

export class Api {
  constructor(token) {
    this.token = token;
  }

  async request(method, path, body) {
    const headers = { Authorization: `Bearer ${this.token}` };
    const init = { method, headers };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    const text = await resp.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = { detail: text };
      }
    }
    if (!resp.ok) throw new ApiError(resp.status, data);
    return data;
  }

  get(path) {
    return this.request("GET", path);
  }

  post(path, body) {
    return this.request("POST", path, body);
  }

  patch(path, body) {
    return this.request("PATCH", path, body);
  }

  del(path) {
    return this.request("DELETE", path);
  }

  // Every item of a list endpoint, following next_cursor up to `max` items.
  async all(path, max = 2000) {
    const items = [];
    let cursor = null;
    do {
      const sep = path.includes("?") ? "&" : "?";
      const page = await this.get(`${path}${sep}limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
      items.push(...page.items);
      cursor = page.next_cursor;
    } while (cursor && items.length < max);
    return items;
  }
}

// Splits a text/event-stream body into {event, data} messages; comment lines are skipped.
export function parseMessages(buffer) {
  const messages = [];
  let rest = buffer.replace(/\r\n/g, "\n");
  let end;
  while ((end = rest.indexOf("\n\n")) >= 0) {
    const block = rest.slice(0, end);
    rest = rest.slice(end + 2);
    let event = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
    }
    if (data.length) messages.push({ event, data: data.join("\n") });
  }
  return { messages, rest };
}

// The one live stream of the page: `fetch` with a streamed body (EventSource cannot send a
// header). It reconnects after a pause that grows to 10 s; `onOpen` runs on every (re)connect, so
// the page re-reads what it shows and misses nothing that happened while it was away.
export class EventStream {
  constructor(token, { onEvent, onOpen, onState, onUnauthorized }) {
    this.token = token;
    this.onEvent = onEvent;
    this.onOpen = onOpen;
    this.onState = onState;
    this.onUnauthorized = onUnauthorized;
    this.controller = null;
    this.stopped = false;
  }

  start() {
    this.run();
  }

  stop() {
    this.stopped = true;
    if (this.controller) this.controller.abort();
  }

  async run() {
    let pause = 500;
    while (!this.stopped) {
      this.controller = new AbortController();
      try {
        const resp = await fetch("/v2/events", {
          headers: { Authorization: `Bearer ${this.token}`, Accept: "text/event-stream" },
          signal: this.controller.signal,
          cache: "no-store",
        });
        if (resp.status === 401) {
          this.onUnauthorized();
          return;
        }
        if (!resp.ok || !resp.body) throw new Error(`HTTP ${resp.status}`);
        this.onState("live");
        pause = 500;
        await this.onOpen();
        await this.read(resp.body.getReader());
      } catch (err) {
        if (this.stopped) return;
      }
      if (this.stopped) return;
      this.onState("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, pause));
      pause = Math.min(pause * 2, 10000);
    }
  }

  async read(reader) {
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      const { messages, rest } = parseMessages(buffer);
      buffer = rest;
      for (const message of messages) {
        let data;
        try {
          data = JSON.parse(message.data);
        } catch {
          continue;
        }
        this.onEvent(message.event, data);
      }
    }
  }
}
