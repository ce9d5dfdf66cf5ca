// Reporting an answer (举报, docs/safety.md#reports-举报): the dialog under page.html's
// #report-dialog asks for a reason and an optional word, sends POST /api/v1/messages/<id>/report,
// and hands the report ({status, status_label}) back to the caller, which marks the answer.
// Filing the same answer again answers the report filed before: a second click cannot duplicate.
import { errorBody, reportPost } from "./api.js";
import { t } from "./i18n.js";
import { errorText, NETWORK_FAILED } from "./messages.js";

const $ = (id) => document.getElementById(id);
export const REPORT_DONE = t("已收到举报，我们会尽快处理");
const PICK_REASON = t("请选择举报原因。");

let pending = null; // {messageId, onFiled} of the dialog open now

async function submit(event) {
  event.preventDefault();
  if (!pending) return;
  const form = $("report-form");
  const reason = form.querySelector("input[name=reason]:checked")?.value;
  if (!reason) {
    $("report-status").textContent = PICK_REASON;
    form.querySelector("input[name=reason]")?.focus();
    return;
  }
  const send = $("report-submit");
  send.disabled = true;
  let response;
  try {
    response = await reportPost({ messageId: pending.messageId, reason, detail: $("report-detail").value.trim() });
  } catch {
    $("report-status").textContent = NETWORK_FAILED;
    send.disabled = false;
    return;
  }
  const body = await errorBody(response);
  send.disabled = false;
  if (!response.ok) {
    $("report-status").textContent = errorText({ code: body.code, status: response.status, message: body.message });
    return;
  }
  const { onFiled } = pending;
  $("report-dialog").close();
  onFiled({ status: body.status, status_label: body.status_label });
}

function reset() {
  $("report-form").reset();
  $("report-status").textContent = "";
  $("report-submit").disabled = false;
}

// Opens the dialog for the answer `messageId`; `onFiled(report)` once it is filed.
export function reportOpen({ messageId, onFiled }) {
  const dialog = $("report-dialog");
  if (!dialog || !messageId) return;
  reset();
  pending = { messageId, onFiled };
  dialog.showModal();
  dialog.querySelector("input[name=reason]")?.focus();
}

export function reportDialog() {
  const dialog = $("report-dialog");
  if (!dialog) return;
  $("report-form").addEventListener("submit", submit);
  $("report-form").addEventListener("change", (event) => {
    if (event.target.name === "reason") $("report-status").textContent = ""; // the ask for a reason is answered
  });
  $("report-close").addEventListener("click", () => dialog.close());
  $("report-cancel").addEventListener("click", () => dialog.close());
  dialog.addEventListener("keydown", (event) => {
    if (event.key === "Escape") event.stopPropagation(); // the dialog only, not the answer streaming behind it
  });
  // Closing a modal <dialog> puts focus back where it was (the answer's report button).
  dialog.addEventListener("close", () => { pending = null; });
}
