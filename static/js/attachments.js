// The question's attachments (docs/design.md#attachments): the files a student picks with the paperclip, drops on
// the question box or pastes into it (a screenshot) are uploaded at once (POST /api/v1/uploads)
// and shown as chips above the box — a thumbnail for an image, the name and size, a button to
// take it off — until the question is sent with their ids. The server reads each file's type
// from its content and refuses what it does not take; the chip then says why.
import { uploadPost } from "./api.js";
import {
  ATTACHMENT_FAILED,
  ATTACHMENT_LIMIT,
  ATTACHMENT_NO_IMAGES,
  ATTACHMENT_REMOVE,
  ATTACHMENT_TEXT_CUT,
  ATTACHMENT_UPLOADING,
  errorText,
} from "./messages.js";
import { t } from "./i18n.js";

export const MAX_ATTACHMENTS = 5; // UPLOAD_MAX_PER_MESSAGE

function node(tag, className, text) {
  const element = document.createElement(tag);
  if (className) element.className = className;
  if (text !== undefined) element.textContent = text;
  return element;
}

export function sizeText(size) {
  if (size >= 1024 * 1024) return `${(size / 1024 / 1024).toFixed(1)} MB`;
  return `${Math.max(1, Math.round(size / 1024))} KB`;
}

const IMAGE = /^image\/(png|jpeg|webp|gif)$/;

// A document's kind as a short label (its extension): no icon font is needed to read it.
function kindLabel(name) {
  const extension = String(name || "").split(".").pop();
  return extension && extension !== name ? extension.slice(0, 4).toUpperCase() : t("文件");
}

// One attachment's chip: `{id, name, content_type, size}` of a stored upload (a sent question's,
// `meta.attachments`), with a thumbnail served to its owner only.
export function attachmentChip({ id, name, content_type: type, size }) {
  const chip = node("li", "attachment");
  if (IMAGE.test(String(type)) && id) {
    const thumb = node("img", "attachment-thumb");
    thumb.src = `/api/v1/uploads/${encodeURIComponent(id)}`;
    thumb.alt = "";
    thumb.loading = "lazy";
    chip.append(thumb);
  } else {
    chip.append(node("span", "attachment-icon", kindLabel(name)));
  }
  chip.append(node("span", "attachment-name", String(name || "")));
  if (Number.isFinite(size)) chip.append(node("span", "attachment-size", sizeText(size)));
  return chip;
}

export class AttachmentTray {
  constructor({ button, picker, tray, drop, paste, readsImages }) {
    Object.assign(this, { tray, readsImages });
    this.items = [];
    button.addEventListener("click", () => picker.click());
    picker.addEventListener("change", () => {
      this.add([...picker.files]);
      picker.value = "";
    });
    drop.addEventListener("dragover", (event) => {
      if ([...(event.dataTransfer?.types || [])].includes("Files")) {
        event.preventDefault();
        drop.classList.add("dropping");
      }
    });
    drop.addEventListener("dragleave", () => drop.classList.remove("dropping"));
    drop.addEventListener("drop", (event) => {
      drop.classList.remove("dropping");
      const files = [...(event.dataTransfer?.files || [])];
      if (!files.length) return;
      event.preventDefault();
      this.add(files);
    });
    paste.addEventListener("paste", (event) => {
      const files = [...(event.clipboardData?.files || [])];
      if (!files.length) return; // text pastes as text
      event.preventDefault();
      this.add(files);
    });
  }

  // The ids of the uploads done; null while one is still uploading (the question waits).
  ids() {
    if (this.items.some((item) => item.state === "uploading")) return null;
    return this.items.filter((item) => item.state === "done").map((item) => item.id);
  }

  // What was sent, for the question's bubble.
  sent() {
    return this.items.filter((item) => item.state === "done").map((item) => item.stored);
  }

  clear() {
    this.items = [];
    this.tray.replaceChildren();
    this.tray.hidden = true;
  }

  add(files) {
    for (const file of files) {
      if (this.items.length >= MAX_ATTACHMENTS) {
        this.note(ATTACHMENT_LIMIT(MAX_ATTACHMENTS));
        break;
      }
      this.upload(file);
    }
  }

  note(text) {
    const chip = node("li", "attachment attachment-failed", text);
    chip.setAttribute("role", "alert");
    this.tray.append(chip);
    this.tray.hidden = false;
    setTimeout(() => chip.remove(), 6000);
  }

  async upload(file) {
    const item = { state: "uploading", id: null, stored: null };
    this.items.push(item);
    const chip = node("li", "attachment attachment-uploading");
    // The thumbnail is the stored file once it is in (the CSP allows no blob: image).
    const icon = node("span", "attachment-icon", kindLabel(file.name));
    chip.append(icon);
    const name = node("span", "attachment-name", file.name || t("粘贴的图片"));
    const status = node("span", "attachment-size", ATTACHMENT_UPLOADING);
    status.setAttribute("aria-live", "polite");
    const remove = node("button", "attachment-remove", "×");
    remove.type = "button";
    remove.setAttribute("aria-label", ATTACHMENT_REMOVE(file.name || ""));
    remove.addEventListener("click", () => {
      this.items = this.items.filter((other) => other !== item);
      chip.remove();
      this.tray.hidden = !this.tray.childElementCount;
    });
    chip.append(name, status, remove);
    this.tray.append(chip);
    this.tray.hidden = false;
    let answer = null;
    try {
      const response = await uploadPost(file);
      answer = await response.json().catch(() => ({}));
      if (!response.ok) throw Object.assign(new Error("refused"), { answer, status: response.status });
    } catch (failure) {
      item.state = "failed";
      chip.className = "attachment attachment-failed";
      const body = failure.answer || {};
      status.textContent = errorText({ code: body.code, status: failure.status, message: body.message }) || ATTACHMENT_FAILED;
      status.setAttribute("role", "alert");
      return;
    }
    item.state = "done";
    item.id = answer.id;
    item.stored = answer;
    name.textContent = answer.name;
    status.textContent = sizeText(answer.size);
    chip.className = "attachment";
    if (IMAGE.test(answer.content_type)) icon.replaceWith(attachmentChip(answer).firstChild);
    if (answer.text_cut) chip.append(node("span", "attachment-warning", ATTACHMENT_TEXT_CUT));
    if (IMAGE.test(answer.content_type) && !this.readsImages()) {
      chip.append(node("span", "attachment-warning", ATTACHMENT_NO_IMAGES));
    }
  }
}
