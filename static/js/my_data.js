// The 「我的数据」 dialog (PIPL; docs/design.md#cross-cutting-rules): download everything stored about the student (a
// plain link to /api/v1/me/export), delete all their conversations, and see and disconnect the
// MCP services they connected their own account to.
import { errorBody, myAccountRemove, myAccountsList, myConversationsDelete } from "./api.js";
import { t } from "./i18n.js";

const $ = (id) => document.getElementById(id);
const TEXTS = {
  confirm: t("确定删除你的全部对话吗？删除后无法恢复。"),
  failed: t("删除失败，请稍后重试。"),
  network: t("网络连接失败，请稍后重试。"),
  deleted: (count) => t("已删除 %s 个对话。", count),
  disconnect: t("断开"),
  disconnectLabel: (service) => t("断开“%s”账号", service),
  disconnected: (service) => t("已断开“%s”账号。", service),
  accountsFailed: t("没有读到已连接的账号，请稍后重试。"),
};

function accountRow(account) {
  const li = document.createElement("li");
  const name = document.createElement("span");
  name.className = "my-account-name";
  name.textContent = String(account.service || "");
  const button = document.createElement("button");
  button.type = "button";
  button.className = "btn btn-ghost btn-small my-account-remove";
  button.textContent = TEXTS.disconnect;
  button.setAttribute("aria-label", TEXTS.disconnectLabel(account.service));
  button.addEventListener("click", async () => {
    button.disabled = true;
    let response;
    try {
      response = await myAccountRemove({ id: account.id });
    } catch {
      $("my-data-status").textContent = TEXTS.network;
      button.disabled = false;
      return;
    }
    if (!response.ok && response.status !== 404) {
      $("my-data-status").textContent = (await errorBody(response)).message || TEXTS.failed;
      button.disabled = false;
      return;
    }
    li.remove();
    $("my-accounts-empty").hidden = $("my-accounts").childElementCount > 0;
    $("my-data-status").textContent = TEXTS.disconnected(account.service);
  });
  li.append(name, button);
  return li;
}

async function accountsShow() {
  const list = $("my-accounts");
  let accounts = [];
  try {
    const response = await myAccountsList();
    if (!response.ok) throw new Error(String(response.status));
    accounts = await response.json();
  } catch {
    $("my-data-status").textContent = TEXTS.accountsFailed;
  }
  list.replaceChildren(...(Array.isArray(accounts) ? accounts : []).map(accountRow));
  $("my-accounts-empty").hidden = list.childElementCount > 0;
}

async function deleteAll() {
  if (!window.confirm(TEXTS.confirm)) return;
  let response;
  try {
    response = await myConversationsDelete();
  } catch {
    $("my-data-status").textContent = TEXTS.network;
    return;
  }
  const body = await errorBody(response);
  if (!response.ok) {
    $("my-data-status").textContent = body.message || TEXTS.failed;
    return;
  }
  $("my-data-status").textContent = TEXTS.deleted(Number(body.deleted) || 0);
  $("my-data").addEventListener("close", () => window.location.assign("/"), { once: true });
}

export function myDataPanel() {
  const dialog = $("my-data");
  if (!dialog) return;
  $("my-data-open").addEventListener("click", () => {
    $("my-data-status").textContent = "";
    dialog.showModal();
    accountsShow();
  });
  $("my-data-close").addEventListener("click", () => dialog.close());
  dialog.addEventListener("keydown", (event) => {
    if (event.key === "Escape") event.stopPropagation(); // the dialog only, not the drawer behind it
  });
  $("my-data-delete").addEventListener("click", deleteAll);
}
