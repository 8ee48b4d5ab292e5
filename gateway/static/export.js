// The page of `scrollback export --html`: the entries of session.js drawn by render.js, as the
// viewer draws them, under a header of the session's title, project, time span and figures.
// Photos are files beside the page, loaded by the browser as they scroll into view; a click
// shows one whole, Escape or a click closes it. Sub-agent threads are not part of an export:
// a Task call names its thread instead of linking it.
"use strict";

(function () {
  const data = typeof SCROLLBACK_EXPORT === "object" ? SCROLLBACK_EXPORT : null;
  const main = document.getElementById("main");
  if (!data) return;
  const el = Render.el;
  Render.configure({ sessionHref: null });
  const session = data.session || {};
  const title = Render.cleanTitle(session.title) || "untitled session";
  document.getElementById("title").textContent = title;
  document.title = title + " · Scrollback export";

  const where = document.getElementById("where");
  const project = el("span", "project", Render.projectName(session, Render.cwdOf(data.entries)));
  if (session.projectDir) project.title = session.projectDir;
  where.append(project);
  const insight = session.insight;
  if (insight && insight.firstTime) {
    const span = el("span", "span");
    span.append(Render.timeNode(insight.firstTime));
    if (insight.lastTime && insight.lastTime !== insight.firstTime) span.append(" – ", Render.timeNode(insight.lastTime));
    where.append(span);
  }
  if (insight) {
    const header = document.getElementById("insight");
    header.hidden = false;
    const entries = (insight.entryCounts || []).reduce((sum, c) => sum + Number(c.count || 0), 0);
    const usage = insight.usage || {};
    const tokens = ["inputTokens", "outputTokens", "cacheCreationInputTokens", "cacheReadInputTokens"]
      .reduce((sum, k) => sum + Number(usage[k] || 0), 0);
    const facts = [
      ["entries", entries.toLocaleString("en-US")],
      ["photos", Number(insight.photoCount || 0).toLocaleString("en-US")],
      ["tokens", tokens.toLocaleString("en-US")],
      ["cost", "$" + Number(insight.costUsd || 0).toFixed(2) + (insight.costComplete ? "" : "+")],
    ];
    for (const [name, value] of facts) {
      const fact = el("span", "fact");
      fact.dataset.fact = name;
      fact.append(el("b", "", value), " " + name);
      header.append(fact);
    }
  }

  const list = el("div", "entries");
  list.setAttribute("aria-label", "messages");
  for (const entry of data.entries || []) list.append(Render.entry(entry, {}));
  Render.pairTools(list);
  // The files are local: the browser's own lazy loading is enough.
  for (const img of list.querySelectorAll("img.photo[data-src]")) img.src = img.dataset.src;
  main.replaceChildren(list);

  function closeFull() {
    const open = document.getElementById("lightbox");
    if (open) open.remove();
  }
  main.addEventListener("click", (event) => {
    const img = event.target.closest && event.target.closest("img.photo");
    if (!img) return;
    closeFull();
    const overlay = el("div", "lightbox");
    overlay.id = "lightbox";
    const full = el("img", "full");
    full.alt = "photo (full size)";
    full.src = img.dataset.full;
    overlay.append(full);
    overlay.addEventListener("click", closeFull);
    document.body.append(overlay);
  });
  document.addEventListener("keydown", (event) => { if (event.key === "Escape") closeFull(); });
  document.body.dataset.ready = "1";
})();
