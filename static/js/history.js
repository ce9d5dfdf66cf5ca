// Rebuilds the pane from stored rows (DESIGN §3): a user row opens a turn; the assistant rows
// (text, `meta.tool_calls`) and tool rows (`meta.tool_call_id`, `tool`, `ok`) that follow fill
// one assistant bubble, in the order they were stored, as they looked while streaming.
import { errorText } from "./messages.js";
import { AssistantTurn, userBubble } from "./view.js";

// Accepts the OpenAI shape ({id, function: {name}}) and the short one ({call_id, tool}).
function storedCall(call) {
  return {
    call_id: call.id ?? call.call_id ?? "",
    tool: call.function?.name ?? call.tool ?? call.name ?? "",
  };
}

export function historyRender(container, messages) {
  let turn = null;
  const close = () => {
    if (turn) {
      // A chip whose tool row is missing was cut off with the reply.
      const cut = [...turn.tools.values()].some((t) => t.details.dataset.state === "running");
      turn.finish({ interrupted: turn.interruptedRow || cut });
    }
    turn = null;
  };
  for (const row of messages) {
    const meta = row.meta || {};
    if (row.role === "user") {
      close();
      userBubble(container, row.content);
      continue;
    }
    if (!turn) turn = new AssistantTurn(container);
    if (row.role === "assistant") {
      if (row.content) {
        turn.segment = null;
        turn.text(row.content);
      }
      for (const call of meta.tool_calls || []) turn.toolCall(storedCall(call));
      // The errors the stream showed inline are stored on the final row as {code, message}.
      for (const err of Array.isArray(meta.errors) ? meta.errors : []) turn.error(errorText(err));
      if (row.chart) {
        turn.flush();
        turn.chart(row.chart);
      }
      if (meta.interrupted) turn.interruptedRow = true;
    } else if (row.role === "tool") {
      turn.toolStored({ callId: meta.tool_call_id, tool: meta.tool, content: row.content, ok: meta.ok });
    }
  }
  close();
}
