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

const state = { info: null, ref: null, crumbs: [], busy: false };

async function api(path, opts = {}) {
  const r = await fetch(path, Object.assign({ credentials: "same-origin" }, opts));
  let data = null;
  try { data = await r.json(); } catch (_) { data = { detail: `HTTP ${r.status}` }; }
  if (!r.ok) throw new Error((data && data.detail) || `HTTP ${r.status}`);
  return data;
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
    if (!i.questions) $("tab-ask").hidden = true;
    if (i.answers_set) { $("tab-search").hidden = true; showTab("panel-ask"); }
  } catch (e) { $("info").textContent = `cannot read the gallery: ${e.message}`; }
  watchPreparation();
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

function hitCard(h, onPick, pickLabel, onMore) {
  const img = el("img", { attrs: { src: `/thumb/${h.row}?size=256`, loading: "lazy", alt: h.id } });
  const cap = el("figcaption", {}, [
    el("span", { cls: "rank", text: `${h.rank}.` }),
    el("span", { cls: "id", text: h.id }),
    el("span", { cls: "score", text: h.score === null || h.score === undefined ? "in the answer" : `score ${h.score.toFixed(3)}` }),
    h.verified ? el("span", { cls: "badge", text: "verified", attrs: { title: "the verifier accepted this candidate" } }) : null,
  ]);
  const meta = metaLine(h.meta);
  const dl = meta.length ? el("dl", { cls: "meta" }, meta.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })])) : null;
  const fig = el("figure", { cls: "hit", attrs: { "data-id": h.id, "data-row": h.row } }, [img, cap, dl]);
  if (onPick) {
    const b = el("button", { cls: "pick small", text: pickLabel, attrs: { type: "button" } });
    b.addEventListener("click", () => onPick(h));
    img.addEventListener("click", () => onPick(h));
    img.classList.add("clickable");
    fig.appendChild(b);
  }
  if (onMore) {
    const m = el("button", { cls: "more small", text: "more like this", attrs: { type: "button", title: "photos similar to this one" } });
    m.addEventListener("click", () => onMore(h));
    fig.appendChild(m);
  }
  return fig;
}

function renderHits(target, hits, onPick, pickLabel, onMore) {
  target.replaceChildren(...hits.map((h) => hitCard(h, onPick, pickLabel, onMore)));
  if (!hits.length) target.appendChild(el("p", { cls: "muted", text: "No results." }));
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

function renderTrace(trace) {
  const box = $("trace");
  box.replaceChildren();
  const s = trace.search || {};
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
function renderCrumbs() {
  const ol = $("crumbs");
  ol.replaceChildren(...state.crumbs.map((c, i) => {
    const li = el("li", { attrs: { "data-step": i + 1 } }, [
      c.thumb ? el("img", { attrs: { src: c.thumb, alt: c.refLabel || "reference" } }) : null,
      el("span", { text: `${i + 1}. ${c.refLabel ? c.refLabel : "no reference"}${c.text ? ` + “${c.text}”` : ""}` })]);
    li.addEventListener("click", () => {
      if (c.ref) setReference(Object.assign({}, c.ref)); else setReference(null);
      $("text").value = c.text;
    });
    li.title = "restore this step";
    return li;
  }));
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
    stop(); status.textContent = ""; err.textContent = e.message;
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
  await submit("/api/search", fd, $("go"), status, err, "searching…", (data) => {
    const s = data.trace.search;
    status.textContent = `${data.hits.length} results in ${s.wall_s.toFixed(2)} s (${s.method})`;
    const note = $("note"); note.textContent = modeNote(s); note.hidden = !note.textContent;
    if (state.ref && state.ref.kind === "file" && s.reference && s.reference.upload) {
      const url = `/upload/${s.reference.upload}/thumb?size=256`;  // the server's thumbnail: shows HEIC/TIFF too
      state.ref.url = url; $("ref-img").src = url;
    }
    state.crumbs.push({ ref: state.ref ? Object.assign({}, state.ref) : null, thumb: state.ref ? state.ref.url : null,
      refLabel: state.ref ? state.ref.label : "", text });
    renderCrumbs();
    renderHits($("hits"), data.hits, (h) => {
      rowReference(h); $("text").value = ""; $("text").focus();
      $("status").textContent = `${h.id} is the new reference: say how the target differs, then search.`;
    }, "use as reference", moreLikeThis);
    renderTrace(data.trace);
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
    renderHits($("answer"), data.hits, null, "", moreLikeThis);
    renderSteps(rec);
  });
}

// -- wiring ----------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
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
