// Draws a sub-agent's `done.chart` with Chart.js, from data only (never from HTML).
//
// Chart JSON shape (the one shape, documented in docs/api.md; sub-agents send it in `done.chart`):
//   {"type": "bar" | "line" | "pie",
//    "title": "本周食堂人流",                       optional, ≤ 100 characters
//    "labels": ["周一", "周二", …],                  1–100 strings or numbers
//    "datasets": [{"label": "人次", "data": [120, 98, …]}]   1–8 series, numbers, one per label
//   }
// Anything else is refused with a short note instead of a chart.
import { t } from "./i18n.js";

export const CHART_TYPES = ["bar", "line", "pie"];
const MAX_LABELS = 100;
const MAX_DATASETS = 8;
const PALETTE = ["#2563eb", "#16a34a", "#f59e0b", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#65a30d"];

const isText = (v) => typeof v === "string" || (typeof v === "number" && Number.isFinite(v));
const clip = (s, n) => String(s).slice(0, n);

// Returns a clean copy of `spec`, or null when it does not follow the shape above.
export function chartSpecParse(spec) {
  if (!spec || typeof spec !== "object" || Array.isArray(spec)) return null;
  if (!CHART_TYPES.includes(spec.type)) return null;
  if (spec.title !== undefined && spec.title !== null && typeof spec.title !== "string") return null;
  const { labels, datasets } = spec;
  if (!Array.isArray(labels) || labels.length === 0 || labels.length > MAX_LABELS || !labels.every(isText)) return null;
  if (!Array.isArray(datasets) || datasets.length === 0 || datasets.length > MAX_DATASETS) return null;
  const clean = [];
  for (const ds of datasets) {
    if (!ds || typeof ds !== "object" || !Array.isArray(ds.data)) return null;
    if (ds.data.length !== labels.length) return null;
    if (!ds.data.every((n) => typeof n === "number" && Number.isFinite(n))) return null;
    if (ds.label !== undefined && typeof ds.label !== "string") return null;
    clean.push({ label: clip(ds.label ?? "", 60), data: [...ds.data] });
  }
  return {
    type: spec.type,
    title: clip(spec.title ?? "", 100),
    labels: labels.map((l) => clip(l, 40)),
    datasets: clean,
  };
}

// A canvas cannot read the page's CSS: its text, grid and slice borders take the theme's colours
// from the CSS variables (static/css/app.css), and are set again when the theme changes (the
// toggle, or the system's prefers-color-scheme), so a chart never stays light on a dark page.
function themeColors() {
  const style = getComputedStyle(document.documentElement);
  const value = (name) => style.getPropertyValue(name).trim();
  return { text: value("--text"), muted: value("--muted"), line: value("--line"), panel: value("--panel") };
}

function chartConfig(parsed) {
  const pie = parsed.type === "pie";
  const colors = themeColors();
  const datasets = parsed.datasets.map((ds, i) => ({
    label: ds.label,
    data: ds.data,
    backgroundColor: pie ? parsed.labels.map((_, j) => PALETTE[j % PALETTE.length]) : PALETTE[i % PALETTE.length],
    borderColor: pie ? colors.panel : PALETTE[i % PALETTE.length],
    borderWidth: pie ? 1 : 2,
    tension: 0.25,
  }));
  const reduceMotion = window.matchMedia("(prefers-reduced-motion: reduce)").matches;
  const axis = { ticks: { color: colors.muted }, grid: { color: colors.line }, border: { color: colors.line } };
  return {
    type: parsed.type,
    data: { labels: parsed.labels, datasets },
    options: {
      responsive: true,
      maintainAspectRatio: false,
      animation: reduceMotion ? false : { duration: 300 },
      color: colors.muted,
      plugins: {
        title: { display: Boolean(parsed.title), text: parsed.title, color: colors.text },
        legend: {
          display: pie || parsed.datasets.length > 1 || Boolean(parsed.datasets[0].label),
          labels: { color: colors.muted },
        },
      },
      scales: pie ? {} : { x: axis, y: { ...axis, beginAtZero: true } },
    },
  };
}

const drawn = new WeakMap(); // canvas → its parsed spec, to draw it again in another theme

function chartsRetheme() {
  for (const canvas of document.querySelectorAll(".chart canvas")) {
    const chart = window.Chart?.getChart(canvas);
    if (!chart || !drawn.has(canvas)) continue;
    const config = chartConfig(drawn.get(canvas));
    chart.options = config.options;
    chart.data.datasets.forEach((ds, i) => { ds.borderColor = config.data.datasets[i].borderColor; });
    chart.update("none");
  }
}

new MutationObserver(chartsRetheme).observe(document.documentElement, { attributeFilter: ["data-theme"] });

// Appends a chart (or a note saying it cannot be shown) to `container`.
export function chartRender(container, spec) {
  const figure = document.createElement("figure");
  figure.className = "chart";
  const parsed = chartSpecParse(spec);
  if (!parsed || !window.Chart) {
    figure.classList.add("chart-invalid");
    figure.textContent = t("图表数据格式不正确，无法显示。");
    container.append(figure);
    return null;
  }
  const box = document.createElement("div");
  box.className = "chart-box";
  const canvas = document.createElement("canvas");
  canvas.setAttribute("role", "img");
  canvas.setAttribute("aria-label", parsed.title || t("图表"));
  box.append(canvas);
  figure.append(box);
  container.append(figure);
  drawn.set(canvas, parsed);
  return new window.Chart(canvas, chartConfig(parsed));
}
