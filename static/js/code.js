// Code blocks in sanitized markdown: highlighted with the vendored highlight.js and given a
// header with the language and a copy button. Runs on the sanitizer's output: highlight.js
// reads the code's text (never HTML) and writes only <span class="hljs-…"> around it.
import { t } from "./i18n.js";

const LANGUAGE = /^language-([\w+#.-]{1,40})$/;

function languageOf(code) {
  for (const name of code.classList) {
    const match = LANGUAGE.exec(name);
    if (match) return match[1];
  }
  return "";
}

function highlight(code, language) {
  const { hljs } = window;
  if (!hljs) return; // the library failed to load: plain code is still readable
  // Only a named language: guessing (highlightAuto) tries every grammar, too slow to redo on
  // each streamed frame.
  if (!language || !hljs.getLanguage(language)) return;
  const result = hljs.highlight(code.textContent, { language, ignoreIllegals: true });
  code.innerHTML = result.value; // highlight.js escapes the text it was given
  code.classList.add("hljs");
}

export function codeEnhance(root) {
  for (const pre of root.querySelectorAll("pre")) {
    const code = pre.querySelector("code");
    if (!code || pre.parentElement?.classList.contains("code-block")) continue;
    const language = languageOf(code);
    highlight(code, language);
    const block = document.createElement("div");
    block.className = "code-block";
    const head = document.createElement("div");
    head.className = "code-head";
    const label = document.createElement("span");
    label.className = "code-lang";
    label.textContent = language || t("代码");
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "icon-btn code-copy";
    copy.textContent = t("复制");
    copy.setAttribute("aria-label", t("复制代码"));
    head.append(label, copy);
    pre.replaceWith(block);
    block.append(head, pre);
  }
}
