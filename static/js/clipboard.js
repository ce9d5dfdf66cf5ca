// Copies text for the student. The async Clipboard API needs a secure context (HTTPS or
// localhost); on a plain-HTTP campus intranet address it is missing, so a hidden textarea and
// execCommand("copy") stand in.
import { t } from "./i18n.js";

export async function copyText(text) {
  if (navigator.clipboard?.writeText) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // denied (no user gesture, permissions): try the old way
    }
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.className = "visually-hidden";
  document.body.append(area);
  area.select();
  let copied = false;
  try {
    copied = document.execCommand("copy");
  } catch {
    copied = false;
  }
  area.remove();
  return copied;
}

// Shows "已复制" (or the failure) on the button for a moment, then its own label again.
export async function copyWithFeedback(button, text) {
  const label = button.dataset.label || button.textContent;
  button.dataset.label = label;
  const ok = await copyText(text);
  button.textContent = ok ? t("已复制") : t("复制失败");
  clearTimeout(Number(button.dataset.timer || 0));
  button.dataset.timer = String(setTimeout(() => { button.textContent = label; }, 1500));
  return ok;
}
