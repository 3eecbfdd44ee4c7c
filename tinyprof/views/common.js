// What the pages of `tinyprof report` share (tinyprof/views/report_page.py): report.js
// (one run) and history.js (many runs) each come after this file, in one script element.
"use strict";
const TP = (() => {
  const CONFIG = { displaylogo: false, responsive: true };
  // An element; its children are elements or strings, and strings become text nodes:
  // a name from a profile never becomes markup.
  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k);
    return e;
  };
  const sum = (a) => a.reduce((s, v) => s + (v || 0), 0);
  // Plotly reads its text fields (labels, names, ticks, hover) as pseudo-HTML
  // (<b>, <a href>, <br>, entities, $...$ as LaTeX): a name goes in escaped,
  // so it shows as the text it is. The DOM gets names as text nodes only.
  const esc = (t) => String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/\$/g, "&#36;");
  const UNITS = [["s", 1], ["ms", 1e-3], ["us", 1e-6], ["ns", 1e-9]];
  const unitOf = (values) => UNITS.find(([, s]) => values.reduce((a, v) => Math.max(a, v), 0) >= s) || UNITS[3];
  // A table column of seconds in one unit, the largest value's: [heading, cells].
  const secondsColumn = (head, values) => {
    const [u, s] = unitOf(values);
    return [`${head} (${u})`, values.map((v) => (v / s).toFixed(3))];
  };
  const fmtS = (seconds) => {
    const [u, s] = UNITS.find(([, s]) => seconds >= s) || UNITS[3];
    return `${(seconds / s).toFixed(3)} ${u}`;
  };
  const BELOW = { orientation: "h", y: -0.3 };   // the legend, clear of the x axis title
  // The sections of a page, appended to its <main>.
  const sections = (main) => ({
    section: (id, title, hint) => {
      const s = el("section", { id }, el("h2", {}, title));
      if (hint) s.append(el("div", { class: "hint" }, hint));
      main.append(s); return s;
    },
    note: (s, text) => s.append(el("p", { class: "note" }, text)),
  });
  // A chart's title is a caption above it, not Plotly's: Plotly's toolbar would cover it.
  const plot = (parent, id, title) => {
    const d = el("div", { id, class: "plot" });
    const caption = el("figcaption", { id: `${id}-title` }, title || "");
    parent.append(el("figure", { class: "chart" }, caption, d));
    return d;
  };
  const caption = (p, text) => { document.getElementById(`${p.id}-title`).textContent = text; };
  const listTable = (id, heads, rows) => {
    const t = el("table", { id }, el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", {}, h)))));
    const b = el("tbody");
    rows.forEach((r) => b.append(el("tr", {}, ...r.map((c) => el("td", {}, c)))));
    t.append(b);
    return el("div", { class: "scroll" }, t);
  };
  const data = () => JSON.parse(document.getElementById("tinyprof-data").textContent);
  return { CONFIG, el, sum, esc, UNITS, unitOf, secondsColumn, fmtS, BELOW, sections, plot, caption,
    listTable, data };
})();
