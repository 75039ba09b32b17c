// The tierstore status page: polls /_tierstore/status.json and renders it. No build step.
"use strict";

const REFRESH_MS = 5000;
const $ = (selector) => document.querySelector(selector);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else if (name === "style") node.style.cssText = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function watts(w) {
  if (w >= 1) return `${w.toFixed(1)} W`;
  if (w >= 1e-3) return `${(w * 1e3).toFixed(1)} mW`;
  return `${(w * 1e6).toFixed(1)} µW`;
}

function fillBar(fill, warn = true) {
  if (fill === null || fill === undefined) return el("span", { class: "label" }, "no capacity set");
  const pct = Math.min(100, fill * 100);
  const level = !warn ? "" : fill >= 0.9 ? " full" : fill >= 0.75 ? " high" : "";
  const bar = el("span", { class: "bar" + level },
    el("span", { style: `width:${pct.toFixed(2)}%` }));
  return el("span", {}, bar, el("span", { class: "label" }, `${pct < 0.1 && pct > 0 ? "<0.1" : pct.toFixed(1)}%`));
}

function heatColor(heat) {
  // 0 → cold blue, ≥ 20 (gpu-direct promotion) → hot red, on a log scale.
  const t = Math.max(0, Math.min(1, Math.log10(1 + heat) / Math.log10(21)));
  return `hsl(${Math.round(220 - 220 * t)}, 75%, 50%)`;
}

function heatCell(tier) {
  const hist = el("span", { class: "hist", title: "objects by heat (≤0.1 … >50)" });
  let previous = 0;
  const total = tier.objects || 1;
  for (const [le, cumulative] of Object.entries(tier.heat_histogram)) {
    const n = cumulative - previous;
    previous = cumulative;
    hist.append(el("i", { title: `heat ≤ ${le}: ${n}`, style: `height:${Math.max(1, (16 * n) / total)}px` }));
  }
  return el("td", {}, el("span", { class: "heat", style: `background:${heatColor(tier.heat_mean)}` }),
    tier.heat_mean.toFixed(2), hist);
}

function renderTiers(tiers) {
  const body = $("#tiers tbody");
  body.replaceChildren(...tiers.map((t) => el("tr", { "data-tier": t.name },
    el("td", {}, el("b", {}, t.name)),
    el("td", {}, t.media),
    el("td", { class: "num" }, t.objects.toLocaleString()),
    el("td", { class: "num" }, bytes(t.bytes)),
    el("td", {}, fillBar(t.fill), el("span", { class: "label" }, `of ${bytes(t.capacity_bytes)}`)),
    heatCell(t),
    el("td", { class: "num" }, watts(t.power_watts)),
    el("td", {}, t.k !== undefined ? `${t.k}+${t.m} by ${t.spread_level}` : t.backend),
    el("td", { class: "num" }, t.domains !== undefined
      ? el("span", { class: t.domains_online < t.domains ? "bad" : "ok" }, `${t.domains_online}/${t.domains}`)
      : "–"),
    el("td", { class: "num" }, t.pending_moves),
  )));
}

function renderDomains(domains) {
  const byTier = new Map();
  for (const d of domains) {
    if (!byTier.has(d.tier)) byTier.set(d.tier, []);
    byTier.get(d.tier).push(d);
  }
  const rows = [];
  for (const [tier, list] of byTier) {
    const offline = list.filter((d) => d.state !== "online").length;
    // Online but skipped by placement: full (below the free-space reserve) or failing writes.
    const unwell = list.filter((d) => d.state === "online" && d.health && d.health !== "normal");
    const notes = [offline ? `${offline} of ${list.length} offline` : `all ${list.length} online`,
      ...unwell.map((d) => `${d.id} ${d.health}`)];
    rows.push(el("div", { class: "tier-domains" }, el("b", {}, tier),
      ...list.map((d) => el("span", {
        class: "cell" + (d.state !== "online" ? " offline" : d.health && d.health !== "normal" ? ` ${d.health}` : ""),
        title: `${d.id} (${d.node}) ${d.state}${d.health && d.health !== "normal" ? `, ${d.health}: ${d.health_detail}` : ""}`
          + `: ${d.shards} shards, ${bytes(d.used_bytes)}`,
      })),
      el("span", { class: "label" + (offline || unwell.length ? " bad" : "") }, notes.join("; "))));
  }
  $("#domains").replaceChildren(...(rows.length ? rows : [el("span", { class: "label" }, "no erasure-coded tiers")]));
}

function renderNodes(all) {
  // Storage nodes (a cluster): one cell per node, red when its heartbeat stopped. A removed node
  // (`admin node remove`) is no longer part of the cluster, beating or not: not shown.
  const nodes = (all || []).filter((n) => n.state !== "removed");
  if (!nodes.length) {
    $("#nodes").replaceChildren();
    return;
  }
  const down = nodes.filter((n) => n.state !== "up");
  $("#nodes").replaceChildren(el("div", { class: "tier-domains" }, el("b", {}, "nodes"),
    ...nodes.map((n) => el("span", {
      class: "cell" + (n.state !== "up" ? " offline" : ""), "data-node": n.name,
      title: `${n.name} (${n.rack}, ${n.zone}) ${n.state}: heartbeat ${n.heartbeat_age}s ago`,
    })),
    el("span", { class: "label" + (down.length ? " bad" : "") },
      down.length ? `down: ${down.map((n) => n.name).join(", ")}` : `all ${nodes.length} up`)));
}

function dl(target, pairs) {
  target.replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

function renderHeal(heal) {
  const progress = heal.blobs_total ? heal.blobs_checked / heal.blobs_total : null;
  dl($("#heal"), [
    ["state", heal.running ? "scrubbing" : "idle"],
    ["progress", progress === null ? "–" : fillBar(progress, false)],
    ["checked", `${heal.blobs_checked} / ${heal.blobs_total} blobs (${bytes(heal.bytes_checked)})`],
    ["passes", heal.passes],
    ["shards healed", heal.shards_healed],
    ["corrupt blocks found", heal.corrupt_blocks_found],
    ["degraded objects", el("span", { class: heal.degraded_objects ? "bad" : "ok" }, heal.degraded_objects)],
    ["lost objects", el("span", { class: heal.lost_objects ? "bad" : "ok" }, heal.lost_objects)],
  ]);
}

function renderLifecycle(lc) {
  const m = lc.mover;
  dl($("#lifecycle"), [
    ["daemon", lc.enabled ? (lc.running ? "running a pass" : "enabled") : "disabled here"],
    ["passes", lc.passes],
    ["active moves", m.active],
    ["queued (total)", m.queued],
    ["skipped / failed", `${m.skipped} / ${m.failed}`],
    ["restores", m.restores],
  ]);
  $("#moves tbody").replaceChildren(...(m.moves.length
    ? m.moves.map((mv) => el("tr", {}, el("td", {}, mv.from), el("td", {}, mv.to),
      el("td", { class: "num" }, mv.count), el("td", { class: "num" }, bytes(mv.bytes))))
    : [el("tr", {}, el("td", { colspan: "4", class: "label" }, "no moves yet"))]));
}

function renderBuckets(buckets) {
  if (!buckets) {  // bucket names go only to a request signed by an administrator
    $("#buckets tbody").replaceChildren(el("tr", {}, el("td", { colspan: "5", class: "label" },
      "bucket names: administrators only (a signed or presigned request for status.json)")));
    return;
  }
  $("#buckets tbody").replaceChildren(...buckets.map((b) => el("tr", {},
    el("td", {}, b.name),
    el("td", { class: "num" }, b.objects.toLocaleString()),
    el("td", { class: "num" }, bytes(b.bytes)),
    el("td", {}, Object.entries(b.tiers).map(([t, n]) => `${t}: ${bytes(n)}`).join(", ")),
    el("td", { class: "num" }, watts(b.power_watts)))));
}

async function refresh() {
  try {
    const response = await fetch("/_tierstore/status.json", { cache: "no-store" });
    if (!response.ok) throw new Error(`${response.status}: ${(await response.text()).trim()}`);
    const status = await response.json();
    renderTiers(status.tiers);
    renderDomains(status.domains);
    renderNodes(status.nodes);
    renderHeal(status.heal);
    renderLifecycle(status.lifecycle);
    renderBuckets(status.buckets);
    const objects = status.tiers.reduce((n, t) => n + t.objects, 0);
    const power = status.tiers.reduce((n, t) => n + t.power_watts, 0);
    $("#summary").textContent = `${status.server.listen} · ${objects.toLocaleString()} objects · ` +
      `${status.bucket_count} buckets · ~${watts(power)} · up ${Math.round(status.server.uptime_seconds)} s`;
    $("#updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    $("#error").hidden = true;
    document.body.dataset.loaded = "true";
  } catch (err) {
    $("#error").textContent = `could not load status: ${err.message}`;
    $("#error").hidden = false;
  }
}

refresh();
setInterval(refresh, REFRESH_MS);
