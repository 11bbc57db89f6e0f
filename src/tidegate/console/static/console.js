// Tidegate console: live updates without reloads (no build step, no dependencies).
// - #live[data-live]: its HTML is fetched again every 1.5 s (the server renders it).
// - canvas#chart[data-src]: offset totals polled every second; the chart plots the
//   produced (sum of end offsets) and consumed (sum of committed offsets) rates.
"use strict";

const LIVE_MS = 1500;
const CHART_MS = 1000;
const POINTS = 120;

function refreshLive() {
  const live = document.getElementById("live");
  if (!live || !live.dataset.live) return;
  const tick = async () => {
    if (document.hidden) { setTimeout(tick, LIVE_MS); return; }  // a background tab: idle
    try {
      const r = await fetch(live.dataset.live, {credentials: "same-origin"});
      if (r.ok) {
        live.innerHTML = await r.text();
        live.dataset.updated = String(Date.now());
      }
    } catch (e) { /* the next tick tries again */ }
    setTimeout(tick, LIVE_MS);
  };
  setTimeout(tick, LIVE_MS);
}

function drawChart(canvas, series) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, pad = 30;
  ctx.clearRect(0, 0, w, h);
  let max = 1;
  for (const s of series) for (const v of s.values) max = Math.max(max, v);
  ctx.strokeStyle = "#ccc";
  ctx.strokeRect(pad, 5, w - pad - 5, h - pad);
  ctx.fillStyle = "#555";
  ctx.font = "11px sans-serif";
  ctx.fillText(max.toFixed(0), 2, 14);
  ctx.fillText("0", 2, h - pad + 4);
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    s.values.forEach((v, i) => {
      const x = pad + (w - pad - 5) * i / (POINTS - 1);
      const y = 5 + (h - pad - 5) * (1 - v / max);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }
}

function throughput() {
  const canvas = document.getElementById("chart");
  if (!canvas) return;
  const produced = [], consumed = [];
  let last = null;
  const tick = async () => {
    try {
      const r = await fetch(canvas.dataset.src, {credentials: "same-origin"});
      if (r.ok) {
        const now = await r.json();
        const total = Object.values(now.produced).reduce((a, b) => a + b, 0);
        if (last) {
          const dt = Math.max(now.t - last.t, 0.001);
          produced.push(Math.max(total - last.total, 0) / dt);
          consumed.push(Math.max(now.consumed - last.consumed, 0) / dt);
          if (produced.length > POINTS) { produced.shift(); consumed.shift(); }
          drawChart(canvas, [{values: produced, color: "#1f77b4"},
                             {values: consumed, color: "#ff7f0e"}]);
          document.getElementById("rates").textContent =
            "produced " + produced[produced.length - 1].toFixed(1) + " rec/s (blue), " +
            "consumed " + consumed[consumed.length - 1].toFixed(1) + " rec/s (orange)";
        }
        last = {t: now.t, total: total, consumed: now.consumed};
      }
    } catch (e) { /* the next tick tries again */ }
    setTimeout(tick, CHART_MS);
  };
  tick();
}

document.addEventListener("DOMContentLoaded", () => { refreshLive(); throughput(); });
