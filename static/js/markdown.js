// Model and tool text is untrusted data (DESIGN §7): markdown is parsed by `marked`, then every
// node goes through DOMPurify before it reaches the page. No script, no event handlers, no
// javascript:/data: links, no images from other origins (a remote image leaks the reader's IP
// and can track them), no forms or frames.

const SAFE_LINK = /^(?:https?:|mailto:|tel:|#|\/(?!\/)|\.{0,2}\/)/i;

const PURIFY_CONFIG = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "frame", "object", "embed", "svg", "math", "video", "audio", "source", "link", "meta", "base"],
  FORBID_ATTR: ["style", "srcset", "formaction", "action"],
  // Only absolute http(s)/mailto/tel and same-site relative URLs survive in href/src.
  ALLOWED_URI_REGEXP: SAFE_LINK,
  ALLOW_DATA_ATTR: false,
};

let hooksInstalled = false;

function sameOrigin(url) {
  try {
    return new URL(url, window.location.href).origin === window.location.origin;
  } catch {
    return false;
  }
}

function installHooks(purify) {
  if (hooksInstalled) return;
  hooksInstalled = true;
  purify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "IMG") {
      const src = node.getAttribute("src") || "";
      // DOMPurify lets data: through on <img>; only same-origin http(s) images are kept.
      if (!src || /^\s*data:/i.test(src) || !sameOrigin(src)) node.removeAttribute("src");
    }
    if (node.tagName === "A" && node.hasAttribute("href")) {
      const href = node.getAttribute("href");
      if (!SAFE_LINK.test(href.trim())) {
        node.removeAttribute("href");
      } else if (!sameOrigin(href)) {
        // Links out open in a new tab that cannot script this one.
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", "noopener noreferrer nofollow");
      }
    }
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
