// The run explorer's script: live parts of pages, Cancel / Resume, values under the pointer, zoom.
// Written for fluksio; no library. The pages work without it (apart from those four things).
"use strict";

(function () {
  const base = document.body.dataset.base || "";

  // -- live: fetch the page's changing part every few seconds and swap it in -----------------------

  let liveTimer = null;

  function liveBox() {
    return document.querySelector("#live[data-live]");
  }

  function keepState(from, into) {
    // What the user did in the part being replaced survives the swap: ticks, open details, zoomed charts.
    const picked = new Set(Array.from(from.querySelectorAll("input.pick:checked"), (box) => box.value));
    into.querySelectorAll("input.pick").forEach((box) => { box.checked = picked.has(box.value); });
    const open = new Set(Array.from(from.querySelectorAll("details[open][data-key]"), (d) => d.dataset.key));
    into.querySelectorAll("details[data-key]").forEach((d) => { if (open.has(d.dataset.key)) d.open = true; });
    from.querySelectorAll(".chart-box[data-zoomed]").forEach((zoomed) => {
      const url = zoomed.dataset.chartUrl;
      into.querySelectorAll(".chart-box").forEach((box) => {
        if (box.dataset.chartUrl === url) box.replaceWith(zoomed.cloneNode(true));
      });
    });
  }

  async function refresh() {
    const box = liveBox();
    if (!box) return;
    if (document.hidden) return schedule();
    box.dataset.busy = "1";
    try {
      const answer = await fetch(box.dataset.live, { credentials: "same-origin", headers: { Accept: "text/html" } });
      if (answer.ok) {
        const next = document.createElement("div");
        next.innerHTML = await answer.text();
        keepState(box, next);
        box.replaceChildren(...next.childNodes);
        box.dataset.refreshed = String(Number(box.dataset.refreshed || 0) + 1);
        updatePicked();
        if (box.querySelector(".live-state[data-final]")) return; // the run ended: nothing changes any more
      }
    } catch (error) {
      // The server may be restarting: try again at the next tick.
    } finally {
      delete box.dataset.busy;
    }
    schedule();
  }

  function schedule() {
    const box = liveBox();
    clearTimeout(liveTimer);
    if (box) liveTimer = setTimeout(refresh, Number(box.dataset.every || 2000));
  }

  // -- runs page: compare the ticked runs --------------------------------------------------------

  function updatePicked() {
    const button = document.getElementById("compare-selected");
    if (button) button.disabled = document.querySelectorAll("input.pick:checked").length < 2;
  }

  document.addEventListener("change", (event) => {
    if (event.target.matches("input.pick")) updatePicked();
    if (event.target.matches("select.autosubmit")) event.target.form.submit();
  });

  document.addEventListener("click", (event) => {
    const compare = event.target.closest("#compare-selected");
    if (compare) {
      const ids = Array.from(document.querySelectorAll("input.pick:checked"), (box) => box.value);
      window.location.href = base + "/compare?runs=" + encodeURIComponent(ids.join(","));
    }
    const action = event.target.closest("button[data-action]");
    if (action) act(action);
  });

  // -- Cancel / Resume ---------------------------------------------------------------------------

  function cookie(name) {
    const found = document.cookie.split("; ").find((part) => part.startsWith(name + "="));
    return found ? decodeURIComponent(found.slice(name.length + 1)) : "";
  }

  async function act(button) {
    if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
    const result = document.getElementById("action-result");
    button.disabled = true;
    try {
      const answer = await fetch(button.dataset.url, {
        method: "POST", credentials: "same-origin",
        headers: { "X-XSRFToken": cookie("_xsrf"), Accept: "application/json" },
      });
      const body = await answer.json();
      if (result) result.textContent = answer.ok ? button.dataset.action + ": " + body.status : body.message;
    } catch (error) {
      if (result) result.textContent = "the explorer did not answer: " + error;
    }
    button.disabled = false;
    const box = document.getElementById("live");
    if (box && !box.dataset.live) box.dataset.live = window.location.pathname + "?live=1";
    refresh(); // a resumed run is live again; a cancelled one shows its end
  }

  // -- charts: the values under the pointer, and zoom by dragging ----------------------------------

  const parsed = new WeakMap();

  function data(line) {
    if (!parsed.has(line)) {
      parsed.set(line, {
        steps: line.dataset.steps.split(" ").map(Number),
        values: line.dataset.values.split(" ").map(Number),
      });
    }
    return parsed.get(line);
  }

  function nearest(steps, step) {
    let low = 0;
    let high = steps.length - 1;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (steps[middle] < step) low = middle + 1; else high = middle;
    }
    if (low > 0 && Math.abs(steps[low - 1] - step) <= Math.abs(steps[low] - step)) low -= 1;
    return low;
  }

  function svgX(svg, event) {
    const point = svg.createSVGPoint();
    point.x = event.clientX;
    point.y = event.clientY;
    return point.matrixTransform(svg.getScreenCTM().inverse()).x;
  }

  function stepAt(svg, x) {
    const d = svg.dataset;
    const share = (x - Number(d.left)) / Number(d.plotWidth);
    return Number(d.x0) + Math.min(1, Math.max(0, share)) * (Number(d.x1) - Number(d.x0));
  }

  function guide(svg, x, cls) {
    let line = svg.querySelector("line." + cls);
    if (!line) {
      line = document.createElementNS("http://www.w3.org/2000/svg", cls === "guide" ? "line" : "rect");
      line.setAttribute("class", cls);
      svg.appendChild(line);
    }
    return line;
  }

  const tooltip = document.getElementById("tooltip");
  let drag = null;

  document.addEventListener("mousemove", (event) => {
    const svg = event.target.closest && event.target.closest("svg.chart[data-x0]");
    document.querySelectorAll("svg.chart line.guide").forEach((line) => { if (line.ownerSVGElement !== svg) line.remove(); });
    if (!svg) { tooltip.hidden = true; return; }
    const x = svgX(svg, event);
    const step = stepAt(svg, x);
    const rows = [];
    svg.querySelectorAll("g.series").forEach((series) => {
      const line = series.querySelector("polyline.line");
      const { steps, values } = data(line);
      const index = nearest(steps, step);
      rows.push([series.dataset.series, steps[index], values[index], series.getAttribute("class")]);
    });
    if (!rows.length) return;
    const line = guide(svg, x, "guide");
    line.setAttribute("x1", x); line.setAttribute("x2", x);
    line.setAttribute("y1", svg.dataset.top);
    line.setAttribute("y2", Number(svg.dataset.top) + Number(svg.dataset.plotHeight));
    tooltip.replaceChildren();
    rows.slice(0, 12).forEach(([name, s, v, cls]) => {
      const row = document.createElement("div");
      row.className = cls.replace("series", "tip");
      row.textContent = name + " · step " + s + ": " + Number(v.toPrecision(6));
      tooltip.appendChild(row);
    });
    tooltip.hidden = false;
    tooltip.style.left = event.pageX + 14 + "px";
    tooltip.style.top = event.pageY + 10 + "px";
    if (drag && drag.svg === svg) {
      const rect = guide(svg, 0, "selection");
      rect.setAttribute("x", Math.min(drag.x, x)); rect.setAttribute("width", Math.abs(x - drag.x));
      rect.setAttribute("y", svg.dataset.top); rect.setAttribute("height", svg.dataset.plotHeight);
    }
  });

  document.addEventListener("mousedown", (event) => {
    const svg = event.target.closest && event.target.closest("svg.chart[data-x0]");
    if (svg && event.button === 0) { drag = { svg, x: svgX(svg, event) }; event.preventDefault(); }
  });

  document.addEventListener("mouseup", (event) => {
    if (!drag) return;
    const { svg, x } = drag;
    drag = null;
    const end = svgX(svg, event);
    const selection = svg.querySelector("rect.selection");
    if (selection) selection.remove();
    if (Math.abs(end - x) < 6) return;
    const from = Math.floor(stepAt(svg, Math.min(x, end)));
    const to = Math.ceil(stepAt(svg, Math.max(x, end)));
    if (to > from) zoom(svg.closest(".chart-box"), from, to);
  });

  document.addEventListener("dblclick", (event) => {
    const box = event.target.closest && event.target.closest(".chart-box[data-zoomed]");
    if (box) zoom(box, null, null);
  });

  async function zoom(box, from, to) {
    if (!box || !box.dataset.chartUrl) return;
    const url = box.dataset.chartUrl + (from === null ? "" : "&start=" + from + "&end=" + to);
    const answer = await fetch(url, { credentials: "same-origin" });
    if (!answer.ok) return;
    const old = box.querySelector("svg.chart");
    const holder = document.createElement("div");
    holder.innerHTML = await answer.text();
    if (old && holder.firstElementChild) old.replaceWith(holder.firstElementChild);
    if (from === null) delete box.dataset.zoomed; else box.dataset.zoomed = from + "-" + to;
  }

  updatePicked();
  schedule();
})();
