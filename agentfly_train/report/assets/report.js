// The report page: curves (plotly) and the episode browser, built from the JSON in #run-data.
// Every run-provided string is set as text, never parsed as HTML.
"use strict";

const DATA = JSON.parse(document.getElementById("run-data").textContent);
const SPLIT_NAMES = { val: "validation", train: "training" };
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null) node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function fmt(value) {
  if (value === null || value === undefined) return "n/a";
  if (typeof value !== "number") return String(value);
  return Number.isInteger(value) ? String(value) : value.toPrecision(4).replace(/\.?0+$/, "");
}

// --- header -------------------------------------------------------------------------------------------------

function renderHeader() {
  document.getElementById("run-dir").textContent = `${DATA.run_dir} · generated ${DATA.generated}`;
  const summary = document.getElementById("summary");
  for (const [name, value] of Object.entries(DATA.summary)) {
    summary.append(el("div", {}, el("dt", {}, name), el("dd", {}, fmt(value))));
  }
  const problems = document.getElementById("problems");
  for (const problem of DATA.problems) problems.append(el("li", { class: "problem" }, problem));
}

// --- curves -------------------------------------------------------------------------------------------------

function renderCharts() {
  const root = document.getElementById("chart-groups");
  if (!DATA.groups.some((group) => group.charts.length)) {
    root.append(el("p", { class: "empty" }, "No curves: metrics.jsonl has no logged steps."));
    return;
  }
  for (const group of DATA.groups) {
    const grid = el("div", { class: "chart-grid" });
    root.append(el("h3", {}, group.title), grid);
    for (const chart of group.charts) {
      const plot = el("div", { class: "plot" });
      grid.append(el("div", { class: "chart" }, el("h4", {}, chart.title), el("p", { class: "help" }, chart.help), plot));
      const traces = chart.series.map((series, index) => ({
        type: "scatter",
        mode: series.x.length > 1 ? "lines+markers" : "markers",
        name: series.name || series.key,
        x: series.x,
        y: series.y,
        line: { color: COLORS[index % COLORS.length], width: 2 },
        marker: { size: 5 },
        hovertemplate: `${series.key}: %{y:.10g}<extra></extra>`,
      }));
      const lastStep = Math.max(...chart.series.map((series) => series.x[series.x.length - 1]));
      Plotly.newPlot(
        plot,
        traces,
        {
          height: 260,
          margin: { l: 55, r: 10, t: 28, b: 40 },
          hovermode: "x unified",
          xaxis: { title: { text: "step" }, zeroline: false, dtick: lastStep <= 20 ? Math.max(1, Math.ceil(lastStep / 10)) : undefined },
          yaxis: { title: { text: chart.unit }, zeroline: false },
          legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
          showlegend: true,
        },
        { displaylogo: false, displayModeBar: false, responsive: true },
      );
    }
    if (group.missing.length) {
      root.append(el("p", { class: "muted missing" }, `Not logged in this run: ${group.missing.join(", ")}.`));
    }
  }
}

// --- episodes -----------------------------------------------------------------------------------------------

const controls = {
  split: document.getElementById("split-picker"),
  step: document.getElementById("step-picker"),
  compare: document.getElementById("compare-picker"),
  correct: document.getElementById("filter-correct"),
  finish: document.getElementById("filter-finish"),
  text: document.getElementById("filter-text"),
};

function stepsOf(split) {
  return Object.keys(DATA.samples[split] || {}).map(Number).sort((a, b) => a - b);
}

// A message's text: its content, or the text of its parts (a message with screenshots has a list of parts).
function textOf(message) {
  const content = message.content ?? "";
  if (!Array.isArray(content)) return String(content);
  return content.filter((part) => part && part.type === "text").map((part) => String(part.text ?? "")).join("\n");
}

function taskKey(episode) {
  const user = (episode.messages || []).find((message) => message.role === "user");
  return user ? textOf(user) : "";
}

function setOptions(select, values, label, keepFirst) {
  const first = keepFirst ? select.options[0] : null;
  select.replaceChildren(...(first ? [first] : []), ...values.map((value) => el("option", { value }, label(value))));
}

function isError(message) {
  return message.role === "tool" && (message.name === "error" || /^\s*error\b/i.test(textOf(message)));
}

function renderCall(call) {
  if (call.error !== undefined) return el("div", { class: "call error" }, `unparsed tool call: ${call.error}`);
  const fn = call.function || call;
  const args = typeof fn.arguments === "string" ? fn.arguments : JSON.stringify(fn.arguments);
  return el("div", { class: "call" }, el("span", { class: "call-name" }, fn.name), `(${args})`);
}

function renderText(text) {
  return text && !text.trim()
    ? el("pre", { class: "muted" }, `(whitespace only: ${text.length} characters, ${JSON.stringify(text.slice(0, 12))}…)`)
    : el("pre", {}, text);
}

// An image part: {type: "image", size: [w, h], file}, its PNG inline in DATA.images when the page holds it.
function renderPart(part) {
  if (part?.type === "text") return renderText(String(part.text ?? ""));
  if (part?.type !== "image") return renderText(JSON.stringify(part));
  const [width, height] = Array.isArray(part.size) ? part.size : [];
  const src = part.file ? DATA.images[part.file] : undefined;
  if (src) return el("img", { class: "shot", src, width, height, alt: `screenshot ${width}×${height}` });
  const where = part.file ? `not in this page: ${part.file}` : "not saved";
  return el("div", { class: "shot-missing muted" }, `[screenshot ${width ?? "?"}×${height ?? "?"}: ${where}]`);
}

function renderCredit(episode, turn) {
  // An assistant turn's reward and the advantage its tokens were trained with (training episodes).
  const rewards = episode.turn_rewards || [];
  const advantages = episode.turn_advantages || [];
  if (turn >= rewards.length && turn >= advantages.length) return null;
  const parts = [`turn ${turn + 1}`, `reward ${fmt(rewards[turn])}`];
  if (episode.turn_advantages) {
    const advantage = advantages[turn];
    parts.push(`advantage ${advantage === null ? "none (no trained token)" : fmt(advantage)}`);
  }
  return el("div", { class: "credit" }, parts.join(" · "));
}

function renderMessage(message, calls, credit) {
  const role = message.role || "?";
  const name = role === "tool" && message.name ? ` · ${message.name}` : "";
  const classes = ["msg", `role-${role}`, isError(message) ? "error" : ""].join(" ").trim();
  const content = message.content ?? "";
  const body = Array.isArray(content) ? content.map(renderPart) : renderText(String(content));
  if (role === "system") {
    return el("details", { class: classes }, el("summary", {}, "system prompt"), body);
  }
  return el("div", { class: classes }, el("div", { class: "role" }, role + name), credit, body, (calls || []).map(renderCall));
}

function renderChat(episode) {
  let turn = 0;
  const turnCalls = episode.turn_calls || [];
  return el(
    "div",
    { class: "chat" },
    (episode.messages || []).map((message) => {
      if (message.role !== "assistant") return renderMessage(message, null, null);
      const credit = renderCredit(episode, turn);
      return renderMessage(message, turnCalls[turn++], credit);
    }),
  );
}

function badge(text, kind) {
  return el("span", { class: `badge ${kind || ""}`.trim() }, text);
}

function renderFacts(episode) {
  const facts = [
    badge(episode.correct ? "correct" : "incorrect", episode.correct ? "good" : "bad"),
    badge(`reward ${fmt(episode.reward)}`),
    badge(`finish: ${episode.finish_reason || "?"}`, episode.finish_reason === "stop" ? "" : "warn"),
    badge(`${episode.turns ?? "?"} turns, ${episode.tool_calls ?? "?"} tool calls`),
  ];
  if (episode.prompt_tokens !== undefined) {
    facts.push(
      badge(`tokens: ${episode.prompt_tokens} prompt, ${episode.completion_tokens} completion (${episode.sampled_tokens} sampled)`),
    );
  }
  if (episode.excluded) facts.push(badge(`excluded, not trained: ${episode.infra_failure}`, "bad"));
  const failed = episode.failed_attempts || [];
  if (failed.length) facts.push(badge(`replayed after ${failed.length} infrastructure failure(s): ${failed.join("; ")}`, "warn"));
  for (const [kind, count] of Object.entries(episode.error_counts || {})) facts.push(badge(`${kind} × ${count}`, "bad"));
  const components = Object.entries(episode.reward_components || {});
  if (components.length) {
    facts.push(badge(`components: ${components.map(([name, value]) => `${name}=${fmt(value)}`).join(", ")}`));
  }
  return el("div", { class: "facts" }, facts);
}

function renderEpisode(episode, title) {
  return el("div", { class: "episode-side" }, el("h4", {}, title), renderFacts(episode), renderChat(episode));
}

function matches(episode) {
  if (controls.correct.value === "correct" && !episode.correct) return false;
  if (controls.correct.value === "incorrect" && episode.correct) return false;
  if (controls.finish.value !== "all" && episode.finish_reason !== controls.finish.value) return false;
  const needle = controls.text.value.trim().toLowerCase();
  if (!needle) return true;
  return (episode.messages || []).some((message) => textOf(message).toLowerCase().includes(needle));
}

function renderEpisodes() {
  const list = document.getElementById("episode-list");
  const split = controls.split.value;
  const step = controls.step.value;
  const episodes = (DATA.samples[split] || {})[step] || [];
  const compareStep = controls.compare.value;
  const others = new Map();
  for (const episode of compareStep ? DATA.samples[split][compareStep] || [] : []) others.set(taskKey(episode), episode);
  const shown = episodes.map((episode, index) => [episode, index]).filter(([episode]) => matches(episode));
  document.getElementById("episode-count").textContent = `${shown.length} of ${episodes.length} episodes`;
  list.replaceChildren(
    ...shown.map(([episode, index]) => {
      const sides = [renderEpisode(episode, `step ${Number(step)}`)];
      if (compareStep) {
        const other = others.get(taskKey(episode));
        sides.push(
          other
            ? renderEpisode(other, `step ${Number(compareStep)}`)
            : el("div", { class: "episode-side muted" }, `This task is not among step ${Number(compareStep)}'s saved episodes.`),
        );
      }
      return el(
        "article",
        { class: `episode${compareStep ? " compare" : ""}`, "data-correct": String(!!episode.correct), "data-finish": episode.finish_reason },
        el("h3", {}, `Episode ${index + 1}`),
        el("div", { class: "sides" }, sides),
      );
    }),
  );
  if (!episodes.length) list.append(el("p", { class: "empty" }, "No saved episodes to show."));
}

function onStepChange() {
  const split = controls.split.value;
  const steps = stepsOf(split).filter((step) => String(step) !== controls.step.value);
  setOptions(controls.compare, split === "val" ? steps.map(String) : [], (step) => `step ${Number(step)}`, true);
  const reasons = [...new Set(((DATA.samples[split] || {})[controls.step.value] || []).map((e) => e.finish_reason))];
  const previous = controls.finish.value;
  setOptions(controls.finish, reasons.sort(), (reason) => reason, true);
  controls.finish.value = reasons.includes(previous) ? previous : "all";
  renderEpisodes();
}

function onSplitChange() {
  const steps = stepsOf(controls.split.value);
  setOptions(controls.step, steps.map(String), (step) => `step ${Number(step)}`, false);
  controls.step.value = steps.length ? String(steps[steps.length - 1]) : "";
  onStepChange();
}

function setUpEpisodes() {
  const splits = Object.keys(SPLIT_NAMES).filter((split) => stepsOf(split).length);
  setOptions(controls.split, splits, (split) => SPLIT_NAMES[split], false);
  if (!splits.length) {
    document.getElementById("episode-controls").hidden = true;
    document.getElementById("episode-list").append(
      el("p", { class: "empty" }, "No saved episodes: see the notes at the top for why."),
    );
    return;
  }
  controls.split.addEventListener("change", onSplitChange);
  controls.step.addEventListener("change", onStepChange);
  for (const control of [controls.compare, controls.correct, controls.finish]) {
    control.addEventListener("change", renderEpisodes);
  }
  controls.text.addEventListener("input", renderEpisodes);
  onSplitChange();
}

// --- evaluation (eval_pass_at_k.json) -------------------------------------------------------------------------

function withInterval(value, interval) {
  return interval ? `${fmt(value)} [${fmt(interval[0])}, ${fmt(interval[1])}]` : fmt(value);
}

function renderPassAtK() {
  const scores = DATA.pass_at_k;
  if (!scores || !scores.tasks) return;
  const k = scores.k;
  const overall = scores.overall;
  const head = el("tr", {}, ["task", "samples", "correct", `pass@${k}`, `mean@${k}`].map((name) => el("th", {}, name)));
  const total = el(
    "tr",
    { class: "overall" },
    el("td", {}, `overall (${overall.tasks} tasks)`),
    el("td", {}),
    el("td", {}),
    el("td", {}, withInterval(overall["pass@k"], overall["pass@k_ci"])),
    el("td", {}, withInterval(overall["mean@k"], overall["mean@k_ci"])),
  );
  const rows = scores.tasks.map((task) =>
    el("tr", {}, [
      el("td", {}, fmt(task.task)),
      el("td", {}, fmt(task.n)),
      el("td", {}, fmt(task.correct)),
      el("td", {}, withInterval(task["pass@k"], task["pass@k_ci"])),
      el("td", {}, withInterval(task["mean@k"], task["mean@k_ci"])),
    ]),
  );
  const caption = el("caption", {}, `${scores.env || "eval"}: k = ${k}; overall figures are means over tasks; [intervals]: ${fmt(100 * scores.confidence)}% bootstrap confidence intervals`);
  document.getElementById("pass-at-k").append(el("table", { id: "pass-at-k-table" }, caption, head, total, rows));
  document.getElementById("evaluation").hidden = false;
  document.getElementById("nav-evaluation").hidden = false;
}

renderHeader();
renderCharts();
renderPassAtK();
setUpEpisodes();
