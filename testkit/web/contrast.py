"""The WCAG 2.2 contrast ratio of an element's text against the background it is drawn on, as
Chromium computes both (the cascade, custom properties, dark mode): for visual findings that axe's
page-wide audit does not pin to one element."""
import json

AA_NORMAL_TEXT = 4.5  # WCAG 2.2 success criterion 1.4.3, text under 18 pt (14 pt bold)

# The text's colour, and the first ancestor background that is not transparent (white when none).
_SCRIPT = """(selector) => {
  const rgba = (css) => (css.match(/[\\d.]+/g) || []).map(Number);
  const channel = (v) => { v /= 255; return v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const luminance = ([r, g, b]) => 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  const node = document.querySelector(selector);
  const text = getComputedStyle(node).color;
  let background = "rgb(255, 255, 255)";
  for (let el = node; el; el = el.parentElement) {
    const css = getComputedStyle(el).backgroundColor;
    const parts = rgba(css);
    if (parts.length === 3 || parts[3] > 0) { background = css; break; }
  }
  const [light, dark] = [luminance(rgba(text)), luminance(rgba(background))].sort((a, b) => b - a);
  return { ratio: (light + 0.05) / (dark + 0.05), text, background };
}"""


def contrast_of(page, selector: str) -> dict:
    """{"ratio", "text", "background"} of the first element `selector` finds on `page`."""
    return page.evaluate(f"({_SCRIPT})({json.dumps(selector)})")
