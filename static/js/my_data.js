// The 「我的数据」 dialog (PIPL; DESIGN §7): download everything stored about the student (a
// plain link to /api/v1/me/export), or delete all their conversations.
import { errorBody, myConversationsDelete } from "./api.js";

const $ = (id) => document.getElementById(id);
const TEXTS = {
  confirm: "确定删除你的全部对话吗？删除后无法恢复。",
  failed: "删除失败，请稍后重试。",
  network: "网络连接失败，请稍后重试。",
  deleted: (count) => `已删除 ${count} 个对话。`,
};

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
  });
  $("my-data-close").addEventListener("click", () => dialog.close());
  dialog.addEventListener("keydown", (event) => {
    if (event.key === "Escape") event.stopPropagation(); // the dialog only, not the drawer behind it
  });
  $("my-data-delete").addEventListener("click", deleteAll);
}
