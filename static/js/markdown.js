// Model and tool text is untrusted data (docs/design.md#cross-cutting-rules): markdown is parsed by `marked`, then every
// node goes through DOMPurify before it reaches the page. The page's Content-Security-Policy is a
// second wall; the sanitizer alone already keeps the browser from running or loading anything:
//
// - elements and attributes are allowlists of what a reader needs. The only attributes that name
//   a URL are a link's `href` and an image's `src`; every other one that makes a browser load
//   something (`background` on table/td/th/tbody, srcset, poster, xlink:href, formaction, action,
//   ping, longdesc, data, cite, lowsrc …) is not on the list, nor is whatever browsers add next;
// - no script, style, forms, frames, media, <svg> or <math>; no on* or style attributes;
// - images only from this origin: a remote image tells a third party who read the answer (and
//   from where); `data:` images are dropped too;
// - links out open in a new tab that cannot script this one;
// - no ids, names or classes of the page's own: model text cannot clobber the page's elements or
//   dress up as its interface (a fake error box). Code blocks keep their `language-*` class.

const SAFE_LINK = /^(?:https?:|mailto:|tel:|#|\/(?!\/)|\.{0,2}\/)/i;
const CODE_LANGUAGE = /^language-[\w+#.-]{1,40}$/;

const ALLOWED_TAGS = [
  "a", "abbr", "b", "blockquote", "br", "caption", "code", "dd", "del", "details", "div", "dl", "dt",
  "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd", "li", "mark", "ol", "p",
  "pre", "q", "s", "small", "span", "strong", "sub", "summary", "sup", "table", "tbody", "td",
  "tfoot", "th", "thead", "tr", "u", "ul",
];
const ALLOWED_ATTR = ["href", "src", "title", "alt", "align", "colspan", "rowspan", "start", "class"];
// DOMPurify tests every attribute not known to be URI-safe against ALLOWED_URI_REGEXP; these hold
// plain values (`center`, `2`), not URLs.
const PLAIN_VALUE_ATTR = ["align", "colspan", "rowspan", "start"];

const PURIFY_CONFIG = {
  ALLOWED_TAGS,
  ALLOWED_ATTR,
  ADD_URI_SAFE_ATTR: PLAIN_VALUE_ATTR,
  // Only absolute http(s)/mailto/tel and same-site relative URLs survive in href/src.
  ALLOWED_URI_REGEXP: SAFE_LINK,
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
};

let hooksInstalled = false;

function sameOrigin(url) {
  try {
    return new URL(url, window.location.href).origin === window.location.origin;
  } catch {
    return false;
  }
}

function imageSourceKeep(node) {
  const src = node.getAttribute("src") || "";
  // DOMPurify lets data: through on <img>; only same-origin http(s) images are kept.
  if (!src || /^\s*data:/i.test(src) || !sameOrigin(src)) node.removeAttribute("src");
}

function linkOpenSafely(node) {
  const href = node.getAttribute("href");
  if (!SAFE_LINK.test(href.trim())) {
    node.removeAttribute("href");
  } else if (!sameOrigin(href)) {
    // Links out open in a new tab that cannot script this one.
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
}

function classKeepLanguage(node) {
  // Only a code block's language survives; the page's own classes are not for model text.
  const classes = node.tagName === "CODE" ? node.getAttribute("class").split(/\s+/) : [];
  const language = classes.filter((c) => CODE_LANGUAGE.test(c));
  if (language.length) node.setAttribute("class", language.join(" "));
  else node.removeAttribute("class");
}

function installHooks(purify) {
  if (hooksInstalled) return;
  hooksInstalled = true;
  purify.addHook("afterSanitizeAttributes", (node) => {
    // A URL is kept in exactly two places: a link's href and an image's src.
    if (node.tagName !== "A") node.removeAttribute("href");
    if (node.tagName !== "IMG") node.removeAttribute("src");
    if (node.tagName === "IMG") imageSourceKeep(node);
    if (node.tagName === "A" && node.hasAttribute("href")) linkOpenSafely(node);
    if (node.hasAttribute("class")) classKeepLanguage(node);
  });
}

// Returns a sanitized DocumentFragment for `text` (markdown). Falls back to plain text when a
// library failed to load: never raw HTML.
export function markdownFragment(text) {
  const { marked, DOMPurify } = window;
  if (!marked || !DOMPurify || !DOMPurify.isSupported) {
    const fragment = document.createDocumentFragment();
    const p = document.createElement("p");
    p.textContent = text;
    fragment.append(p);
    return fragment;
  }
  installHooks(DOMPurify);
  const html = marked.parse(String(text ?? ""), { gfm: true, breaks: true, async: false });
  const fragment = DOMPurify.sanitize(html, { ...PURIFY_CONFIG, RETURN_DOM_FRAGMENT: true });
  // Images whose source the hook refused are dropped whole (removing nodes inside a hook would
  // disturb DOMPurify's own walk over the tree).
  fragment.querySelectorAll("img:not([src])").forEach((img) => img.remove());
  return fragment;
}
