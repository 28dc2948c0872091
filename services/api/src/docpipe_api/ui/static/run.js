// A run's page, live: follows the run's event stream and updates the page in place; when
// the run ends the page is loaded again, with its final values. Text only (textContent):
// nothing from the stream is ever parsed as HTML.
"use strict";
(function () {
  const root = document.getElementById("run");
  const url = root && root.dataset.events;
  if (!url) return;
  const field = (name) => root.querySelector(`[data-run="${name}"]`);
  const usd = (n) => `$${Number(n).toFixed(4)}`;

  function show(run) {
    const status = field("status");
    status.textContent = run.status;
    status.className = `badge status-${run.status}`;
    field("current_step").textContent = run.current_step || "";
    field("steps_done").textContent = String(run.steps_done);
    field("cost").textContent = usd(run.cost_so_far_usd);
    for (const step of run.steps || []) {
      const row = document.querySelector(`tr[data-step="${CSS.escape(step.step)}"]`);
      if (!row) continue;
      const badge = row.querySelector('[data-step-field="status"]');
      badge.textContent = step.status;
      badge.className = `badge status-${step.status}`;
      row.querySelector('[data-step-field="attempt"]').textContent = String(step.attempt);
      row.querySelector('[data-step-field="model"]').textContent = step.model || "";
      row.querySelector('[data-step-field="cost"]').textContent =
        step.cost_usd === null ? "" : usd(step.cost_usd);
    }
  }

  function open() {
    const events = new EventSource(url);
    events.addEventListener("progress", (e) => show(JSON.parse(e.data)));
    events.addEventListener("end", (e) => {
      events.close();
      show(JSON.parse(e.data));
      field("notice").textContent = "The run has ended; loading its results.";
      window.location.reload();
    });
    events.addEventListener("reconnect", () => { events.close(); open(); });
    events.addEventListener("revoked", () => {
      events.close();
      field("notice").textContent = "Your API key was revoked: reload the page to sign in again.";
    });
  }
  open();
})();
