// The 「API 密钥」 dialog (docs/design.md#other-clients): the student's personal keys — made here (the secret is
// shown once, with a copy button), listed (name, the key's first characters, dates), revoked.
import { apiKeyCreate, apiKeyRevoke, apiKeysList, errorBody } from "./api.js";
import { copyWithFeedback } from "./clipboard.js";
import { el } from "./view.js";
import { LOCALE, t } from "./i18n.js";

const DAY_MS = 24 * 60 * 60 * 1000;
const TEXTS = {
  loadFailed: t("密钥列表加载失败，请稍后重试。"),
  network: t("网络连接失败，请稍后重试。"),
  nameMissing: t("请填写名称。"),
  created: t("已创建。"),
  revoked: t("已吊销，使用它的应用会立即失去访问权限。"),
  confirmRevoke: (name) => t("确定吊销密钥“%s”吗？使用它的应用会立即失去访问权限。", name),
  never: t("从未"),
  noExpiry: t("不过期"),
  revoke: t("吊销"),
};

const $ = (id) => document.getElementById(id);

function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleString(LOCALE, { dateStyle: "short", timeStyle: "short" });
}

function say(text) {
  $("api-keys-status").textContent = text;
}

function row(key, onRevoke) {
  const tr = el("tr");
  tr.dataset.id = key.id;
  const revoke = el("button", "btn btn-ghost btn-small key-revoke", TEXTS.revoke);
  revoke.type = "button";
  revoke.setAttribute("aria-label", t("%s：%s", TEXTS.revoke, key.name));
  revoke.addEventListener("click", () => onRevoke(key));
  const cells = [
    el("td", "key-name", key.name),
    el("td", "key-prefix", `${key.prefix}…`),
    el("td", "", when(key.created_at)),
    el("td", "", when(key.last_used_at) || TEXTS.never),
    el("td", "", when(key.expires_at) || TEXTS.noExpiry),
    el("td"),
  ];
  cells[5].append(revoke);
  tr.append(...cells);
  return tr;
}

async function refresh() {
  let response;
  try {
    response = await apiKeysList();
  } catch {
    say(TEXTS.network);
    return;
  }
  if (!response.ok) {
    say((await errorBody(response)).message || TEXTS.loadFailed);
    return;
  }
  const keys = await response.json();
  $("api-keys-list").replaceChildren(...keys.map((key) => row(key, revoke)));
  $("api-keys-empty").hidden = keys.length > 0;
  $("api-keys-table").hidden = keys.length === 0;
}

async function revoke(key) {
  if (!window.confirm(TEXTS.confirmRevoke(key.name))) return;
  try {
    const response = await apiKeyRevoke({ id: key.id });
    say(response.ok || response.status === 404 ? TEXTS.revoked : (await errorBody(response)).message || TEXTS.loadFailed);
  } catch {
    say(TEXTS.network);
    return;
  }
  await refresh();
}

async function create(event) {
  event.preventDefault();
  const name = $("api-key-name").value.trim();
  if (!name) {
    say(TEXTS.nameMissing);
    $("api-key-name").focus();
    return;
  }
  const days = Number($("api-key-expiry").value || 0);
  const expiresAt = days ? new Date(Date.now() + days * DAY_MS).toISOString() : null;
  $("api-key-create").disabled = true;
  let response;
  try {
    response = await apiKeyCreate({ name, expiresAt });
  } catch {
    say(TEXTS.network);
    return;
  } finally {
    $("api-key-create").disabled = false;
  }
  const body = await errorBody(response);
  if (response.status !== 201) {
    say(body.message || TEXTS.loadFailed);
    return;
  }
  $("api-key-secret").textContent = body.key; // shown once: gone when the dialog closes
  $("api-key-created").hidden = false;
  $("api-key-name").value = "";
  say(TEXTS.created);
  $("api-key-copy").focus();
  await refresh();
}

function forgetSecret() {
  $("api-key-secret").textContent = "";
  $("api-key-created").hidden = true;
  say("");
}

export function apiKeysPanel() {
  const dialog = $("api-keys");
  if (!dialog) return;
  $("api-keys-open").addEventListener("click", () => {
    forgetSecret();
    dialog.showModal();
    refresh();
  });
  $("api-keys-close").addEventListener("click", () => dialog.close());
  dialog.addEventListener("close", forgetSecret);
  // Esc closes the dialog only (the browser does that), not the list drawer behind it too.
  dialog.addEventListener("keydown", (event) => {
    if (event.key === "Escape") event.stopPropagation();
  });
  $("api-key-form").addEventListener("submit", create);
  $("api-key-copy").addEventListener("click", () => copyWithFeedback($("api-key-copy"), $("api-key-secret").textContent));
}
