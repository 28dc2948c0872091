// A batch's page, live: every two seconds its counts, cost, ETA and first page of runs are
// read again from /progress and shown, until the batch has ended. Text only (textContent).
"use strict";
(function () {
  const root = document.getElementById("batch");
  const url = root && root.dataset.progress;
  if (!url) return;
  const field = (name) => document.querySelector(`[data-batch="${name}"]`);
  const usd = (n) => `$${Number(n).toFixed(4)}`;
  const base = url.split("/batches/")[0];

  function cell(row, text) {
    const td = document.createElement("td");
    if (text instanceof Node) td.appendChild(text); else td.textContent = text;
    row.appendChild(td);
  }
  function badge(status) {
    const span = document.createElement("span");
    span.className = `badge status-${status}`;
    span.textContent = status;
    return span;
  }

  function show(found) {
    const batch = found.batch;
    const status = field("status");
    status.textContent = batch.status;
    status.className = `badge status-${batch.status}`;
    field("steps_done").textContent = String(batch.steps_done);
    field("cost").textContent = usd(batch.cost_so_far_usd) +
      (batch.budget_usd === null ? "" : ` of ${usd(batch.budget_usd)}`);
    field("eta").textContent = batch.eta_s === null ? "unknown yet" : `${Math.round(batch.eta_s)} s`;
    const counts = field("counts");
    counts.replaceChildren(...Object.keys(batch.runs_by_status).sort().map((name) => {
      const li = document.createElement("li");
      li.append(badge(name), ` ${batch.runs_by_status[name]}`);
      return li;
    }));
    field("runs").replaceChildren(...found.runs.map((run) => {
      const row = document.createElement("tr");
      row.dataset.runId = run.run_id;
      const link = document.createElement("a");
      link.href = `${base}/runs/${encodeURIComponent(run.run_id)}`;
      const code = document.createElement("code");
      code.textContent = run.run_id;
      link.appendChild(code);
      cell(row, link);
      cell(row, run.document_id);
      cell(row, badge(run.status));
      cell(row, run.current_step || "");
      cell(row, `${run.steps_done} / ${run.steps_total}`);
      cell(row, usd(run.cost_usd));
      cell(row, run.error || "");
      return row;
    }));
    return batch.status === "running";
  }

  async function poll() {
    try {
      const answer = await fetch(url, { credentials: "same-origin" });
      if (answer.ok && !show(await answer.json())) return;
    } catch (e) { /* the next round tries again */ }
    window.setTimeout(poll, 2000);
  }
  window.setTimeout(poll, 2000);
})();
