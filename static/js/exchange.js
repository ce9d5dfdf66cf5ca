// One question and its answers. Regenerate and edit-and-resend add an answer to the same
// exchange; the earlier ones stay as versions the student pages through (‹ 1/2 ›), as stored
// on the server (`superseded` rows, docs/api.md "Regenerate and edit").
//
// A version: {turn: AssistantTurn, question, messageId (the answer's final row, for feedback),
// stored (the question reached the database), superseded, feedback: {rating, comment} | null,
// report: {status, status_label} | null (the student reported it: docs/safety.md#reports-举报)}.
import { AssistantTurn, el, userBubble } from "./view.js";
import { t } from "./i18n.js";

const exchangeOf = new WeakMap(); // .exchange node → Exchange
export const FROM_CLIENT_MARK = t("（来自你所用客户端的聊天记录）");

export function exchangeFor(node) {
  const host = node?.closest?.(".exchange");
  return host ? exchangeOf.get(host) : undefined;
}

function iconButton(action, text, label, extraClass = "") {
  const button = el("button", `icon-btn ${extraClass}`.trim(), text);
  button.type = "button";
  button.dataset.action = action;
  button.setAttribute("aria-label", label);
  button.title = label;
  return button;
}

export class Exchange {
  constructor(container, question, attachments = []) {
    this.node = el("div", "exchange");
    this.attachments = attachments; // the question's files: regenerate and edit send them again
    this.userArticle = userBubble(this.node, question, attachments);
    // Edit-and-resend is offered on the last question only (CSS .only-last).
    this.userArticle.prepend(iconButton("edit", "✎", t("编辑问题后重新发送"), "edit-question only-last"));
    container.append(this.node);
    exchangeOf.set(this.node, this);
    this.versions = [];
    this.shown = -1;
  }

  markFromClient() {
    this.node.classList.add("from-client");
    this.userArticle.append(el("p", "msg-flag", FROM_CLIENT_MARK));
  }

  get current() {
    return this.versions[this.shown];
  }

  setQuestion(text) {
    this.userArticle.querySelector(".msg-text").textContent = text;
  }

  newTurn() {
    return new AssistantTurn(this.node);
  }

  addVersion(version) {
    this.versions.push({ messageId: null, stored: false, superseded: false, feedback: null, report: null, ...version });
    this.show(this.versions.length - 1);
    return this.current;
  }

  removeVersion(version) {
    const index = this.versions.indexOf(version);
    if (index === -1) return;
    version.turn.article.remove();
    this.versions.splice(index, 1);
    if (this.versions.length) this.show(this.versions.length - 1);
  }

  show(index) {
    if (index < 0 || index >= this.versions.length) return;
    this.shown = index;
    this.versions.forEach((v, i) => { v.turn.article.hidden = i !== index; });
    this.setQuestion(this.versions[index].question);
    this.versions.forEach((v) => this.pagerRender(v));
  }

  // The action bar under a finished answer: versions, copy, regenerate, thumbs up / down, report. An
  // answer that failed just now offers 重试 instead (chat.js retryOffer), which regenerates it too:
  // one button for one action.
  actionsRender(version, { regenerate = true } = {}) {
    const { turn } = version;
    turn.actions?.remove();
    const bar = el("div", "msg-actions");
    bar.append(el("span", "versions"));
    if (turn.markdownText()) bar.append(iconButton("copy", t("复制"), t("复制回答（Markdown 原文）")));
    if (regenerate) bar.append(iconButton("regenerate", t("↻ 重新生成"), t("重新生成回答"), "only-last"));
    if (version.messageId) {
      // Icons drawn from this site's SVGs (CSS masks), not emoji: not every system has an emoji font.
      for (const [rating, label] of [["up", t("有帮助")], ["down", t("没帮助")]]) {
        const button = iconButton("rate", "", label, `rate-${rating}`);
        button.append(el("span", `thumb thumb-${rating}`));
        button.dataset.rating = rating;
        button.setAttribute("aria-pressed", String(version.feedback?.rating === rating));
        bar.append(button);
      }
      const report = iconButton("report", "", t("举报这个回答"), "report-btn");
      report.setAttribute("aria-haspopup", "dialog");
      report.append(el("span", "flag"), el("span", "report-state"));
      bar.append(report);
    }
    turn.body.append(bar);
    turn.actions = bar;
    this.reportMarked(version);
    this.pagerRender(version);
  }

  // The report button of a reported answer says so, with the report's status.
  reportMarked(version) {
    const button = version.turn.actions?.querySelector("[data-action=report]");
    if (!button || !version.report) return;
    const label = t("已举报（%s）", version.report.status_label || "");
    button.classList.add("reported");
    button.removeAttribute("aria-haspopup");
    button.setAttribute("aria-label", label);
    button.title = label;
    button.querySelector(".report-state").textContent = t("已举报");
  }

  pagerRender(version) {
    const slot = version.turn.actions?.querySelector(".versions");
    if (!slot) return;
    slot.replaceChildren();
    if (this.versions.length < 2) return;
    const index = this.versions.indexOf(version);
    const prev = iconButton("prev", "‹", t("上一个版本"), "version-prev");
    const next = iconButton("next", "›", t("下一个版本"), "version-next");
    prev.disabled = index === 0;
    next.disabled = index === this.versions.length - 1;
    slot.append(prev, el("span", "version-count", `${index + 1}/${this.versions.length}`), next);
  }

  feedbackPressed(version) {
    for (const button of version.turn.actions?.querySelectorAll("[data-action=rate]") || []) {
      button.setAttribute("aria-pressed", String(version.feedback?.rating === button.dataset.rating));
    }
  }
}
