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

  // What stands for an image in a prompt's text: Claude Code's "[Image #1]", Codex's
  // `<image name=[Image #1]>` wrapper, a slim copy's note where an image was.
  const IMAGE_PLACEHOLDER = /\[Image(?: #\d+|: [^\]\n]{0,400})\]|<\/?image(?: name=\[Image #\d+\])?>|\[(?:image|document) cut by scrollback slim:[^\]\n]{0,800}\]/g;

  // Markdown's marks in a line of plain text (a title): emphasis, code ticks, a heading's #s.
  function plainMarkdown(text) {
    return String(text).replace(/(\*\*|__)(?=\S)([\s\S]*?\S)\1/g, "$2").replace(/`([^`\n]+)`/g, "$1")
      .replace(/(^|\n)\s{0,3}#{1,6}\s+/g, "$1");
  }

  // A title without tags: IDE notes and reminders dropped, a command as its name and args.
  // A project as the CLI names it (scrollback_app/cli_sessions.py `project_name`): the last
  // component of its path. Claude Code names a project's directory by that path with every
  // character but letters and digits made a dash, so the path is taken from an entry's `cwd`
  // when the directory's name is that path's; else the directory's last whole dash-separated
  // words that fit in 20 characters, after an ellipsis. A Codex or opencode session's directory
  // is a path already: its last component, marked with the source.
  const NOT_NAME = /[^A-Za-z0-9]/g;
  const PROJECT_WIDTH = 20;
  function lastComponent(path) {
    const parts = String(path || "").split("/").filter(Boolean);
    return parts.length ? parts[parts.length - 1] : "";
  }
  function projectName(session, cwd) {
    const dir = String((session && session.projectDir) || "");
    const source = session && session.source;
    if (source === "codex" || source === "opencode") return (source + " " + lastComponent(dir)).trim();
    if (cwd && lastComponent(cwd) && String(cwd).replace(NOT_NAME, "-") === dir) return lastComponent(cwd);
    const whole = dir.replace(/^-+|-+$/g, "");
    const words = whole.split("-");
    let tail = words[words.length - 1];
    for (let i = words.length - 2; i >= 0; i--) {
      if (words[i].length + 1 + tail.length + 1 > PROJECT_WIDTH) break;
      tail = words[i] + "-" + tail;
    }
    return tail === whole ? tail : "…" + tail;
  }
  // The working directory the latest entry of a window that names one was written in.
  const CWD = /"cwd"\s*:\s*("(?:[^"\\]|\\.)*")/;
  function cwdOf(entries) {
    for (let i = (entries || []).length - 1; i >= 0; i--) {
      const match = CWD.exec(entries[i].json || "");
      if (!match) continue;
      try { return String(JSON.parse(match[1])); } catch (e) { /* not a string: look further */ }
    }
    return "";
  }

  function cleanTitle(title) {
    let text = String(title || "");
    text = text.replace(/<(ide_opened_file|ide_selection|ide_diagnostics|system-reminder|local-command-caveat|command-message)>[\s\S]*?(<\/\1>|$)/g, " ");
    text = text.replace(/<(command-name|command-args)>([\s\S]*?)(<\/\1>|$)/g, " $2 ");
    text = text.replace(IMAGE_PLACEHOLDER, " ");
    text = stripAnsi(text.replace(/<\/?[A-Za-z][\w-]*>/g, " "));
    return plainMarkdown(text).replace(/\s+/g, " ").trim();
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

  // `ref` (the entry's media ref, when there is one) names the image for a box that says what
  // it is when its thumbnail is refused.
  function photo(url, options, ref) {
    const img = el("img", "photo");
    if (ref) {
      img.dataset.uri = ref.uri || "";
      img.dataset.type = ref.declaredMediaType || "";
      img.dataset.bytes = String(ref.approxSizeBytes || "");
    }
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
        else if (ref) into.append(photo(ref.url, ctx, ref));
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

  // The text a slim copy put where an image or document was: its facts as a note, without the
  // ref, pin and digest it also names.
  const SLIM_NOTE = /^\s*\[(image|document) cut by scrollback slim: ([^\]]*?)(?:; Scrollback still serves it: [^\]]*)?\]\s*$/;

  function textBlock(text, entry) {
    const slim = SLIM_NOTE.exec(text);
    if (slim) return el("div", "note note-slim", `${slim[1]} cut by scrollback slim: ${slim[2]}`);
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

  // --- Codex rollouts -----------------------------------------------------------------------

  // A Codex CLI rollout line: `{timestamp, type, payload}` (docs/contract.md §1), no message.
  function isRollout(line) {
    return !!line && typeof line.payload === "object" && line.payload !== null && !("message" in line);
  }

  const DATA_URL = /^data:([A-Za-z0-9!#$&^_.+-]{1,127})\/([A-Za-z0-9!#$&^_.+-]{1,127});base64,/;
  const STRIPPED = "[scrollback:stripped-media]";
  const INLINE_TYPES = /^image\/(png|jpeg|gif|webp)$/i;

  // The rollout image rule (docs/contract.md §2): the i-th string value that is an image data
  // URL in a depth-first walk of the payload, in document order, has index i. An explicit
  // stack, as the server's walk, so a deeply nested line cannot exhaust the call stack.
  // Returns holder -> {key: index}.
  function rolloutImages(payload) {
    const found = new Map();
    let next = 0;
    const stack = [[null, null, payload]];
    while (stack.length) {
      const [holder, key, value] = stack.pop();
      if (typeof value === "string") {
        const url = DATA_URL.exec(value);
        if (!url || url[1].toLowerCase() !== "image") continue;
        if (!found.has(holder)) found.set(holder, {});
        found.get(holder)[key] = next++;
      } else if (value && typeof value === "object") {
        const keys = Array.isArray(value) ? value.map((_, i) => i) : Object.keys(value);
        for (let k = keys.length - 1; k >= 0; k--) stack.push([value, keys[k], value[keys[k]]]);
      }
    }
    return found;
  }

  // The photo for the image at holder[key]: its ref, else an uncut small data URL, else a note.
  function rolloutPhoto(holder, key, data, images, ctx) {
    const index = (images.get(holder) || {})[key];
    const value = holder[key];
    if (index === undefined) return el("div", "failed", "[image not displayed]");
    const ref = (data.mediaRefs || []).find((r) => (r.index || 0) === index);
    if ((data.failedImageIndexes || []).includes(index)) return el("div", "failed", "[image not displayed]");
    if (ref) return photo(ref.url, ctx, ref);
    const url = DATA_URL.exec(value);
    const rest = value.slice(url[0].length);
    if (rest && rest !== STRIPPED && INLINE_TYPES.test(url[1] + "/" + url[2]) && /^[A-Za-z0-9+/=\s]+$/.test(rest)) {
      return photo(value, {});
    }
    return el("div", "failed", "[image not displayed]");
  }

  const CODEX_IMAGE_TAG = /<\/?image(?: name=\[Image #\d+\])?>/g;

  // Codex's own context (AGENTS.md instructions, the environment) sent as a user message.
  const CODEX_CONTEXT = /^\s*<(environment_context|user_instructions|user_shell_command|turn_aborted)>/;

  // The text and photos of a message's content items (input_text, output_text, input_image).
  function codexContent(items, data, images, into, ctx, typed) {
    for (const item of Array.isArray(items) ? items : []) {
      if (typeof item === "string") { into.append(textBlock(item, { type: typed ? "user" : "assistant" })); continue; }
      if (!item || typeof item !== "object") continue;
      if (item.type === "input_image" || typeof item.image_url === "string") into.append(rolloutPhoto(item, "image_url", data, images, ctx));
      else if (typeof item.text === "string") {
        // Codex wraps a pasted image in `<image name=[Image #1]>` and `</image>` texts.
        const text = item.text.replace(CODEX_IMAGE_TAG, "");
        if (!text.trim()) continue;
        if (CODEX_CONTEXT.test(item.text)) into.append(note("context", "context: " + CODEX_CONTEXT.exec(item.text)[1].replace(/_/g, " "), stripAnsi(item.text)));
        else into.append(textBlock(text, { type: typed ? "user" : "assistant" }));
      } else if (item.type === "refusal" && typeof item.refusal === "string") into.append(el("div", "note", "refused: " + item.refusal));
    }
  }

  function parseJson(text) {
    if (typeof text !== "string") return text;
    try { return JSON.parse(text); } catch (e) { return null; }
  }

  // A shell command as a reader types it: `bash -lc <script>` as the script.
  function shellText(command) {
    if (typeof command === "string") return command;
    if (!Array.isArray(command)) return "";
    const parts = command.map(String);
    if (parts.length === 3 && /^(?:\/\S*\/)?(?:ba|z|da|k)?sh$/.test(parts[0]) && /^-l?c$/.test(parts[1])) return parts[2];
    return parts.map((p) => (/^[\w@%+=:,./-]+$/.test(p) ? p : "'" + p.replace(/'/g, "'\\''") + "'")).join(" ");
  }

  // The patch of an apply_patch call, wherever Codex wrote it (its own tool's input, a
  // function's `input` argument, or a shell command).
  function patchText(text) {
    const source = String(text || "");
    const start = source.indexOf("*** Begin Patch");
    if (start < 0) return "";
    const end = source.indexOf("*** End Patch", start);
    return end < 0 ? source.slice(start) : source.slice(start, end + "*** End Patch".length);
  }

  // Codex's patch format as a diff per file: `*** Update File: p` (with `*** Move to: q`),
  // `*** Add File: p`, `*** Delete File: p`, then @@ hunks of +/-/space lines.
  function patchDiff(patch) {
    const box = el("div", "tool-input");
    let pre = null;
    const files = [];
    for (const raw of patch.split("\n")) {
      const header = /^\*\*\* (Update|Add|Delete) File: (.*)$/.exec(raw);
      const moved = /^\*\*\* Move to: (.*)$/.exec(raw);
      if (header) {
        files.push(header[2]);
        const diffBox = el("div", "diff");
        const path = el("div", "diff-path", header[2] + (header[1] === "Update" ? "" : header[1] === "Add" ? " (added)" : " (deleted)"));
        pre = el("pre", "diff-lines");
        diffBox.append(path, pre);
        box.append(diffBox);
        continue;
      }
      if (moved && pre) { pre.previousSibling.textContent += " → " + moved[1]; continue; }
      if (!pre || /^\*\*\* (Begin|End) Patch|^\*\*\* End of File/.test(raw)) continue;
      if (raw.startsWith("@@")) pre.append(el("span", "diff-hunk", raw));
      else if (raw.startsWith("+")) pre.append(el("span", "diff-add", "+ " + raw.slice(1)));
      else if (raw.startsWith("-")) pre.append(el("span", "diff-del", "- " + raw.slice(1)));
      else pre.append(el("span", "diff-ctx", "  " + raw.slice(1)));
    }
    return { box, files };
  }

  // One call (function_call, custom_tool_call, local_shell_call, web_search_call) as
  // toolUse draws Claude Code's: a line with its name and main argument, its output folded in.
  function codexCall(payload) {
    let name = String(payload.name || (payload.type === "local_shell_call" ? "shell" : payload.type === "web_search_call" ? "web_search" : "tool"));
    const args = payload.type === "function_call" ? parseJson(payload.arguments) : null;
    const input = payload.type === "custom_tool_call" ? String(payload.input || "")
      : payload.type === "local_shell_call" ? (payload.action || {}) : args;
    let arg = "";
    let body = el("div", "tool-input");
    const command = input && typeof input === "object" ? shellText(input.command || input.cmd) : "";
    const patch = patchText(typeof input === "string" ? input : input && typeof input === "object" ? (input.input || command) : "");
    if (patch) {
      const drawn = patchDiff(patch);
      body = drawn.box;
      if (name !== "apply_patch") name = "apply_patch";
      arg = drawn.files.join(", ");
    } else if (command) {
      arg = command;
      body.append(codeBlock(command, "bash"));
      const workdir = input.workdir || input.working_directory;
      if (typeof workdir === "string" && workdir) body.append(el("div", "tool-note", "in " + workdir));
    } else if (name === "update_plan" && input && Array.isArray(input.plan)) {
      const plan = input.plan.map((p) => ({ content: p && p.step, status: p && p.status }));
      arg = `${plan.filter((p) => p.status === "completed").length}/${plan.length} done`;
      if (typeof input.explanation === "string" && input.explanation) body.append(markdown(input.explanation));
      body.append(checklist(plan));
    } else if (payload.type === "web_search_call") {
      const action = payload.action || {};
      arg = String(action.query || action.url || "");
    } else if (typeof input === "string") {
      arg = input;
      if (input) body.append(ansiPre(input));
    } else if (input && typeof input === "object") {
      arg = mainArgument(name, input);
      body.append(codeBlock(JSON.stringify(input, null, 2), "json"));
    } else if (typeof payload.arguments === "string" && payload.arguments) {
      body.append(ansiPre(payload.arguments));
    }
    const details = el("details", "tool");
    const id = payload.call_id || payload.id;
    if (typeof id === "string" && id) {
      details.dataset.toolUseId = id;
      details.id = "call-" + id;
    }
    const summary = el("summary", "tool-line");
    summary.append(el("span", "tool-name", name));
    if (arg) summary.append(" ", el("code", "tool-arg", String(arg).split("\n")[0].slice(0, 200)));
    const status = el("span", "tool-status");
    summary.append(status);
    if (payload.type === "web_search_call" && payload.status) status.textContent = payload.status === "completed" ? " ✓" : " " + payload.status;
    details.append(summary, body);
    if (name === "update_plan") details.open = true;
    return details;
  }

  // A call's output: Codex writes a shell's as JSON text ({output, metadata: {exit_code}}),
  // others as text or as content items (text and images).
  function codexOutput(payload, data, images, ctx) {
    let output = payload.output;
    let failed = false;
    let holder = payload;
    let key = "output";
    if (output && typeof output === "object" && !Array.isArray(output)) {
      if (output.success === false) failed = true;
      holder = output;
      key = "content";
      output = output.content;
    }
    const parsed = typeof output === "string" ? parseJson(output) : null;
    if (parsed && typeof parsed === "object" && !Array.isArray(parsed) && typeof parsed.output === "string") {
      const code = parsed.metadata && parsed.metadata.exit_code;
      if (typeof code === "number" && code !== 0) failed = true;
      output = parsed.output;
    }
    const box = el("div", "tool-result" + (failed ? " tool-error" : ""));
    if (typeof payload.call_id === "string" && payload.call_id) box.dataset.for = payload.call_id;
    box.dataset.fromOffset = data.byteOffset;
    box.append(el("div", "tool-result-label", failed ? "error" : "result"));
    if (typeof output === "string") {
      if (output) box.append(ansiPre(output.replace(/\n+$/, "")));
    } else if (Array.isArray(output)) {
      for (let i = 0; i < output.length; i++) {
        const item = output[i];
        if (typeof item === "string") box.append(ansiPre(item));
        else if (item && typeof item === "object" && typeof item.image_url === "string") box.append(rolloutPhoto(item, "image_url", data, images, ctx));
        else if (item && typeof item.text === "string") box.append(ansiPre(item.text.replace(/\n+$/, "")));
      }
    } else if (holder[key] !== undefined && holder[key] !== null) box.append(ansiPre(JSON.stringify(holder[key], null, 2)));
    return box;
  }

  function codexFolded(node, role, label) {
    node.className = "entry meta folded codex";
    role(label);
    return node;
  }

  // What a reader sees of a rollout line: messages as Claude Code's, reasoning summaries folded
  // (never the encrypted blob), calls with their outputs, patches as diffs, photos lazily; the
  // event_msg copies of messages and the token counts hidden; session and turn settings as notes.
  function codexEntry(data, line, node, head, body, role, ctx) {
    const type = line.type || data.type || "entry";
    const payload = line.payload;
    const kind = typeof payload.type === "string" ? payload.type : "";
    const images = rolloutImages(payload);
    node.classList.add("codex");
    if (type === "session_meta") {
      node.className = "entry meta codex session-meta";
      role("session");
      const facts = ["Codex" + (payload.cli_version ? " " + payload.cli_version : "")];
      if (payload.cwd) facts.push("in " + payload.cwd);
      if (payload.git && payload.git.branch) facts.push("on " + payload.git.branch);
      body.append(el("span", "", facts.join(" ")));
      return node;
    }
    if (type === "turn_context") {
      node.className = "entry meta codex turn-context";
      role("turn");
      const facts = [];
      if (payload.model) facts.push("model " + payload.model);
      if (payload.approval_policy) facts.push("approval " + payload.approval_policy);
      const sandbox = payload.sandbox_policy;
      const mode = typeof sandbox === "string" ? sandbox : sandbox && (sandbox.mode || sandbox.type);
      if (mode) facts.push("sandbox " + mode);
      body.append(el("span", "", facts.join(" · ")));
      return node;
    }
    if (type === "compacted") {
      node.className = "entry codex compaction";
      role("compaction summary");
      const details = el("details", "note note-compaction");
      details.append(el("summary", "", "Summary of the conversation before compaction"));
      if (typeof payload.message === "string") details.append(markdown(payload.message));
      for (const item of Array.isArray(payload.replacement_history) ? payload.replacement_history : []) {
        if (item && typeof item === "object" && item.type === "message") codexContent(item.content, data, images, details, ctx, item.role === "user");
      }
      body.append(details);
      return node;
    }
    if (type === "event_msg") {
      // Copies of what response_items hold (user_message, agent_message, agent_reasoning) and
      // bookkeeping (token_count, task_started, ...) say nothing new; errors do.
      if (kind === "error" || kind === "stream_error") {
        node.className = "entry meta system error codex";
        role("error");
        body.append(ansiPre(String(payload.message || kind), "system-text"));
        return node;
      }
      if (kind === "turn_aborted") {
        node.className = "entry meta codex";
        role("turn");
        body.append(el("span", "", "turn aborted" + (payload.reason ? " (" + payload.reason + ")" : "")));
        return node;
      }
      return codexFolded(node, role, kind || type);
    }
    if (type !== "response_item") {
      node.className = "entry meta codex";
      role(type);
      return node;
    }
    if (kind === "message") {
      const who = String(payload.role || "assistant");
      const texts = (Array.isArray(payload.content) ? payload.content : []).filter((i) => i && typeof i.text === "string");
      const context = who === "developer" || who === "system" || (texts.length && texts.every((i) => CODEX_CONTEXT.test(i.text)));
      node.className = "entry codex " + (who === "user" ? "user" : "assistant") + (context ? " context" : "");
      role(context ? "context" : who === "user" ? "user" : who === "assistant" ? "assistant" : who);
      if (context && who !== "user") {
        const all = texts.map((i) => i.text).join("\n\n");
        body.append(note("context", who + " instructions", stripAnsi(all)));
      } else codexContent(payload.content, data, images, body, ctx, who === "user" && !context);
      return node;
    }
    if (kind === "reasoning") {
      node.className = "entry codex assistant reasoning";
      role("assistant");
      const details = el("details", "thinking");
      details.append(el("summary", "", "reasoning"));
      const parts = [];
      for (const list of [payload.summary, payload.content]) {
        for (const item of Array.isArray(list) ? list : []) {
          if (item && typeof item.text === "string" && item.text) parts.push(item.text);
        }
      }
      if (!parts.length) return codexFolded(node, role, "reasoning");
      details.append(markdown(parts.join("\n\n")));
      body.append(details);
      return node;
    }
    if (kind === "function_call" || kind === "custom_tool_call" || kind === "local_shell_call" || kind === "web_search_call") {
      node.className = "entry codex assistant";
      role("assistant");
      body.append(codexCall(payload));
      return node;
    }
    if (kind === "function_call_output" || kind === "custom_tool_call_output") {
      node.className = "entry codex user tool-output";
      role("tool output");
      body.append(codexOutput(payload, data, images, ctx));
      return node;
    }
    node.className = "entry meta codex";
    role(kind || type);
    return node;
  }

  // --- opencode sessions ------------------------------------------------------------------

  // An opencode message (docs/contract.md §1): `{type: "opencode", uuid, timestamp, payload:
  // {message, parts: [{id, data}]}}`; its images are numbered as a rollout's (a file part's
  // url, a tool's attachments, in part order).
  function isOpencode(line) {
    return line.type === "opencode" && isRollout(line) && Array.isArray(line.payload.parts);
  }

  function isImageUrl(url) {
    const found = typeof url === "string" ? DATA_URL.exec(url) : null;
    return !!found && found[1].toLowerCase() === "image";
  }

  // opencode's tools drawn as Claude Code's of the same kind (an edit as a diff, a command
  // as a script), their input's names mapped; any other tool as it is.
  function opencodeCall(tool, input) {
    const i = input && typeof input === "object" ? input : {};
    switch (tool) {
      case "edit": return ["Edit", { file_path: i.filePath, old_string: i.oldString, new_string: i.newString }];
      case "write": return ["Write", { file_path: i.filePath, content: i.content }];
      case "read": return ["Read", { file_path: i.filePath }];
      case "bash": return ["Bash", { command: i.command, description: i.description }];
      case "grep": return ["Grep", { pattern: i.pattern, path: i.path }];
      case "glob": return ["Glob", { pattern: i.pattern }];
      case "webfetch": return ["WebFetch", { url: i.url }];
      case "task": return ["Task", { description: i.description, prompt: i.prompt, subagent_type: i.subagent_type }];
      case "todowrite": return ["TodoWrite", { todos: i.todos }];
      default: return [String(tool || "tool"), i];
    }
  }

  // A tool part: one line with its name and main argument, its output and attachments folded in.
  function opencodeTool(part, data, images, ctx) {
    const state = part.state && typeof part.state === "object" ? part.state : {};
    const [name, input] = opencodeCall(part.tool, state.input);
    const call = toolUse({ name, id: typeof part.callID === "string" ? part.callID : "", input }, []);
    const status = call.querySelector(".tool-status");
    const failed = state.status === "error";
    status.textContent = state.status === "completed" ? " ✓" : failed ? " ✗" : " " + String(state.status || "");
    const box = el("div", "tool-result" + (failed ? " tool-error" : ""));
    box.append(el("div", "tool-result-label", failed ? "error" : "result"));
    const output = failed ? state.error : state.output;
    if (typeof output === "string" && output) box.append(ansiPre(output.replace(/\n+$/, "")));
    for (const file of Array.isArray(state.attachments) ? state.attachments : []) {
      if (file && typeof file === "object") box.append(opencodeFile(file, data, images, ctx));
    }
    call.append(box);
    return call;
  }

  function opencodeFile(file, data, images, ctx) {
    if (isImageUrl(file.url)) return rolloutPhoto(file, "url", data, images, ctx);
    return el("div", "note", "file: " + String(file.filename || file.mime || "attachment"));
  }

  // One part as a reader sees it; null for bookkeeping (steps, snapshots).
  function opencodePart(part, who, data, images, ctx) {
    switch (part.type) {
      case "text":
        return part.ignored ? null : textBlock(String(part.text || ""), { type: who });
      case "reasoning": {
        if (!part.text) return null;
        const details = el("details", "thinking");
        details.append(el("summary", "", "reasoning"), markdown(String(part.text)));
        return details;
      }
      case "file": return opencodeFile(part, data, images, ctx);
      case "tool": return opencodeTool(part, data, images, ctx);
      case "patch": return el("div", "note", "changed " + (Array.isArray(part.files) ? part.files.map(String).join(", ") : "files"));
      case "subtask": return note("subtask", "subtask for " + String(part.agent || "an agent") + ": " + String(part.description || ""), String(part.prompt || ""));
      case "agent": return el("div", "note", "@" + String(part.name || "agent"));
      case "compaction": return el("div", "note note-compaction", "Conversation compacted");
      case "retry": return el("div", "failed", "retry " + String(part.attempt || ""));
      default: return null;
    }
  }

  function opencodeEntry(data, line, node, body, role, ctx) {
    const payload = line.payload;
    const info = payload.message && typeof payload.message === "object" ? payload.message : {};
    const who = info.role === "user" ? "user" : "assistant";
    const images = rolloutImages(payload);
    node.className = "entry opencode " + who;
    role(who === "assistant" && typeof info.modelID === "string" ? "assistant (" + info.modelID + ")" : who);
    for (const part of payload.parts) {
      const shown = part && part.data && typeof part.data === "object" ? opencodePart(part.data, who, data, images, ctx) : null;
      if (shown) body.append(shown);
    }
    const error = info.error && typeof info.error === "object" ? info.error : null;
    if (error) body.append(el("div", "failed", "error: " + String((error.data && error.data.message) || error.name || "")));
    return node;
  }

  // --- Gemini CLI sessions ------------------------------------------------------------------

  // A Gemini CLI message (docs/contract.md §2): a string `id`, one of Gemini's types, and no
  // `uuid`, `message` or `payload` member.
  const GEMINI_TYPES = new Set(["user", "gemini", "info", "error", "warning"]);
  function isGemini(line) {
    return !!line && typeof line.id === "string" && GEMINI_TYPES.has(line.type) &&
      !("uuid" in line) && !("message" in line) && !("payload" in line);
  }

  // The Gemini image rule (docs/contract.md §2): the i-th object with an `inlineData` of an
  // image type met in a depth-first walk of the whole entry has index i. An explicit stack, as
  // the server's walk. Returns part -> index.
  function geminiImages(line) {
    const found = new Map();
    let next = 0;
    const stack = [line];
    while (stack.length) {
      const value = stack.pop();
      if (!value || typeof value !== "object") continue;
      const inline = Array.isArray(value) ? null : value.inlineData;
      if (inline && typeof inline === "object" && typeof inline.mimeType === "string" && inline.mimeType.slice(0, 6).toLowerCase() === "image/") {
        found.set(value, next++);
      }
      const items = Array.isArray(value) ? value : Object.values(value);
      for (let k = items.length - 1; k >= 0; k--) stack.push(items[k]);
    }
    return found;
  }

  function geminiPhoto(part, data, images, ctx) {
    const index = images.get(part);
    if (index === undefined || (data.failedImageIndexes || []).includes(index)) return el("div", "failed", "[image not displayed]");
    const ref = (data.mediaRefs || []).find((r) => (r.index || 0) === index);
    return ref ? photo(ref.url, ctx) : el("div", "failed", "[image not displayed]");
  }

  // The text and photos of a Part list (or a string); function calls and responses are the
  // tool calls' business, drawn with them.
  function geminiParts(content, data, images, into, ctx, entry) {
    if (typeof content === "string") { if (content) into.append(textBlock(content, entry)); return; }
    for (const part of Array.isArray(content) ? content : [content]) {
      if (!part || typeof part !== "object") continue;
      if (part.inlineData) into.append(geminiPhoto(part, data, images, ctx));
      else if (typeof part.text === "string" && part.text && !part.thought) into.append(textBlock(part.text, entry));
    }
  }

  // A tool call as Claude Code's are drawn: its name and main argument on one line, the
  // arguments and the result (text and photos, a function response's parts too) inside.
  function geminiCall(call, data, images, ctx) {
    const details = el("details", "tool");
    if (typeof call.id === "string" && call.id) {
      details.dataset.toolUseId = call.id;
      details.id = "call-" + call.id;
    }
    const name = String(call.displayName || call.name || "tool");
    const args = call.args && typeof call.args === "object" ? call.args : {};
    const summary = el("summary", "tool-line");
    summary.append(el("span", "tool-name", name));
    const arg = mainArgument(String(call.name || name), args);
    if (arg) summary.append(" ", el("code", "tool-arg", String(arg).split("\n")[0].slice(0, 200)));
    const failed = call.status === "error" || call.status === "cancelled";
    summary.append(el("span", "tool-status", call.status === "success" ? " ✓" : failed ? " ✗" : ""));
    const input = el("div", "tool-input");
    input.append(codeBlock(JSON.stringify(args, null, 2), "json"));
    const result = el("div", "tool-result" + (failed ? " tool-error" : ""));
    result.append(el("div", "tool-result-label", failed ? "error" : "result"));
    for (const part of Array.isArray(call.result) ? call.result : call.result ? [call.result] : []) {
      if (!part || typeof part !== "object") continue;
      const response = part.functionResponse;
      if (response && typeof response === "object") {
        const out = response.response && typeof response.response === "object" ? response.response : {};
        const text = typeof out.output === "string" ? out.output : typeof out.error === "string" ? out.error : "";
        if (text) result.append(ansiPre(text.replace(/\n+$/, "")));
        for (const inner of Array.isArray(response.parts) ? response.parts : []) {
          if (inner && inner.inlineData) result.append(geminiPhoto(inner, data, images, ctx));
        }
      } else if (part.inlineData) result.append(geminiPhoto(part, data, images, ctx));
      else if (typeof part.text === "string" && part.text) result.append(ansiPre(part.text));
    }
    details.append(summary, input, result);
    return details;
  }

  // What a reader sees of a Gemini message: the user's and the model's text as Claude Code's,
  // thoughts folded, tool calls with their results, photos lazily; info, warnings and errors
  // as notes.
  function geminiEntry(data, line, node, head, body, role, ctx) {
    const images = geminiImages(line);
    const type = line.type;
    const entry = Object.assign({}, data, { type: type === "user" ? "user" : "assistant", meta: false });
    if (type !== "user" && type !== "gemini") {
      node.className = "entry meta gemini" + (type === "error" ? " system error" : "");
      role(type);
      geminiParts(line.content, data, images, body, ctx, entry);
      return node;
    }
    node.className = "entry gemini " + (type === "user" ? "user" : "assistant");
    role(type === "user" ? "user" : "assistant" + (line.model ? " (" + line.model + ")" : ""));
    const thoughts = (Array.isArray(line.thoughts) ? line.thoughts : []).filter((t) => t && (t.subject || t.description));
    if (thoughts.length) {
      const details = el("details", "thinking");
      details.append(el("summary", "", "thinking"));
      details.append(markdown(thoughts.map((t) => (t.subject ? "**" + t.subject + "** " : "") + (t.description || "")).join("\n\n")));
      body.append(details);
    }
    geminiParts(line.content, data, images, body, ctx, entry);
    for (const call of Array.isArray(line.toolCalls) ? line.toolCalls : []) {
      if (call && typeof call === "object") body.append(geminiCall(call, data, images, ctx));
    }
    return node;
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
    if (isOpencode(line)) return opencodeEntry(data, line, node, body, role, ctx);
    if (isRollout(line)) return codexEntry(data, line, node, head, body, role, ctx);
    if (isGemini(line)) return geminiEntry(data, line, node, head, body, role, ctx);
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

  return { configure, el, ansi, stripAnsi, markdown, cleanTitle, projectName, cwdOf, IMAGE_PLACEHOLDER, entry, pairTools, photo, timeNode, setTime, when, diff, checklist };
})();
