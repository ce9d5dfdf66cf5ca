// The chat page controller: sends a question, reads the SSE answer as it arrives, keeps the
// sidebar and the address bar in step, and lets the student stop an answer.
//
// An answer is a run on the server (DESIGN §4a): it goes on whatever happens to this page. The
// page follows it, re-attaches after a dropped connection (from the last frame it has) or after
// a reload (from the start: the run's rows are not in the rendered history), and stops it with
// POST /api/v1/runs/<id>/stop rather than by hanging up.
import { chatPost, conversationDelete, errorBody, runEvents, runStop } from "./api.js";
import { historyRender } from "./history.js";
import { DELETE_FAILED, NETWORK_FAILED, STREAM_CUT, errorText } from "./messages.js";
import { eventIds, sseFrames } from "./sse.js";
import { AssistantTurn, userBubble } from "./view.js";

const state = JSON.parse(document.getElementById("page-state").textContent);
const $ = (id) => document.getElementById(id);
const pane = $("messages");
const input = $("input");
const sendButton = $("send");
const stopButton = $("stop");
const agentSelect = $("agent-select");
const statusLine = $("status");
const app = $("app");

// The run this page follows now, if any: {controller, runId, lastSeq, stopWanted, turn, question}.
let current = null;
const RESUME_TRIES = 5;
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
  if (!text) return "新对话";
  return text.length > 24 ? `${text.slice(0, 24)}...` : text;
}

function setStreaming(on) {
  input.disabled = on;
  sendButton.hidden = on;
  stopButton.hidden = !on;
  agentSelect.disabled = on || agentSelect.options.length === 0 || !agentSelect.value;
  app.classList.toggle("streaming", on);
  statusLine.textContent = on ? "小智正在回答…（可按“停止”中断）" : "";
  if (on) stopButton.focus();
  else input.focus();
}

function sidebarItem(id, title) {
  const li = document.createElement("li");
  li.className = "conversation-item";
  li.dataset.id = id;
  const link = document.createElement("a");
  link.className = "conversation-link";
  link.href = `/c/${id}/`;
  link.textContent = title;
  const del = document.createElement("button");
  del.type = "button";
  del.className = "icon-btn delete-conversation";
  del.dataset.id = id;
  del.title = "删除";
  del.setAttribute("aria-label", `删除对话：${title}`);
  del.textContent = "✕";
  li.append(link, del);
  return li;
}

// The conversation just used moves to the top of the sidebar (newest first) and is marked open.
function sidebarTouch(id, question) {
  const list = $("conversation-list");
  let li = list.querySelector(`li[data-id="${CSS.escape(id)}"]`);
  if (!li) {
    li = sidebarItem(id, titleFrom(question || ""));
    $("chat-title").textContent = li.querySelector("a").textContent;
    document.title = `${li.querySelector("a").textContent} · 校园小智`;
  }
  list.prepend(li);
  for (const other of list.querySelectorAll("li")) {
    other.classList.toggle("active", other === li);
    const link = other.querySelector("a");
    if (other === li) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  $("conversation-empty").hidden = true;
}

// --- one turn --------------------------------------------------------------------------------

function onFrame(turn, frame, question) {
  switch (frame.type) {
    case "session":
      if (frame.conversation_id && frame.conversation_id !== state.conversation_id) {
        state.conversation_id = frame.conversation_id;
        // A reload (or a shared link) reopens this conversation from the database.
        history.replaceState(null, "", `/c/${frame.conversation_id}/`);
      }
      if (frame.conversation_id) sidebarTouch(frame.conversation_id, question);
      break;
    case "chunk":
      turn.text(frame.content);
      break;
    case "tool_call":
      turn.toolCall(frame);
      break;
    case "tool_chunk":
      turn.toolChunk(frame);
      break;
    case "tool_result":
      turn.toolResult(frame);
      break;
    case "error":
      turn.error(errorText({ code: frame.code, message: frame.message }));
      break;
    case "done":
      turn.finish({ fullText: frame.full_text, chart: frame.chart, interrupted: frame.interrupted === true });
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
    const ended = onFrame(run.turn, frame, run.question);
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
  statusLine.textContent = "正在停止…";
  if (run.runId) sendStop(run);
}

function runBegin(question, runId = null) {
  const turn = new AssistantTurn(pane);
  turn.thinking(true);
  pane.scrollTop = pane.scrollHeight;
  current = { controller: new AbortController(), runId, lastSeq: 0, stopWanted: false, turn, question };
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
    pane.scrollTop = pane.scrollHeight;
  }
}

function ask(question) {
  $("welcome").hidden = true;
  userBubble(pane, question);
  const run = runBegin(question);
  return runFollow(run, async () => {
    const response = await chatPost({
      message: question,
      conversationId: state.conversation_id,
      agent: agentSelect.value,
      signal: run.controller.signal,
    });
    if (!response.ok) {
      const body = await errorBody(response);
      run.turn.error(errorText({ code: body.code, status: response.status, message: body.message }));
      run.turn.finish({});
      return;
    }
    await followRun(run, response);
  });
}

// After a reload (or in a second tab) while an answer is still being written: show what was
// said so far, then follow it live.
function attach(runId) {
  $("welcome").hidden = true;
  const run = runBegin(null, runId);
  return runFollow(run, async () => {
    const response = await runEvents({ runId, after: 0, signal: run.controller.signal });
    if (!response.ok) throw new Error("stream cut");
    await followRun(run, response);
  });
}

// --- wiring ----------------------------------------------------------------------------------

function autosize() {
  input.style.height = "auto";
  input.style.height = `${Math.min(input.scrollHeight, 200)}px`;
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const question = input.value.trim();
  if (!question || current) return;
  input.value = "";
  autosize();
  ask(question);
});

input.addEventListener("keydown", (event) => {
  // Enter sends; Shift+Enter adds a line; Enter that confirms an IME candidate does neither.
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
input.addEventListener("input", autosize);

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
  if (!window.confirm("确定删除这个对话吗？删除后无法恢复。")) return;
  let response;
  try {
    response = await conversationDelete({ id });
  } catch {
    statusLine.textContent = NETWORK_FAILED;
    return;
  }
  if (!response.ok && response.status !== 404) {
    statusLine.textContent = DELETE_FAILED;
    return;
  }
  button.closest("li").remove();
  $("conversation-empty").hidden = $("conversation-list").children.length > 0;
  if (id === state.conversation_id) window.location.assign("/");
});

historyRender(pane, state.messages);
pane.scrollTop = pane.scrollHeight;
if (state.active_run_id) attach(state.active_run_id);
else if (!input.disabled) input.focus();
app.dataset.ready = "true"; // the page is interactive (browser tests wait for this, not a sleep)
