// The mgst live view: polls /api/snapshot once a second and redraws. Read-only: it sends nothing but GETs.
"use strict";
(function () {
  const POLL_MS = 1000;
  const $ = (id) => document.getElementById(id);
  const fmt = (x, d) => (x === null || x === undefined) ? "-" : Number(x).toFixed(d === undefined ? 3 : d);
  const ci = (c) => (c && c[0] !== null && c[1] !== null) ? `[${fmt(c[0])}, ${fmt(c[1])}]` : "";
  const el = (tag, text, cls) => {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  };
  const row = (cells) => { const tr = el("tr"); cells.forEach((c) => tr.appendChild(c instanceof Node ? c : el("td", c))); return tr; };
  const fill = (tbody, rows) => { tbody.replaceChildren(...rows); };
  const plots = {};
  window.MGST_PLOTS = plots;  // (the charts, for the browser's console and the tests)

  // y from 0 to a little above the largest value: counts and response times read against 0, and a curve that
  // barely moves (a mean response settling at 0.20) still gets several ticks, not one.
  const fromZero = (u, min, max) => [0, max > 0 ? max * 1.1 : 1];

  function plot(id, label, stroke) {
    const width = Math.max(280, Math.min(460, (window.innerWidth - 140) / 3));
    const series = [{}].concat(label.map((l, i) => ({label: l, stroke: stroke[i], width: 1.5})));
    return new uPlot({width: width, height: 170, series: series, scales: {x: {time: false}, y: {range: fromZero}},
                      axes: [{label: "elapsed (s)"}, {space: 15}], legend: {show: true, live: false}},
                     [[]].concat(label.map(() => [])), $(id));
  }

  // A machine's running jobs by their IDs, said as IDs ("job 17", "jobs 17, 23"): a bare "17" read like a count.
  const jobIds = (ids) => ids.length === 0 ? "-" : (ids.length === 1 ? "job " : "jobs ") + ids.join(", ");

  function drawPlots(s) {
    if (typeof uPlot === "undefined") return;
    const rows = s.series.rows;
    const col = (i) => rows.map((r) => r[i]);
    if (!plots.jobs) {
      plots.jobs = plot("plot-jobs", ["queued", "running"], ["#d70", "#36c"]);
      plots.response = plot("plot-response", ["testbed", "simulation"], ["#c33", "#888"]);
      plots.up = plot("plot-up", ["up"], ["#2a7"]);
    }
    plots.jobs.setData([col(0), col(2), col(3)]);
    const sim = simOverall(s);
    plots.response.setData([col(0), col(5), rows.map(() => sim)]);
    plots.up.setData([col(0), col(4)]);
  }

  function simOverall(s) {
    const sim = s.simulation;
    return (sim && sim.status === "done" && sim.summary.overall) ? sim.summary.overall.mean_response : null;
  }

  function drawResults(s) {
    const sim = s.simulation && s.simulation.status === "done" ? s.simulation.summary : null;
    const thead = $("results").tHead, tbody = $("results").tBodies[0];
    const res = s.results || {};
    let rows = [];
    if (res.bags) {
      thead.replaceChildren(row([el("th", "metric"), el("th", "testbed"), el("th", "95 % interval"),
                                 el("th", "simulation"), el("th", "95 % interval")]));
      for (const [key, name] of [["avt", "AVT"], ["makespan", "makespan"], ["waiting", "waiting"], ["rwt", "RWT"]]) {
        const t = res.bags[key], m = sim && sim.bags ? sim.bags[key] : null;
        const v = (x) => x === "unbounded" ? ["unbounded", ""] : (x ? [fmt(x.mean), ci(x.ci95)] : ["-", ""]);
        rows.push(row([name, ...v(t), ...v(m)]));
      }
      rows.push(row(["bags done", `${res.bags.done} of ${res.bags.arrived}`, "", sim && sim.bags ? String(sim.bags.bags) : "-", ""]));
    } else {
      thead.replaceChildren(row([el("th", "class"), el("th", "jobs"), el("th", "mean response"), el("th", "95 % interval"),
                                 el("th", "simulation"), el("th", "95 % interval")]));
      const simClass = (i) => sim && sim.classes[i] ? sim.classes[i] : null;
      (res.classes || []).forEach((c, i) => {
        const m = simClass(i);
        rows.push(row([c.name, String(c.jobs), fmt(c.mean_response), ci(c.ci95), m ? fmt(m.mean_response) : "-", m ? ci(m.ci95) : ""]));
      });
      if (res.overall) {
        const m = sim ? sim.overall : null;
        rows.push(row(["all", String(res.overall.jobs), fmt(res.overall.mean_response), ci(res.overall.ci95),
                       m ? fmt(m.mean_response) : "-", m ? ci(m.ci95) : ""]));
      }
    }
    fill(tbody, rows);
    const st = s.simulation;
    $("sim-status").textContent = !st ? "No simulation beside this run." :
      st.status === "waiting" ? "The simulation of this setting starts now that the page is open..." :
      st.status === "running" ? "The simulation of this setting is running (low priority)..." :
      st.status === "failed" ? `The simulation failed: ${st.error}` :
      `Simulation: ${st.summary.replications} replication${st.summary.replications === 1 ? '' : 's'}, horizon ${fmt(st.summary.horizon, 1)}, seed ${st.summary.seed}. ` +
      `Times in model units; testbed intervals: ${res.ci_method || ""}.`;
  }

  function drawMachines(s) {
    const rows = s.machines.map((m) => {
      const state = el("td"); state.appendChild(el("span", m.state, "state " + m.state));
      const tr = row([m.name, state, m.activity, fmt(m.share_requested, 2), fmt(m.share_reported, 2), fmt(m.share_achieved, 2),
                      jobIds(m.running), String(m.jobs_run), String(m.refusals),
                      m.clock_offset_s === null ? "-" : fmt(m.clock_offset_s * 1e3, 2), m.rtt_s === null ? "-" : fmt(m.rtt_s * 1e3, 2)]);
      tr.dataset.machine = m.name;
      return tr;
    });
    fill($("machines").tBodies[0], rows);
    $("machines-note").textContent = s.machines.length < s.machine_count ? `(the first ${s.machines.length} of ${s.machine_count})` : `(${s.machine_count})`;
    $("machine-states").textContent = Object.entries(s.machine_states).map(([k, v]) => `${v} ${k}`).join(", ");
  }

  function draw(s) {
    $("experiment").textContent = s.experiment || "mgst";
    $("policy").textContent = s.policy ? `policy ${s.policy}` : "";
    $("phase").textContent = s.phase;
    $("phase").className = "phase " + (s.phase || "").split(" ")[0];
    if (s.jobs === undefined) return;
    $("clock").textContent = s.phase === "waiting for pullers" ? `${s.registered} of ${s.machine_count} registered` :
      s.phase === "resuming" ? `at ${fmt(s.elapsed_s, 0)} s of ${fmt(s.duration_s, 0)} s: ${s.registered} of ${s.machine_count} registered` :
      `${fmt(s.elapsed_s, 0)} s of ${fmt(s.duration_s, 0)} s`;
    for (const k of ["generated", "done", "running", "queued"]) $("jobs-" + k).textContent = String(s.jobs[k]);
    $("jobs-discarded").textContent = s.jobs.discarded ? `${s.jobs.discarded} (${fmt(s.jobs.wasted_time, 1)} tu)` : "0";
    drawMachines(s);
    fill($("queues").tBodies[0], s.queues.map((q) => row([q.queue, String(q.waiting)])));
    drawResults(s);
    const events = s.events.slice().reverse().map((e) =>
      el("li", `${new Date(e.at * 1000).toLocaleTimeString()} ${e.machine}: ${e.kind}${e.detail ? " (" + e.detail + ")" : ""}`, "event " + e.kind));
    fill($("timeline"), events.length ? events : [el("li", "nothing yet")]);
    drawPlots(s);
  }

  async function poll() {
    try {
      const r = await fetch("/api/snapshot", {cache: "no-store", credentials: "same-origin"});
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      draw(await r.json());
      $("contact").textContent = "";
      $("contact").className = "contact";
    } catch (e) {
      $("contact").textContent = `no contact with the mapper (${e.message}): the run may be over`;
      $("contact").className = "contact lost";
    }
    setTimeout(poll, POLL_MS);
  }
  if (window.MGST_REPORT) {  // report.html: the run's end, given with the page; nothing to poll
    draw(window.MGST_REPORT);
    $("contact").textContent = window.MGST_REPORT.phase === "over" ? "report of the finished run" :
      "report of a run that did not end: its results so far";
  } else {
    poll();
  }
})();
