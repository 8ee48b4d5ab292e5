// The Scrollback viewer: static files, no build step; entries are drawn by render.js.
// "/" lists sessions, newest first, page after page (sub-agents nested under their parent),
// filterable by project; "/sessions/<id>" opens a session at its latest window, loads older
// windows as the reader scrolls up (keeping the scroll position), fetches a photo's 320 px
// thumbnail only when its reserved box enters the viewport (each once), the full image only
// when it is clicked, and appends live events (SSE), keeping the header (title, project, time
// span, insight figures: GET /api/v1/sessions/<id>) current.
// "/?q=..." lists search hits grouped by session; a hit opens "/sessions/<id>?at=<window
// token>&hl=<words>": the window that ends with the hit, its blocks open and the words marked.
// Keys: "/" search, "j"/"k" next/previous message, Esc closes the photo or leaves the box.
"use strict";

const PAGE_SIZE = 50;
const LIST_PAGE_SIZE = 100;
const TOKEN_KEY = "scrollback-token";
// A session whose prompts hold no text yet (never its id: a reader cannot tell ids apart).
const UNTITLED = "untitled session";
const main = document.getElementById("main");
const statusLine = document.getElementById("status");
const el = Render.el;

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function authHeaders(extra) {
  const headers = Object.assign({}, extra || {});
  if (token()) headers.Authorization = "Bearer " + token();
  return headers;
}

// An API failure: the HTTP status and the gateway's error (code, reason, message).
class ApiError extends Error {
  constructor(status, error) {
    super(error.message || error.reason || error.code || String(status));
    this.status = status;
    this.code = error.code || "";
    this.reason = error.reason || "";
  }
}

async function api(path, options) {
  const init = Object.assign({}, options || {});
  init.headers = authHeaders(init.headers);
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, { code: "NETWORK", message: "the gateway did not answer" });
  }
  if (response.status === 401 && !(options && options.noPrompt)) {
    const entered = window.prompt("This gateway needs a bearer token (from your token file):");
    if (entered) { sessionStorage.setItem(TOKEN_KEY, entered.trim()); return api(path, options); }
  }
  if (!response.ok) {
    let error = {};
    try { error = (await response.json()).error || {}; } catch (e) { /* not JSON */ }
    throw new ApiError(response.status, error);
  }
  return response.json();
}

// What went wrong and what to do about it, for the error page.
function explain(error) {
  const status = error.status || 0;
  if (status === 404) {
    return ["Not found", error.reason === "SESSION_NOT_FOUND" || /session/.test(error.message)
      ? "No session with this id is visible to you. It may have been deleted or moved, or belong to a project your token does not cover."
      : "Nothing is at this address.", "Go back to the session list and pick one from there."];
  }
  if (status === 401) {
    return ["A token is needed", "This gateway runs with authentication and the token given was missing or not accepted.",
      "Reload the page and enter the bearer token of your principal (the token file the services read)."];
  }
  if (status === 403) return ["Not allowed", "Your token does not cover this session's project.", "Ask for access, or use a token that covers it."];
  if (status === 409) return ["The transcript changed", error.message, "Open the session again from the list to start from its latest window."];
  if (status === 503 || status === 504 || status === 0) {
    return ["A service is not answering", "The gateway is up but the history or media service is down or still starting (" + (error.message || error.code) + ").",
      "Start them with `scrollback up` (or check its log), then reload this page."];
  }
  if (status === 400) return ["Bad request", error.message, "Check the address; a session id is letters, digits, - and _."];
  return ["Something went wrong", error.message || String(error), "Reload the page; if it persists, check the gateway's log."];
}

function showError(error) {
  const [title, what, todo] = explain(error);
  const box = el("section", "error-page");
  box.setAttribute("role", "alert");
  box.append(el("h1", "", title), el("p", "", what), el("p", "hint", todo));
  const back = el("a", "", "← all sessions");
  back.href = "/";
  box.append(back);
  if (error.code) box.append(el("p", "code", `(${error.status || ""} ${error.code}${error.reason ? " / " + error.reason : ""})`));
  main.replaceChildren(box);
  document.title = title + " · Scrollback";
  document.body.dataset.ready = "1";
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

const renderOptions = { thumbnail: (url) => sized(url, THUMBNAIL_SIZE) };

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
  if (open) { open.remove(); return true; }
  return false;
}

main.addEventListener("click", (event) => {
  const img = event.target.closest && event.target.closest("img.photo");
  if (img) showFull(img.dataset.full);
});

// A session's image list (GET .../images, the rescue line's too), fetched once per page.
const imageLists = new Map();
function sessionImages(sessionId) {
  if (!imageLists.has(sessionId)) {
    imageLists.set(sessionId, api(`/api/v1/sessions/${encodeURIComponent(sessionId)}/images`, { noPrompt: true }));
  }
  return imageLists.get(sessionId);
}

function humanBytes(n) {
  const bytes = Number(n || 0);
  if (bytes >= 1e9) return (bytes / 1e9).toFixed(1) + " GB";
  if (bytes >= 1e6) return (bytes / 1e6).toFixed(bytes >= 1e7 ? 0 : 1) + " MB";
  if (bytes >= 1e3) return Math.round(bytes / 1e3) + " kB";
  return bytes + " B";
}

// "PNG, 9000×9000, 28 MB": what an image is, from the image list (or the ref's declared type
// and approximate size when the list does not have it).
function describeImage(info, img) {
  const type = (info && (info.mediaType || info.declaredMediaType)) || img.dataset.type || "";
  const parts = [type ? type.replace(/^image\//, "").toUpperCase() : "image"];
  if (info && info.width) parts.push(`${info.width}×${info.height}`);
  const bytes = (info && info.sizeBytes) || img.dataset.bytes;
  if (Number(bytes)) parts.push(humanBytes(bytes));
  return parts.join(", ");
}

// Why the media service gave no thumbnail, as a reader reads it.
const REFUSALS = {
  IMAGE_TOO_LARGE: "too large to preview",
  NOT_AN_IMAGE: "not an image this server can preview",
  PIN_MISMATCH: "changed since this page was loaded; reload to see it",
  MEDIA_NOT_FOUND: "no longer in the transcript",
};

// A thumbnail that did not come (IMAGE_TOO_LARGE, NOT_AN_IMAGE, ...): its box says what the
// image is and why there is no preview, with links to open or download the image itself.
// A busy gateway or service (too many downloads or calls at once, a restart) is asked again.
const THUMBNAIL_RETRIES = 3;

async function thumbnailRefused(img) {
  if (img.dataset.refused || !img.isConnected) return;
  img.dataset.refused = "1";
  let reason = "";
  let busy = false;
  if (!img.src.startsWith("data:")) {
    try {
      const response = await fetch(img.src, { headers: authHeaders() });
      if (response.ok) busy = true; // it came this time: the error was passing
      else {
        const error = (await response.json().catch(() => ({}))).error || {};
        reason = error.reason || error.code || String(response.status);
        busy = response.status >= 500 || (response.status === 429 && reason !== "IMAGE_TOO_LARGE");
      }
    } catch (e) { busy = true; }
  }
  const tries = Number(img.dataset.tries || 0);
  if (busy && tries < THUMBNAIL_RETRIES) {
    img.dataset.tries = String(tries + 1);
    img.removeAttribute("src");
    setTimeout(() => { img.dataset.refused = ""; img.src = img.dataset.src; }, 1000 * (tries + 1));
    return;
  }
  let info = null;
  const sessionId = view.sessionId;
  if (img.dataset.uri && sessionId) {
    try {
      const listing = await sessionImages(sessionId);
      info = listing.images.find((i) => i.ref && i.ref.uri === img.dataset.uri) || null;
    } catch (e) { /* described from the ref alone */ }
  }
  const box = el("div", "photo-refused");
  box.dataset.reason = reason;
  box.append(el("span", "refused-what", describeImage(info, img) + ": " + (REFUSALS[reason] || "no preview")));
  if (!img.dataset.full.startsWith("data:")) {
    const open = el("a", "", "open the image");
    open.href = img.dataset.full;
    open.target = "_blank";
    open.rel = "noopener";
    const download = el("a", "", "download it");
    download.href = img.dataset.full;
    download.download = (img.dataset.uri || "image").replace(/\//g, "-");
    const links = el("span", "refused-links");
    links.append(open, " · ", download);
    box.append(links);
  }
  img.replaceWith(box);
}

// A thumbnail's error does not bubble: caught on its way down.
main.addEventListener("error", (event) => {
  const img = event.target;
  if (img && img.matches && img.matches("img.photo")) thumbnailRefused(img);
}, true);

function observePhotos(root) {
  for (const img of root.querySelectorAll("img.photo[data-src]:not([src])")) photoObserver.observe(img);
}

function count(n) { return Number(n || 0).toLocaleString("en-US"); }

function entryTotal(insight) {
  return (insight && insight.entryCounts || []).reduce((sum, c) => sum + Number(c.count || 0), 0);
}

function money(insight) {
  return "$" + Number(insight.costUsd || 0).toFixed(2) + (insight.costComplete ? "" : "+");
}

function plural(n, word, words) { return count(n) + " " + (Number(n) === 1 ? word : words || word + "s"); }

// --- The session list -----------------------------------------------------------------------

const listState = { next: "", project: "", loading: false, byId: new Map(), projects: new Set() };

function sessionCard(s) {
  const item = el("li", "session" + (s.isSubagent ? " subagent" : ""));
  item.dataset.sessionId = s.sessionId;
  if (s.isSubagent && s.parentSessionId) item.dataset.parent = s.parentSessionId;
  const link = el("a", "session-link");
  link.href = "/sessions/" + encodeURIComponent(s.sessionId);
  const title = Render.cleanTitle(s.title) || UNTITLED;
  if (s.isSubagent) link.append(el("span", "badge", "sub-agent"), " ");
  if (s.slimCopyOf) link.append(el("span", "badge", "slim copy"), " ");
  link.append(el("span", "session-title", title));
  const facts = el("span", "session-facts");
  const insight = s.insight;
  const last = (insight && insight.lastTime) || s.modifiedTime;
  facts.append(projectNode(s));
  if (last) facts.append(Render.timeNode(last));
  if (insight) {
    facts.append(el("span", "", plural(entryTotal(insight), "entry", "entries")));
    if (Number(insight.photoCount)) facts.append(el("span", "", plural(insight.photoCount, "photo")));
    if (Number(insight.costUsd) > 0) facts.append(el("span", "", money(insight)));
  }
  if (s.subagentCount) facts.append(el("span", "", plural(s.subagentCount, "sub-agent")));
  link.append(facts);
  item.append(link);
  // Beside the card, not in it: a link inside a link would nest two controls.
  if (s.slimCopyOf) item.append(slimOf(s.slimCopyOf));
  return item;
}

// "slim copy of <the original's title>", linking to the original (its title fetched once).
const originalTitles = new Map();
function slimOf(originalId) {
  const line = el("div", "slim-of", "slim copy of ");
  const link = el("a", "", "the original session");
  link.href = "/sessions/" + encodeURIComponent(originalId);
  line.append(link);
  if (!originalTitles.has(originalId)) {
    originalTitles.set(originalId, api(`/api/v1/sessions/${encodeURIComponent(originalId)}`, { noPrompt: true })
      .then((s) => Render.cleanTitle(s.title) || UNTITLED).catch(() => ""));
  }
  originalTitles.get(originalId).then((title) => { if (title) link.textContent = title; });
  return line;
}

async function showSessions(project) {
  listState.project = project || "";
  listState.next = "";
  listState.byId = new Map();
  document.title = "Sessions · Scrollback";
  const box = el("section", "sessions");
  const head = el("div", "list-head");
  head.append(el("h1", "", "Sessions"));
  const label = el("label", "", "Project ");
  const select = el("select");
  select.id = "project-filter";
  select.append(new Option("all projects", ""));
  label.append(select);
  head.append(label);
  const list = el("ul", "session-list");
  const more = el("button", "more-sessions", "more sessions");
  more.type = "button";
  more.hidden = true;
  box.append(head, list, more);
  main.replaceChildren(box);
  select.addEventListener("change", () => {
    const url = select.value ? "/?" + new URLSearchParams({ project: select.value }) : "/";
    history.pushState(null, "", url);
    showSessions(select.value).catch(showError);
  });
  more.addEventListener("click", () => loadSessions(list, more, select).catch(showError));
  await loadSessions(list, more, select);
  if (!list.children.length) list.append(el("li", "empty", "No sessions under the root yet."));
  // Later pages come as the reader nears the end of the list.
  const sentinel = new IntersectionObserver((records) => {
    if (records.some((r) => r.isIntersecting) && listState.next && !listState.loading) {
      loadSessions(list, more, select).catch(showError);
    }
  });
  sentinel.observe(more);
  document.body.dataset.ready = "1";
}

async function loadSessions(list, more, select) {
  if (listState.loading) return;
  listState.loading = true;
  try {
    const query = new URLSearchParams({ page_size: String(LIST_PAGE_SIZE) });
    if (listState.next) query.set("page_token", listState.next);
    if (listState.project) query.set("project", listState.project);
    const page = await api("/api/v1/sessions?" + query);
    for (const s of page.sessions) {
      // A session the index reached between two pages moves down and may come again.
      if (listState.byId.has(s.sessionId)) continue;
      const card = sessionCard(s);
      listState.byId.set(s.sessionId, card);
      const parent = s.isSubagent && s.parentSessionId ? listState.byId.get(s.parentSessionId) : null;
      if (parent) {
        let nested = parent.querySelector("ul.subagents");
        if (!nested) { nested = el("ul", "subagents"); parent.append(nested); }
        nested.append(card);
      } else list.append(card);
      if (!listState.projects.has(s.projectDir)) {
        listState.projects.add(s.projectDir);
        select.append(new Option(s.projectDir, s.projectDir));
      }
    }
    // A sub-agent listed before its parent (it changed later) moves under it once it is here.
    for (const card of list.querySelectorAll(":scope > li.subagent[data-parent]")) {
      const parent = listState.byId.get(card.dataset.parent);
      if (!parent) continue;
      let nested = parent.querySelector("ul.subagents");
      if (!nested) { nested = el("ul", "subagents"); parent.append(nested); }
      nested.append(card);
    }
    select.value = listState.project;
    listState.next = page.nextPageToken;
    more.hidden = !listState.next;
  } finally {
    listState.loading = false;
  }
}

// --- Search ---------------------------------------------------------------------------------

// What a snippet would show raw: markdown's emphasis, code ticks and heading marks, Claude
// Code's tags (their text stays), Codex's image wrappers, the refs and digests of a slim
// copy's note where an image was.
const SNIPPET_NOISE = /\*\*|__|`+|<\/?[A-Za-z][\w-]*(?: name=\[Image #\d+\])?>|; Scrollback still serves it: [^\]]*|^#{1,6} |\n#{1,6} /g;

// The snippet without its noise, its highlights (code point offsets) moved to match.
function cleanSnippet(snippet) {
  const text = snippet.text || "";
  const drop = new Uint8Array(text.length); // per UTF-16 unit
  for (const found of text.matchAll(SNIPPET_NOISE)) drop.fill(1, found.index, found.index + found[0].length);
  const kept = [];
  const moved = []; // code point offset -> offset in the kept text
  let unit = 0;
  for (const ch of text) {
    moved.push(kept.length);
    if (!drop[unit]) kept.push(ch);
    unit += ch.length;
  }
  moved.push(kept.length);
  const highlights = (snippet.highlights || [])
    .map((h) => ({ start: moved[h.start || 0], end: moved[Math.min(h.end, moved.length - 1)] }))
    .filter((h) => h.end > h.start);
  return { text: kept.join(""), highlights };
}

// A snippet as text nodes with <mark> around each highlight (never innerHTML).
function markedSnippet(raw) {
  const snippet = cleanSnippet(raw);
  const node = el("div", "snippet");
  const chars = Array.from(snippet.text || ""); // highlights count code points
  let at = 0;
  for (const h of snippet.highlights || []) {
    const start = h.start || 0;
    node.append(chars.slice(at, start).join(""), el("mark", "", chars.slice(start, h.end).join("")));
    at = h.end;
  }
  node.append(chars.slice(at).join(""));
  return node;
}

function hitWords(hit) {
  const chars = Array.from(hit.snippet.text || "");
  return [...new Set((hit.snippet.highlights || []).map((h) => chars.slice(h.start || 0, h.end).join("").toLowerCase()))];
}

// Where a hit is read: the window that ends with it, its words marked.
function hitHref(sessionId, hit) {
  return `/sessions/${encodeURIComponent(sessionId)}?` +
    new URLSearchParams({ at: hit.windowPageToken, hl: hitWords(hit).join(" "), hit: hit.entryUuid });
}

async function showSearch(q, pageToken) {
  document.getElementById("search-q").value = q;
  document.title = q + " · search · Scrollback";
  const query = new URLSearchParams({ q, page_size: "50" });
  if (pageToken) query.set("page_token", pageToken);
  const page = await api("/api/v1/search?" + query);
  const box = el("section", "hits");
  box.append(el("h1", "", `Search: ${q}`));
  const groups = new Map();
  for (const hit of page.hits) {
    if (!groups.has(hit.sessionId)) groups.set(hit.sessionId, []);
    groups.get(hit.sessionId).push(hit);
  }
  const sessions = await Promise.all([...groups.keys()].map((id) =>
    api(`/api/v1/sessions/${encodeURIComponent(id)}`).catch(() => null)));
  let i = 0;
  for (const [sessionId, hits] of groups) {
    const session = sessions[i++];
    const group = el("section", "hit-group");
    const head = el("h2", "hit-session");
    const title = el("a", "", (session && Render.cleanTitle(session.title)) || UNTITLED);
    // The heading leads to the session's first hit, as its snippet does: opened and marked.
    title.href = hitHref(sessionId, hits[0]);
    head.append(title);
    const facts = el("div", "session-facts");
    facts.append(projectNode(hits[0]), el("span", "hit-count", plural(hits.length, "hit")));
    if (session && session.insight && session.insight.lastTime) facts.append(Render.timeNode(session.insight.lastTime));
    group.append(head, facts);
    for (const hit of hits) {
      const link = el("a", "hit-link");
      link.href = hitHref(sessionId, hit);
      const meta = el("small", "hit-meta");
      meta.append(el("span", "", hit.role || hit.type));
      if (hit.timestamp) meta.append(" · ", Render.timeNode(hit.timestamp));
      link.append(meta, markedSnippet(hit.snippet));
      group.append(link);
    }
    box.append(group);
  }
  if (!page.hits.length) box.append(el("p", "", "No hits. Words match whole; \"quotes\" match a phrase."));
  if (page.nextPageToken) {
    const more = el("a", "more", "more hits");
    more.href = "/?" + new URLSearchParams({ q, page_token: page.nextPageToken });
    box.append(more);
  }
  main.replaceChildren(box);
  document.body.dataset.ready = "1";
}

// --- One session ----------------------------------------------------------------------------

const view = { sessionId: "", older: "", loading: false, list: null, more: null, session: null, cwd: "" };

// The project as the CLI names it (its last path component), its directory's name on hover.
function projectNode(session, cwd) {
  const node = el("span", "project", Render.projectName(session, cwd));
  if (session.projectDir) node.title = session.projectDir;
  return node;
}

// The header: title (tags removed), project, time span and the insight figures. Loaded beside
// the window (never before it) into lines of the bar whose height is fixed, so nothing below
// moves when it arrives; called again as live lines arrive. A failure leaves it as it was.
async function showHeader(sessionId) {
  let session;
  try {
    session = await api(`/api/v1/sessions/${encodeURIComponent(sessionId)}`, { noPrompt: true });
  } catch (error) {
    return;
  }
  const firstHeader = !view.session;
  view.session = session;
  if (firstHeader && session.followed) showSend(true);
  const title = Render.cleanTitle(session.title) || UNTITLED;
  document.getElementById("title").textContent = title;
  document.title = title + " · Scrollback";
  const where = document.getElementById("where");
  where.replaceChildren();
  where.append(projectNode(session, view.cwd));
  const insight = session.insight;
  if (insight && insight.firstTime) {
    const span = el("span", "span");
    span.append(Render.timeNode(insight.firstTime));
    if (insight.lastTime && insight.lastTime !== insight.firstTime) span.append(" – ", Render.timeNode(insight.lastTime));
    where.append(span);
  }
  if (session.slimCopyOf) where.append(slimOf(session.slimCopyOf));
  if (session.isSubagent && session.parentSessionId) {
    const back = el("a", "parent-link", "← parent session");
    back.href = "/sessions/" + encodeURIComponent(session.parentSessionId) +
      (session.parentToolUseId ? "#call-" + encodeURIComponent(session.parentToolUseId) : "");
    where.append(back);
  }
  const header = document.getElementById("insight");
  header.hidden = false;
  if (!insight) return;
  const usage = insight.usage || {};
  const tokens = ["inputTokens", "outputTokens", "cacheCreationInputTokens", "cacheReadInputTokens"]
    .reduce((sum, k) => sum + Number(usage[k] || 0), 0);
  const facts = [
    ["entries", count(entryTotal(insight))],
    ["photos", count(insight.photoCount)],
    ["tokens", count(tokens)],
    ["cost", money(insight)],
  ];
  const nodes = [];
  for (const [name, value] of facts) {
    const fact = el("span", "fact");
    fact.dataset.fact = name;
    fact.append(el("b", "", value), " " + (value === "1" ? name.replace(/ies$/, "y").replace(/s$/, "") : name));
    nodes.push(fact);
  }
  const models = (insight.models || []).map((m) => m.model).join(", ");
  if (models) nodes.push(el("span", "models", models));
  if (session.subagentCount) nodes.push(el("span", "models", plural(session.subagentCount, "sub-agent")));
  header.replaceChildren(...nodes);
  header.title = `input ${count(usage.inputTokens)} · output ${count(usage.outputTokens)} · ` +
    `cache write ${count(usage.cacheCreationInputTokens)} · ` +
    `cache read ${count(usage.cacheReadInputTokens)} (cost: an estimate from list prices)`;
}

let headerTimer = null;
function refreshHeaderSoon() {
  if (headerTimer) return;
  headerTimer = setTimeout(() => { headerTimer = null; showHeader(view.sessionId); }, 500);
}

function nearBottom() {
  const scroller = document.scrollingElement;
  return scroller.scrollHeight - scroller.scrollTop - window.innerHeight < 80;
}

function renderInto(target, entries, prepend) {
  const fragment = document.createDocumentFragment();
  for (const entry of entries) fragment.append(Render.entry(entry, renderOptions));
  if (prepend) target.prepend(fragment); else target.append(fragment);
  Render.pairTools(target);
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
    renderInto(view.list, window_.entries, true);
    view.older = window_.nextPageToken;
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

function openSessionFrame(sessionId) {
  view.sessionId = sessionId;
  view.cwd = "";
  document.getElementById("title").textContent = "";
  view.list = el("div", "entries");
  view.list.setAttribute("aria-label", "messages");
}

async function showSession(sessionId) {
  openSessionFrame(sessionId);
  const boot = await api(`/api/v1/sessions/${encodeURIComponent(sessionId)}/bootstrap?page_size=${PAGE_SIZE}`);
  view.more = el("div", "more", boot.nextPageToken ? "loading older…" : "start of session");
  renderInto(view.list, boot.entries, false);
  view.cwd = Render.cwdOf(boot.entries);
  for (const message of boot.pending) view.list.append(renderAccepted(message));
  view.older = boot.nextPageToken;
  showHeader(sessionId);
  main.replaceChildren(view.more, view.list);
  // Opened from a sub-agent's thread (#call-<id>): older windows load until the call is here.
  const wanted = location.hash.startsWith("#call-") ? decodeURIComponent(location.hash.slice(1)) : "";
  let target = wanted ? document.getElementById(wanted) : null;
  const deadline = Date.now() + 15000;
  while (wanted && !target && view.older && Date.now() < deadline) {
    if (view.loading) await new Promise((resolve) => setTimeout(resolve, 50));
    else await loadOlder();
    target = document.getElementById(wanted);
  }
  if (target) { target.open = true; target.scrollIntoView({ block: "center" }); target.classList.add("linked"); }
  // Open at the end, then watch photos: only the boxes now in view load.
  else document.scrollingElement.scrollTop = document.scrollingElement.scrollHeight;
  observePhotos(view.list);
  window.addEventListener("scroll", maybeLoadOlder, { passive: true });
  maybeLoadOlder();
  watch(sessionId, boot.watchPosition);
  setUpSend(sessionId);
  document.body.dataset.ready = "1";
}

// Marks each occurrence of `words` in the text under `root` (text nodes split, never HTML).
function markWords(root, words) {
  const wanted = words.filter(Boolean).map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  if (!wanted.length) return [];
  const pattern = new RegExp("(" + wanted.join("|") + ")", "gi");
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) nodes.push(walker.currentNode);
  const marks = [];
  for (const node of nodes) {
    const text = node.nodeValue;
    pattern.lastIndex = 0;
    if (!pattern.test(text) || node.parentElement.closest("mark, summary")) continue;
    const fragment = document.createDocumentFragment();
    let at = 0;
    pattern.lastIndex = 0;
    for (const found of text.matchAll(pattern)) {
      fragment.append(text.slice(at, found.index));
      const mark = el("mark", "found", found[0]);
      marks.push(mark);
      fragment.append(mark);
      at = found.index + found[0].length;
    }
    fragment.append(text.slice(at));
    node.replaceWith(fragment);
  }
  return marks;
}

// Jump to a search hit: the window that ends with it (no live tail: this is the past), its
// blocks open and the searched words marked.
async function showSessionAt(sessionId, at, words, hitUuid) {
  openSessionFrame(sessionId);
  const query = new URLSearchParams({ page_token: at, page_size: String(PAGE_SIZE) });
  const window_ = await api(`/api/v1/sessions/${encodeURIComponent(sessionId)}/window?${query}`);
  view.more = el("div", "more", window_.nextPageToken ? "loading older…" : "start of session");
  renderInto(view.list, window_.entries, false);
  view.cwd = Render.cwdOf(window_.entries);
  let hit = hitUuid ? view.list.querySelector(`.entry[data-uuid="${CSS.escape(hitUuid)}"]`) : null;
  hit = hit || view.list.lastElementChild;
  const latest = el("a", "more", "go to the latest messages");
  latest.href = "/sessions/" + encodeURIComponent(sessionId);
  view.older = window_.nextPageToken;
  showHeader(sessionId);
  main.replaceChildren(view.more, view.list, latest);
  if (hit) {
    hit.classList.add("hit");
    // A result folded into its call is read there.
    const places = [hit, ...view.list.querySelectorAll(`.tool-result[data-from-offset="${hit.dataset.offset}"]`)];
    for (const place of places.slice(1)) place.closest(".entry").classList.add("hit");
    const marks = [];
    for (const place of places) {
      for (const details of place.querySelectorAll("details")) details.open = true;
      let up = place.parentElement;
      while (up && up !== view.list) { if (up.tagName === "DETAILS") up.open = true; up = up.parentElement; }
      marks.push(...markWords(place, words));
    }
    const first = marks.find((m) => m.getClientRects().length) || (hit.classList.contains("folded") ? places[1] : hit);
    if (first) first.scrollIntoView({ block: "center" });
  }
  observePhotos(view.list);
  window.addEventListener("scroll", maybeLoadOlder, { passive: true });
  document.body.dataset.ready = "1";
}

function renderAccepted(message) {
  const node = el("div", "entry accepted");
  node.dataset.seq = message.seq;
  const head = el("div", "role");
  head.append(el("span", "who", "queued for the session's process"));
  if (message.acceptedTime) head.append(" · ", Render.timeNode(message.acceptedTime));
  const body = el("div", "body");
  body.append(el("div", "text", message.text));
  for (const attachment of message.attachments) body.append(Render.photo(attachment.url, renderOptions));
  node.append(head, body);
  return node;
}

function appendLive(node) {
  const follow = nearBottom();
  view.list.append(node);
  Render.pairTools(view.list);
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
          if (event.type === "error") {
            let reason = "";
            try { const e = JSON.parse(event.data); reason = e.reason || e.code; } catch (e) { /* as sent */ }
            statusLine.textContent = "stopped: " + (reason || event.data);
            return;
          }
          if (event.type === "entry") {
            appendLive(Render.entry(JSON.parse(event.data), renderOptions));
            refreshHeaderSoon();
          } else if (event.type === "accepted") {
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

// The send box: open where a program follows the session (a chat key is bound to it: the
// header's `followed`), else one line that opens it.
function showSend(open) {
  const form = document.getElementById("send");
  const toggle = document.getElementById("send-open");
  document.getElementById("send-bar").hidden = false;
  form.hidden = !open;
  toggle.hidden = open;
  toggle.setAttribute("aria-expanded", String(open));
}

function setUpSend(sessionId) {
  const form = document.getElementById("send");
  const input = document.getElementById("send-text");
  const result = document.getElementById("send-result");
  showSend(!!(view.session && view.session.followed));
  document.getElementById("send-open").addEventListener("click", () => { showSend(true); input.focus(); });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    const txn = "web-" + Date.now().toString(36) + Math.random().toString(36).slice(2, 10);
    try {
      await api(`/api/v1/sessions/${encodeURIComponent(sessionId)}/messages`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ client_txn_id: txn, text }),
      });
      input.value = "";
      result.textContent = "queued";
    } catch (error) {
      result.textContent = "not queued: " + error.message;
    }
  });
}

// --- Keys -----------------------------------------------------------------------------------

function messages() {
  return [...document.querySelectorAll(".entries > .entry:not(.folded):not(.meta)")];
}

function move(step) {
  const all = messages();
  if (!all.length) return;
  const current = document.querySelector(".entry.current");
  let index = current ? all.indexOf(current) : -1;
  if (index < 0) {
    // From the message nearest the middle of the viewport.
    const middle = window.innerHeight / 2;
    index = all.findIndex((e) => e.getBoundingClientRect().bottom > middle);
    if (index < 0) index = all.length - 1;
    if (step > 0) index -= 1;
    if (step < 0) index += 1;
  }
  const next = all[Math.max(0, Math.min(all.length - 1, index + step))];
  if (current) current.classList.remove("current");
  next.classList.add("current");
  next.focus({ preventScroll: true });
  next.scrollIntoView({ block: "nearest" });
}

document.addEventListener("keydown", (event) => {
  const typing = event.target.closest && event.target.closest("input, textarea, select");
  if (event.key === "Escape") {
    if (closeFull()) return;
    if (typing) event.target.blur();
    return;
  }
  if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
  if (event.key === "/") {
    event.preventDefault();
    document.getElementById("search-q").focus();
  } else if (event.key === "j") move(1);
  else if (event.key === "k") move(-1);
});

// Relative times age while the page is open.
setInterval(() => { for (const node of document.querySelectorAll("time[data-stamp]")) Render.setTime(node); }, 60000);

const match = location.pathname.match(/^\/sessions\/([^/]+)$/);
const params = new URLSearchParams(location.search);
let page;
if (match && params.get("at")) {
  page = showSessionAt(decodeURIComponent(match[1]), params.get("at"),
    (params.get("hl") || "").split(" "), params.get("hit") || "");
} else if (match) page = showSession(decodeURIComponent(match[1]));
else if (params.get("q")) page = showSearch(params.get("q"), params.get("page_token") || "");
else if (location.pathname === "/") page = showSessions(params.get("project") || "");
else page = Promise.reject(new ApiError(404, { code: "NOT_FOUND", message: "no such page" }));
window.addEventListener("popstate", () => location.reload());
page.catch(showError);
