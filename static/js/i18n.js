// The page's strings in the student's language (docs/design.md#cross-cutting-rules). The Chinese source text is the key:
// Django's JavaScript catalog (/jsi18n/, loaded by base.html before any module) gives the
// English one when the student reads English; without a catalog the Chinese stays.
const catalog = typeof window !== "undefined" && typeof window.gettext === "function" ? window.gettext : null;

// `text` translated, each `%s` in it replaced by the next of `values` (a value's own "%s" stays).
export function t(text, ...values) {
  const translated = catalog ? catalog(text) : text;
  if (!values.length) return translated;
  const pieces = translated.split("%s");
  return pieces.reduce((out, piece, i) => out + (i ? String(values[i - 1] ?? "") : "") + piece, "");
}

// The page's language, for dates and numbers: the <html lang> the server rendered.
export const LOCALE = typeof document !== "undefined" && document.documentElement.lang === "en" ? "en" : "zh-CN";
