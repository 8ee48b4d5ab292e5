// The Scrollback viewer: no dependencies, no build step.
// "/" lists sessions; "/sessions/<id>" opens a session at its latest window, loads older
// windows as the reader scrolls up (keeping the scroll position), fetches a photo's 320 px
// thumbnail only when its reserved box enters the viewport (each once), the full image only
// when it is clicked, and appends live events (SSE). A session opens under a header of its
// insight (entries, photos, tokens, cost: GET /api/v1/sessions/<id>).
// "/?q=..." lists search hits (newest first, matched words marked); a hit opens
// "/sessions/<id>?at=<window token>": the window that ends with the hit, older ones on scroll.
"use strict";

const PAGE_SIZE = 50;
const TOKEN_KEY = "scrollback-token";
const main = document.getElementById("main");
const statusLine = document.getElementById("status");

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function authHeaders(extra) {
  const headers = Object.assign({}, extra || {});
  if (token()) headers.Authorization = "Bearer " + token();
  return headers;
}

async function api(path, options) {
  const init = Object.assign({}, options || {});
  init.headers = authHeaders(init.headers);
  const response = await fetch(path, init);
  if (response.status === 401) {
    const entered = window.prompt("Bearer token");
    if (entered) { sessionStorage.setItem(TOKEN_KEY, entered); return api(path, options); }
  }
  if (!response.ok) {
    // The gateway's fixed text for the cause (its reason), else the status.
    let text = String(response.status);
    try {
      const error = (await response.json()).error;
      text = error.message || error.reason || error.code;
    } catch (e) { /* not JSON */ }
    throw new Error(text);
  }
  return response.json();
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// Photos: the box is reserved by CSS (width and height), the bytes load on intersection.
const photoObserver = new IntersectionObserver((records) => {
  for (const record of records) {
    if (!record.isIntersecting) continue;
    const img = record.target;
    photoObserver.unobserve(img);
    img.src = img.dataset.src;
  }
}, { rootMargin: "0px" });

// The thumbnail size the boxes show (one of the gateway's 96, 320, 960).
const THUMBNAIL_SIZE = 320;

// A photo URL at a thumbnail size (the size is outside the URL's signature); an inline
// data: URL has no thumbnails and stays as it is.
function sized(url, size) {
  if (url.startsWith("data:")) return url;
  return url + (url.includes("?") ? "&" : "?") + "size=" + size;
}

function photo(url) {
  const img = el("img", "photo");
  img.width = 320;
  img.height = 240;
  img.alt = "photo";
  img.loading = "lazy";
  img.decoding = "async";
  img.dataset.src = sized(url, THUMBNAIL_SIZE);
  img.dataset.full = url;
  img.title = "open the full image";
  img.addEventListener("click", () => showFull(url));
  return img;
}

// The full image over the page, fetched only now; a click or Escape closes it.
function showFull(url) {
  closeFull();
  const overlay = el("div", "lightbox");
  overlay.id = "lightbox";
  const img = el("img", "full");
  img.alt = "photo (full size)";
  img.src = url;
  overlay.append(img);
  overlay.addEventListener("click", closeFull);
  document.body.append(overlay);
}

function closeFull() {
  const open = document.getElementById("lightbox");
  if (open) open.remove();
}

document.addEventListener("keydown", (event) => { if (event.key === "Escape") closeFull(); });

function observePhotos(root) {
  for (const img of root.querySelectorAll("img.photo[data-src]:not([src])")) {
    photoObserver.observe(img);
  }
}

// The image enumeration rule (docs/contract.md §2): depth-first over message.content,
// descending into the "content" array of any block; the i-th image has index i.
function renderBlocks(blocks, entry, counter, into) {
  for (const block of blocks) {
    if (!block || typeof block !== "object") continue;
    if (block.type === "image") {
      const index = counter.next++;
      const ref = entry.refs.find((r) => r.index === index);
      if (entry.failed_image_indexes.includes(index)) {
        into.append(el("div", "failed", "[image not displayed]"));
      } else if (ref) {
        into.append(photo(ref.url));
      } else if (block.source && block.source.data && /^image\/(png|jpeg|gif|webp)$/.test(block.source.media_type || "")) {
        into.append(photo("data:" + block.source.media_type + ";base64," + block.source.data));
      } else {
        into.append(el("div", "failed", "[image not displayed]"));
      }
      continue;
    }
    if (block.type === "text") {
      into.append(el("div", "text", block.text || ""));
    } else if (block.type === "thinking" || block.type === "redacted_thinking") {
      const details = el("details", "thinking");
      details.append(el("summary", "", "thinking"), el("pre", "", block.thinking || ""));
      into.append(details);
    } else if (block.type === "tool_use") {
      const details = el("details", "tool");
      details.append(el("summary", "", "tool call: " + (block.name || "")),
        el("pre", "", JSON.stringify(block.input, null, 2)));
      into.append(details);
    } else if (block.type === "tool_result") {
      const details = el("details", "tool");
      details.append(el("summary", "", "tool result"));
      const inner = Array.isArray(block.content) ? block.content : [];
      if (typeof block.content === "string") details.append(el("pre", "", block.content));
      for (const part of inner) {
        if (part && part.type === "text") details.append(el("pre", "", part.text || ""));
      }
      into.append(details);
      // Photos of a result stay visible (screenshots are what readers look for).
      renderBlocks(inner.filter((p) => p && p.type !== "text"), entry, counter, into);
      continue;
    }
    if (Array.isArray(block.content) && block.type !== "tool_result") {
      renderBlocks(block.content, entry, counter, into);
    }
  }
}

function renderEntry(entry) {
  const line = entry.line || {};
  const message = line.message;
  if (!message || (entry.type !== "user" && entry.type !== "assistant")) {
    const meta = el("div", "entry meta", entry.type || "entry");
    if (line.summary) meta.textContent += ": " + line.summary;
    meta.dataset.offset = entry.byte_offset;
    return meta;
  }
  const node = el("div", "entry " + entry.type);
  node.dataset.offset = entry.byte_offset;
  node.append(el("div", "role", (message.role || entry.type) + (entry.timestamp ? " · " + entry.timestamp : "")));
  if (entry.oversize) node.append(el("div", "text", String(message.content)));
  else if (typeof message.content === "string") node.append(el("div", "text", message.content));
  else if (Array.isArray(message.content)) renderBlocks(message.content, entry, { next: 0 }, node);
  return node;
}

function renderAccepted(message) {
  const node = el("div", "entry accepted");
  node.dataset.seq = message.seq;
  node.append(el("div", "role", "sent · " + message.accepted_time), el("div", "text", message.text));
  for (const attachment of message.attachments) node.append(photo(attachment.url));
  return node;
}

async function showSessions() {
  const page = await api("/api/v1/sessions?page_size=200");
  const list = el("div", "sessions");
  for (const s of page.sessions) {
    const link = el("a", "", s.title || s.session_id);
    link.href = "/sessions/" + encodeURIComponent(s.session_id);
    link.append(el("small", "", s.project_dir + " · " + Math.round(s.size_bytes / 1024) + " KB"));
    list.append(link);
  }
  if (!page.sessions.length) list.append(el("p", "", "No sessions."));
  main.replaceChildren(list);
}

// A snippet as text nodes with <mark> around each highlight (never innerHTML).
function marked(text, highlights) {
  const node = el("div", "text");
  const chars = Array.from(text); // highlights count code points
  let at = 0;
  for (const [start, end] of highlights) {
    node.append(chars.slice(at, start).join(""), el("mark", "", chars.slice(start, end).join("")));
    at = end;
  }
  node.append(chars.slice(at).join(""));
  return node;
}

async function showSearch(q, pageToken) {
  document.getElementById("search-q").value = q;
  const query = new URLSearchParams({ q, page_size: "50" });
  if (pageToken) query.set("page_token", pageToken);
  const page = await api("/api/v1/search?" + query);
  const list = el("div", "hits");
  for (const hit of page.hits) {
    const link = el("a", "hit-link");
    link.href = `/sessions/${encodeURIComponent(hit.session_id)}?` +
      new URLSearchParams({ at: hit.window_page_token });
    link.append(el("small", "", `${hit.project_dir} · ${hit.session_id} · ${hit.type} · ${hit.timestamp}`),
      marked(hit.snippet, hit.highlights));
    list.append(link);
  }
  if (!page.hits.length) list.append(el("p", "", "No hits."));
  if (page.next_page_token) {
    const more = el("a", "more", "more hits");
    more.href = "/?" + new URLSearchParams({ q, page_token: page.next_page_token });
    list.append(more);
  }
  main.replaceChildren(list);
  document.body.dataset.ready = "1";
}

const view = { sessionId: "", older: "", loading: false, list: null, more: null };

function count(n) { return Number(n || 0).toLocaleString("en-US"); }

// The insight header: what the session holds, from the insight index. It loads beside the
// window (never before it) into a line of the bar whose height is fixed, so nothing below
// moves when it arrives; a failure leaves the line empty.
async function showInsight(sessionId) {
  const header = document.getElementById("insight");
  header.replaceChildren();
  header.hidden = false;
  let session;
  try {
    session = await api(`/api/v1/sessions/${encodeURIComponent(sessionId)}`);
  } catch (error) {
    return;
  }
  const insight = session.insight;
  if (!insight) return;
  const usage = insight.usage;
  const tokens = usage.input_tokens + usage.output_tokens +
    usage.cache_creation_input_tokens + usage.cache_read_input_tokens;
  const cost = "$" + insight.cost_usd.toFixed(2) + (insight.cost_complete ? "" : "+");
  const facts = [
    ["entries", count(insight.entries)],
    ["photos", count(insight.photo_count)],
    ["tokens", count(tokens)],
    ["cost", cost],
  ];
  for (const [name, value] of facts) {
    const fact = el("span", "fact");
    fact.dataset.fact = name;
    fact.append(el("b", "", value), " " + (value === "1" ? name.replace(/s$/, "") : name));
    header.append(fact);
  }
  const models = insight.models.map((m) => m.model).join(", ");
  if (models) header.append(el("span", "models", models));
  if (session.subagent_count) {
    header.append(el("span", "models", session.subagent_count + " sub-agents"));
  }
  header.title = `input ${count(usage.input_tokens)} · output ${count(usage.output_tokens)} · ` +
    `cache write ${count(usage.cache_creation_input_tokens)} · ` +
    `cache read ${count(usage.cache_read_input_tokens)} (cost: an estimate from list prices)`;
}

function nearBottom() {
  const scroller = document.scrollingElement;
  return scroller.scrollHeight - scroller.scrollTop - window.innerHeight < 80;
}

async function loadOlder() {
  if (view.loading || !view.older) return;
  view.loading = true;
  try {
    const query = new URLSearchParams({ page_token: view.older, page_size: String(PAGE_SIZE) });
    const window_ = await api(`/api/v1/sessions/${encodeURIComponent(view.sessionId)}/window?${query}`);
    const scroller = document.scrollingElement;
    const before = scroller.scrollHeight;
    const top = scroller.scrollTop;
    const fragment = document.createDocumentFragment();
    for (const entry of window_.entries) fragment.append(renderEntry(entry));
    view.list.prepend(fragment);
    view.older = window_.next_page_token;
    if (!view.older) view.more.textContent = "start of session";
    // Keep what the reader looks at in place: shift by what was added above it.
    scroller.scrollTop = top + (scroller.scrollHeight - before);
    observePhotos(view.list);
  } finally {
    view.loading = false;
  }
  maybeLoadOlder();
}

function maybeLoadOlder() {
  if (document.scrollingElement.scrollTop < 600 && view.older) loadOlder();
}

async function showSession(sessionId) {
  view.sessionId = sessionId;
  document.getElementById("title").textContent = sessionId;
  const boot = await api(`/api/v1/sessions/${encodeURIComponent(sessionId)}/bootstrap?page_size=${PAGE_SIZE}`);
  view.more = el("div", "more", boot.next_page_token ? "loading older…" : "start of session");
  view.list = el("div", "entries");
  for (const entry of boot.entries) view.list.append(renderEntry(entry));
  for (const message of boot.pending) view.list.append(renderAccepted(message));
  view.older = boot.next_page_token;
  showInsight(sessionId);
  main.replaceChildren(view.more, view.list);
  // Open at the end, then watch photos: only the boxes now in view load.
  document.scrollingElement.scrollTop = document.scrollingElement.scrollHeight;
  observePhotos(view.list);
  window.addEventListener("scroll", maybeLoadOlder, { passive: true });
  maybeLoadOlder();
  watch(sessionId, boot.watch_position);
  setUpSend(sessionId);
  document.body.dataset.ready = "1";
}

// Jump to a search hit: the window that ends with it (no live tail: this is the past).
async function showSessionAt(sessionId, at) {
  view.sessionId = sessionId;
  document.getElementById("title").textContent = sessionId;
  const query = new URLSearchParams({ page_token: at, page_size: String(PAGE_SIZE) });
  const window_ = await api(`/api/v1/sessions/${encodeURIComponent(sessionId)}/window?${query}`);
  view.more = el("div", "more", window_.next_page_token ? "loading older…" : "start of session");
  view.list = el("div", "entries");
  for (const entry of window_.entries) view.list.append(renderEntry(entry));
  const hit = view.list.lastElementChild;
  if (hit) hit.classList.add("hit");
  const latest = el("a", "more", "go to the latest messages");
  latest.href = "/sessions/" + encodeURIComponent(sessionId);
  view.older = window_.next_page_token;
  showInsight(sessionId);
  main.replaceChildren(view.more, view.list, latest);
  if (hit) hit.scrollIntoView({ block: "center" });
  observePhotos(view.list);
  window.addEventListener("scroll", maybeLoadOlder, { passive: true });
  document.body.dataset.ready = "1";
}

function appendLive(node) {
  const follow = nearBottom();
  view.list.append(node);
  observePhotos(node);
  if (follow) document.scrollingElement.scrollTop = document.scrollingElement.scrollHeight;
}

// Server-Sent Events read with fetch (EventSource cannot send a bearer token); on a drop
// it reconnects with Last-Event-ID, so nothing is lost or repeated.
async function watch(sessionId, position) {
  let lastId = position;
  const url = `/api/v1/sessions/${encodeURIComponent(sessionId)}/events`;
  for (;;) {
    try {
      const response = await fetch(url, { headers: authHeaders(lastId ? { "Last-Event-ID": lastId } : {}) });
      if (!response.ok) throw new Error(String(response.status));
      statusLine.textContent = "live";
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const event = { type: "message", data: "", id: null };
          for (const line of block.split("\n")) {
            const colon = line.indexOf(":");
            if (colon <= 0) continue;
            const field = line.slice(0, colon);
            const text = line.slice(colon + 1).replace(/^ /, "");
            if (field === "event") event.type = text;
            else if (field === "data") event.data += text;
            else if (field === "id") event.id = text;
          }
          if (event.type === "error") { statusLine.textContent = "stopped: " + event.data; return; }
          if (event.type === "entry") appendLive(renderEntry(JSON.parse(event.data)));
          else if (event.type === "accepted") {
            const message = JSON.parse(event.data);
            if (!view.list.querySelector(`[data-seq="${message.seq}"]`)) appendLive(renderAccepted(message));
          }
          if (event.id !== null) lastId = event.id;
        }
      }
    } catch (error) {
      statusLine.textContent = "reconnecting";
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

function setUpSend(sessionId) {
  const form = document.getElementById("send");
  const input = document.getElementById("send-text");
  form.hidden = false;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    const txn = "web-" + Date.now().toString(36) + Math.random().toString(36).slice(2, 10);
    await api(`/api/v1/sessions/${encodeURIComponent(sessionId)}/messages`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ client_txn_id: txn, text }),
    });
    input.value = "";
  });
}

const match = location.pathname.match(/^\/sessions\/([^/]+)$/);
const params = new URLSearchParams(location.search);
let page;
if (match && params.get("at")) page = showSessionAt(decodeURIComponent(match[1]), params.get("at"));
else if (match) page = showSession(decodeURIComponent(match[1]));
else if (params.get("q")) page = showSearch(params.get("q"), params.get("page_token") || "");
else page = showSessions();
page.catch((error) => {
  main.replaceChildren(el("p", "failed", "Error: " + error.message));
});
