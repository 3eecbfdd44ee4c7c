// The history page of `tinyprof report R1 R2 ...` (tinyprof/views/history_page.py): many runs,
// or the snapshots of one, from the data of #tinyprof-data. No network.
"use strict";
(function () {
  const { CONFIG, el, esc, UNITS, fmtS, BELOW, plot, listTable } = TP;
  const D = TP.data();
  const R = D.runs.length, N = D.callpaths.length, SNAPS = D.kind === "snapshots";
  const RUN = SNAPS ? "interval" : "run";
  const RULE = D.rule, TIME = RULE.metric === "time", MPI = D.mpi;
  // Per run: exclusive and inclusive, the sum over the callpath's subtree (tree order: children
  // after their parent); one is embedded, the one judged (null: the callpath is not in the run).
  const inclusive = (exc) => {
    const inc = [...exc];
    for (let i = N - 1; i >= 0; i--) {
      const p = D.callpaths[i].parent;
      if (p >= 0 && inc[i] !== null) inc[p] = (inc[p] || 0) + inc[i];
    }
    return inc;
  };
  const exclusive = (inc) => {
    const exc = [...inc];
    D.callpaths.forEach((c, i) => { if (c.parent >= 0 && inc[i] !== null && exc[c.parent] !== null) exc[c.parent] -= inc[i]; });
    return exc;
  };
  const EXC = D.exc || D.inc.map(exclusive), INC = D.inc || EXC.map(inclusive);
  const VAL = RULE.inclusive ? INC : EXC;       // the values judged, over the runs and in the regressions
  const biggest = VAL.reduce((m, row) => row.reduce((a, v) => (v !== null && Math.abs(v) > a ? Math.abs(v) : a), m), 0);
  const [unit, scale] = TIME ? UNITS.find(([, s]) => biggest >= s) || UNITS[3] : [RULE.metric, 1];
  const fmt = (v) => (v === null || v === undefined ? "-" : (v / scale).toFixed(3));
  const fmtTotal = (v) => (TIME ? fmtS(v) : `${fmt(v)} ${unit}`);
  const share = (f) => `${+(100 * f).toPrecision(12)}%`;    // 0.07 as 7%, not 7.000000000000001%
  const pct = (v) => (v === null || !isFinite(v) ? "-" : `${v >= 0 ? "+" : ""}${(100 * v).toFixed(1)}%`);
  const change = (a, b) => (a === null || b === null || a === 0 ? null : b / a - 1);
  const KIND = RULE.inclusive ? "inclusive" : "exclusive";
  const per = `${TIME ? `time${D.outside_mpi ? " outside MPI calls" : ""}` : RULE.metric} per rank on average`;
  const what = TIME ? `${KIND} ${per}` : per;
  // MPI time and bytes per rank of callpath c in run k (null: not recorded there, or c not in
  // run k); embedded for the callpaths with MPI calls in some run only.
  const MPI_COLUMN = new Map(MPI ? MPI.columns.map((c, j) => [c, j]) : []);
  const mpiOf = (key, k, c) => {
    if (!MPI || MPI[key][k] === null) return null;
    const j = MPI_COLUMN.get(c);
    return j === undefined ? (EXC[k][c] === null ? null : 0) : MPI[key][k][j];
  };
  const mpiRuns = MPI ? MPI.time.filter((row) => row !== null).length : 0;

  const REGS = D.flags.filter((f) => f[7] > 0).length;
  const main = el("main");
  const ranks = [...new Set(D.nranks)];
  document.body.append(
    el("header", {}, el("h1", {}, `tinyprof history: ${D.name}`),
      el("div", { class: "facts", id: "facts" },
        el("span", {}, SNAPS ? `${R} snapshots of one run, as intervals` : `${R} runs, by start time`),
        el("span", {}, `${N} callpaths`), el("span", {}, `${ranks.join("/")} ranks`),
        el("span", {}, `${REGS} regression(s), ${D.flags.length - REGS} improvement(s) flagged`),
        ...(MPI ? [el("span", {}, `MPI time and bytes (${KIND}) in ${mpiRuns} of ${R} ${SNAPS ? "snapshots" : "runs"}`)] : []),
        ...D.notes.map((n) => el("span", {}, n)))),
    main);
  const { section, note } = TP.sections(main);

  // -- the changes flagged (tinyprof.history's table, in its order) ---------------------------
  const flagged = section("regressions", "Changes flagged",
    `Each ${RUN} against its baseline, the ${SNAPS ? "intervals" : "runs"} since the callpath's last change ` +
    `flagged (all before it until then): ${what}; flagged when p < ${RULE.alpha} by the run-to-run noise ` +
    `seen over the ${SNAPS ? "intervals" : "runs"}, the change beyond ${share(RULE.threshold)} and ` +
    `|new - baseline| at least ${share(RULE.floor)} of the baseline's time (${RULE.test}; docs/guide.md). ` +
    "Regressions first, largest change first.");
  const span = (a, b) => (a === b ? D.runs[a] : `${D.runs[a]} to ${D.runs[b]}`);
  if (D.flags.length) {
    flagged.append(listTable("flags-table", ["callpath", RUN, "baseline", `baseline (${unit})`, `${RUN} (${unit})`,
      "change", "p", "flag"], D.flags.map(([k, c, since, base, now, ch, p, sign]) => [D.callpaths[c].path, D.runs[k],
      span(since, k - 1), fmt(base), fmt(now), ch === null ? "from 0" : pct(ch), p === null ? "-" : p.toPrecision(2),
      sign > 0 ? "regressed" : "improved"])));
    flagged.querySelectorAll("#flags-table tbody tr").forEach((tr, i) => {
      const [k, c, , , , , , sign] = D.flags[i];
      tr.dataset.callpath = D.callpaths[c].path;
      tr.classList.add(sign > 0 ? "hot" : "good");
      tr.addEventListener("click", () => {       // its chart, and the diff of its run and the one before
        select(c);
        baseSel.value = String(k - 1); newSel.value = String(k); drawDiff();
      });
    });
  } else note(flagged, `No change flagged${D.notes.length ? ` (${D.notes.join("; ")})` : ""}.`);

  // -- each callpath over the runs ---------------------------------------------------------
  const over = section("history", `Callpaths over the ${SNAPS ? "snapshots" : "runs"}`,
    `${what[0].toUpperCase()}${what.slice(1)}${SNAPS ? ", recorded in each interval between snapshots" : ""}; ` +
    "the worst regression first (the largest flagged change; then the change from first to last). " +
    "Red dots: the changes flagged. Click a row for its chart (a change above: also the diff of its two runs).");
  const flagsOf = D.callpaths.map(() => []);
  D.flags.forEach((f) => flagsOf[f[1]].push(f[0]));
  const SVG = "http://www.w3.org/2000/svg", W = 240, H = 28;
  const spark = (c) => {
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("class", "spark");
    const ys = VAL.map((row) => row[c]), given = ys.filter((v) => v !== null);
    if (!given.length) return svg;
    const lo = Math.min(...given), hi = Math.max(...given), span = hi - lo || 1;
    const x = (k) => (R > 1 ? (k * (W - 4)) / (R - 1) + 2 : W / 2), y = (v) => H - 3 - ((v - lo) * (H - 6)) / span;
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", ys.map((v, k) => (v === null ? null : `${x(k).toFixed(1)},${y(v).toFixed(1)}`))
      .filter((p) => p).join(" "));
    svg.append(line);
    for (const k of flagsOf[c]) {
      if (ys[k] === null) continue;
      const dot = document.createElementNS(SVG, "circle");
      dot.setAttribute("cx", x(k).toFixed(1)); dot.setAttribute("cy", y(ys[k]).toFixed(1)); dot.setAttribute("r", 2.5);
      svg.append(dot);
    }
    return svg;
  };
  const first = (c) => { for (let k = 0; k < R; k++) if (VAL[k][c] !== null) return VAL[k][c]; return null; };
  const last = (c) => { for (let k = R - 1; k >= 0; k--) if (VAL[k][c] !== null) return VAL[k][c]; return null; };
  const histTable = el("table", { id: "history-table" });
  histTable.append(el("thead", {}, el("tr", {}, ...["callpath", `over the ${SNAPS ? "intervals" : "runs"}`,
    `first (${unit})`, `last (${unit})`, "first to last", "regressions"].map((h) => el("th", {}, h)))));
  const histBody = el("tbody");
  const ROWS = 300;     // sparklines drawn: the worst; the chart and the diff have every callpath
  for (const c of D.worst.slice(0, ROWS)) {
    const tr = el("tr", { "data-callpath": D.callpaths[c].path, onclick: () => select(c) },
      el("td", { title: D.callpaths[c].path }, D.callpaths[c].path), el("td", {}, spark(c)),
      el("td", {}, fmt(first(c))), el("td", {}, fmt(last(c))), el("td", {}, pct(change(first(c), last(c)))),
      el("td", flagsOf[c].length ? { class: "hot" } : {}, String(flagsOf[c].length)));
    histBody.append(tr);
  }
  histTable.append(histBody);
  over.append(el("div", { class: "scroll" }, histTable));
  if (N > ROWS) note(over, `The ${ROWS} worst of ${N} callpaths.`);
  const chart = plot(over, "history-plot", "");
  const x = D.runs.map((_, k) => k), text = D.runs.map(esc);
  function select(c) {
    histBody.querySelectorAll("tr").forEach((tr) => tr.classList.toggle("selected", tr.dataset.callpath === D.callpaths[c].path));
    TP.caption(chart, `${D.callpaths[c].path}: ${what}`);
    const y = (rows) => rows.map((row) => (row[c] === null ? null : row[c] / scale));
    const marks = flagsOf[c];
    const traces = [
      { x, y: y(EXC), text, name: "exclusive", mode: "lines+markers", hovertemplate: `%{text}<br>%{y:.3f} ${unit}` },
      { x, y: y(INC), text, name: "inclusive", mode: "lines", line: { dash: "dot" }, hovertemplate: `%{text}<br>%{y:.3f} ${unit}` },
      { x: marks, y: marks.map((k) => (VAL[k][c] === null ? null : VAL[k][c] / scale)), text: marks.map((k) => text[k]),
        name: "change flagged", mode: "markers", marker: { color: "#c22", size: 10 }, hovertemplate: "%{text}" }];
    if (MPI) {      // null where a run recorded no MPI: a gap in the line
      const mpi = (key, k) => mpiOf(key, k, c);
      if (TIME) traces.push({ x, y: D.runs.map((_, k) => (mpi("time", k) === null ? null : mpi("time", k) / scale)), text,
        name: `MPI time (${KIND})`, mode: "lines+markers", line: { dash: "dash", color: "#2a8a4a" },
        marker: { color: "#2a8a4a" }, hovertemplate: `%{text}<br>MPI %{y:.3f} ${unit}` });
      traces.push({ x, y: D.runs.map((_, k) => mpi("bytes", k)), text, name: `MPI bytes (${KIND}, right)`, yaxis: "y2",
        mode: "lines+markers", line: { dash: "dashdot", color: "#8a4ab0" }, marker: { color: "#8a4ab0" },
        hovertemplate: "%{text}<br>%{y} bytes" });
    }
    Plotly.react(chart, traces,
    { margin: { t: 10 }, legend: BELOW, yaxis: { title: { text: unit }, rangemode: "tozero" },
      ...(MPI ? { yaxis2: { title: { text: "bytes per rank" }, overlaying: "y", side: "right", rangemode: "tozero" } } : {}),
      xaxis: { title: { text: SNAPS ? "interval (snapshot), in order" : "run, in start order" }, tickformat: "d" } }, CONFIG);
  }

  // -- the diff of two runs ------------------------------------------------------------------
  const diff = section("diff", `Diff of two ${SNAPS ? "intervals" : "runs"}`,
    `Pick the two to compare: ${per}, exclusive and inclusive (the subtree's sum)` +
    `${MPI ? `, and the MPI time and bytes per rank (${KIND}; - where a ${RUN} recorded none)` : ""}. Siblings: ` +
    `the largest inclusive difference first. No flags here: one ${RUN} a side cannot tell a change from ` +
    "run-to-run noise (the changes flagged are above).");
  const choose = (id, pick) => {
    const s = el("select", { id }, ...D.runs.map((r, k) => el("option", { value: String(k) }, r)));
    s.value = String(pick);
    s.addEventListener("change", drawDiff);
    return s;
  };
  const baseSel = choose("diff-base", 0), newSel = choose("diff-new", R - 1);
  const diffTitle = el("p", { id: "diff-title" });
  const diffTable = el("table", { id: "diff-table" });
  const mpiTime = (v) => (v === null ? "-" : TIME ? fmt(v) : fmtS(v)), mpiUnit = TIME ? ` (${unit})` : "";
  diffTable.append(el("thead", {}, el("tr", {}, ...["callpath", `base exclusive (${unit})`, `new exclusive (${unit})`,
    "change", `base inclusive (${unit})`, `new inclusive (${unit})`, "change",
    ...(MPI ? [`base MPI time${mpiUnit}`, `new MPI time${mpiUnit}`, "base MPI bytes", "new MPI bytes"] : [])]
    .map((h) => el("th", {}, h)))));
  const diffBody = el("tbody");
  diffTable.append(diffBody);
  diff.append(el("label", {}, "base:", baseSel), " ", el("label", {}, "new:", newSel), diffTitle,
    el("div", { class: "scroll" }, diffTable));
  const children = D.callpaths.map(() => []), roots = [];
  D.callpaths.forEach((c, i) => (c.parent < 0 ? roots : children[c.parent]).push(i));
  function drawDiff() {
    const a = +baseSel.value, b = +newSel.value;
    const ea = EXC[a], eb = EXC[b], ia = INC[a], ib = INC[b];
    diffBody.textContent = "";
    const delta = (i) => Math.abs((ib[i] || 0) - (ia[i] || 0));
    const visit = (ids, depth) => {
      for (const i of [...ids].sort((p, q) => delta(q) - delta(p))) {
        if (ea[i] === null && eb[i] === null) continue;
        const name = el("td", { style: `padding-left:${8 + 16 * depth}px`, title: D.callpaths[i].path },
          D.callpaths[i].name);
        const bytes = (k) => { const v = mpiOf("bytes", k, i); return v === null ? "-" : String(v); };
        diffBody.append(el("tr", { "data-callpath": D.callpaths[i].path },
          name, el("td", {}, ea[i] === null ? "(none)" : fmt(ea[i])), el("td", {}, eb[i] === null ? "(none)" : fmt(eb[i])),
          el("td", {}, pct(change(ea[i], eb[i]))), el("td", {}, fmt(ia[i])), el("td", {}, fmt(ib[i])),
          el("td", {}, pct(change(ia[i], ib[i]))),
          ...(MPI ? [el("td", {}, mpiTime(mpiOf("time", a, i))), el("td", {}, mpiTime(mpiOf("time", b, i))),
            el("td", {}, bytes(a)), el("td", {}, bytes(b))] : [])));
        visit(children[i], depth + 1);
      }
    };
    visit(roots, 0);
    diffTitle.textContent = `${D.runs[b]} against ${D.runs[a]}: ` +
      `total ${fmtTotal(D.totals[a] || 0)} to ${fmtTotal(D.totals[b] || 0)} per rank.`;
  }

  // -- the runs' metadata --------------------------------------------------------------------
  const runs = section("runs", SNAPS ? "Snapshots" : "Runs",
    "The run metadata (docs/api.md, \"Run metadata\"), one row per " + (SNAPS ? "snapshot" : "run") +
    " in the order above. Type to keep the rows holding the text (in any column).");
  const filter = el("input", { id: "run-filter", type: "search", placeholder: "filter", size: "40" });
  const metaTable = listTable("runs-table", D.meta.columns, D.meta.rows);
  const count = el("span", { id: "run-count", class: "hint" }, `${R} of ${R}`);
  runs.append(el("label", {}, "Filter: ", filter), " ", count, metaTable);
  const lower = D.meta.rows.map((row) => row.join("\u0000").toLowerCase());
  filter.addEventListener("input", () => {
    const want = filter.value.toLowerCase();
    let shown = 0;
    metaTable.querySelectorAll("tbody tr").forEach((tr, k) => {
      const keep = lower[k].includes(want);
      tr.hidden = !keep; shown += keep;
    });
    count.textContent = `${shown} of ${R}`;
  });

  if (N) { drawDiff(); select(D.worst[0]); }
  document.body.dataset.ready = "1";
})();
