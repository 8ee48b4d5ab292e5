// The rescue line of a session page (docs/contract.md §14): "images (N, M too large)", which
// opens a panel of every image and document with its API position, size, pixels and problems,
// and "download a slim copy" (the session with its images cut, as Claude Code can resume it).
// It loads after the page, into a line of its own under the bar; a failure leaves it empty.
"use strict";

(function () {
  const found = location.pathname.match(/^\/sessions\/([^/]+)$/);
  if (!found) return;
  const sessionId = decodeURIComponent(found[1]);
  const base = `/api/v1/sessions/${encodeURIComponent(sessionId)}`;
  const line = el("div", "rescue");
  line.id = "rescue";
  document.getElementById("bar").append(line);

  async function download(event) {
    event.preventDefault();
    // A bearer token cannot ride on a plain link: fetch with it, then hand the bytes over.
    const response = await fetch(base + "/slim", { headers: authHeaders() });
    if (!response.ok) { line.append(el("span", "failed", " download failed")); return; }
    const url = URL.createObjectURL(await response.blob());
    const link = el("a");
    link.href = url;
    link.download = `${sessionId}.slim.jsonl`;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  }

  // The list in a region of its own that scrolls (and can be scrolled from the keyboard),
  // never taller than the screen under the bar's first lines.
  function panel(listing) {
    const box = el("div", "images-panel");
    box.id = "images-panel";
    box.tabIndex = 0;
    box.setAttribute("role", "region");
    box.setAttribute("aria-label", "images of this session");
    const table = el("table", "images");
    const head = el("tr");
    for (const name of ["API position", "entry", "kind", "size", "pixels", "problems", "preview"]) {
      const cell = el("th", "", name);
      cell.scope = "col";
      head.append(cell);
    }
    table.append(head);
    for (const image of listing.images) {
      const row = el("tr", image.problems.length ? "problem" : "");
      row.append(
        el("td", "", image.apiPath || "(not sent)"),
        el("td", "", `${image.sessionId === sessionId ? "" : image.sessionId + " "}${image.entryUuid}`),
        el("td", "", `${image.kind} ${image.mediaType || image.declaredMediaType}`),
        el("td", "", count(image.sizeBytes) + " B"),
        el("td", "", image.width ? `${image.width}×${image.height}` : ""),
        el("td", "", image.problems.join(", ")),
      );
      const cell = el("td");
      if (image.url) {
        const thumb = el("img");
        thumb.loading = "lazy";
        thumb.src = sized(image.url, 96);
        thumb.alt = image.apiPath;
        // A refused thumbnail (too many pixels) says so; the row says the rest.
        thumb.addEventListener("error", () => {
          const link = el("a", "", "no preview: open");
          link.href = image.url;
          link.target = "_blank";
          link.rel = "noopener";
          thumb.replaceWith(link);
        });
        cell.append(thumb);
      }
      row.append(cell);
      table.append(row);
    }
    box.append(table);
    return box;
  }

  async function load() {
    const listing = await sessionImages(sessionId);
    const totals = listing.totals;
    const toggle = el("button", "images-toggle",
      `images (${totals.images}, ${totals.withProblems} too large)`);
    let shown = null;
    toggle.setAttribute("aria-expanded", "false");
    toggle.setAttribute("aria-controls", "images-panel");
    toggle.addEventListener("click", () => {
      toggle.setAttribute("aria-expanded", String(!shown));
      if (shown) { shown.remove(); shown = null; return; }
      shown = panel(listing);
      line.after(shown);
    });
    const slim = el("a", "slim-download", "download a slim copy");
    slim.href = base + "/slim";
    slim.addEventListener("click", download);
    line.append(toggle, " ", slim);
  }

  load().catch(() => { /* the line stays empty */ });
})();
