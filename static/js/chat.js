// The chat page controller: sends a question, reads the SSE answer as it arrives, keeps the
// sidebar and the address bar in step, and lets the student stop, regenerate, edit, retry,
// copy and rate an answer.
//
// An answer is a run on the server (docs/design.md#runs): it goes on whatever happens to this page. The
// page follows it, re-attaches after a dropped connection (from the last frame it has) or after
// a reload (from the start: the run's rows are not in the rendered history), and stops it with
// POST /api/v1/runs/<id>/stop rather than by hanging up. Every new answer (a question, an example,
// regenerate, edit-and-resend, retry) starts through `ask`.
import {
  chatPost,
  conversationDelete,
  errorBody,
  feedbackDelete,
  feedbackPut,
  lastTurnSupersede,
  runApprovalAnswer,
  runApprovalDecide,
  runEvents,
  runStop,
} from "./api.js";
import { apiKeysPanel } from "./api_keys.js";
import { AttachmentTray } from "./attachments.js";
import { copyWithFeedback } from "./clipboard.js";
import { Composer } from "./composer.js";
import { Exchange, exchangeFor } from "./exchange.js";
import { historyRender } from "./history.js";
import { myDataPanel } from "./my_data.js";
import { REPORT_DONE, reportDialog, reportOpen } from "./report.js";
import {
  APPROVAL_APPROVE,
  APPROVAL_FAILED,
  APPROVAL_REJECT,
  APPROVAL_SENT,
  APPROVAL_TITLE,
  APPROVAL_UNTIL,
  APPROVAL_WAITING,
  ATTACHMENT_WAIT,
  AUTHORIZATION_DECLINE,
  AUTHORIZATION_HINT,
  AUTHORIZATION_OPEN,
  AUTHORIZATION_SENT,
  AUTHORIZATION_TITLE,
  ELICITATION_DECLINE,
  ELICITATION_DONE,
  ELICITATION_HINT,
  ELICITATION_OPEN,
  ELICITATION_SENT,
  ELICITATION_SUBMIT,
  ELICITATION_TITLE,
  ELICITATION_URL_NOTE,
  ELICITATION_WAITING,
  AUTHORIZATION_WAITING,
  CAMPUS_LOGIN_BUTTON,
  CAMPUS_LOGIN_EXPIRED,
  DELETE_FAILED,
  FEEDBACK_FAILED,
  NETWORK_FAILED,
  RETRY,
  RETRY_IN,
  STREAM_CUT,
  errorText,
} from "./messages.js";
import { Sidebar } from "./sidebar.js";
import { eventIds, sseFrames } from "./sse.js";
import { el, toolLabelsSet } from "./view.js";
import { welcomeRender } from "./welcome.js";
import { t } from "./i18n.js";

const state = JSON.parse(document.getElementById("page-state").textContent);
const $ = (id) => document.getElementById(id);
const pane = $("messages");
const input = $("input");
const sendButton = $("send");
const stopButton = $("stop");
const agentSelect = $("agent-select");
const statusLine = $("status");
const app = $("app");
const CAMPUS_TOKEN_EXPIRED = 40102;

toolLabelsSet(state.tools);
const composer = new Composer({
  input, send: sendButton, counter: $("input-limit"), notice: statusLine, max: state.message_max || 8000,
});

const tray = new AttachmentTray({
  button: $("attach"), picker: $("attach-picker"), tray: $("attachment-tray"), drop: $("composer"), paste: input,
  readsImages: () => state.reads_images?.[agentSelect.value] === true,
});

// The run this page follows now, if any:
// {controller, runId, lastSeq, stopWanted, turn, question, exchange, version, sessionSeen, refused}.
let current = null;
const RESUME_TRIES = 5;
const STREAMING_STATUS = t("小智正在回答…（可按“停止”中断）");
const APPROVAL_TEXTS = {
  title: APPROVAL_TITLE, approve: APPROVAL_APPROVE, reject: APPROVAL_REJECT, until: APPROVAL_UNTIL, sent: APPROVAL_SENT,
};
const AUTHORIZATION_TEXTS = {
  title: AUTHORIZATION_TITLE, hint: AUTHORIZATION_HINT, open: AUTHORIZATION_OPEN, decline: AUTHORIZATION_DECLINE,
  sent: AUTHORIZATION_SENT,
};
const ELICITATION_TEXTS = {
  title: ELICITATION_TITLE, hint: ELICITATION_HINT, submit: ELICITATION_SUBMIT, decline: ELICITATION_DECLINE,
  open: ELICITATION_OPEN, done: ELICITATION_DONE, urlNote: ELICITATION_URL_NOTE, sent: ELICITATION_SENT,
};
const RESUME_DELAY_MS = 1000;

// --- helpers ---------------------------------------------------------------------------------

function nearBottom() {
  return pane.scrollHeight - pane.scrollTop - pane.clientHeight < 80;
}

function keepScrolled(wasNear) {
  if (wasNear) pane.scrollTop = pane.scrollHeight;
}

// Mirrors the server's rule (issue 4) so the sidebar shows the title before a reload does.
function titleFrom(question) {
  const text = question.replace(/\s+/g, " ").trim();
  if (!text) return t("新对话");
  return text.length > 24 ? `${text.slice(0, 24)}...` : text;
}

function status(text) {
  statusLine.classList.remove("over-limit");
  statusLine.textContent = text;
}

function setStreaming(on) {
  input.disabled = on;
  sendButton.hidden = on;
  stopButton.hidden = !on;
  agentSelect.disabled = on || agentSelect.options.length === 0 || !agentSelect.value;
  app.classList.toggle("streaming", on);
  status(on ? STREAMING_STATUS : "");
  if (!on) composer.update();
  if (on) stopButton.focus();
  else input.focus();
}

function titleShow(title) {
  $("chat-title").textContent = title;
  document.title = t("%s · 校园小智", title);
}

const sidebar = new Sidebar({
  activeId: state.conversation_id,
  onStatus: status,
  onRenamed: (id, title) => { if (id === state.conversation_id) titleShow(title); },
});

// --- campus login expired (40102) -------------------------------------------------------------

function campusLoginUrl() {
  if (!state.campus_login_url) return null;
  const back = state.conversation_id ? `/c/${state.conversation_id}/` : "/";
  return `${state.campus_login_url}?next=${encodeURIComponent(back)}`;
}

function campusLoginExpired(turn) {
  const box = turn.error(CAMPUS_LOGIN_EXPIRED);
  box.classList.add("relogin");
  const url = campusLoginUrl();
  if (url) {
    const link = el("a", "btn btn-primary btn-small campus-relogin", CAMPUS_LOGIN_BUTTON);
    link.href = url;
    box.append(link);
  }
}

function errorShow(turn, err, text) {
  if (Number(err?.code) === CAMPUS_TOKEN_EXPIRED) campusLoginExpired(turn);
  else turn.error(text);
}

// --- one turn --------------------------------------------------------------------------------

function onFrame(run, frame) {
  const { turn } = run;
  switch (frame.type) {
    case "session":
      run.sessionSeen = true;
      if (frame.conversation_id && frame.conversation_id !== state.conversation_id) {
        state.conversation_id = frame.conversation_id;
        // A reload (or a shared link) reopens this conversation from the database.
        history.replaceState(null, "", `/c/${frame.conversation_id}/`);
      }
      if (frame.conversation_id) {
        const known = sidebar.itemFor(frame.conversation_id);
        sidebar.touch(frame.conversation_id, titleFrom(run.question || ""));
        if (!known) titleShow(sidebar.titleOf(frame.conversation_id));
      }
      break;
    case "chunk":
      turn.text(frame.content);
      break;
    case "reasoning":
      turn.reasoning(frame.content);
      break;
    case "tool_call":
      turn.toolCall(frame);
      break;
    case "tool_chunk":
      turn.toolChunk(frame);
      break;
    case "tool_result":
      turn.toolResult(frame);
      if (run.waiting?.delete(frame.call_id) && !run.waiting.size) status(STREAMING_STATUS);
      break;
    case "approval_required":
      (run.waiting ||= new Set()).add(frame.call_id);
      turn.approvalAsk(frame, (decision) => decide(run, frame.call_id, decision), APPROVAL_TEXTS);
      status(APPROVAL_WAITING);
      break;
    case "authorization_required":
      (run.waiting ||= new Set()).add(frame.call_id);
      turn.authorizationAsk(frame, () => decide(run, frame.call_id, "reject"), AUTHORIZATION_TEXTS);
      status(AUTHORIZATION_WAITING);
      break;
    case "elicitation_required":
      (run.waiting ||= new Set()).add(frame.call_id);
      turn.elicitationAsk(frame, (answer) => answerSend(run, frame.call_id, answer), ELICITATION_TEXTS);
      status(ELICITATION_WAITING);
      break;
    case "error":
      errorShow(turn, frame, errorText({ code: frame.code, message: frame.message }));
      break;
    case "done":
      run.messageId = frame.message_id || null;
      turn.finish({ fullText: frame.full_text, chart: frame.chart, interrupted: frame.interrupted === true,
                    sources: frame.sources });
      return true;
    default:
      break; // frame types added later are ignored, not fatal
  }
  return false;
}

// Reads one response of the run; true once `done` came.
async function readStream(run, response) {
  for await (const frame of sseFrames(response)) {
    const seq = Number(eventIds.get(frame));
    if (seq > run.lastSeq) run.lastSeq = seq;
    if (frame.type === "session" && frame.run_id && !run.runId) {
      run.runId = frame.run_id;
      if (run.stopWanted) sendStop(run); // stop was pressed before the run had a name
    }
    const wasNear = nearBottom();
    const ended = onFrame(run, frame);
    keepScrolled(wasNear);
    if (ended) return true;
  }
  return false;
}

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Follows the run to its end. A connection that drops (mobile network, proxy) does not cut the
// answer: the page re-attaches after the last frame it has, a few times, before giving up.
async function followRun(run, response) {
  for (let attempt = 0; ; attempt += 1) {
    try {
      if (await readStream(run, response)) return;
    } catch (err) {
      if (err?.name === "AbortError") throw err;
    }
    if (!run.runId || attempt >= RESUME_TRIES) throw new Error("stream cut");
    await pause(RESUME_DELAY_MS);
    try {
      response = await runEvents({ runId: run.runId, after: run.lastSeq, signal: run.controller.signal });
    } catch (err) {
      if (err?.name === "AbortError") throw err;
      continue; // still offline: try again
    }
    if (!response.ok) throw new Error(`re-attach refused (${response.status})`);
  }
}

// The student's decision on a waiting call; null when it went through (the run goes on and its
// frames arrive on the stream), else what to tell them.
// The problem to show when the answer to a waiting call was not taken, else null.
async function answerProblem(send) {
  try {
    const response = await send();
    if (response.ok) return null;
    const body = await errorBody(response);
    return errorText({ code: body?.code, status: response.status, message: body?.message }) || APPROVAL_FAILED;
  } catch {
    return APPROVAL_FAILED;
  }
}

function decide(run, callId, decision) {
  return answerProblem(() => runApprovalDecide({ runId: run.runId, callId, decision }));
}

function answerSend(run, callId, { action, content }) {
  return answerProblem(() => runApprovalAnswer({ runId: run.runId, callId, action, content }));
}

async function sendStop(run) {
  try {
    const response = await runStop({ runId: run.runId });
    if (response.ok) return; // the run ends; its `done` (interrupted) arrives on the stream
  } catch {
    // fall through: the server could not be asked
  }
  run.controller.abort();
}

function stopCurrent() {
  const run = current;
  if (!run || run.stopWanted) return;
  run.stopWanted = true;
  status(t("正在停止…"));
  if (run.runId) sendStop(run);
}

function runBegin(question, exchange, runId = null) {
  const turn = exchange.newTurn();
  const version = exchange.addVersion({ turn, question });
  turn.thinking(true);
  pane.scrollTop = pane.scrollHeight;
  current = {
    controller: new AbortController(), runId, lastSeq: 0, stopWanted: false, turn, question, exchange, version,
    sessionSeen: Boolean(runId), refused: null, messageId: null,
  };
  setStreaming(true);
  return current;
}

// Runs `start` (which follows the run), then ends the turn's view whatever happened.
async function runFollow(run, start) {
  try {
    await start();
    if (!run.turn.finished) run.turn.finish({});
  } catch (err) {
    if (err?.name === "AbortError") {
      run.turn.finish({ interrupted: true });
    } else {
      run.turn.error(err?.message === "stream cut" ? STREAM_CUT : NETWORK_FAILED);
      run.turn.finish({ interrupted: true });
    }
  } finally {
    current = null;
    setStreaming(false);
    runSettle(run);
    pane.scrollTop = pane.scrollHeight;
  }
}

// After the run: the answer's action bar, and a retry button when it failed.
function runSettle(run) {
  const { version, exchange } = run;
  version.stored = run.sessionSeen;
  version.messageId = run.messageId;
  const failed = Boolean(run.refused || run.turn.hasError);
  if (version.stored) exchange.actionsRender(version, { regenerate: !failed });
  if (failed) retryOffer(run);
}

// A refused question (nothing stored: 429, network) is asked again as it was; a stored one that
// failed is regenerated, the failed answer kept as an earlier version.
function retryOffer(run) {
  const { turn, version, exchange } = run;
  const row = el("div", "retry-row only-last");
  const button = el("button", "btn btn-ghost btn-small retry", RETRY);
  button.type = "button";
  row.append(button);
  turn.body.insertBefore(row, turn.actions || null);
  button.addEventListener("click", () => {
    if (current) return;
    if (version.stored) {
      regenerate(exchange);
      return;
    }
    exchange.removeVersion(version);
    if (exchange.versions.length) ask(version.question, { exchange });
    else {
      exchange.node.remove();
      ask(version.question);
    }
  });
  const wait = Number(run.refused?.retryAfter);
  if (wait > 0) countdown(button, Math.min(Math.ceil(wait), 3600));
}

// A 429 says when to come back (Retry-After): the button counts down and waits until then.
function countdown(button, seconds) {
  let left = seconds;
  button.disabled = true;
  const tick = () => {
    if (left <= 0) {
      clearInterval(timer);
      button.disabled = false;
      button.textContent = RETRY;
      return;
    }
    button.textContent = t("%s（%s）", RETRY, RETRY_IN(left));
    left -= 1;
  };
  const timer = setInterval(tick, 1000);
  tick();
}

function ask(question, { exchange = null, attachments = exchange?.attachments || [] } = {}) {
  $("welcome").hidden = true;
  const target = exchange || new Exchange(pane, question, attachments);
  target.pendingQuestion = null;
  const run = runBegin(question, target);
  return runFollow(run, async () => {
    const response = await chatPost({
      message: question,
      conversationId: state.conversation_id,
      agent: agentSelect.value,
      attachments: attachments.map((a) => a.id),
      signal: run.controller.signal,
    });
    if (!response.ok) {
      const body = await errorBody(response);
      run.refused = { status: response.status, code: body.code, retryAfter: response.headers.get("Retry-After") };
      errorShow(run.turn, body, errorText({ code: body.code, status: response.status, message: body.message }));
      run.turn.finish({});
      return;
    }
    await followRun(run, response);
  });
}

// After a reload (or in a second tab) while an answer is still being written: show what was
// said so far, then follow it live.
function attach(runId, exchange) {
  $("welcome").hidden = true;
  const target = exchange || new Exchange(pane, "");
  const question = target.pendingQuestion || "";
  target.pendingQuestion = null;
  const run = runBegin(question, target, runId);
  return runFollow(run, async () => {
    const response = await runEvents({ runId, after: 0, signal: run.controller.signal });
    if (!response.ok) throw new Error("stream cut");
    await followRun(run, response);
  });
}

// --- regenerate, edit, copy, rate -------------------------------------------------------------

// The last turn is set aside on the server (kept as an earlier version), then asked anew.
async function replaceLastTurn(exchange, question) {
  if (current) return;
  const shown = exchange.current;
  if (shown?.stored && !shown.superseded && state.conversation_id) {
    let response;
    try {
      response = await lastTurnSupersede({ conversationId: state.conversation_id });
    } catch {
      status(NETWORK_FAILED);
      return;
    }
    // 40902: nothing left to set aside (another tab did it): the new question goes on as asked.
    if (!response.ok && !(response.status === 409 && (await errorBody(response)).code === 40902)) {
      const body = await errorBody(response);
      status(errorText({ code: body.code, status: response.status, message: body.message }));
      return;
    }
    for (const version of exchange.versions) version.superseded = true;
  }
  ask(question, { exchange });
}

function regenerate(exchange) {
  const question = exchange.current?.question ?? exchange.pendingQuestion;
  if (question) replaceLastTurn(exchange, question);
}

function editStart(exchange) {
  if (current || exchange.editor) return;
  const bubble = exchange.userArticle;
  const body = bubble.querySelector(".msg-body");
  const editor = el("div", "question-editor");
  const area = el("textarea");
  area.value = bubble.querySelector(".msg-text").textContent;
  area.setAttribute("aria-label", t("修改问题"));
  const buttons = el("div", "question-editor-buttons");
  const cancel = el("button", "btn btn-ghost btn-small", t("取消"));
  const send = el("button", "btn btn-primary btn-small", t("发送"));
  cancel.type = "button";
  send.type = "button";
  buttons.append(cancel, send);
  editor.append(area, buttons);
  body.hidden = true;
  bubble.append(editor);
  exchange.editor = editor;
  area.focus();
  const close = () => {
    editor.remove();
    body.hidden = false;
    exchange.editor = null;
  };
  cancel.addEventListener("click", close);
  const submit = () => {
    const question = area.value.trim();
    if (!question || [...question].length > composer.max) return;
    close();
    replaceLastTurn(exchange, question);
  };
  send.addEventListener("click", submit);
  area.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      event.stopPropagation();
      close();
    } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
      event.preventDefault();
      submit();
    }
  });
}

async function rate(exchange, version, rating) {
  if (!version?.messageId) return;
  const same = version.feedback?.rating === rating;
  let response;
  try {
    response = same
      ? await feedbackDelete({ messageId: version.messageId })
      : await feedbackPut({ messageId: version.messageId, rating });
  } catch {
    status(FEEDBACK_FAILED);
    return;
  }
  if (!response.ok) {
    status(FEEDBACK_FAILED);
    return;
  }
  version.feedback = same ? null : { rating, comment: "" };
  exchange.feedbackPressed(version);
  version.turn.body.querySelector(".feedback-form, .feedback-thanks")?.remove();
  if (!same) feedbackFormShow(exchange, version, rating);
}

// After a thumb: an optional comment, sent with the same rating.
function feedbackFormShow(exchange, version, rating) {
  const form = el("form", "feedback-form");
  const area = el("textarea");
  area.maxLength = 1000;
  area.placeholder = rating === "up" ? t("哪里有帮助？（可选）") : t("哪里不对或不够好？（可选）");
  area.setAttribute("aria-label", t("补充意见"));
  const buttons = el("div", "feedback-form-buttons");
  const send = el("button", "btn btn-primary btn-small", t("提交意见"));
  const skip = el("button", "btn btn-ghost btn-small", t("不用了"));
  send.type = "submit";
  skip.type = "button";
  buttons.append(send, skip);
  form.append(area, buttons);
  version.turn.actions.after(form);
  area.focus();
  skip.addEventListener("click", () => form.remove());
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const comment = area.value.trim();
    if (!comment) {
      form.remove();
      return;
    }
    let response;
    try {
      response = await feedbackPut({ messageId: version.messageId, rating, comment });
    } catch {
      response = null;
    }
    if (!response?.ok) {
      status(FEEDBACK_FAILED);
      return;
    }
    version.feedback = { rating, comment };
    form.replaceWith(el("p", "feedback-thanks", t("谢谢你的意见！")));
  });
}

// The report dialog (report.js); a reported answer's button only says the report's status.
function report(exchange, version) {
  if (!version?.messageId) return;
  if (version.report) {
    status(t("你已举报过这个回答：%s", version.report.status_label || ""));
    return;
  }
  reportOpen({
    messageId: version.messageId,
    onFiled: (filed) => {
      version.report = filed;
      exchange.reportMarked(version);
      version.turn.body.querySelector(".report-thanks")?.remove();
      const thanks = el("p", "report-thanks", REPORT_DONE);
      thanks.setAttribute("role", "status");
      version.turn.actions.after(thanks);
    },
  });
}

pane.addEventListener("click", (event) => {
  const example = event.target.closest(".example-question");
  if (example && !current) {
    ask(example.dataset.question);
    return;
  }
  const codeCopy = event.target.closest(".code-copy");
  if (codeCopy) {
    copyWithFeedback(codeCopy, codeCopy.closest(".code-block").querySelector("code").textContent);
    return;
  }
  const button = event.target.closest("[data-action]");
  const exchange = button && exchangeFor(button);
  if (!exchange) return;
  const version = exchange.versions.find((v) => v.turn.article.contains(button));
  switch (button.dataset.action) {
    case "prev":
      exchange.show(exchange.versions.indexOf(version) - 1);
      break;
    case "next":
      exchange.show(exchange.versions.indexOf(version) + 1);
      break;
    case "copy":
      copyWithFeedback(button, version.turn.copyText());
      break;
    case "regenerate":
      regenerate(exchange);
      break;
    case "edit":
      editStart(exchange);
      break;
    case "rate":
      rate(exchange, version, button.dataset.rating);
      break;
    case "report":
      report(exchange, version);
      break;
    default:
      break;
  }
});

// --- wiring ----------------------------------------------------------------------------------

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const question = input.value.trim();
  if (!question || current || composer.tooLong) return;
  if (tray.ids() === null) {
    status(ATTACHMENT_WAIT);
    return;
  }
  const attachments = tray.sent();
  composer.clear();
  tray.clear();
  ask(question, { attachments });
});

input.addEventListener("keydown", (event) => {
  // Enter sends; Shift+Enter adds a line; Enter that confirms an IME candidate does neither.
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});

stopButton.addEventListener("click", stopCurrent);
document.addEventListener("keydown", (event) => {
  if (event.key !== "Escape") return;
  if (app.classList.contains("sidebar-open")) sidebarOpen(false);
  else stopCurrent();
});

function sidebarOpen(open) {
  app.classList.toggle("sidebar-open", open);
  $("scrim").hidden = !open;
  $("menu-toggle").setAttribute("aria-expanded", String(open));
  if (open) $("new-chat").focus();
}
$("menu-toggle").addEventListener("click", () => sidebarOpen(!app.classList.contains("sidebar-open")));
$("scrim").addEventListener("click", () => sidebarOpen(false));

$("conversation-list").addEventListener("click", async (event) => {
  const button = event.target.closest(".delete-conversation");
  if (!button) return;
  const { id } = button.dataset;
  if (!window.confirm(t("确定删除这个对话吗？删除后无法恢复。"))) return;
  let response;
  try {
    response = await conversationDelete({ id });
  } catch {
    status(NETWORK_FAILED);
    return;
  }
  if (!response.ok && response.status !== 404) {
    status(DELETE_FAILED);
    return;
  }
  sidebar.remove(id);
  if (id === state.conversation_id) window.location.assign("/");
});

function themeToggleSync() {
  const dark = document.documentElement.dataset.theme === "dark";
  $("theme-toggle").setAttribute("aria-pressed", String(dark));
  $("theme-toggle").setAttribute("aria-label", dark ? t("浅色模式") : t("深色模式"));
}
$("theme-toggle").addEventListener("click", () => {
  window.themeChoose(document.documentElement.dataset.theme === "dark" ? "light" : "dark");
  themeToggleSync();
});
new MutationObserver(themeToggleSync).observe(document.documentElement, { attributeFilter: ["data-theme"] });
themeToggleSync();

function welcomeShow() {
  welcomeRender($("welcome"), state.catalogs?.[agentSelect.value]);
}
agentSelect.addEventListener("change", welcomeShow);
welcomeShow();

apiKeysPanel();
myDataPanel();
reportDialog();

const exchanges = historyRender(pane, state.messages, {
  feedback: state.feedback, reports: state.reports, onError: errorShow,
});
pane.scrollTop = pane.scrollHeight;
if (state.active_run_id) attach(state.active_run_id, exchanges[exchanges.length - 1]);
else if (!input.disabled) input.focus();
app.dataset.ready = "true"; // the page is interactive (browser tests wait for this, not a sleep)
