// DOM of the conversation pane. A live stream and a reloaded history build the same nodes
// through the same AssistantTurn methods, so both look the same (tool chips included).
import { attachmentChip } from "./attachments.js";
import { chartRender } from "./charts.js";
import { codeEnhance } from "./code.js";
import { elicitationFields } from "./elicitation_form.js";
import { markdownFragment } from "./markdown.js";
import { LOCALE, t } from "./i18n.js";

export const INTERRUPTED_MARK = t("（已中断）");
// The visible label of an AI answer (《人工智能生成合成内容标识办法》, GB 45438-2025; docs/safety.md):
// under the answer from its first word, and at the end of what its copy button copies.
export const AI_LABEL = t("内容由 AI 生成");
export const AI_LABEL_COPIED = t("（内容由 AI 生成）");
const TOOL_STATE_TEXT = {
  running: t("运行中…"), waiting: t("等待确认"), authorizing: t("等待连接账号"), asking: t("等待回答"), done: t("完成"), failed: t("失败"),
  cut: t("已中断"),
};
export const ECHO_TITLE = t("结果已写在回答里");
const TOOL_IMAGE_ALT = t("工具返回的图片");
export const REASONING_TITLE = t("思考过程");
// The knowledge passages an answer read (docs/knowledge.md): numbered as the answer cites them.
export const SOURCES_TITLE = t("出处");
const SAFE_SOURCE = /^\/api\/v1\/knowledge\/documents\/\d+\/file(#page=\d+)?$/;
const REASONING_LIVE = t("思考中…");
const SAFE_LINK = /^https?:\/\/[^\s]+$/i;
const SAFE_IMAGE = /^data:image\/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/]+={0,2}$/;

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// The names staff gave the tools (page state `tools`: exact names and `<service>__` prefixes).
let toolNames = { names: {}, prefixes: [] };

export function toolLabelsSet(tools) {
  if (tools && typeof tools === "object") toolNames = { names: tools.names || {}, prefixes: tools.prefixes || [] };
}

// `call_canteen` → 食堂助手 (its display name); `campus-calendar__today` → 校历. A tool the page
// does not know (renamed or deleted since) keeps a plain description of what it is.
export function toolLabel(tool) {
  const name = String(tool || "");
  if (Object.hasOwn(toolNames.names, name)) return toolNames.names[name];
  for (const [prefix, label] of toolNames.prefixes) if (name.startsWith(prefix)) return label;
  return name.startsWith("call_") ? t("子 Agent · %s", name.slice(5)) : t("工具 · %s", name);
}

export function userBubble(container, text, attachments = []) {
  const article = el("article", "msg msg-user");
  const body = el("div", "msg-body");
  body.append(el("p", "msg-text", text)); // the student's own text, shown as typed
  if (attachments.length) {
    const list = el("ul", "attachment-list");
    list.setAttribute("aria-label", t("附件"));
    list.append(...attachments.map(attachmentChip));
    body.append(list);
  }
  article.append(body);
  container.append(article);
  return article;
}

// A call's arguments (JSON text) as readable pairs: {"message": "订一份午饭"} → 内容: 订一份午饭.
// Shown as text nodes only; a value that is not a string is shown as compact JSON.
const ARGUMENT_NAMES = { message: t("内容") };

export function argumentPairs(args) {
  let value;
  try {
    value = JSON.parse(String(args || "{}"));
  } catch {
    return [[t("参数"), String(args)]];
  }
  if (!value || typeof value !== "object" || Array.isArray(value)) return [[t("参数"), JSON.stringify(value)]];
  return Object.entries(value).map(([key, item]) => [
    ARGUMENT_NAMES[key] || key,
    typeof item === "string" ? item : JSON.stringify(item),
  ]);
}

const flat = (text) => String(text || "").replace(/\s+/g, " ").trim();

export class AssistantTurn {
  constructor(container) {
    this.article = el("article", "msg msg-assistant");
    this.article.append(el("div", "msg-avatar", t("智")));
    this.body = el("div", "msg-body");
    this.article.append(this.body);
    container.append(this.article);
    this.segment = null; // the text segment that chunks currently append to
    this.thought = null; // the reasoning block that reasoning deltas currently append to
    this.segments = []; // every text segment, in order: the answer's markdown source
    this.tools = new Map(); // call_id → {details, output, text, state}
    this.pending = new Set(); // nodes to re-render on the next animation frame
    this.frame = 0;
    this.hasText = false;
    this.hasError = false;
    this.finished = false;
    this.label = null; // the 「内容由 AI 生成」 line, once the answer has something of the model's
    this.labelled = true; // false for an answer a client brought along (not ours to label)
  }

  // Where the answer's next piece goes: above the thinking dots, and above the label.
  get tail() {
    return this.dots || this.label || null;
  }

  // Shows the label, or moves it back under everything the answer shows (a chart, 已中断),
  // above the action bar.
  labelShow() {
    if (!this.labelled) return;
    this.label ||= el("p", "ai-label", AI_LABEL);
    this.body.insertBefore(this.label, this.actions || null);
  }

  thinking(on) {
    if (on && !this.dots) {
      this.dots = el("div", "thinking");
      this.dots.setAttribute("aria-label", t("正在思考"));
      this.dots.append(el("span"), el("span"), el("span"));
      this.body.insertBefore(this.dots, this.label || null);
    } else if (!on && this.dots) {
      this.dots.remove();
      this.dots = null;
    }
  }

  // Markdown is re-rendered at most once per frame however fast chunks arrive.
  schedule(target) {
    this.pending.add(target);
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  flush() {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
    for (const target of this.pending) {
      const fragment = markdownFragment(target.text);
      codeEnhance(fragment);
      target.node.replaceChildren(fragment);
    }
    this.pending.clear();
  }

  // A thinking model's reasoning (docs/design.md#the-tool-loop): a block of plain text (never markdown: it is a
  // draft), open while it streams, folded once the answer or a tool call begins. Reasoning
  // after a tool round opens a block of its own.
  reasoning(delta) {
    if (!delta) return;
    this.thinking(false);
    if (!this.thought) {
      const details = el("details", "reasoning");
      details.open = true;
      const summary = el("summary", "reasoning-summary");
      summary.append(el("span", "reasoning-title", REASONING_TITLE), el("span", "reasoning-state", REASONING_LIVE));
      const text = el("div", "reasoning-text");
      details.append(summary, text);
      this.body.insertBefore(details, this.tail);
      this.thought = { details, text };
      if (!this.label) this.labelShow();
      this.segment = null; // answer text after the block goes below it
    }
    this.thought.text.append(String(delta)); // a text node: shown as written
  }

  reasoningFold() {
    if (!this.thought) return;
    const { details } = this.thought;
    details.open = false;
    details.querySelector(".reasoning-state").textContent = "";
    this.thought = null;
  }

  text(delta) {
    if (!delta) return;
    this.thinking(false);
    this.reasoningFold();
    if (!this.segment) {
      this.segment = { node: el("div", "md segment"), text: "" };
      this.segments.push(this.segment);
      this.body.insertBefore(this.segment.node, this.tail);
    }
    if (!this.label) this.labelShow();
    this.segment.text += delta;
    this.hasText = true;
    this.schedule(this.segment);
  }

  // The answer's own markdown, segment after segment.
  markdownText() {
    return this.segments.map((s) => s.text.trim()).filter(Boolean).join("\n\n");
  }

  // What "copy" puts on the clipboard: the markdown, and the label after a blank line (the rules
  // want it in what is copied too).
  copyText() {
    const text = this.markdownText();
    return text && this.labelled ? `${text}\n\n${AI_LABEL_COPIED}` : text;
  }

  toolCall({ call_id: callId, tool }) {
    this.thinking(false);
    this.reasoningFold();
    this.segment = null; // text after a tool call starts a new segment below the chip
    const details = el("details", "tool");
    details.dataset.callId = callId || "";
    details.dataset.tool = tool || "";
    const summary = el("summary", "tool-summary");
    summary.append(el("span", "tool-icon"), el("span", "tool-name", toolLabel(tool)), el("span", "tool-state"));
    const output = el("div", "md tool-output");
    details.append(summary, output);
    this.body.insertBefore(details, this.tail);
    const entry = { details, node: output, text: "" };
    this.tools.set(callId, entry);
    this.toolState(entry, "running");
    return entry;
  }

  // `label`: a state text of its own (a waiting call waits for an approval or for an account).
  toolState(entry, state, label = TOOL_STATE_TEXT[state]) {
    entry.details.dataset.state = state;
    entry.details.querySelector(".tool-state").textContent = label;
  }

  toolEntry(callId, tool) {
    return this.tools.get(callId) || this.toolCall({ call_id: callId, tool });
  }

  toolChunk({ call_id: callId, tool, content }) {
    const entry = this.toolEntry(callId, tool);
    entry.text += content || "";
    entry.details.classList.add("has-output");
    this.schedule(entry);
  }

  toolResult({ call_id: callId, tool, ok, error, links, images, label, interrupted }) {
    const entry = this.toolEntry(callId, tool);
    this.approvalSettle(entry);
    if (label) entry.details.querySelector(".tool-name").textContent = String(label); // the tool's own title
    this.toolMedia(entry, links, images);
    // A cut call (the run stopped before it answered) reads 已中断, live as after a reload.
    this.toolState(entry, interrupted === true ? "cut" : ok ? "done" : "failed");
    if (!ok && error && !entry.text) {
      entry.text = String(error);
      entry.details.classList.add("has-output");
      this.schedule(entry);
    }
  }

  // An MCP tool's resource links and a trusted service's images (tool_result `links`, `images`),
  // in the chip, built as DOM nodes, never through markdown (whose sanitizer drops data: images).
  // Checked again here: only http(s) links, only raster data: images.
  toolMedia(entry, links, images) {
    const list = (value) => (Array.isArray(value) ? value : []);
    const safeLinks = list(links).filter((link) => link && SAFE_LINK.test(String(link.uri)));
    const safeImages = list(images).filter((image) => image && SAFE_IMAGE.test(String(image.src)));
    if (!safeLinks.length && !safeImages.length) return;
    const box = el("div", "tool-media");
    for (const link of safeLinks) {
      const a = el("a", "tool-link", String(link.name || link.uri));
      a.href = String(link.uri);
      a.target = "_blank";
      a.rel = "noopener noreferrer";
      box.append(a);
    }
    for (const image of safeImages) {
      const img = el("img", "tool-image");
      img.src = String(image.src);
      img.alt = TOOL_IMAGE_ALT;
      img.style.maxWidth = "100%"; // CSSOM, which the CSP allows (an inline style attribute it would not)
      box.append(img);
    }
    entry.details.append(box);
    entry.media = true;
    entry.details.classList.add("has-output");
    entry.details.open = true; // a link or a picture is the answer's point: shown without a click
  }

  // A tool call that waits for the student (approval_required): a card in its chip with what
  // will run and two buttons. `onDecide(decision)` posts the decision and resolves to null, or
  // to a message to show when it did not go through. The card goes when the call's result comes.
  approvalAsk({ call_id: callId, tool, args, expires_at: expiresAt }, onDecide, texts) {
    const entry = this.toolEntry(callId, tool);
    if (entry.approval) return; // a replayed frame (re-attach) for a card already shown
    this.toolState(entry, "waiting");
    const card = el("div", "approval");
    card.setAttribute("role", "group");
    card.append(el("p", "approval-title", t("%s：%s", texts.title, toolLabel(tool))));
    const list = el("dl", "approval-args");
    for (const [key, value] of argumentPairs(args)) list.append(el("dt", "", key), el("dd", "", value));
    if (list.childElementCount) card.append(list);
    const until = new Date(expiresAt);
    if (!Number.isNaN(until.getTime())) {
      const time = until.toLocaleTimeString(LOCALE, { hour: "2-digit", minute: "2-digit" });
      card.append(el("p", "approval-until", texts.until(time)));
    }
    const row = el("div", "approval-actions");
    const note = el("p", "approval-note");
    note.setAttribute("aria-live", "polite");
    const buttons = [["approve", texts.approve, "btn-primary"], ["reject", texts.reject, "btn-ghost"]].map(
      ([decision, label, style]) => {
        const button = el("button", `btn ${style} btn-small approval-${decision}`, label);
        button.type = "button";
        button.addEventListener("click", async () => {
          buttons.forEach((b) => { b.disabled = true; });
          note.textContent = texts.sent[decision];
          const problem = await onDecide(decision);
          if (problem) {
            note.textContent = problem;
            buttons.forEach((b) => { b.disabled = false; });
          }
        });
        return button;
      },
    );
    row.append(...buttons);
    card.append(row, note);
    entry.details.append(card);
    entry.details.open = true;
    entry.approval = card;
    buttons[0].focus();
  }

  // A call whose MCP service needs the student's own account first (authorization_required): a
  // card in its chip with a link to the authorization server's page (a new tab; the answer comes
  // back to the server, which lets the run go on, and its frames arrive on this stream) and a
  // button to decline. Only an http(s) link is drawn; the card goes when the call's result comes.
  authorizationAsk({ call_id: callId, tool, service, url, expires_at: expiresAt }, onDecline, texts) {
    const entry = this.toolEntry(callId, tool);
    if (entry.approval) return; // a replayed frame (re-attach)
    this.toolState(entry, "waiting", TOOL_STATE_TEXT.authorizing);
    const name = String(service || toolLabel(tool));
    const card = el("div", "approval authorization");
    card.setAttribute("role", "group");
    card.append(el("p", "approval-title", texts.title(name)));
    const until = new Date(expiresAt);
    if (!Number.isNaN(until.getTime())) {
      const time = until.toLocaleTimeString(LOCALE, { hour: "2-digit", minute: "2-digit" });
      card.append(el("p", "approval-until", texts.hint(time)));
    }
    const row = el("div", "approval-actions");
    const note = el("p", "approval-note");
    note.setAttribute("aria-live", "polite");
    let href = null;
    try {
      const parsed = new URL(String(url));
      if (parsed.protocol === "https:" || parsed.protocol === "http:") href = parsed.href;
    } catch {
      href = null;
    }
    if (href) {
      const open = el("a", "btn btn-primary btn-small authorization-open", texts.open(name));
      open.href = href;
      open.target = "_blank";
      open.rel = "noopener noreferrer";
      open.addEventListener("click", () => { note.textContent = texts.sent.open; });
      row.append(open);
    }
    const decline = el("button", "btn btn-ghost btn-small approval-reject", texts.decline);
    decline.type = "button";
    decline.addEventListener("click", async () => {
      decline.disabled = true;
      note.textContent = texts.sent.reject;
      const problem = await onDecline();
      if (problem) {
        note.textContent = problem;
        decline.disabled = false;
      }
    });
    row.append(decline);
    card.append(row, note);
    entry.details.append(card);
    entry.details.open = true;
    entry.approval = card;
    (row.firstElementChild || decline).focus();
  }

  // A call whose MCP server asks the student something (elicitation_required): its question, and
  // either a form built from the schema (defaults filled in) or, in URL mode, a link (http(s)
  // only, its host named) and a button to say it is done. `onAnswer({action, content})` sends
  // the answer and gives back a problem to show, or null; the card goes when the call's result
  // comes.
  elicitationAsk(frame, onAnswer, texts) {
    const { call_id: callId, tool, service, message, mode, expires_at: expiresAt } = frame;
    const entry = this.toolEntry(callId, tool);
    if (entry.approval) return; // a replayed frame (re-attach)
    this.toolState(entry, "waiting", TOOL_STATE_TEXT.asking);
    const name = String(service || toolLabel(tool));
    const card = el("form", "approval elicitation");
    card.noValidate = false;
    card.setAttribute("aria-label", texts.title(name));
    card.append(el("p", "approval-title", texts.title(name)));
    if (message) card.append(el("p", "elicitation-message", String(message)));
    const until = new Date(expiresAt);
    if (!Number.isNaN(until.getTime())) {
      const time = until.toLocaleTimeString(LOCALE, { hour: "2-digit", minute: "2-digit" });
      card.append(el("p", "approval-until", texts.hint(time)));
    }
    const note = el("p", "approval-note");
    note.setAttribute("aria-live", "polite");
    const row = el("div", "approval-actions");
    let read = () => ({});
    let href = null;
    if (mode === "url") {
      try {
        const parsed = new URL(String(frame.url));
        if (parsed.protocol === "https:" || parsed.protocol === "http:") href = parsed;
      } catch {
        href = null;
      }
      if (href) {
        const open = el("a", "btn btn-ghost btn-small elicitation-open", texts.open(href.host));
        open.href = href.href;
        open.target = "_blank";
        open.rel = "noopener noreferrer";
        open.addEventListener("click", () => { note.textContent = texts.sent.open; });
        card.append(el("p", "elicitation-hint", texts.urlNote));
        row.append(open);
      }
    } else {
      read = elicitationFields(card, frame.schema || {}, frame.defaults || {});
    }
    const submit = el("button", "btn btn-primary btn-small approval-approve", mode === "url" ? texts.done : texts.submit);
    submit.type = "submit";
    const decline = el("button", "btn btn-ghost btn-small approval-reject", texts.decline);
    decline.type = "button";
    if (mode !== "url" || href) row.append(submit);
    row.append(decline);
    const buttons = [submit, decline];
    const send = async (answer) => {
      buttons.forEach((b) => { b.disabled = true; });
      note.textContent = texts.sent[answer.action];
      const problem = await onAnswer(answer);
      if (problem) {
        note.textContent = problem;
        buttons.forEach((b) => { b.disabled = false; });
      }
    };
    card.addEventListener("submit", (event) => {
      event.preventDefault();
      const content = read();
      if (content === null) return; // the browser showed what is wrong
      send(mode === "url" ? { action: "accept" } : { action: "accept", content });
    });
    decline.addEventListener("click", () => send({ action: "decline" }));
    card.append(row, note);
    entry.details.append(card);
    entry.details.open = true;
    entry.approval = card;
    (card.querySelector("input, select") || row.firstElementChild).focus();
  }

  approvalSettle(entry) {
    if (!entry.approval) return;
    entry.approval.remove();
    entry.approval = null;
  }

  // A stored tool row: its content is the full text the tool returned.
  toolStored({ callId, tool, content, ok, interrupted, links, images, label }) {
    const entry = this.toolEntry(callId, tool);
    if (label) entry.details.querySelector(".tool-name").textContent = String(label);
    this.toolMedia(entry, links, images);
    entry.text = content || "";
    if (entry.text) entry.details.classList.add("has-output");
    this.schedule(entry);
    // A stopped call's row says `interrupted`: the chip reads 已中断 after a reload as it did live.
    this.toolState(entry, interrupted ? "cut" : ok === false ? "failed" : "done");
  }

  // A tool whose whole output is already in the answer (a sub-agent's reply passed on as it
  // was) keeps its chip but nothing to expand: opening it would repeat the answer.
  toolEchoesMark() {
    const answer = flat(this.markdownText());
    if (!answer) return;
    for (const entry of this.tools.values()) {
      const output = flat(entry.text);
      if (entry.media || !output || entry.details.dataset.state !== "done" || !answer.includes(output)) continue;
      entry.details.classList.add("echo");
      entry.details.classList.remove("has-output");
      entry.node.replaceChildren(); // not even hidden: a screen reader would read it twice
      entry.details.open = false;
      entry.details.querySelector(".tool-summary").title = ECHO_TITLE;
    }
  }

  error(message) {
    this.thinking(false);
    const p = el("p", "msg-error", message);
    p.setAttribute("role", "alert");
    this.body.insertBefore(p, this.actions || null);
    this.segment = null;
    this.hasError = true;
    return p;
  }

  chart(spec) {
    if (spec) chartRender(this.body, spec);
  }

  markInterrupted() {
    for (const entry of this.tools.values()) {
      if (entry.details.dataset.state === "running") this.toolState(entry, "cut");
    }
    if (!this.body.querySelector(".msg-flag")) this.body.append(el("p", "msg-flag", INTERRUPTED_MARK));
  }

  // The footnotes of an answer that read knowledge passages: `[n] 《title》 p.N · heading`, each a
  // link to the document at its page (same origin only; the server says who may open it).
  sourcesShow(sources) {
    if (!Array.isArray(sources) || !sources.length || this.sourcesList) return;
    const list = el("ol", "sources");
    list.setAttribute("aria-label", SOURCES_TITLE);
    for (const source of sources) {
      if (!source || typeof source !== "object") continue;
      const item = el("li", "source");
      const where = `[${Number(source.n) || 0}] 《${String(source.title || "")}》`
        + (source.page ? ` p.${Number(source.page)}` : "") + (source.heading ? ` · ${String(source.heading)}` : "");
      if (SAFE_SOURCE.test(String(source.url || ""))) {
        const link = el("a", null, where);
        link.href = source.url;
        link.target = "_blank";
        link.rel = "noopener noreferrer";
        item.append(link);
      } else {
        item.textContent = where;
      }
      list.append(item);
    }
    this.sourcesList = list;
    this.body.insertBefore(list, this.label || this.actions || null);
  }

  finish({ fullText, chart, interrupted, sources } = {}) {
    if (this.finished) return;
    this.finished = true;
    this.thinking(false);
    // A reply that streamed no chunks (e.g. answered in one piece) still shows its text.
    if (!this.hasText && fullText) this.text(fullText);
    // A turn that ended while thinking keeps its reasoning open: it is all the turn said.
    if (this.thought && !this.hasText) this.thought.details.querySelector(".reasoning-state").textContent = "";
    else this.reasoningFold();
    this.flush();
    this.chart(chart);
    this.sourcesShow(sources);
    if (interrupted) this.markInterrupted();
    if (this.label || chart) this.labelShow(); // under the chart and the 已中断 mark too
    this.toolEchoesMark();
    this.article.classList.add("done");
  }
}
