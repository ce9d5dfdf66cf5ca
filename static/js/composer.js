// The question box: grows with its text, counts characters near the limit and says clearly when
// a question is too long (no `maxlength`: a long paste used to be cut silently at 8000).
import { COUNT, TOO_LONG } from "./messages.js";

const COUNT_FROM = 0.9; // the counter appears at 90 % of the limit

// Characters as the server counts them (code points, after trimming), not UTF-16 units.
export function questionLength(text) {
  return [...String(text || "").trim()].length;
}

export class Composer {
  constructor({ input, send, counter, notice, max }) {
    Object.assign(this, { input, send, counter, notice, max });
    this.noticeShown = false;
    input.addEventListener("input", () => this.update());
    this.update();
  }

  get tooLong() {
    return questionLength(this.input.value) > this.max;
  }

  autosize() {
    this.input.style.height = "auto";
    this.input.style.height = `${Math.min(this.input.scrollHeight, 200)}px`;
  }

  update() {
    this.autosize();
    const used = questionLength(this.input.value);
    const over = used - this.max;
    this.counter.textContent = used >= this.max * COUNT_FROM ? COUNT(used, this.max) : "";
    this.counter.classList.toggle("over-limit", over > 0);
    this.input.setAttribute("aria-invalid", String(over > 0));
    this.send.disabled = over > 0;
    if (over > 0) {
      this.notice.textContent = TOO_LONG(over, this.max);
      this.notice.classList.add("over-limit");
      this.noticeShown = true;
    } else if (this.noticeShown) {
      this.notice.textContent = "";
      this.notice.classList.remove("over-limit");
      this.noticeShown = false;
    }
  }

  clear() {
    this.input.value = "";
    this.update();
  }
}
