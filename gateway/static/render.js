// How a transcript reads: entries (the gateway's canonical JSON: `json` the line, `mediaRefs`
// each with a `url`) turned into DOM nodes. Shared by the viewer and the HTML export.
// Markdown goes through marked, then DOMPurify (raw HTML in a transcript is shown as text,
// never parsed); code blocks are highlighted by highlight.js; Claude Code's own tags
// (<command-name>, <local-command-stdout>, <ide_opened_file>, <system-reminder>, ...) become
// commands, outputs and notes; ANSI colours become classes; a tool call is one line with its
// main argument and its result folded into it. No transcript text is ever assigned as HTML
// except through DOMPurify (markdown and highlight.js's output both pass through it).
"use strict";

const Render = (function () {
  // sessionHref(id): the link to another session (a sub-agent's thread), or null where there
  // is none to link to (an export).
  const settings = { sessionHref: (id) => "/sessions/" + encodeURIComponent(id) };

  function configure(options) { Object.assign(settings, options); }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  // --- ANSI ---------------------------------------------------------------------------------

  const ANSI = /\x1b\[([0-9;]*)m/g;
  const ANSI_OTHER = /\x1b\[[0-9;?]*[A-Za-ln-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][A-Z0-9]|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]/g;

  function stripAnsi(text) {
    return String(text).replace(ANSI, "").replace(ANSI_OTHER, "");
  }

  // Text with SGR sequences as spans (bold, dim, italic, underline, the 16 colours as classes,
  // 256 and true colours through the CSSOM, which the page's CSP allows); other escapes dropped.
  function ansi(text) {
    const out = document.createDocumentFragment();
    const source = String(text).replace(ANSI_OTHER, "");
    let state = {};
    let at = 0;
    const push = (piece) => {
      if (!piece) return;
      const classes = [];
      if (state.bold) classes.push("ansi-bold");
      if (state.dim) classes.push("ansi-dim");
      if (state.italic) classes.push("ansi-italic");
      if (state.underline) classes.push("ansi-underline");
      if (typeof state.fg === "number") classes.push("ansi-fg-" + state.fg);
      if (typeof state.bg === "number") classes.push("ansi-bg-" + state.bg);
      if (!classes.length && !state.fgRgb && !state.bgRgb) { out.append(piece); return; }
      const span = el("span", classes.join(" "), piece);
      if (state.fgRgb) span.style.color = state.fgRgb;
      if (state.bgRgb) span.style.backgroundColor = state.bgRgb;
      out.append(span);
    };
    for (const found of source.matchAll(ANSI)) {
      push(source.slice(at, found.index));
      at = found.index + found[0].length;
      const codes = found[1] === "" ? [0] : found[1].split(";").map((c) => Number(c || 0));
      for (let i = 0; i < codes.length; i++) {
        const c = codes[i];
        if (c === 0) state = {};
        else if (c === 1) state.bold = true;
        else if (c === 2) state.dim = true;
        else if (c === 3) state.italic = true;
        else if (c === 4) state.underline = true;
        else if (c === 22) { state.bold = false; state.dim = false; }
        else if (c === 23) state.italic = false;
        else if (c === 24) state.underline = false;
        else if (c >= 30 && c <= 37) { state.fg = c - 30; state.fgRgb = null; }
        else if (c >= 90 && c <= 97) { state.fg = c - 90 + 8; state.fgRgb = null; }
        else if (c === 39) { state.fg = null; state.fgRgb = null; }
        else if (c >= 40 && c <= 47) { state.bg = c - 40; state.bgRgb = null; }
        else if (c >= 100 && c <= 107) { state.bg = c - 100 + 8; state.bgRgb = null; }
        else if (c === 49) { state.bg = null; state.bgRgb = null; }
        else if (c === 38 || c === 48) {
          let colour = null;
          if (codes[i + 1] === 5) { colour = xterm(codes[i + 2]); i += 2; }
          else if (codes[i + 1] === 2) { colour = `rgb(${codes[i + 2] | 0}, ${codes[i + 3] | 0}, ${codes[i + 4] | 0})`; i += 4; }
          if (c === 38) { state.fg = null; state.fgRgb = colour; } else { state.bg = null; state.bgRgb = colour; }
        }
      }
    }
    push(source.slice(at));
    return out;
  }

  function xterm(n) {
    n = Number(n) | 0;
    if (n < 16) return null;
    if (n >= 232) { const v = 8 + (n - 232) * 10; return `rgb(${v}, ${v}, ${v})`; }
    n -= 16;
    const level = (x) => (x ? 55 + x * 40 : 0);
    return `rgb(${level(Math.floor(n / 36))}, ${level(Math.floor(n / 6) % 6)}, ${level(n % 6)})`;
  }

  function ansiPre(text, className) {
    const pre = el("pre", "output" + (className ? " " + className : ""));
    pre.append(ansi(text));
    return pre;
  }

  // --- Markdown -----------------------------------------------------------------------------

  // Raw HTML in a message is text someone wrote, shown as written.
  const renderer = { html(token) { return escapeHtml(token.text || token.raw || ""); } };
  const markdownParser = (typeof marked !== "undefined") ? new marked.Marked({ gfm: true, breaks: false, renderer }) : null;
  // What a person typed keeps its line breaks.
  const typedParser = (typeof marked !== "undefined") ? new marked.Marked({ gfm: true, breaks: true, renderer }) : null;

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }

  const PURIFY = {
    RETURN_DOM_FRAGMENT: true,
    FORBID_TAGS: ["img", "style", "form", "input", "button", "textarea", "select", "iframe", "svg", "math"],
    FORBID_ATTR: ["style"],
    ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
  };

  function markdown(text, typed) {
    const box = el("div", "md" + (typed ? " typed" : ""));
    const source = stripAnsi(text);
    const parser = typed ? typedParser : markdownParser;
    if (!parser || typeof DOMPurify === "undefined") {
      box.classList.add("plain");
      box.textContent = source;
      return box;
    }
    box.append(DOMPurify.sanitize(parser.parse(source), PURIFY));
    // marked ends blocks with newlines: the text of a box is what it shows.
    for (const end of [box.firstChild, box.lastChild]) {
      if (end && end.nodeType === Node.TEXT_NODE && !end.nodeValue.trim()) end.remove();
    }
    for (const link of box.querySelectorAll("a[href]")) {
      link.target = "_blank";
      link.rel = "noopener noreferrer nofollow";
    }
    for (const code of box.querySelectorAll("pre code")) highlight(code);
    return box;
  }

  function highlight(code) {
    if (typeof hljs === "undefined") return;
    const named = /(?:^|\s)language-([\w+#.-]+)/.exec(code.className);
    const language = named && hljs.getLanguage(named[1]) ? named[1] : null;
    if (!language) return;
    // highlight.js escapes the text into its spans; DOMPurify checks that all the same.
    const html = hljs.highlight(code.textContent, { language, ignoreIllegals: true }).value;
    if (typeof DOMPurify === "undefined") return;
    code.replaceChildren(DOMPurify.sanitize(html, { RETURN_DOM_FRAGMENT: true, ALLOWED_TAGS: ["span"], ALLOWED_ATTR: ["class"] }));
    code.classList.add("hljs");
    code.dataset.language = language;
  }

  // A code block of `text` in `language` (file contents, commands).
  function codeBlock(text, language) {
    const pre = el("pre", "code");
    const code = el("code", language ? "language-" + language : "", text);
    pre.append(code);
    highlight(code);
    return pre;
  }

  const EXTENSIONS = {
    py: "python", js: "javascript", mjs: "javascript", ts: "typescript", tsx: "typescript", jsx: "javascript",
    rs: "rust", go: "go", rb: "ruby", java: "java", kt: "kotlin", c: "c", h: "c", cc: "cpp", cpp: "cpp",
    hpp: "cpp", cs: "csharp", css: "css", scss: "scss", less: "less", html: "xml", xml: "xml", json: "json",
    yml: "yaml", yaml: "yaml", toml: "ini", ini: "ini", sh: "bash", bash: "bash", zsh: "bash", md: "markdown",
    sql: "sql", swift: "swift", php: "php", lua: "lua", r: "r", pl: "perl", mk: "makefile",
  };

  function languageOf(path) {
    const name = String(path || "").split("/").pop().toLowerCase();
    if (name === "makefile") return "makefile";
    if (name === "dockerfile") return "bash";
    return EXTENSIONS[name.split(".").pop()] || "";
  }

  // --- Claude Code's tags -------------------------------------------------------------------

  const TAG = /<(command-name|command-message|command-args|command-contents|local-command-stdout|local-command-stderr|local-command-caveat|bash-input|bash-stdout|bash-stderr|ide_opened_file|ide_selection|ide_diagnostics|system-reminder|user-prompt-submit-hook|persisted-output|tool_use_error)>([\s\S]*?)(?:<\/\1>|$)/g;

  function hasTags(text) {
    TAG.lastIndex = 0;
    return TAG.test(text);
  }

  // The tag parts of a text, in order: {tag, body} and {text} for the rest.
  function tagParts(text) {
    const parts = [];
    let at = 0;
    TAG.lastIndex = 0;
    for (const found of String(text).matchAll(TAG)) {
      const before = text.slice(at, found.index);
      if (before.trim()) parts.push({ text: before });
      parts.push({ tag: found[1], body: found[2] });
      at = found.index + found[0].length;
    }
    const rest = text.slice(at);
    if (rest.trim()) parts.push({ text: rest });
    return parts;
  }

  function note(kind, label, body) {
    const box = el("details", "note note-" + kind);
    box.append(el("summary", "", label));
    if (body) box.append(ansiPre(body.trim()));
    return box;
  }

  // A text that holds Claude Code's tags, as a reader should see it.
  function taggedText(text, into, typed) {
    const parts = tagParts(text);
    let command = null;
    for (const part of parts) {
      if (part.text !== undefined) { into.append(markdown(part.text, typed)); continue; }
      const body = part.body;
      switch (part.tag) {
        case "command-name":
        case "bash-input": {
          command = el("div", "command");
          const line = el("div", "command-line");
          line.append(el("span", "prompt", part.tag === "bash-input" ? "$" : "›"), " ",
            el("code", "command-name", stripAnsi(body).trim()));
          command.append(line);
          into.append(command);
          break;
        }
        case "command-args": {
          const args = stripAnsi(body).trim();
          if (!args) break;
          const target = command ? command.querySelector(".command-line") : null;
          if (target) target.append(" ", el("code", "command-args", args));
          else into.append(el("code", "command-args", args));
          break;
        }
        case "command-message":
          break; // the name again, as Claude Code shows it while running
        case "command-contents":
          into.append(markdown(body));
          break;
        case "local-command-stdout":
        case "bash-stdout":
        case "local-command-stderr":
        case "bash-stderr": {
          if (!body.trim()) break;
          const output = ansiPre(body.replace(/\n+$/, ""), /stderr/.test(part.tag) ? "stderr" : "stdout");
          // Claude Code writes a command's output as a line of its own: pairTools moves it
          // under the command.
          if (!command) output.classList.add("lone-output");
          (command || into).append(output);
          break;
        }
        case "local-command-caveat":
          into.append(el("div", "note note-caveat", stripAnsi(body).trim()));
          break;
        case "ide_opened_file":
        case "ide_selection":
        case "ide_diagnostics":
          into.append(el("div", "note note-ide", "IDE: " + stripAnsi(body).trim()));
          break;
        case "system-reminder":
          into.append(note("reminder", "system reminder", stripAnsi(body)));
          break;
        case "user-prompt-submit-hook":
          into.append(note("hook", "prompt hook output", body));
          break;
        case "persisted-output":
        case "tool_use_error":
          into.append(ansiPre(body.trim(), part.tag === "tool_use_error" ? "stderr" : ""));
          break;
      }
    }
  }

  // A title without tags: IDE notes and reminders dropped, a command as its name and args.
  function cleanTitle(title) {
    let text = String(title || "");
    text = text.replace(/<(ide_opened_file|ide_selection|ide_diagnostics|system-reminder|local-command-caveat|command-message)>[\s\S]*?(<\/\1>|$)/g, " ");
    text = text.replace(/<(command-name|command-args)>([\s\S]*?)(<\/\1>|$)/g, " $2 ");
    text = stripAnsi(text.replace(/<\/?[A-Za-z][\w-]*>/g, " "));
    return text.replace(/\s+/g, " ").trim();
  }

  // --- Tool calls ---------------------------------------------------------------------------

  function mainArgument(name, input) {
    if (!input || typeof input !== "object") return "";
    const pick = (...keys) => {
      for (const key of keys) if (typeof input[key] === "string" && input[key]) return input[key];
      return "";
    };
    switch (name) {
      case "Bash": return pick("command");
      case "Read": case "Write": case "Edit": case "MultiEdit": case "NotebookEdit": case "NotebookRead":
        return pick("file_path", "notebook_path", "path");
      case "Grep": return pick("pattern") + (input.path ? " in " + input.path : "");
      case "Glob": return pick("pattern");
      case "LS": return pick("path");
      case "WebFetch": return pick("url");
      case "WebSearch": return pick("query");
      case "Task": case "Agent": return pick("description", "subagent_type", "prompt");
      case "TodoWrite": {
        const todos = Array.isArray(input.todos) ? input.todos : [];
        const done = todos.filter((t) => t && t.status === "completed").length;
        return `${done}/${todos.length} done`;
      }
      default:
        return pick("file_path", "path", "command", "pattern", "url", "query", "description", "prompt");
    }
  }

  // A unified-looking diff of old -> new: the common head and tail kept as context.
  function diff(oldText, newText, path) {
    const a = String(oldText || "").split("\n");
    const b = String(newText || "").split("\n");
    let head = 0;
    while (head < a.length && head < b.length && a[head] === b[head]) head++;
    let tail = 0;
    while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
    const box = el("div", "diff");
    if (path) box.append(el("div", "diff-path", path));
    const pre = el("pre", "diff-lines");
    const line = (kind, text) => pre.append(el("span", "diff-" + kind, (kind === "del" ? "- " : kind === "add" ? "+ " : "  ") + text));
    for (const text of a.slice(Math.max(0, head - 3), head)) line("ctx", text);
    for (const text of a.slice(head, a.length - tail)) line("del", text);
    for (const text of b.slice(head, b.length - tail)) line("add", text);
    for (const text of a.slice(a.length - tail, Math.min(a.length, a.length - tail + 3))) line("ctx", text);
    box.append(pre);
    return box;
  }

  function checklist(todos) {
    const list = el("ul", "todos");
    for (const todo of Array.isArray(todos) ? todos : []) {
      if (!todo || typeof todo !== "object") continue;
      const status = String(todo.status || "pending");
      const item = el("li", "todo todo-" + status);
      const mark = el("span", "todo-mark", status === "completed" ? "☑" : status === "in_progress" ? "◐" : "☐");
      mark.setAttribute("aria-label", status.replace("_", " "));
      item.append(mark, " ", el("span", "todo-text", String(todo.content || todo.activeForm || "")));
      list.append(item);
    }
    return list;
  }

  function toolBody(name, input) {
    const body = el("div", "tool-input");
    if (!input || typeof input !== "object") return body;
    const path = input.file_path || input.notebook_path || "";
    if (name === "Edit") body.append(diff(input.old_string, input.new_string, path));
    else if (name === "MultiEdit") {
      for (const edit of Array.isArray(input.edits) ? input.edits : []) body.append(diff(edit && edit.old_string, edit && edit.new_string, path));
    } else if (name === "Write") {
      body.append(el("div", "diff-path", path + " (written)"));
      body.append(codeBlock(String(input.content || ""), languageOf(path)));
    } else if (name === "TodoWrite") body.append(checklist(input.todos));
    else if (name === "Bash") {
      body.append(codeBlock(String(input.command || ""), "bash"));
      if (input.description) body.append(el("div", "tool-note", String(input.description)));
    } else if ((name === "Task" || name === "Agent") && typeof input.prompt === "string") {
      body.append(markdown(input.prompt));
    } else {
      body.append(codeBlock(JSON.stringify(input, null, 2), "json"));
    }
    return body;
  }

  function toolUse(block, links) {
    const name = String(block.name || "tool");
    const details = el("details", "tool");
    if (block.id) {
      details.dataset.toolUseId = block.id;
      details.id = "call-" + block.id;
    }
    const summary = el("summary", "tool-line");
    summary.append(el("span", "tool-name", name));
    const arg = mainArgument(name, block.input);
    if (arg) summary.append(" ", el("code", "tool-arg", arg.split("\n")[0].slice(0, 200)));
    const status = el("span", "tool-status");
    summary.append(status);
    details.append(summary);
    const link = (links || []).find((l) => l.toolUseId === block.id);
    if (link) linkSubagent(details, link.sessionId);
    details.append(toolBody(name, block.input));
    if (name === "TodoWrite") details.open = true;
    return details;
  }

  // The call's link to the sub-agent thread it started (once).
  // (A line right under the call: a link inside its summary would nest two controls.)
  function linkSubagent(call, sessionId) {
    call.dataset.subagent = sessionId;
    if (!call.parentElement) return; // placed by toolUse's caller, see blocks()
    const next = call.nextElementSibling;
    if (next && next.matches(".subagent-line")) return;
    call.after(subagentLine(sessionId));
  }

  function subagentLine(sessionId) {
    const line = el("div", "subagent-line");
    const href = settings.sessionHref ? settings.sessionHref(sessionId) : null;
    if (href) {
      const a = el("a", "subagent-link", "open the sub-agent's thread →");
      a.href = href;
      line.append(a);
    } else line.append("sub-agent thread: " + sessionId);
    return line;
  }

  function resultText(content) {
    if (typeof content === "string") return content;
    if (!Array.isArray(content)) return "";
    return content.filter((p) => p && p.type === "text").map((p) => p.text || "").join("\n");
  }

  function toolResult(block, entry) {
    const box = el("div", "tool-result" + (block.is_error ? " tool-error" : ""));
    if (block.tool_use_id) box.dataset.for = block.tool_use_id;
    box.dataset.fromOffset = entry.byteOffset;
    if (entry.agentSession) box.dataset.agentSession = entry.agentSession;
    box.append(el("div", "tool-result-label", block.is_error ? "error" : "result"));
    const text = resultText(block.content);
    if (text) {
      if (hasTags(text)) taggedText(text, box);
      else box.append(ansiPre(text.replace(/\n+$/, "")));
    }
    return box;
  }

  // Moves a command's output (a line of its own) under the command in the line before.
  function pairOutputs(root) {
    for (const output of root.querySelectorAll("pre.lone-output")) {
      const entry = output.closest(".entry");
      let before = entry && entry.previousElementSibling;
      while (before && before.matches(".meta, .folded")) before = before.previousElementSibling;
      const commands = before ? before.querySelectorAll(".command") : [];
      const command = commands[commands.length - 1];
      if (!command) continue;
      output.classList.remove("lone-output");
      command.append(output);
      if (!entry.querySelector(".body .text > *")) entry.classList.add("folded");
    }
  }

  // Moves each result into its call (whichever was rendered first), marks errors, and marks
  // an entry left with nothing of its own as folded.
  function pairTools(root) {
    pairOutputs(root);
    for (const result of root.querySelectorAll(".tool-result[data-for]")) {
      if (result.parentElement && result.parentElement.matches("details.tool")) continue;
      const call = root.querySelector(`details.tool[data-tool-use-id="${CSS.escape(result.dataset.for)}"]`);
      if (!call) continue;
      const entry = result.closest(".entry");
      call.append(result);
      call.classList.toggle("failed-call", result.classList.contains("tool-error"));
      const status = call.querySelector(".tool-status");
      if (status) status.textContent = result.classList.contains("tool-error") ? " ✗ error" : " ✓";
      // A result that names its agent (toolUseResult.agentId) links the call to the thread,
      // as the history service's index does (agent-<agentId>).
      if (result.dataset.agentSession) linkSubagent(call, result.dataset.agentSession);
      if (entry && !entry.querySelector(".body > *")) entry.classList.add("folded");
    }
  }

  // --- Photos -------------------------------------------------------------------------------

  function photo(url, options) {
    const img = el("img", "photo");
    img.width = 320;
    img.height = 240;
    img.alt = "photo from the transcript";
    img.loading = "lazy";
    img.decoding = "async";
    const thumb = options && options.thumbnail;
    img.dataset.src = thumb ? thumb(url) : url;
    img.dataset.full = url;
    img.title = "open the full image";
    img.tabIndex = 0;
    return img;
  }

  // --- Entries ------------------------------------------------------------------------------

  // The image enumeration rule (docs/contract.md §2): depth-first over message.content,
  // descending into the "content" array of any block; the i-th image has index i.
  function blocks(list, entry, counter, into, ctx) {
    for (const block of list) {
      if (typeof block === "string") { into.append(textBlock(block, entry)); continue; }
      if (!block || typeof block !== "object") continue;
      if (block.type === "image") {
        const index = counter.next++;
        const ref = (entry.mediaRefs || []).find((r) => (r.index || 0) === index);
        if ((entry.failedImageIndexes || []).includes(index)) into.append(el("div", "failed", "[image not displayed]"));
        else if (ref) into.append(photo(ref.url, ctx));
        else if (block.source && block.source.data && /^image\/(png|jpeg|gif|webp)$/.test(block.source.media_type || "")) {
          into.append(photo("data:" + block.source.media_type + ";base64," + block.source.data, {}));
        } else into.append(el("div", "failed", "[image not displayed]"));
        continue;
      }
      if (block.type === "text") into.append(textBlock(block.text || "", entry));
      else if (block.type === "thinking" || block.type === "redacted_thinking") {
        const details = el("details", "thinking");
        details.append(el("summary", "", "thinking"));
        if (block.thinking) details.append(markdown(block.thinking));
        into.append(details);
      } else if (block.type === "tool_use") {
        const call = toolUse(block, entry.subagentLinks);
        into.append(call);
        if (call.dataset.subagent) into.append(subagentLine(call.dataset.subagent));
      } else if (block.type === "tool_result") {
        const result = toolResult(block, entry);
        into.append(result);
        // Photos of a result stay with it (screenshots are what readers look for).
        const inner = Array.isArray(block.content) ? block.content : [];
        blocks(inner.filter((p) => p && p.type !== "text"), entry, counter, result, ctx);
        continue;
      } else if (block.type === "document") {
        into.append(el("div", "note", "[document]"));
      }
      if (Array.isArray(block.content) && block.type !== "tool_result") blocks(block.content, entry, counter, into, ctx);
    }
  }

  function textBlock(text, entry) {
    const box = el("div", "text");
    const typed = entry.type === "user" && !entry.meta;
    if (hasTags(text)) taggedText(text, box, typed);
    else box.append(markdown(text, typed));
    return box;
  }

  function parseLine(entry) {
    if (entry.line && typeof entry.line === "object") return entry.line;
    try { return JSON.parse(entry.json || "{}"); } catch (e) { return {}; }
  }

  function timeNode(stamp) {
    const node = el("time", "when");
    node.dateTime = stamp;
    node.dataset.stamp = stamp;
    setTime(node);
    return node;
  }

  function setTime(node) {
    const date = new Date(node.dataset.stamp);
    if (isNaN(date)) { node.textContent = node.dataset.stamp; return; }
    node.textContent = when(date);
    node.title = date.toISOString().replace(".000Z", "Z").replace("T", " ").replace("Z", " UTC");
  }

  // Relative for the last week, the local date and time before that.
  function when(date, now) {
    now = now || new Date();
    const seconds = Math.round((now - date) / 1000);
    if (seconds >= 0 && seconds < 45) return "just now";
    if (seconds >= 0 && seconds < 7 * 86400) {
      const rtf = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
      if (seconds < 3600) return rtf.format(-Math.round(seconds / 60), "minute");
      if (seconds < 86400) return rtf.format(-Math.round(seconds / 3600), "hour");
      return rtf.format(-Math.round(seconds / 86400), "day");
    }
    return date.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  }

  function systemText(line) {
    const subtype = line.subtype || "";
    if (subtype === "stop_hook_summary") {
      const hooks = (line.hookInfos || []).map((h) => h && h.command).filter(Boolean);
      const errors = (line.hookErrors || []).map(String);
      const head = `Stop hook${hooks.length > 1 ? "s" : ""}${hooks.length ? " [" + hooks.join(", ") + "]" : ""}`;
      return head + (errors.length ? " failed: " + errors.join("; ") : line.preventedContinuation ? " stopped the turn" : " completed");
    }
    if (subtype === "api_error" || subtype === "error") {
      const error = line.error || {};
      return "API error" + (error.status ? " " + error.status : "") + (typeof error.message === "string" ? ": " + error.message : "") +
        (line.retryAttempt ? ` (retry ${line.retryAttempt}/${line.maxRetries || "?"})` : "");
    }
    if (subtype === "turn_duration" && line.durationMs) return `turn took ${Math.round(line.durationMs / 1000)} s`;
    if (subtype === "api_refusal") return "refused: " + (line.apiRefusalExplanation || line.apiRefusalCategory || "");
    if (typeof line.content === "string" && line.content) return line.content;
    return subtype ? subtype.replace(/_/g, " ") : "system";
  }

  const BOOKKEEPING = new Set(["queue-operation", "progress", "file-history-snapshot", "last-prompt"]);

  // One entry as a node: `.entry` with data-offset, a role line (who, when) and its body.
  function entry(data, ctx) {
    ctx = ctx || {};
    const line = parseLine(data);
    const type = data.type || line.type || "entry";
    const message = line.message;
    const node = el("div", "entry " + type);
    node.dataset.offset = data.byteOffset;
    if (data.uuid) node.dataset.uuid = data.uuid;
    node.tabIndex = -1;
    const head = el("div", "role");
    const body = el("div", "body");
    node.append(head, body);
    const stamp = data.timestamp || line.timestamp;
    const role = (label) => {
      head.append(el("span", "who", label));
      if (stamp) head.append(" · ", timeNode(stamp));
    };
    if (type === "system") {
      node.className = "entry meta system" + (line.level === "error" || /error/.test(line.subtype || "") ? " error" : "");
      if (line.subtype === "compact_boundary") {
        node.classList.add("compaction");
        role("compaction");
        body.append(el("div", "note note-compaction", "Conversation compacted" +
          (line.compactMetadata && line.compactMetadata.preTokens ? ` (${Number(line.compactMetadata.preTokens).toLocaleString()} tokens before)` : "")));
        return node;
      }
      role(line.subtype === "stop_hook_summary" ? "hook" : "system");
      body.append(ansiPre(systemText(line), "system-text"));
      return node;
    }
    if (!message || (type !== "user" && type !== "assistant")) {
      // Claude Code's bookkeeping lines (queue, progress, file snapshots) say nothing to a reader.
      node.className = "entry meta" + (BOOKKEEPING.has(type) ? " folded" : "");
      role(type);
      if (line.summary) body.append(el("span", "", line.summary));
      return node;
    }
    const agent = line.toolUseResult && typeof line.toolUseResult === "object" ? line.toolUseResult.agentId : "";
    const ctxEntry = Object.assign({}, data, {
      type, meta: !!line.isMeta, agentSession: typeof agent === "string" && /^[\w-]{1,58}$/.test(agent) ? "agent-" + agent : "",
    });
    if (line.isCompactSummary) {
      node.classList.add("compaction");
      role("compaction summary");
      const details = el("details", "note note-compaction");
      details.append(el("summary", "", "Summary of the conversation before compaction"));
      const text = typeof message.content === "string" ? message.content : resultText(message.content);
      details.append(markdown(text));
      body.append(details);
      return node;
    }
    role(line.isMeta ? "context" : type === "assistant" ? "assistant" + (message.model ? " (" + message.model + ")" : "") : "user");
    if (line.isMeta) node.classList.add("context");
    if (data.oversize) body.append(el("div", "text", String(message.content)));
    else if (typeof message.content === "string") body.append(textBlock(message.content, ctxEntry));
    else if (Array.isArray(message.content)) blocks(message.content, ctxEntry, { next: 0 }, body, ctx);
    return node;
  }

  return { configure, el, ansi, stripAnsi, markdown, cleanTitle, entry, pairTools, photo, timeNode, setTime, when, diff, checklist };
})();
