// Rebuilds the pane from stored rows (docs/design.md#data-model): a user row opens a turn; the assistant rows
// (`meta.reasoning`, text, `meta.tool_calls`) and tool rows (`meta.tool_call_id`, `tool`, `ok`) that follow fill
// one assistant bubble, in the order they were stored, as they looked while streaming.
// Turns set aside by regenerate / edit (`superseded`) become earlier versions of the turn that
// follows them.
import { Exchange } from "./exchange.js";
import { errorText } from "./messages.js";

// Accepts the OpenAI shape ({id, function: {name}}) and the short one ({call_id, tool}).
function storedCall(call) {
  return {
    call_id: call.id ?? call.call_id ?? "",
    tool: call.function?.name ?? call.tool ?? call.name ?? "",
  };
}

function turnsOf(messages) {
  const turns = [];
  for (const row of messages) {
    if (row.role === "user") turns.push({ question: row, rows: [] });
    else if (turns.length) turns[turns.length - 1].rows.push(row);
  }
  return turns;
}

// Fills `turn` (an AssistantTurn) from stored rows; returns the final assistant row's id and
// the codes of the errors stored with it.
function turnFill(turn, rows, onError) {
  let answerId = null;
  let interrupted = false;
  let sources = null; // the knowledge passages the answer read (the final row's meta.sources)
  for (const row of rows) {
    const meta = row.meta || {};
    if (row.role === "assistant") {
      answerId = row.id;
      // An answer a client brought along (its own history, docs/clients.md) is not ours to label.
      if (meta.from_client === true) turn.labelled = false;
      // A thinking model's reasoning came before the row's text and calls, as it streamed.
      if (typeof meta.reasoning === "string") turn.reasoning(meta.reasoning);
      if (row.content) {
        turn.segment = null;
        turn.text(row.content);
      }
      for (const call of meta.tool_calls || []) turn.toolCall(storedCall(call));
      // The errors the stream showed inline are stored on the final row as {code, message}.
      for (const err of Array.isArray(meta.errors) ? meta.errors : []) onError(turn, err, errorText(err));
      if (row.chart) {
        turn.flush();
        turn.chart(row.chart);
      }
      if (meta.interrupted) interrupted = true;
      if (Array.isArray(meta.sources)) sources = meta.sources;
    } else if (row.role === "tool") {
      turn.toolStored({
        callId: meta.tool_call_id, tool: meta.tool, content: row.content, ok: meta.ok,
        interrupted: meta.interrupted === true, links: meta.links, images: meta.images, label: meta.label,
      });
    }
  }
  // A chip whose tool row is missing was cut off with the reply.
  const cut = [...turn.tools.values()].some((t) => t.details.dataset.state === "running");
  turn.finish({ interrupted: interrupted || cut, sources });
  return answerId;
}

// Returns the exchanges built, oldest first. `onError(turn, {code, message}, text)` shows a
// stored error (the controller adds what goes with it, e.g. the campus login button).
export function historyRender(container, messages, { feedback = {}, reports = {}, onError } = {}) {
  const show = onError || ((turn, _err, text) => turn.error(text));
  const exchanges = [];
  let earlier = []; // superseded turns waiting for the turn that replaced them
  const build = (turns) => {
    const last = turns[turns.length - 1];
    const attached = Array.isArray(last.question.meta?.attachments) ? last.question.meta.attachments : [];
    const exchange = new Exchange(container, last.question.content, attached);
    // A question and answer a client brought along (its own history opened this conversation,
    // docs/clients.md): marked as such, and not ours to rate.
    const fromClient = last.question.meta?.from_client === true;
    if (fromClient) exchange.markFromClient();
    for (const t of turns) {
      if (!t.rows.length) continue; // a question still being answered: the run re-attaches
      const turn = exchange.newTurn();
      const answerId = turnFill(turn, t.rows, show);
      const version = exchange.addVersion({
        turn,
        question: t.question.content,
        messageId: fromClient ? null : answerId,
        stored: true,
        superseded: Boolean(t.question.superseded),
        feedback: answerId ? feedback[answerId] || null : null,
        report: answerId ? reports[answerId] || null : null,
      });
      exchange.actionsRender(version);
    }
    if (!last.rows.length) {
      // Its answer is still being written: the earlier versions wait hidden until it arrives.
      exchange.versions.forEach((v) => { v.turn.article.hidden = true; });
      exchange.setQuestion(last.question.content);
    }
    exchange.pendingQuestion = last.rows.length ? null : last.question.content;
    exchanges.push(exchange);
  };
  for (const turn of turnsOf(messages)) {
    if (turn.question.superseded) {
      earlier.push(turn);
      continue;
    }
    build([...earlier, turn]);
    earlier = [];
  }
  if (earlier.length) build(earlier); // set aside, and the new question never reached the server
  return exchanges;
}
