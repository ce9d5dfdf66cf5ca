// The page's calls to the gateway's API (docs/design.md#the-chat-stream), authenticated by the Django session; the
// CSRF token comes from the page because session-authenticated POSTs and DELETEs need it.

function csrfToken() {
  return document.querySelector('meta[name="csrf-token"]')?.content || "";
}

function headers(extra = {}) {
  return { "X-CSRFToken": csrfToken(), "X-Requested-With": "fetch", ...extra };
}

// Starts one chat turn; the caller reads the SSE body. Rejects only on network failure/abort.
export function chatPost({ message, conversationId, agent, attachments, signal }) {
  const body = { message, conversation_id: conversationId, agent: agent || null, hint_domain: null };
  if (attachments?.length) body.attachments = attachments;
  return fetch("/api/v1/chat", {
    method: "POST",
    credentials: "same-origin",
    headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
    body: JSON.stringify(body),
    signal,
  });
}

// Uploads one attachment (docs/design.md#attachments): 201 {id, name, content_type, size}.
export function uploadPost(file) {
  const form = new FormData();
  form.append("file", file, file.name || "image.png");
  return fetch("/api/v1/uploads", {
    method: "POST", credentials: "same-origin", headers: headers({ Accept: "application/json" }), body: form,
  });
}

// Re-attaches to a run (docs/design.md#runs): its frames after `after`, then live, to `done`.
export function runEvents({ runId, after, signal }) {
  return fetch(`/api/v1/runs/${encodeURIComponent(runId)}/events?after=${encodeURIComponent(after || 0)}`, {
    credentials: "same-origin",
    headers: { Accept: "text/event-stream" },
    signal,
  });
}

// Asks the server to stop a run; works whatever happened to the stream that follows it.
export function runStop({ runId }) {
  return fetch(`/api/v1/runs/${encodeURIComponent(runId)}/stop`, {
    method: "POST",
    credentials: "same-origin",
    headers: headers({ Accept: "application/json" }),
  });
}

// Decides on a tool call that waits for approval (docs/design.md#runs): "approve" | "reject".
function runApprovalPost(runId, body) {
  return fetch(`/api/v1/runs/${encodeURIComponent(runId)}/approvals`, {
    method: "POST",
    credentials: "same-origin",
    headers: headers({ Accept: "application/json", "Content-Type": "application/json" }),
    body: JSON.stringify(body),
  });
}

export function runApprovalDecide({ runId, callId, decision }) {
  return runApprovalPost(runId, { call_id: callId, decision });
}

// The student's answer to what a call's MCP server asked (an elicitation): accept (a form's
// content), decline or cancel.
export function runApprovalAnswer({ runId, callId, action, content }) {
  return runApprovalPost(runId, content === undefined ? { call_id: callId, action } : { call_id: callId, action, content });
}

export function conversationDelete({ id }) {
  return fetch(`/api/v1/conversations/${encodeURIComponent(id)}`, {
    method: "DELETE",
    credentials: "same-origin",
    headers: headers({ Accept: "application/json" }),
  });
}

function jsonRequest(method, url, body) {
  return fetch(url, {
    method,
    credentials: "same-origin",
    headers: headers({ Accept: "application/json", ...(body === undefined ? {} : { "Content-Type": "application/json" }) }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

export function conversationRename({ id, title }) {
  return jsonRequest("PATCH", `/api/v1/conversations/${encodeURIComponent(id)}`, { title });
}

export function conversationSearch({ query, signal }) {
  const params = new URLSearchParams({ q: query, page_size: "100" });
  return fetch(`/api/v1/conversations?${params}`, {
    credentials: "same-origin",
    headers: { Accept: "application/json" },
    signal,
  });
}

// Regenerate / edit-and-resend, step one: the last turn is set aside (kept as an earlier version).
export function lastTurnSupersede({ conversationId }) {
  return jsonRequest("POST", `/api/v1/conversations/${encodeURIComponent(conversationId)}/last-turn/supersede`);
}

export function feedbackPut({ messageId, rating, comment = "" }) {
  return jsonRequest("PUT", `/api/v1/messages/${encodeURIComponent(messageId)}/feedback`, { rating, comment });
}

// Reports an answer (docs/safety.md#reports-举报): 201 a new report, 200 the one filed before.
export function reportPost({ messageId, reason, detail = "" }) {
  return jsonRequest("POST", `/api/v1/messages/${encodeURIComponent(messageId)}/report`, { reason, detail });
}

export function feedbackDelete({ messageId }) {
  return jsonRequest("DELETE", `/api/v1/messages/${encodeURIComponent(messageId)}/feedback`);
}

// Personal API keys (docs/design.md#other-clients): list, create (the secret comes back once), revoke.
export function apiKeysList() {
  return jsonRequest("GET", "/api/v1/api-keys");
}

export function apiKeyCreate({ name, expiresAt }) {
  return jsonRequest("POST", "/api/v1/api-keys", { name, expires_at: expiresAt || null });
}

export function apiKeyRevoke({ id }) {
  return jsonRequest("DELETE", `/api/v1/api-keys/${encodeURIComponent(id)}`);
}

// Every conversation of the caller, deleted (the 「我的数据」 dialog).
export function myConversationsDelete() {
  return jsonRequest("DELETE", "/api/v1/me/conversations");
}

// The MCP services the student connected their own account to, and one disconnected.
export function myAccountsList() {
  return jsonRequest("GET", "/api/v1/me/accounts");
}

export function myAccountRemove({ id }) {
  return jsonRequest("DELETE", `/api/v1/me/accounts/${encodeURIComponent(id)}`);
}

// The JSON error body of a refused request ({code, message}), or {} when there is none.
export async function errorBody(response) {
  try {
    const body = await response.json();
    return body && typeof body === "object" ? body : {};
  } catch {
    return {};
  }
}
