// agentcir web app: plain DOM, every text set with textContent (nothing from the server is parsed as HTML).
"use strict";

const $ = (id) => document.getElementById(id);

function el(tag, opts = {}, children = []) {
  const e = document.createElement(tag);
  if (opts.cls) e.className = opts.cls;
  if (opts.text !== undefined && opts.text !== null) e.textContent = String(opts.text);
  for (const [k, v] of Object.entries(opts.attrs || {})) e.setAttribute(k, String(v));
  for (const c of children) if (c) e.appendChild(c);
  return e;
}

const state = { info: null, ref: null, crumbs: [], crumb: -1, busy: false, views: {} };

// an error said in words: the server's one-line detail, or what the HTTP status means
const STATUS_WORDS = { 401: "This server needs its access token: open the page once as /?token=… (the token you were given).",
  404: "Not found.", 413: "That is too large for this server.", 429: "The server is busy; try again in a moment.",
  500: "Something went wrong on the server; its log has the details.", 502: "The server cannot be reached.",
  503: "The server is starting or busy; try again in a moment.", 504: "The server took too long to answer." };

async function errorText(r) {
  try { const d = await r.json(); if (d && typeof d.detail === "string" && d.detail) return d.detail; } catch (_) { /* not JSON */ }
  return STATUS_WORDS[r.status] || `The server could not answer (HTTP ${r.status}).`;
}

function plainError(e) {
  return e instanceof TypeError ? "The server cannot be reached: is agentcir serve still running?" : e.message;
}

async function api(path, opts = {}) {
  let r;
  try { r = await fetch(path, Object.assign({ credentials: "same-origin" }, opts)); } catch (e) { throw new Error(plainError(e)); }
  if (!r.ok) throw new Error(await errorText(r));
  try { return await r.json(); } catch (_) { throw new Error("The server's answer could not be read."); }
}

// -- progress -------------------------------------------------------------------------------
function progressText(p) {
  let s = p.stage ? `stage ${p.stage}` : "starting";
  if (p.total) s += ` ${p.done} / ${p.total}`;
  if (p.stages && p.stages.length > 1) s += ` (${p.stages.length} stages so far: ${p.stages.join(" → ")})`;
  return `${s} · ${p.elapsed_s.toFixed(1)} s`;
}

function poll(target) {
  let stop = false;
  (async function loop() {
    while (!stop) {
      try {
        const p = await api("/api/progress");
        if (!stop && p.busy) target.textContent = (p.preparing ? "waiting for the start-up preparation: " : "searching: ") + progressText(p);
      } catch (_) { /* the search's own reply reports errors */ }
      await new Promise((res) => setTimeout(res, 250));
    }
  })();
  return () => { stop = true; };
}

async function watchPreparation() {
  const banner = $("prepare");
  for (;;) {
    let p;
    try { p = await api("/api/progress"); } catch (_) { return; }
    if (!p.preparing) {
      if (p.error && !p.prepared) { banner.hidden = false; banner.textContent = p.error; }
      else if (!banner.hidden) { banner.textContent = "Gallery captions ready."; setTimeout(() => { banner.hidden = true; }, 1500); }
      return;
    }
    banner.hidden = false;
    banner.textContent = p.stage === "gallery_captions" && p.total
      ? `Preparing the gallery captions for this method (once per gallery): ${p.done} / ${p.total} · ${p.elapsed_s.toFixed(0)} s`
      : `Loading the models (once per start): ${p.stage || "starting"} · ${p.elapsed_s.toFixed(0)} s`;
    await new Promise((res) => setTimeout(res, 500));
  }
}

// -- info and tabs ---------------------------------------------------------------------------
async function loadInfo() {
  try {
    const i = await api("/api/info");
    state.info = i;
    $("info").textContent = `Gallery ${i.gallery} · ${i.size} images · method ${i.method} · encoder ${i.encoder}` +
      (i.with_metadata ? ` · ${i.with_metadata} with a date or place` : "");
    for (const v of Object.values(state.views)) v.configure(i);
    if (!i.questions) $("tab-ask").hidden = true;
    if (i.answers_set) { $("tab-search").hidden = true; showTab("panel-ask"); }
  } catch (e) { $("info").textContent = `cannot read the gallery: ${e.message}`; }
  watchPreparation();
  watchWarmup();
}

// The start-up work's progress from GET /api/status (agentcir/serve/routes/status.py): the
// warm-up step by step ({"warm_up": {"state", "elapsed_s", "ready_for", "steps": [{"name", "state"}]}})
// and the thumbnails made in the background ({"thumbnails": {"state", "done", "total"}}). The banner
// says what is loading and what can already be searched; it hides when both are done.
const STATUS_ROUTE = "/api/status";
function warmupText(st) {
  const w = st.warm_up || {}, t = st.thumbnails || {};
  const parts = [];
  if (w.state === "running" || w.state === "idle") {
    const steps = w.steps || [];
    const now = steps.find((s) => s.state === "running") || steps.find((s) => s.state !== "done");
    const done = steps.filter((s) => s.state === "done").length;
    parts.push(`Getting ready: ${now ? now.name : "starting"} (${done} / ${steps.length || "?"} steps` +
      (w.elapsed_s !== undefined ? `, ${Number(w.elapsed_s).toFixed(0)} s` : "") + ")");
    if ((w.ready_for || []).length) parts.push(`ready for ${w.ready_for.join(", ")} searches`);
  } else if (w.state === "failed") {
    parts.push("Some models could not be loaded ahead of time; a search loads them when it runs");
  }
  if (t.state === "running" && t.total) parts.push(`thumbnails ${t.done} / ${t.total}`);
  return parts.join(" · ");
}
async function watchWarmup() {
  const banner = $("warmup");
  for (;;) {
    let st;
    try {
      const r = await fetch(STATUS_ROUTE, { credentials: "same-origin" });
      if (!r.ok) { banner.hidden = true; return; }
      st = await r.json();
    } catch (_) { banner.hidden = true; return; }
    const text = warmupText(st);
    const w = (st.warm_up || {}).state, t = (st.thumbnails || {}).state;
    const settled = ["done", "off", "failed"].includes(w) && ["done", "off"].includes(t);
    banner.hidden = !text;
    banner.textContent = text;
    if (settled) return;
    await new Promise((res) => setTimeout(res, 1000));
  }
}

function showTab(id) {
  for (const b of document.querySelectorAll("#tabs [role=tab]")) {
    const on = b.dataset.panel === id;
    b.setAttribute("aria-selected", on ? "true" : "false");
    $(b.dataset.panel).hidden = !on;
  }
}

// -- the reference -----------------------------------------------------------------------------
function setReference(ref) {
  if (state.ref && state.ref.objectUrl) URL.revokeObjectURL(state.ref.objectUrl);
  state.ref = ref;
  const img = $("ref-img");
  if (!ref) {
    img.hidden = true; img.removeAttribute("src"); $("ref-clear").hidden = true; $("ref-hint").hidden = false;
    $("file").value = "";
    return;
  }
  img.src = ref.url; img.hidden = false; $("ref-clear").hidden = false; $("ref-hint").hidden = true;
  img.alt = `reference: ${ref.label}`;
}

function fileReference(file) {
  if (!file) return;
  const objectUrl = URL.createObjectURL(file);
  setReference({ kind: "file", file, url: objectUrl, objectUrl, label: file.name || "pasted image" });
  // a format the browser cannot show (HEIC, TIFF) falls back to a placeholder until the server's thumbnail comes
  $("ref-img").onerror = () => { $("ref-img").onerror = null; $("ref-img").alt = `reference: ${file.name} (shown after the search)`; };
}

function rowReference(hit) {
  setReference({ kind: "row", row: hit.row, url: `/thumb/${hit.row}?size=256`, label: hit.id });
}

// -- results -------------------------------------------------------------------------------
function metaLine(m) {
  if (!m) return [];
  const out = [];
  if (m.taken_time) out.push(["date", String(m.taken_time).replace("T", " ")]);
  const place = [m.city, m.region, m.country].filter(Boolean);
  if (place.length) out.push(["place", place.join(", ")]);
  if (m.capturedevice) out.push(["camera", m.capturedevice]);
  if (m.people && m.people.length) out.push(["people", m.people.join(", ")]);
  if (m.album) out.push(["album", m.album]);
  return out;
}

// a thumbnail with a placeholder while the server makes it, and words when it cannot
function thumbImg(row, alt, size = 256) {
  const img = el("img", { cls: "loading", attrs: { src: `/thumb/${row}?size=${size}`, loading: "lazy", alt } });
  img.addEventListener("load", () => img.classList.remove("loading"));
  img.addEventListener("error", () => { img.classList.remove("loading"); img.classList.add("broken"); img.alt = `${alt} (no preview: the file cannot be read)`; });
  return img;
}

function hitCard(h, view, copyOf) {
  const img = thumbImg(h.row, h.id);
  img.classList.add("clickable");
  img.title = "open the full photo";
  img.addEventListener("click", () => openViewer(view, h));
  const cap = el("figcaption", {}, [
    el("span", { cls: "rank", text: `${h.rank}.` }),
    el("span", { cls: "id", text: h.id }),
    el("span", { cls: "score", text: h.score === null || h.score === undefined ? "in the answer" : `score ${h.score.toFixed(3)}` }),
    h.verified ? el("span", { cls: "badge", text: "verified", attrs: { title: "the verifier accepted this candidate" } }) : null,
    copyOf ? el("span", { cls: "copy-of", text: `copy of ${copyOf.rank}.` }) : null,
  ]);
  const meta = metaLine(h.meta);
  const dl = meta.length ? el("dl", { cls: "meta" }, meta.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })])) : null;
  const fig = el("figure", { cls: copyOf ? "hit copy" : "hit", attrs: { "data-id": h.id, "data-row": h.row } }, [img, cap, dl]);
  const actions = el("div", { cls: "actions" });
  if (view.onPick) {
    const b = el("button", { cls: "pick small", text: view.pickLabel, attrs: { type: "button" } });
    b.addEventListener("click", () => view.onPick(h));
    actions.appendChild(b);
  }
  if (view.onMore) {
    const m = el("button", { cls: "more small", text: "more like this", attrs: { type: "button", title: "photos similar to this one" } });
    m.addEventListener("click", () => view.onMore(h));
    actions.appendChild(m);
  }
  fig.appendChild(actions);
  return fig;
}

// A result set shown page by page, copies of one picture grouped behind their best-ranked hit,
// with export. `name` prefixes its elements: #NAME (the grid), #NAME-tools, #NAME-pager.
class ResultView {
  constructor(name, opts) {
    Object.assign(this, opts);
    this.name = name;
    this.grid = $(name); this.tools = $(`${name}-tools`); this.pager = $(`${name}-pager`);
    this.hits = []; this.groups = []; this.page = 0; this.perPage = 24; this.open = new Set(); this.query = {};
    this.buildTools();
  }

  buildTools() {
    const id = (s) => `${this.name}-${s}`;
    this.dupOn = el("input", { attrs: { type: "checkbox", id: id("dup-on"), checked: "" } });
    this.dupThr = el("input", { attrs: { type: "number", id: id("dup-threshold"), min: "0.5", max: "1", step: "0.005", value: "0.97",
      title: "two results are copies of one picture when their image similarity is at least this (and their perceptual hashes agree)" } });
    this.per = el("select", { attrs: { id: id("per-page"), "aria-label": "results per page" } },
      [12, 24, 48, 96].map((n) => el("option", { text: n, attrs: n === 24 ? { value: n, selected: "" } : { value: n } })));
    this.dupOn.addEventListener("change", () => this.regroup());
    this.dupThr.addEventListener("change", () => this.regroup());
    this.per.addEventListener("change", () => { this.perPage = Number(this.per.value); this.page = 0; this.render(); });
    const exp = ["csv", "json", "zip"].map((f) => {
      const b = el("button", { cls: "small export", text: f.toUpperCase(), attrs: { type: "button", "data-format": f, id: id(`export-${f}`),
        title: f === "zip" ? "the photos, with a CSV and a JSON of their paths and metadata" : `paths and metadata as ${f.toUpperCase()}` } });
      b.addEventListener("click", () => this.exportAs(f, b));
      return b;
    });
    this.albumName = el("input", { attrs: { type: "text", id: id("album-name"), placeholder: "album name", maxlength: "100" } });
    const albumGo = el("button", { cls: "small", text: "copy into album", attrs: { type: "button", id: id("album-go") } });
    albumGo.addEventListener("click", () => this.copyAlbum(albumGo));
    this.albumBox = el("span", { cls: "album", attrs: { hidden: "" } }, [this.albumName, albumGo]);
    this.msg = el("span", { cls: "tool-msg", attrs: { id: id("tool-msg"), role: "status" } });
    this.tools.replaceChildren(
      el("label", {}, [this.dupOn, el("span", { text: " group copies, similarity ≥ " }), this.dupThr]),
      el("label", {}, [el("span", { text: "per page " }), this.per]),
      el("span", { cls: "exports" }, [el("span", { text: "export " }), ...exp]), this.albumBox, this.msg);
  }

  configure(info) {
    if (info.dup_threshold) this.dupThr.value = String(info.dup_threshold);
    else if (info.dup_threshold === 0) this.dupOn.checked = false;
    this.albumBox.hidden = !info.album;
  }

  threshold() { return this.dupOn.checked ? Number(this.dupThr.value) : 0; }

  show(data, query) {
    this.hits = data.hits; this.query = query || {};
    this.groups = data.groups && data.groups.length ? data.groups : data.hits.map((_, i) => [i]);
    this.page = 0; this.open = new Set(); this.msg.textContent = "";
    this.render();
  }

  async regroup() {
    if (!this.hits.length) return;
    const threshold = this.threshold();
    this.dupThr.disabled = !this.dupOn.checked;
    try {
      const g = await api("/api/groups", { method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ rows: this.hits.map((h) => h.row), threshold }) });
      this.groups = g.groups; this.page = 0; this.open = new Set(); this.render();
    } catch (e) { this.msg.textContent = e.message; }
  }

  pages() { return Math.max(1, Math.ceil(this.groups.length / this.perPage)); }

  render() {
    const hits = this.hits;
    this.tools.hidden = !hits.length;
    const shown = this.groups.slice(this.page * this.perPage, (this.page + 1) * this.perPage);
    const cards = [];
    shown.forEach((g, gi) => {
      const lead = hits[g[0]];
      const card = hitCard(lead, this);
      if (g.length > 1) {
        const key = lead.row;
        const b = el("button", { cls: "dups small", attrs: { type: "button", "aria-expanded": this.open.has(key) ? "true" : "false",
          title: "the same picture in other files" } });
        const label = () => { b.textContent = this.open.has(key) ? `hide ${g.length - 1} cop${g.length > 2 ? "ies" : "y"}` : `+${g.length - 1} cop${g.length > 2 ? "ies" : "y"}`; };
        label();
        const copies = g.slice(1).map((i) => hitCard(hits[i], this, lead));
        for (const c of copies) c.hidden = !this.open.has(key);
        b.addEventListener("click", () => {
          if (this.open.has(key)) this.open.delete(key); else this.open.add(key);
          for (const c of copies) c.hidden = !this.open.has(key);
          b.setAttribute("aria-expanded", this.open.has(key) ? "true" : "false");
          label();
        });
        card.querySelector(".actions").appendChild(b);
        card.classList.add("grouped");
        cards.push(card, ...copies);
      } else cards.push(card);
      card.dataset.group = String(this.page * this.perPage + gi);
    });
    this.grid.replaceChildren(...cards);
    if (!hits.length) this.grid.appendChild(el("p", { cls: "muted", text: "No results." }));
    this.renderPager();
  }

  renderPager() {
    const n = this.pages();
    this.pager.replaceChildren();
    this.pager.hidden = n <= 1;
    if (n <= 1) return;
    const go = (p) => { this.page = p; this.render(); this.grid.scrollIntoView({ block: "start" }); };
    const btn = (text, p, attrs = {}) => {
      const b = el("button", { cls: "small", text, attrs: Object.assign({ type: "button" }, attrs) });
      if (p === null) b.disabled = true; else b.addEventListener("click", () => go(p));
      return b;
    };
    const items = [btn("‹ previous", this.page > 0 ? this.page - 1 : null, { "aria-label": "previous page", cls: "prev" })];
    for (let p = 0; p < n; p++) {
      if (n > 9 && p > 1 && p < n - 2 && Math.abs(p - this.page) > 2) { if (items[items.length - 1].textContent !== "…") items.push(el("span", { text: "…" })); continue; }
      const b = btn(String(p + 1), p === this.page ? null : p, { "data-page": p + 1, "aria-label": `page ${p + 1}` });
      if (p === this.page) b.setAttribute("aria-current", "page");
      items.push(b);
    }
    items.push(btn("next ›", this.page < n - 1 ? this.page + 1 : null, { "aria-label": "next page" }));
    const nGroups = this.groups.length, nHits = this.hits.length;
    items.push(el("span", { cls: "muted", text: `page ${this.page + 1} of ${n} · ${nGroups} picture${nGroups === 1 ? "" : "s"}` +
      (nGroups !== nHits ? ` (${nHits} results)` : "") }));
    this.pager.replaceChildren(...items);
  }

  shownHits() {  // every hit, with the group it is shown in
    const group = new Map();
    this.groups.forEach((g, gi) => g.forEach((i) => group.set(i, gi)));
    return this.hits.map((h, i) => ({ row: h.row, rank: h.rank, score: h.score, verified: !!h.verified, group: group.get(i) }));
  }

  async exportAs(format, button) {
    if (!this.hits.length) return;
    button.disabled = true; this.msg.textContent = `preparing the ${format.toUpperCase()}…`;
    try {
      const r = await fetch("/api/export", { method: "POST", credentials: "same-origin", headers: { "content-type": "application/json" },
        body: JSON.stringify({ format, hits: this.shownHits(), query: this.query }) });
      if (!r.ok) throw new Error(await errorText(r));
      const blob = await r.blob();
      const url = URL.createObjectURL(blob);
      const a = el("a", { attrs: { href: url, download: `agentcir-results.${format}` } });
      document.body.appendChild(a); a.click(); a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
      this.msg.textContent = `${format.toUpperCase()} of ${this.hits.length} results saved.`;
    } catch (e) { this.msg.textContent = plainError(e); }
    finally { button.disabled = false; }
  }

  async copyAlbum(button) {
    const name = this.albumName.value.trim();
    if (!name) { this.msg.textContent = "Give the album a name."; return; }
    button.disabled = true;
    try {
      const r = await api("/api/album", { method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ name, hits: this.shownHits() }) });
      this.msg.textContent = `${r.copied.length} photo(s) copied into ${r.folder}` + (r.already_there.length ? `, ${r.already_there.length} already there` : "") +
        (r.missing.length ? `; ${r.missing.length} missing` : "") + ".";
    } catch (e) { this.msg.textContent = e.message; }
    finally { button.disabled = false; }
  }
}

// -- the full photo --------------------------------------------------------------------------------
function openViewer(view, h) {
  const d = $("viewer");
  const list = view.hits;
  let i = list.indexOf(h);
  const show = () => {
    const cur = list[i];
    const img = $("viewer-img");
    img.classList.add("loading"); img.alt = cur.id;
    img.onload = () => img.classList.remove("loading");
    img.onerror = () => { img.classList.remove("loading"); img.alt = `${cur.id}: this photo cannot be shown (its file is missing or unreadable)`; };
    img.src = `/view/${cur.row}`;
    $("viewer-title").textContent = `${cur.rank}. ${cur.id}`;
    $("viewer-path").textContent = cur.path;
    const meta = metaLine(cur.meta);
    $("viewer-meta").replaceChildren(...meta.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
    $("viewer-original").href = `/image/${cur.row}`;
    $("viewer-download").href = `/image/${cur.row}?download=true`;
    $("viewer-prev").disabled = i <= 0; $("viewer-next").disabled = i >= list.length - 1;
  };
  $("viewer-prev").onclick = () => { if (i > 0) { i--; show(); } };
  $("viewer-next").onclick = () => { if (i < list.length - 1) { i++; show(); } };
  d.onkeydown = (e) => { if (e.key === "ArrowLeft") $("viewer-prev").click(); if (e.key === "ArrowRight") $("viewer-next").click(); };
  show();
  if (!d.open) d.showModal();
}

// -- trace -----------------------------------------------------------------------------------
const LABELS = {
  reference_caption: "Reference caption", initial_target: "First target description", target_caption: "Target description",
  modifications: "Modifications", keyframe_captions: "Keyframe captions", proxies: "Textual proxies",
  visual_proxy: "Visual proxy", objects: "Objects seen", kept_objects: "Kept objects", removed_objects: "Removed objects",
  descriptions: "Target descriptions", rewritten: "Rewritten description", questions: "Questions", uncertainty: "Uncertainty",
  verdicts: "Verdicts", accepted: "Accepted rank", reasoning: "Reasoning", subset_chain: "Subset chain",
  // AutoCIR rounds and ImageScope stages
  description: "Target description", round: "Round", verdict: "Corrector's verdict", suggestions: "Suggestions",
  stopped: "Stopped (good retrieval)", checked_ids: "Candidates checked", step1: "Atomic instructions",
  step2: "Target descriptions", values: "Questions answered as expected, per candidate", reply: "Model reply",
};

function valueNode(v) {
  if (v === null || v === undefined || v === "") return el("span", { cls: "muted", text: "—" });
  if (Array.isArray(v) && v.every((x) => typeof x !== "object" || x === null)) {
    if (!v.length) return el("span", { cls: "muted", text: "none" });
    return el("ul", { cls: "chips" }, v.map((x) => el("li", { text: String(x) })));
  }
  if (typeof v === "object") return el("pre", { text: JSON.stringify(v, null, 1).slice(0, 3000) });
  if (typeof v === "number") return el("span", { text: Number.isInteger(v) ? v : v.toFixed(4) });
  return el("span", { text: String(v) });
}

// a looped method's rounds (trace.search.loop, the shape of agentcir/framework/loops.py)
function renderLoop(steps, method) {
  const items = steps.map((st) => {
    const head = st.round !== null && st.round !== undefined ? `round ${st.round}` : st.stage;
    const kids = [el("div", { cls: "call" }, [el("span", { cls: "n", text: head }), st.round !== null && st.round !== undefined && st.stage !== `round${st.round}` ? el("span", { cls: "muted", text: st.stage }) : null])];
    const line = (label, node) => kids.push(el("div", { cls: "loop-line" }, [el("span", { cls: "muted", text: `${label}: ` }), node]));
    if (st.checked !== null && st.checked !== undefined && !st.verdicts) line("checked", el("span", { text: `${st.checked} candidates` }));
    if (st.questions && st.questions.length) line("questions", el("ul", { cls: "chips" }, st.questions.map((q) => el("li", { text: q }))));
    if (st.satisfied && st.satisfied.length) line("statements held, per candidate", el("span", { text: st.satisfied.join(" ") }));
    if (st.verdict) line("verdict", el("q", { text: st.verdict }));
    if (st.stopped) kids.push(el("div", { cls: "kept", text: "stopped: the corrector judged the retrieval good" }));
    else if (st.suggestions) line("suggestions", el("q", { text: st.suggestions }));
    if (st.verdicts) line("verdicts", el("span", { text: `${st.verdicts.length} inspected, ` + (st.accepted_rank ? `accepted rank ${st.accepted_rank}` : "none accepted") }));
    if (st.description) line("searched with", el("q", { text: st.description }));
    return el("li", { cls: st.stopped ? "chain" : "" }, kids);
  });
  return el("section", { cls: "stage loop" }, [el("h3", { text: `the loop of ${method}: rounds, suggestions and verdicts` }),
    el("ol", { cls: "timeline", attrs: { id: "loop" } }, items)]);
}

function renderTrace(trace) {
  const box = $("trace");
  box.replaceChildren();
  const s = trace.search || {};
  if (s.loop && s.loop.length) box.appendChild(renderLoop(s.loop, s.method));
  for (const [stage, rec] of Object.entries(trace)) {
    if (stage === "search" || !rec || typeof rec !== "object" || !Object.keys(rec).length) continue;
    const rows = [];
    for (const [k, v] of Object.entries(rec)) {
      if ((k === "verdicts" || k === "accepted") && s.verification && s.verification.length) continue;  // shown with the candidates below
      let node = valueNode(v);
      if (k === "visual_proxy" && v && s.visual_proxy) {
        node = el("img", { cls: "proxy", attrs: { src: `${s.visual_proxy.url}${s.visual_proxy.url.includes("?") ? "&" : "?"}size=128`, alt: "visual proxy" } });
      }
      rows.push(el("dt", { text: LABELS[k] || k.replace(/_/g, " ") }), el("dd", {}, [node]));
    }
    box.appendChild(el("section", { cls: "stage" }, [el("h3", { text: stage }), el("dl", {}, rows)]));
  }
  if (s.verification && s.verification.length) {
    const items = s.verification.map((v) => el("li", { cls: v.accepted ? "yes" : "no" }, [
      el("img", { attrs: { src: `/thumb/${v.row}?size=128`, alt: v.id } }),
      el("span", { text: `rank ${v.rank}: ${v.id} — ${v.accepted ? "accepted" : "rejected"}` })]));
    box.appendChild(el("section", { cls: "stage" }, [el("h3", { text: "verification verdicts" }), el("ul", { cls: "verdicts" }, items)]));
  }
  const stats = Object.entries(s.stages || {});
  if (stats.length) {
    const head = el("tr", {}, ["stage", "model calls", "cache hits", "wall s"].map((t) => el("th", { text: t })));
    const body = stats.map(([name, st]) => el("tr", {}, [name, st.calls, st.cache_hits, st.wall_s.toFixed(3)].map((t) => el("td", { text: t }))));
    box.appendChild(el("section", { cls: "stage" }, [el("h3", { text: "model calls and cache hits" }), el("table", {}, [head, ...body])]));
  }
  $("trace-box").hidden = !box.children.length;
}

function modeNote(s) {
  if (s.note) return s.note;
  return { composed: "Composed search: the reference image changed as the text says.", image: "Image search: similar to the reference.",
    text: `Text search with ${s.method}.`, answer: "Answer set of the question." }[s.mode] || "";
}

// -- breadcrumb -----------------------------------------------------------------------------
// each step keeps its own results: clicking it shows them again (and its reference and text)
function renderCrumbs() {
  const ol = $("crumbs");
  ol.replaceChildren(...state.crumbs.map((c, i) => {
    const li = el("li", { attrs: { "data-step": i + 1, tabindex: "0" } }, [
      c.thumb ? el("img", { attrs: { src: c.thumb, alt: c.refLabel || "reference" } }) : null,
      el("span", { text: `${i + 1}. ${c.refLabel ? c.refLabel : "no reference"}${c.text ? ` + “${c.text}”` : ""}` })]);
    if (i === state.crumb) li.setAttribute("aria-current", "step");
    const restore = () => restoreCrumb(i);
    li.addEventListener("click", restore);
    li.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); restore(); } });
    li.title = "show this step's results again";
    return li;
  }));
}

function restoreCrumb(i) {
  if (state.busy) return;
  const c = state.crumbs[i];
  state.crumb = i;
  if (c.ref) setReference(Object.assign({}, c.ref)); else setReference(null);
  $("text").value = c.text;
  $("error").textContent = "";
  showSearchResult(c.data, c.text);
  $("status").textContent = `step ${i + 1}: ${c.data.hits.length} results (${c.data.trace.search.method})`;
  renderCrumbs();
}

function showSearchResult(data, text) {
  const s = data.trace.search;
  const note = $("note"); note.textContent = modeNote(s); note.hidden = !note.textContent;
  state.views.hits.show(data, { text, reference: s.reference ? (s.reference.gallery_id || s.reference.path || "") : "", method: s.method });
  renderTrace(data.trace);
}

// -- submitting ------------------------------------------------------------------------------
// POST the form to `path` with the button disabled and the progress polled into `status`; `show(data)` renders
async function submit(path, fd, button, status, err, busyText, show) {
  state.busy = true; button.disabled = true;
  status.textContent = busyText;
  const stop = poll(status);
  try {
    const data = await api(path, { method: "POST", body: fd });
    stop();
    show(data);
  } catch (e) {
    stop(); status.textContent = ""; err.textContent = plainError(e);
  } finally {
    state.busy = false; button.disabled = false;
  }
}

// -- search ----------------------------------------------------------------------------------
async function runSearch() {
  if (state.busy) return;
  const text = $("text").value.trim();
  const err = $("error"), status = $("status");
  err.textContent = "";
  if (!state.ref && !text) { err.textContent = "Give a reference image, a text, or both."; return; }
  const fd = new FormData();
  if (state.ref && state.ref.kind === "file") fd.append("image", state.ref.file, state.ref.file.name || "pasted.png");
  if (state.ref && state.ref.kind === "row") fd.append("reference_row", state.ref.row);
  fd.append("text", text);
  fd.append("k", $("k").value || "20");
  fd.append("dup_threshold", String(state.views.hits.threshold()));
  await submit("/api/search", fd, $("go"), status, err, "searching…", (data) => {
    const s = data.trace.search;
    status.textContent = `${data.hits.length} results in ${s.wall_s.toFixed(2)} s (${s.method})`;
    if (state.ref && state.ref.kind === "file" && s.reference && s.reference.upload) {
      const url = `/upload/${s.reference.upload}/thumb?size=256`;  // the server's thumbnail: shows HEIC/TIFF too
      state.ref.url = url; $("ref-img").src = url;
    }
    // a search made from an earlier step replaces the steps after it
    state.crumbs = state.crumbs.slice(0, state.crumb + 1);
    state.crumbs.push({ ref: state.ref ? Object.assign({}, state.ref) : null, thumb: state.ref ? state.ref.url : null,
      refLabel: state.ref ? state.ref.label : "", text, data });
    state.crumb = state.crumbs.length - 1;
    renderCrumbs();
    showSearchResult(data, text);
  });
}

// "more like this": the photo as the reference, no text (image retrieval with any method)
function moreLikeThis(h) {
  if (state.busy) return;
  $("tab-search").hidden = false; showTab("panel-search");
  rowReference(h); $("text").value = "";
  runSearch();
}

// -- history questions -------------------------------------------------------------------------
function summarize(result) {
  if (!result || typeof result !== "object") return result === undefined || result === null ? "" : String(result);
  const parts = [];
  for (const [k, v] of Object.entries(result)) {
    if (v === "" || v === null || k === "saved_as") continue;
    if (Array.isArray(v)) parts.push(`${k}: ${v.length}`);
    else if (v !== null && typeof v === "object") parts.push(`${k}: {…}`);
    else parts.push(`${k}: ${String(v).slice(0, 80)}`);
    if (parts.length >= 6) break;
  }
  return parts.join(" · ");
}

function renderSteps(rec) {
  const sizes = Object.fromEntries((rec.subsets || []).map((s) => [s.name, s.size]));
  const ol = $("steps");
  const items = (rec.steps || []).map((st, i) => {
    const args = Object.entries(st.arguments || {}).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(", ");
    const kids = [el("div", { cls: "call" }, [el("span", { cls: "n", text: `${i + 1}` }), el("code", { text: `${st.tool}(${args})` })])];
    if (st.saved) kids.push(el("div", { cls: "kept", text: `kept ${sizes[st.saved] !== undefined ? sizes[st.saved] : "?"} photos as subset “${st.saved}”` }));
    if (st.error) kids.push(el("div", { cls: "error", text: `error: ${st.error}` }));
    else if (st.result) kids.push(el("div", { cls: "muted", text: summarize(st.result) }));
    return el("li", {}, kids);
  });
  if (rec.subset_chain && rec.subset_chain.length) items.push(el("li", { cls: "chain" }, [el("strong", { text: "answer from " }), el("span", { text: rec.subset_chain.join(" → ") })]));
  ol.replaceChildren(...items);
  $("steps-box").hidden = !items.length;
}

async function runAsk() {
  if (state.busy) return;
  const q = $("question").value.trim();
  const err = $("ask-error"), status = $("ask-status");
  err.textContent = "";
  if (!q) { err.textContent = "Type a question."; return; }
  const fd = new FormData();
  fd.append("question", q);
  await submit("/api/ask", fd, $("ask-go"), status, err, "thinking…", (data) => {
    const s = data.trace.search;
    const rec = data.trace.seek || {};
    status.textContent = `${data.hits.length} photo(s) in ${s.wall_s.toFixed(2)} s (${s.method})`;
    const line = $("answer-line");
    line.textContent = `Answer: ${data.hits.length} photo(s).` + (rec.reasoning ? ` ${rec.reasoning}` : "");
    line.hidden = false;
    state.views.answer.show(data, { question: q });
    renderSteps(rec);
  });
}

// -- wiring ----------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  state.views.hits = new ResultView("hits", { pickLabel: "use as reference", onMore: moreLikeThis, onPick: (h) => {
    rowReference(h); $("text").value = ""; $("text").focus();
    $("status").textContent = `${h.id} is the new reference: say how the target differs, then search.`;
  } });
  state.views.answer = new ResultView("answer", { onMore: moreLikeThis });
  $("viewer-close").addEventListener("click", () => $("viewer").close());
  $("viewer").addEventListener("click", (e) => { if (e.target === $("viewer")) $("viewer").close(); });
  for (const b of document.querySelectorAll("#tabs [role=tab]")) b.addEventListener("click", () => showTab(b.dataset.panel));
  $("search-form").addEventListener("submit", (e) => { e.preventDefault(); runSearch(); });
  $("ask-form").addEventListener("submit", (e) => { e.preventDefault(); runAsk(); });
  $("file").addEventListener("change", (e) => fileReference(e.target.files[0]));
  $("ref-clear").addEventListener("click", () => setReference(null));
  const drop = $("drop");
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault(); drop.classList.remove("over");
    if (e.dataTransfer.files.length) fileReference(e.dataTransfer.files[0]);
  });
  document.addEventListener("paste", (e) => {
    for (const it of e.clipboardData ? e.clipboardData.items : []) {
      if (it.kind === "file" && it.type.startsWith("image/")) { fileReference(it.getAsFile()); e.preventDefault(); return; }
    }
  });
  loadInfo();
});
