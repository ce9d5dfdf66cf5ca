// The conversation list: grouped by when each conversation was last used (today, yesterday,
// the last 7 days, earlier; in the student's own time zone), renamed inline, searched through
// the API (titles and message text; a hit shows the text around the match), items deleted.
import { conversationRename, conversationSearch, errorBody } from "./api.js";
import { RENAME_FAILED, SEARCH_FAILED, errorText } from "./messages.js";
import { el } from "./view.js";
import { t } from "./i18n.js";

const $ = (id) => document.getElementById(id);
const DAY_MS = 24 * 60 * 60 * 1000;
export const GROUPS = [t("今天"), t("昨天"), t("7 天内"), t("更早")];
const SEARCH_DELAY_MS = 250;

export function groupOf(updated, now = new Date()) {
  const startOfToday = new Date(now.getFullYear(), now.getMonth(), now.getDate()).getTime();
  const time = new Date(updated).getTime();
  if (Number.isNaN(time)) return GROUPS[3];
  if (time >= startOfToday) return GROUPS[0];
  if (time >= startOfToday - DAY_MS) return GROUPS[1];
  if (time >= startOfToday - 6 * DAY_MS) return GROUPS[2];
  return GROUPS[3];
}

// A search hit's snippet (the API's `snippet`: the text around the first match) with each
// occurrence of the query marked. Text nodes and <mark> only: a message's text is never markup.
export function snippetNode(snippet, query) {
  const node = el("p", "conversation-snippet");
  const words = query.split(/\s+/).filter(Boolean).map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  let at = 0;
  if (words.length) {
    for (const match of snippet.matchAll(new RegExp(words.join("\\s+"), "giu"))) {
      node.append(document.createTextNode(snippet.slice(at, match.index)), el("mark", "", match[0]));
      at = match.index + match[0].length;
    }
  }
  node.append(document.createTextNode(snippet.slice(at)));
  return node;
}

export function sidebarItem({ id, title, updated, snippet, query }) {
  const li = el("li", "conversation-item");
  li.dataset.id = id;
  li.dataset.updated = updated || new Date().toISOString();
  const link = el("a", "conversation-link", title);
  link.href = `/c/${id}/`;
  const rename = el("button", "icon-btn rename-conversation", "✎");
  const del = el("button", "icon-btn delete-conversation", "✕");
  for (const [button, word] of [[rename, t("重命名")], [del, t("删除")]]) {
    button.type = "button";
    button.dataset.id = id;
    button.title = word;
  }
  li.append(link, rename, del);
  if (snippet && query) {
    const why = snippetNode(snippet, query);
    why.id = `snippet-${id}`;
    link.setAttribute("aria-describedby", why.id); // read after the title: why it was found
    li.append(why);
  }
  itemLabel(li, title);
  return li;
}

function itemLabel(li, title) {
  li.querySelector(".conversation-link").textContent = title;
  li.querySelector(".rename-conversation").setAttribute("aria-label", t("重命名对话：%s", title));
  li.querySelector(".delete-conversation").setAttribute("aria-label", t("删除对话：%s", title));
}

export class Sidebar {
  constructor({ activeId, onStatus, onRenamed }) {
    this.list = $("conversation-list");
    this.empty = $("conversation-empty");
    this.searchEmpty = $("search-empty");
    this.search = $("conversation-search");
    this.activeId = activeId;
    this.onStatus = onStatus;
    this.onRenamed = onRenamed;
    this.items = [...this.list.querySelectorAll("li.conversation-item")]; // the full list (not search hits)
    this.searching = null; // {query, controller} while results are shown
    this.timer = 0;
    this.render(this.items);
    this.search.addEventListener("input", () => this.searchSoon());
    this.search.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && this.search.value) {
        event.stopPropagation();
        this.search.value = "";
        this.searchSoon();
      }
    });
    this.list.addEventListener("click", (event) => {
      const button = event.target.closest(".rename-conversation");
      if (button) this.renameStart(button.closest("li"));
    });
  }

  // Lays `items` out newest first under their date headings.
  render(items) {
    const sorted = [...items].sort((a, b) => new Date(b.dataset.updated) - new Date(a.dataset.updated));
    const now = new Date();
    const nodes = [];
    let group = null;
    for (const li of sorted) {
      const name = groupOf(li.dataset.updated, now);
      if (name !== group) {
        group = name;
        // A list item of its own (a <ul> holds only <li>, and role=presentation on one breaks
        // that for assistive technology): read as 「今天」 before that day's conversations.
        nodes.push(el("li", "conversation-group", name));
      }
      li.classList.toggle("active", li.dataset.id === this.activeId);
      const link = li.querySelector(".conversation-link");
      if (li.dataset.id === this.activeId) link?.setAttribute("aria-current", "page");
      else link?.removeAttribute("aria-current");
      nodes.push(li);
    }
    this.list.replaceChildren(...nodes);
    this.empty.hidden = Boolean(this.searching) || this.items.length > 0;
    this.searchEmpty.hidden = !this.searching || sorted.length > 0;
  }

  itemFor(id) {
    return this.items.find((li) => li.dataset.id === id);
  }

  // The conversation just used moves to the top (today) and is marked open; a new one is added.
  touch(id, title) {
    this.activeId = id;
    let li = this.itemFor(id);
    if (!li) {
      li = sidebarItem({ id, title });
      this.items.push(li);
    }
    li.dataset.updated = new Date().toISOString();
    if (this.searching) this.searchClear();
    this.render(this.items);
    return li;
  }

  remove(id) {
    this.items = this.items.filter((li) => li.dataset.id !== id);
    this.list.querySelector(`li[data-id="${CSS.escape(id)}"]`)?.remove();
    this.render(this.searching ? [...this.list.querySelectorAll("li.conversation-item")] : this.items);
  }

  titleOf(id) {
    return this.itemFor(id)?.querySelector(".conversation-link")?.textContent || "";
  }

  // --- rename ---------------------------------------------------------------------------

  renameStart(li) {
    if (!li || li.querySelector(".rename-input")) return;
    const link = li.querySelector(".conversation-link");
    const input = el("input", "rename-input");
    input.type = "text";
    input.value = link.textContent;
    input.maxLength = 64;
    input.setAttribute("aria-label", t("新的对话标题"));
    link.hidden = true;
    li.insertBefore(input, link);
    input.focus();
    input.select();
    let done = false;
    const finish = async (save) => {
      if (done) return;
      done = true;
      const title = input.value.replace(/\s+/g, " ").trim();
      if (save && title && title !== link.textContent) await this.renameSave(li, title);
      else if (save && !title) this.onStatus(t("标题不能为空。"));
      input.remove();
      link.hidden = false;
      link.focus();
    };
    input.addEventListener("keydown", (event) => {
      if (event.isComposing || event.keyCode === 229) return; // confirming an IME candidate
      if (event.key === "Enter") {
        event.preventDefault();
        finish(true);
      } else if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        finish(false);
      }
    });
    input.addEventListener("blur", () => finish(true));
  }

  async renameSave(li, title) {
    const { id } = li.dataset;
    let response;
    try {
      response = await conversationRename({ id, title });
    } catch {
      this.onStatus(RENAME_FAILED);
      return;
    }
    if (!response.ok) {
      const body = await errorBody(response);
      this.onStatus(response.status === 400 ? errorText({ message: body.message }) : RENAME_FAILED);
      return;
    }
    const saved = (await response.json()).title;
    for (const item of [li, this.itemFor(id)]) if (item) itemLabel(item, saved);
    this.onRenamed(id, saved);
  }

  // --- search ---------------------------------------------------------------------------

  searchSoon() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.searchRun(this.search.value.trim()), SEARCH_DELAY_MS);
  }

  searchClear() {
    this.searching?.controller.abort();
    this.searching = null;
    this.search.value = "";
    delete this.list.dataset.query;
  }

  async searchRun(query) {
    this.searching?.controller.abort();
    if (!query) {
      this.searching = null;
      this.render(this.items);
      delete this.list.dataset.query;
      return;
    }
    const controller = new AbortController();
    this.searching = { query, controller };
    let response;
    try {
      response = await conversationSearch({ query: query.slice(0, 100), signal: controller.signal });
    } catch (err) {
      if (err?.name !== "AbortError") this.onStatus(SEARCH_FAILED);
      return;
    }
    if (this.searching?.controller !== controller) return; // a newer query took over
    if (!response.ok) {
      this.onStatus(SEARCH_FAILED);
      return;
    }
    const { results } = await response.json();
    if (this.searching?.controller !== controller) return;
    this.render(results.map((c) => sidebarItem({ id: c.id, title: c.title, updated: c.updated_at, snippet: c.snippet, query })));
    this.list.dataset.query = query;
  }
}
