// The page of `tinyprof report` for one run (tinyprof/views/report_page.py): draws the
// data of the element #tinyprof-data with plotly.js, inlined beside it. No network.
"use strict";
(function () {
  const { CONFIG, el, sum, esc, UNITS, unitOf, secondsColumn, fmtS, BELOW, plot, caption, listTable } = TP;
  const D = TP.data();
  const P = D.nranks, N = D.callpaths.length;
  // Ranks are integers: ticks at whole steps, about ten of them at most.
  const rankAxis = (title, n) => {
    const step = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000].find((d) => n / d <= 10) || Math.ceil(n / 10);
    return { title: { text: title }, tickmode: "linear", tick0: 0, dtick: step, tickformat: "d" };
  };

  // -- per-callpath statistics, as tinyprof show gives them (analysis/values.summary): means
  // over all ranks of the run, a rank that did not run the callpath counting 0 (POP's basis).
  const stats = D.callpaths.map((c, i) => {
    const s = { count: sum(D.count[i]) };
    for (const key of ["ran", "inc", "exc", "share", "imbalance", "max", "slowest"]) s[key] = D.stats[key][i] ?? 0;
    if (D.mpi) s.mpi = sum(D.mpi.time[i]) / P;
    return s;
  });
  const children = D.callpaths.map(() => []), roots = [];
  D.callpaths.forEach((c, i) => (c.parent < 0 ? roots : children[c.parent]).push(i));
  const biggest = Math.max(0, ...stats.map((s) => s.max));
  const [unit, scale] = UNITS.find(([, s]) => biggest >= s) || UNITS[3];
  const fmt = (v) => (v / scale).toFixed(3);
  const BYTES = ["B", "KiB", "MiB", "GiB", "TiB"];
  const bytesColumn = (head, values) => {
    let i = 0;
    const top = values.reduce((a, v) => Math.max(a, v), 0);
    while (top >= 1024 ** (i + 1) && i < 4) i++;
    return [`${head} (${BYTES[i]})`, values.map((v) => (v / 1024 ** i).toFixed(i ? 1 : 0))];
  };
  // A callpath is flagged for imbalance only when it is a share of the run worth a look.
  const HOT_IMBALANCE = 1.25, HOT_SHARE = 0.01, GOOD_EFFICIENCY = 0.8;

  // -- the page -------------------------------------------------------------------------
  const main = el("main");
  document.body.append(
    el("header", {}, el("h1", {}, `tinyprof: ${D.name}`),
      el("div", { class: "facts", id: "facts" },
        el("span", {}, `${P} ranks`), el("span", {}, `${N} callpaths`),
        el("span", {}, `run ${fmt(Math.max(0, ...D.runtime))} ${unit} (slowest rank)`),
        el("span", {}, `${D.files} file(s), ${D.set || "flush"}`),
        el("span", {}, `created ${D.created}`), el("span", {}, `tinyprof ${D.version}`),
        ...(D.run ? [el("span", { id: "run" }, D.run)] : []))),
    main);
  const { section, note } = TP.sections(main);

  // -- call tree ------------------------------------------------------------------------
  const COLUMNS = [
    ["callpath", "Callpath", null], ["inc", `Inclusive (${unit}, mean)`, (s) => fmt(s.inc)],
    ["exc", `Exclusive (${unit}, mean)`, (s) => fmt(s.exc)],
    ["share", "% of run", (s) => (100 * s.share).toFixed(1)],
    ["imbalance", "Imbalance (max/mean)", (s) => (s.imbalance ? s.imbalance.toFixed(2) + "x" : "-")],
    ["slowest", "Slowest rank", (s) => (s.slowest < 0 ? "-" : String(s.slowest))],
    ["ran", "Ranks", (s) => `${s.ran}/${P}`], ["count", "Occurrences", (s) => String(s.count)]];
  if (D.mpi) COLUMNS.push(["mpi", `MPI (${unit}, mean)`, (s) => fmt(s.mpi)]);
  const tree = section("tree", "Call tree",
    "Times per rank summed over executions; mean over all ranks of the run (a rank that did not run " +
    "the callpath counts 0; Ranks: how many ran it). " +
    "Click a row for its ranks and iterations, a heading to sort (within each parent), ▸/▾ to fold. " +
    `Red: imbalance above ${HOT_IMBALANCE}x in a callpath of at least ${100 * HOT_SHARE}% of the run.`);
  const table = el("table", { id: "tree-table" });
  const head = el("tr");
  let sortKey = "inc";
  const collapsed = new Set();
  COLUMNS.forEach(([key, label]) => head.append(el("th", {
    "data-key": key, onclick: () => { sortKey = key === "callpath" ? null : key; drawTree(); } }, label)));
  const body = el("tbody");
  table.append(el("thead", {}, head), body);
  tree.append(el("div", { class: "scroll" }, table));
  let selected = -1;
  function drawTree() {
    head.querySelectorAll("th").forEach((th) => th.classList.toggle("sorted", th.dataset.key === sortKey));
    body.textContent = "";
    const visit = (ids, depth) => {
      const order = sortKey ? [...ids].sort((a, b) => stats[b][sortKey] - stats[a][sortKey]) : ids;
      for (const i of order) {
        const s = stats[i], kids = children[i].length, open = !collapsed.has(i);
        const toggle = el("span", { class: "toggle", onclick: (e) => {
          e.stopPropagation(); open ? collapsed.add(i) : collapsed.delete(i); drawTree(); } },
          kids ? (open ? "▾" : "▸") : "");
        const name = el("td", { style: `padding-left:${8 + 16 * depth}px`, title: D.callpaths[i].path },
          toggle, el("span", { class: "bar", style: `width:${Math.round(40 * s.share)}px` }),
          D.callpaths[i].name);
        const tr = el("tr", { "data-callpath": D.callpaths[i].path, onclick: () => select(i) }, name);
        COLUMNS.slice(1).forEach(([key, , f]) => tr.append(el("td",
          key === "imbalance" && s.imbalance > HOT_IMBALANCE && s.share >= HOT_SHARE ? { class: "hot" } : {},
          f(s))));
        if (i === selected) tr.classList.add("selected");
        body.append(tr);
        if (open) visit(children[i], depth + 1);
      }
    };
    visit(roots, 0);
  }

  // -- one callpath: its ranks, its iterations --------------------------------------------
  const detail = section("detail", "Selected callpath");
  const detailTitle = el("p", { id: "detail-title" });
  const grid = el("div", { class: "grid" });
  detail.append(detailTitle, grid);
  const distPlot = plot(grid, "dist", "Across ranks"), iterPlot = plot(grid, "iters");
  const ranks = Array.from({ length: P }, (_, r) => r);
  function select(i) {
    selected = i;
    drawTree();
    const s = stats[i];
    detailTitle.textContent = `${D.callpaths[i].path}: ran on ${s.ran} of ${P} ranks, mean ` +
      `${fmt(s.inc)} ${unit}, slowest rank ${s.slowest} (${s.imbalance.toFixed(2)}x the mean)`;
    const inc = D.inc[i].map((v) => v / scale), exc = D.exc[i].map((v) => v / scale);
    Plotly.react(distPlot, [
      { type: "bar", x: ranks, y: inc, name: "inclusive", marker: { color: "#4c78a8" } },
      { type: "bar", x: ranks, y: exc, name: "exclusive", marker: { color: "#f58518" } },
      { type: "box", y: inc, name: "spread", xaxis: "x2", yaxis: "y", boxpoints: false,
        marker: { color: "#54a24b" } }],
    { barmode: "group", margin: { t: 30, r: 10 },
      xaxis: { ...rankAxis("rank", P), domain: [0, 0.85] }, xaxis2: { domain: [0.88, 1] },
      yaxis: { title: { text: unit } }, legend: BELOW }, CONFIG);
    const it = D.iterations[String(i)];
    if (!it) {
      caption(iterPlot, "One occurrence per rank: no iterations to show");
      Plotly.react(iterPlot, [], { xaxis: { visible: false }, yaxis: { visible: false } }, CONFIG);
      return;
    }
    caption(iterPlot, "Across executions and iterations (min-max over ranks)");
    const x = it.occurrence, text = it.execution.map((e, k) =>
      `execution ${e}, iteration ${it.iteration[k]}${it.binned ? " (bin start)" : ""}`);
    const y = (a) => a.map((v) => (v === null ? null : v / scale));
    Plotly.react(iterPlot, [
      { x, y: y(it.max), text, name: "max", line: { width: 0 }, hoverinfo: "y+text+name" },
      { x, y: y(it.min), text, name: "min", fill: "tonexty", line: { width: 0 },
        fillcolor: "rgba(76,120,168,0.25)", hoverinfo: "y+text+name" },
      { x, y: y(it.mean), text, name: "mean", line: { color: "#4c78a8" }, hoverinfo: "y+text+name" }],
    { margin: { t: 30, r: 10 },
      xaxis: { title: { text: "occurrence (executions and iterations in order, from 0)" +
        (it.binned ? ": each point a bin from there" : "") }, tickformat: "d", rangemode: "tozero" },
      yaxis: { title: { text: unit } }, legend: BELOW }, CONFIG);
  }

  // -- rank x callpath heatmap -------------------------------------------------------------
  const heat = section("heatmap", "Ranks x callpaths",
    "Each cell: a callpath's time on one rank. Click a cell to select its callpath.");
  const pick = el("select", { id: "heat-metric" }, el("option", { value: "exc" }, "exclusive"),
    el("option", { value: "inc" }, "inclusive"));
  heat.append(el("label", {}, "Time:", pick));
  const heatPlot = plot(heat, "heat");
  const labels = D.callpaths.map((c) => esc(c.path));
  function drawHeat() {
    const z = D[pick.value].map((row, i) => row.map((v, r) => (D.count[i][r] > 0 ? v / scale : null)));
    // The scale starts at 0: two close times get close colours, not the ends of the scale.
    const top = z.reduce((m, row) => row.reduce((a, v) => (v !== null && v > a ? v : a), m), 0);
    Plotly.react(heatPlot, [{ type: "heatmap", z, x: ranks, y: labels, colorscale: "Viridis",
      zmin: 0, zmax: top || 1, colorbar: { title: { text: unit } }, hoverongaps: false,
      hovertemplate: `rank %{x}<br>%{y}<br>%{z:.3f} ${unit}<extra></extra>` }],
    { margin: { l: 220, t: 30 }, height: Math.min(900, 160 + 18 * N), xaxis: rankAxis("rank", P),
      yaxis: { type: "category", autorange: "reversed", automargin: true } }, CONFIG);
  }
  pick.addEventListener("change", drawHeat);
  drawHeat();
  heatPlot.on("plotly_click", (e) => select(labels.indexOf(e.points[0].y)));

  // -- snapshots over time ----------------------------------------------------------------
  const snaps = section("snapshots", "Snapshots over time");
  if (D.snapshots.series.length) {
    const x = D.snapshots.numbers;
    snaps.append(el("div", { class: "hint" }, `${x.length} snapshots; each point: the exclusive ` +
      "time summed over ranks recorded since the previous snapshot."));
    Plotly.newPlot(plot(snaps, "snapshot-plot"), D.snapshots.series.map((s) => ({
      x, y: s.values.map((v) => v / scale), stackgroup: "one",
      name: s.callpath < 0 ? "other" : esc(D.callpaths[s.callpath].path),
      text: D.snapshots.created.map(esc), hovertemplate: `snapshot %{x} (%{text})<br>%{y:.3f} ${unit}` })),
    { margin: { t: 10 }, xaxis: { title: { text: "snapshot" }, tickformat: "d" },
      yaxis: { title: { text: `${unit} per interval` } } }, CONFIG);
  } else {
    note(snaps, D.snapshots.numbers.length
      ? "Only one snapshot was kept: record with Profiler(frequency=..., keep=\"all\") to see the run over time."
      : "No snapshots in this profile: record with Profiler(frequency=..., keep=\"all\") and " +
        "make the report of the output directory to see the run over time.");
  }

  // -- POP efficiencies ---------------------------------------------------------------------
  const effSection = section("efficiency", "Efficiency (POP metrics)",
    "Per callpath, inclusive of the regions below it. Useful mean: over all ranks of the run (a rank " +
    "that did not run the callpath counts 0); runtime, useful max: max over ranks. Useful time: time " +
    "outside MPI calls. Load balance = mean / max useful time; communication efficiency = max useful " +
    "time / runtime (the longest rank's time), traced: serialization (max useful time / runtime on an " +
    "ideal network) x transfer (ideal / real runtime); parallel efficiency = load balance x communication " +
    "efficiency (docs/pop.md); on several hosts, load balance = within nodes x across nodes (TALP). " +
    "Siblings: the worst parallel efficiency first; in red below 0.8 (POP's rule of thumb for a good efficiency).");
  if (D.pop) {
    const E = D.pop, eff = (v) => (v === null ? "-" : v.toFixed(2));
    const [runHead, runCells] = secondsColumn("runtime", E.rows.map((r) => r[2] || 0));
    const useful = (k) => E.rows.map((r) => (r[k] === null ? "-" : fmt(r[k])));
    const means = useful(3), maxes = useful(4);
    const depth = (i) => { let d = 0; for (let p = D.callpaths[i].parent; p >= 0; p = D.callpaths[p].parent) d++; return d; };
    const at = (name) => E.columns.indexOf(name) + 1;      // a row: [callpath, ...columns]
    const has = (name) => E.columns.includes(name);
    const split = has("transfer_efficiency");             // traced: serialization and transfer
    const nodes = has("load_balance_out");                // on several hosts: within and across nodes
    const ratios = [["load_balance", "load balance"], ["communication_efficiency", "comm. efficiency"],
      ...(split ? [["serialization_efficiency", "serialization"], ["transfer_efficiency", "transfer"]] : []),
      ...(nodes ? [["load_balance_in", "LB within nodes"], ["load_balance_out", "LB across nodes"]] : []),
      ["parallel_efficiency", "parallel efficiency"]];
    const t = listTable("pop-table", ["callpath", "ranks", runHead, `useful mean (${unit})`,
      `useful max (${unit})`, ...ratios.map(([, head]) => head)],
    E.rows.map((r, k) => [D.callpaths[r[0]].path, `${r[1]}/${P}`, r[1] ? runCells[k] : "-",
      means[k], maxes[k], ...ratios.map(([name]) => eff(r[at(name)]))]));
    t.querySelectorAll("tbody tr").forEach((tr, k) => {
      const i = E.rows[k][0], cell = tr.firstChild;
      cell.textContent = D.callpaths[i].name;
      cell.title = D.callpaths[i].path;
      cell.style.paddingLeft = `${8 + 16 * depth(i)}px`;
      tr.dataset.callpath = D.callpaths[i].path;
      const pe = E.rows[k][at("parallel_efficiency")];
      if (pe !== null && pe < GOOD_EFFICIENCY) tr.lastChild.classList.add("hot");
    });
    effSection.append(t);
    if (E.problem) note(effSection, `No efficiencies over time: ${E.problem}`);
    if (E.history) {
      const H = E.history, x = H.numbers, g = el("div", { class: "grid" });
      effSection.append(el("div", { class: "hint" }, `Over time: each point is one interval between ` +
        `kept snapshots (what ran since the previous one), for the ${H.series.length} callpaths that ran longest.`), g);
      [["parallel_efficiency", "pop-history-pe", "Parallel efficiency per interval"],
        ["load_balance", "pop-history-lb", "Load balance per interval"],
        ...("load_balance_out" in (H.series[0] || {}) ?
          [["load_balance_in", "pop-history-lb-in", "Load balance within nodes per interval"],
            ["load_balance_out", "pop-history-lb-out", "Load balance across nodes per interval"]] : [])
      ].forEach(([key, id, title]) =>
        Plotly.newPlot(plot(g, id, title), H.series.map((s) => ({
          x, y: s[key], mode: "lines+markers", name: esc(D.callpaths[s.callpath].path),
          text: H.created.map(esc), hovertemplate: "snapshot %{x} (%{text})<br>%{y:.3f}" })),
        { margin: { t: 10 }, yaxis: { range: [0, 1.05] }, legend: BELOW,
          xaxis: { title: { text: "snapshot" }, tickformat: "d", ...(x.length <= 20 ? { tickvals: x } : {}) } },
        CONFIG));
    }
  } else note(effSection, "No MPI data: the efficiencies need the time in MPI calls: record with " +
    "Profiler(mpi=True) or TINYPROF_MPI=1 (docs/pop.md).");

  // -- MPI ----------------------------------------------------------------------------------
  const mpi = section("mpi", "MPI communication");
  if (D.mpi) {
    const ops = D.mpi.ops;
    const keyOf = (r) => `${r[0]} ${r[1]}`;
    const keys = [...new Set(ops.map(keyOf))], buckets = D.mpi.sizes;   // smallest size first
    const bar = (col) => ({ data: buckets.map((b, j) => ({ type: "bar", name: esc(b), x: keys.map(esc),
      marker: { color: ramp(j, buckets.length) },
      y: keys.map((k) => sum(ops.filter((r) => keyOf(r) === k && r[2] === b).map((r) => r[col]))) })),
      layout: { barmode: "stack", margin: { t: 30, b: 120 }, xaxis: { type: "category" },
        legend: { title: { text: "size" }, traceorder: "normal" } } });
    const g = el("div", { class: "grid" });
    mpi.append(el("div", { class: "hint" }, `${fmtS(D.mpi.total_time)} in MPI summed over ranks. ` +
      "Per communicator and operation, stacked by message size."), g);
    const t = bar(5), b = bar(4);
    Plotly.newPlot(plot(g, "mpi-time", "Time (s)"), t.data, t.layout, CONFIG);
    Plotly.newPlot(plot(g, "mpi-bytes", "Bytes"), b.data, b.layout, CONFIG);
    if (D.mpi.matrix) {
      Plotly.newPlot(plot(mpi, "mpi-matrix", "Point-to-point bytes, sender (row) to receiver (column)"),
        [{ type: "heatmap", z: D.mpi.matrix, colorscale: "Blues", reversescale: true, zmin: 0,
          hovertemplate: "rank %{y} to rank %{x}<br>%{z} bytes<extra></extra>" }],
        { margin: { t: 10 }, xaxis: rankAxis("to rank", P),
          yaxis: { ...rankAxis("from rank", P), autorange: "reversed" }, height: 480, width: 560 }, CONFIG);
    } else note(mpi, "No point-to-point messages between ranks.");
    const top = ops.slice(0, 40);
    const [bytesHead, bytesCells] = bytesColumn("bytes", top.map((r) => r[4]));
    const [timeHead, timeCells] = secondsColumn("time", top.map((r) => r[5]));
    mpi.append(listTable("mpi-table", ["communicator", "operation", "size", "calls", bytesHead, timeHead],
      top.map((r, k) => [r[0], r[1], r[2], String(r[3]), bytesCells[k], timeCells[k]])));
    if (D.mpi.transport) drawTransport(mpi, D.mpi.transport);
  } else note(mpi, "No MPI data: record with Profiler(mpi=True) or TINYPROF_MPI=1 (docs/mpi.md).");

  // -- trace: critical path and wait states ------------------------------------------------
  const traceSection = section("trace", "Critical path and wait states");
  if (D.trace) {
    const T = D.trace;
    traceSection.append(el("p", { id: "critical-length" }, `Critical path ${fmtS(T.length)} over ${T.ranks} of ` +
      `${P} ranks; wall time ${fmtS(T.wall)}. Waiting in MPI: ${fmtS(T.wait_total)} summed over ranks.`));
    const g = el("div", { class: "grid" });
    traceSection.append(g);
    const crit = T.critical.slice(0, 15), critLabels = crit.map((r) => esc(`rank ${r[0]}: ${r[1]}`));
    const bars = { barmode: "overlay", margin: { l: 220, t: 10 },
      yaxis: { type: "category", autorange: "reversed", automargin: true } };
    Plotly.newPlot(plot(g, "critical-plot", "Critical path by rank and callpath (s)"), [
      { type: "bar", orientation: "h", y: critLabels, x: crit.map((r) => r[2]), name: "on path" },
      { type: "bar", orientation: "h", y: critLabels, x: crit.map((r) => r[3]), name: "in MPI" }],
    bars, CONFIG);
    const waits = T.waits.slice(0, 15);
    Plotly.newPlot(plot(g, "wait-plot", "Wait states by callpath and rank (s)"), T.kinds.map((k, j) => ({
      type: "bar", orientation: "h", name: k.replace(/_/g, " "), y: waits.map((r) => esc(`rank ${r[1]}: ${r[0]}`)),
      x: waits.map((r) => r[2 + j]) })), { ...bars, barmode: "stack" }, CONFIG);
    const [pathHead, pathCells] = secondsColumn("on path", T.critical.map((r) => r[2]));
    const [mpiHead, mpiCells] = secondsColumn("in MPI", T.critical.map((r) => r[3]));
    traceSection.append(listTable("critical-table", ["rank", "callpath", pathHead, mpiHead, "share"],
      T.critical.map((r, k) => [String(r[0]), r[1], pathCells[k], mpiCells[k], (100 * r[4]).toFixed(1) + "%"])));
  } else note(traceSection, "No trace: record with Profiler(trace=True) or TINYPROF_TRACE=1 (docs/trace.md).");

  // The transport view: bytes each callpath sent per UCX protocol and transport.
  function drawTransport(parent, T) {
    const said = { used: "UCX carried the MPI traffic of", unused: "UCX carried none of the MPI traffic of",
      unavailable: "this MPI does not use UCX on" };
    const text = Object.entries(T.states).map(([s, r]) => `${said[s]} ${r.length} rank(s)`).join("; ");
    parent.append(el("h3", {}, "Transports (UCX)"), el("div", { class: "hint", id: "transport-states" },
      text + (T.states.unused ? ". Between ranks of one node MPICH uses its own shared memory, not UCX, " +
        "unless MPIR_CVAR_NOLOCAL=1." : ".") + " Receives show no protocol: the sender selects it."));
    const sent = T.rows.filter((r) => r[3]);
    if (sent.length) {
      const paths = [...new Set(sent.map((r) => r[0]))], kinds = [...new Set(sent.map((r) => `${r[3]} on ${r[4]}`))];
      const tick = { type: "category", autorange: "reversed", automargin: true };
      const g = el("div", { class: "grid" });
      parent.append(g);
      [[5, "transport-calls", "Operations sent"], [6, "transport-bytes", "Bytes sent"]].forEach(([col, id, title]) =>
        Plotly.newPlot(plot(g, id, title), kinds.map((k) => ({ type: "bar", orientation: "h", name: esc(k),
          y: paths.map(esc),
          x: paths.map((p) => sum(sent.filter((r) => r[0] === p && `${r[3]} on ${r[4]}` === k).map((r) => r[col]))) })),
        { barmode: "stack", margin: { l: 160, t: 10 }, yaxis: tick,
          legend: { orientation: "h", y: -0.25 } }, CONFIG));
    }
    const shown = T.rows.slice(0, 40), [bytesHead, bytesCells] = bytesColumn("bytes", shown.map((r) => r[6]));
    parent.append(listTable("transport-table", ["callpath", "MPI op", "UCP op", "protocol", "transport", "calls",
      bytesHead], shown.map((r, k) => [r[0], r[1] || "-", r[2],
      r[3] || (/recv/.test(r[2]) ? "(by sender)" : "(not known)"), r[4] || "-", String(r[5]), bytesCells[k]])));
  }

  // Colour j of n, ordered (viridis, dark to light): sizes read small to large.
  function ramp(j, n) {
    const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
    const t = n > 1 ? (j / (n - 1)) * (stops.length - 1) : 0, k = Math.min(Math.floor(t), stops.length - 2);
    const c = stops[k].map((v, i) => Math.round(v + (stops[k + 1][i] - v) * (t - k)));
    return `rgb(${c.join(",")})`;
  }

  // Start on the callpath with the largest mean exclusive time.
  let start = 0;
  stats.forEach((s, i) => { if (s.exc > stats[start].exc) start = i; });
  if (N) select(start); else drawTree();
  document.body.dataset.ready = "1";
})();
