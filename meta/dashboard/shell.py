"""The frame of every dashboard page, and the page's one script and style sheet.

Each page is a whole document built on the server: ``document`` puts a page's HTML
fragment (built by ``meta.dashboard.pages`` or ``meta.dashboard.zookeeper``, every value
escaped by ``meta.dashboard.html``) under a header and a menu of plain links. The browser
never inserts HTML it fetched: there is no client-side loading of fragments at all, so no
answer from anywhere can become markup or script in the dashboard's origin. The script and
the style sheet are served from this origin at ``SCRIPT_PATH`` and ``STYLE_PATH``, so the
pages run under a Content-Security-Policy without ``'unsafe-inline'``
(``meta.dashboard.server`` sets it on every answer).

What the script (``SCRIPT``) does, and nothing else:

* at ``/``, a ``#fragment`` of the Java dashboard's links (``/#topics``, ``/#topics/T``,
  ``/#topics/T?group=G``, ``/#stats/ITEM``) is looked up in a fixed table
  (``PAGE_NAMES`` plus those three shapes) and the browser goes to that same-origin page,
  its names percent-encoded; any other fragment shows an error box, and nothing is fetched;
* on ``/logging``, refreshes the log lines every 1.5 s from ``/logging?format=json``,
  written as text;
* the action buttons (``data-action``): the path must match ``ACTION_PATH``; a skip first
  shows a confirmation naming the group, topic, partition and the offsets it moves; the
  POST carries ``X-MetaQ-Admin: 1`` and ``Authorization: Bearer <token>``, the token the
  operator typed into the page's Operator token field (kept in ``sessionStorage``, for
  this tab only; never part of any served page). The answer is shown as text.

Pure; any thread.
"""

from __future__ import annotations

import json

from meta.dashboard.html import escape

MENU = (
    ("dashboard", "Dashboard"),
    ("cluster", "Cluster"),
    ("topics", "Topics"),
    ("replication", "Replication"),
    ("transactions", "Transactions"),
    ("stats", "Stats"),
    ("config", "Config"),
    ("logging", "Logging"),
    ("java-properties", "Runtime"),
    ("thread-dump", "Threads"),
)
PAGE_NAMES = tuple(name for name, _text in MENU)
SCRIPT_PATH = "/static/dashboard.js"
STYLE_PATH = "/static/dashboard.css"
TOKEN_STORAGE_KEY = "metaq-operator-token"
ACTION_PATH = r"^\/(?:reload-config|topics\/[^\/?#]+\/groups\/[^\/?#]+\/partitions\/\d+\/skip)$"
"""The actions the script may POST (a JavaScript regular expression): same-origin paths."""

STYLE = """
:root { color-scheme: light; font-family: system-ui, sans-serif; }
body { margin: 0; background: #f7f7f9; color: #1a202c; }
header { background: #1a365d; color: #fff; padding: .6rem 1rem; }
header h1 { font-size: 1.1rem; margin: 0; }
nav { display: flex; flex-wrap: wrap; gap: .2rem .9rem; padding: .5rem 1rem;
      background: #e2e8f0; }
nav a { color: #1a365d; text-decoration: none; }
nav a.current { font-weight: bold; text-decoration: underline; }
main { padding: 1rem; max-width: 70rem; }
h2 { font-size: 1.1rem; margin: 1rem 0 .5rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; background: #fff; margin-bottom: 1rem; }
th, td { border: 1px solid #cbd5e0; padding: .25rem .5rem; text-align: left;
         vertical-align: top; }
thead th { background: #edf2f7; }
table.facts th { background: #edf2f7; font-weight: normal; }
td.number, th.number { text-align: right; }
pre, textarea { font-family: ui-monospace, monospace; font-size: .85rem; }
textarea { width: 100%; min-height: 20rem; }
pre { background: #fff; border: 1px solid #cbd5e0; padding: .5rem; overflow-x: auto; }
.error { background: #fff5f5; border: 1px solid #c53030; color: #742a2a; padding: .5rem; }
.note { color: #4a5568; }
.operator { background: #fff; border: 1px solid #cbd5e0; padding: .5rem; margin-bottom: 1rem; }
.confirm { background: #fffaf0; border: 1px solid #c05621; padding: .5rem; margin: .5rem 0; }
figure { margin: 0 0 1rem; }
figcaption { font-size: .9rem; color: #4a5568; }
svg.chart { width: 100%; max-width: 40rem; background: #fff; border: 1px solid #cbd5e0;
            font-size: 11px; }
button { padding: .3rem .8rem; }
#action-result { margin: .5rem 0; font-weight: bold; white-space: pre-wrap; }
"""

SCRIPT_TEMPLATE = """
"use strict";
const PAGES = __PAGES__;
const ACTION = new RegExp(__ACTION__);
const TOKEN = __TOKEN__;
const LOG_REFRESH_MS = 1500;

function element(tag, text, css) {
  const made = document.createElement(tag);
  if (text !== undefined) { made.textContent = text; }
  if (css) { made.className = css; }
  return made;
}
function decoded(text) {
  try { return decodeURIComponent(text); } catch (error) { return null; }
}
// The fixed table of the Java dashboard's #fragment links: a same-origin path, or null.
function pageOf(fragment) {
  const plain = fragment.split("?")[0];
  if (PAGES.includes(plain)) { return "/" + plain; }
  let match = /^topics\\/([^\\/?#]+)(?:\\?group=([^&#]*))?$/.exec(fragment);
  if (match) {
    const topic = decoded(match[1]);
    const group = match[2] === undefined ? "" : decoded(match[2]);
    if (!topic || group === null) { return null; }
    const query = match[2] === undefined ? "" : "?group=" + encodeURIComponent(group);
    return "/topics/" + encodeURIComponent(topic) + query;
  }
  match = /^stats\\/([^\\/?#]+)$/.exec(fragment);
  const item = match ? decoded(match[1]) : null;
  return item ? "/stats/" + encodeURIComponent(item) : null;
}
function followFragment() {
  if (location.pathname !== "/" && location.pathname !== "/index.html") { return; }
  const fragment = location.hash.slice(1);
  if (!fragment) { return; }
  const path = pageOf(fragment);
  if (path) { location.replace(path); return; }
  const box = element("div", "No page #" + fragment + " on this dashboard: the menu lists "
                      + "the pages.", "error");
  box.setAttribute("role", "alert");
  document.getElementById("main").replaceChildren(box);
}

function refreshLog() {
  const pre = document.getElementById("log-lines");
  if (!pre) { return; }
  const shown = Number(pre.dataset.lines) || 20;
  setTimeout(async () => {
    try {
      const response = await fetch("/logging?format=json",
                                   {headers: {"Accept": "application/json"}});
      const lines = await response.json();
      pre.textContent = lines.slice(-shown).map((line) => line.text).join("\\n");
    } catch (error) {
      pre.textContent = "Cannot reach the broker: " + error;
    }
    refreshLog();
  }, LOG_REFRESH_MS);
}

function say(text, failed) {
  const out = document.getElementById("action-result");
  if (!out) { return; }
  out.textContent = text;
  out.classList.toggle("error", Boolean(failed));
}
function showTokenState() {
  const state = document.getElementById("operator-state");
  if (state) {
    state.textContent = sessionStorage.getItem(TOKEN) ? "A token is set for this tab."
                                                      : "No token is set.";
  }
}
function setUpToken() {
  const input = document.getElementById("operator-token");
  if (!input) { return; }
  document.getElementById("operator").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = input.value.trim();
    if (token) { sessionStorage.setItem(TOKEN, token); }
    input.value = "";
    showTokenState();
  });
  document.getElementById("operator-forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN);
    showTokenState();
  });
  showTokenState();
}
async function post(path) {
  if (!ACTION.test(path)) { say("No action of this dashboard: " + path, true); return; }
  const token = sessionStorage.getItem(TOKEN);
  if (!token) {
    say("Enter the operator token in the Operator token field first.", true);
    return;
  }
  try {
    const response = await fetch(path, {
      method: "POST", credentials: "omit", redirect: "error", cache: "no-store",
      headers: {"X-MetaQ-Admin": "1", "Authorization": "Bearer " + token},
    });
    say(await response.text(), !response.ok);
  } catch (error) {
    say("Cannot reach the broker: " + error, true);
  }
}
function cell(row, header) {
  const headers = [...row.closest("table").querySelectorAll("thead th")];
  const index = headers.findIndex((th) => th.textContent === header);
  return index < 0 ? "-" : row.cells[index].textContent;
}
function confirmSkip(button, path) {
  const parts = path.split("/");
  const topic = decoded(parts[2]), group = decoded(parts[4]), partition = parts[6];
  const row = button.closest("tr");
  const box = element("div", undefined, "confirm");
  box.id = "confirm";
  box.setAttribute("role", "alertdialog");
  const owner = cell(row, "Owner");
  box.append(element("p", "Skip the backlog of group " + group + " on topic " + topic
    + ", partition " + partition + "? Its committed offset moves from "
    + cell(row, "Committed") + " to the partition's end, " + cell(row, "Max offset")
    + ": its " + cell(row, "Pending bytes") + " pending bytes will not be consumed."
    + (owner === "-" ? "" : " Consumer " + owner + " owns it: the broker refuses the skip"
                            + " until the group's consumers are stopped.")));
  const yes = element("button", "Skip partition " + partition);
  const no = element("button", "Cancel");
  yes.id = "confirm-skip";
  no.id = "confirm-cancel";
  yes.type = no.type = "button";
  yes.addEventListener("click", () => { box.remove(); post(path); });
  no.addEventListener("click", () => { box.remove(); say("Skip cancelled.", false); });
  box.append(yes, " ", no);
  document.getElementById("confirm")?.remove();
  document.getElementById("action-result").before(box);
  yes.focus();
}
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-action]");
  if (!button) { return; }
  event.preventDefault();
  const path = button.dataset.action;
  if (path.endsWith("/skip") && ACTION.test(path)) { confirmSkip(button, path); }
  else { post(path); }
});
window.addEventListener("hashchange", followFragment);
followFragment();
refreshLog();
setUpToken();
"""
SCRIPT = (
    SCRIPT_TEMPLATE.replace("__PAGES__", json.dumps(PAGE_NAMES))
    .replace("__ACTION__", json.dumps(ACTION_PATH))
    .replace("__TOKEN__", json.dumps(TOKEN_STORAGE_KEY))
)


def operator_panel(token_configured: bool, how_to_enable: str) -> str:
    """What a page with action buttons shows above them: the Operator token field, or,
    when no token is configured, ``how_to_enable`` (the actions are off)."""
    if not token_configured:
        return f'<p class="error" id="operator-off" role="note">{escape(how_to_enable)}</p>\n'
    # A form, so Enter uses the token; it is never submitted: the script takes the submit
    # event, the input has no name, and the policy's form-action 'none' blocks a submission.
    return (
        '<form class="operator" id="operator">'
        '<label for="operator-token">Operator token</label> '
        '<input id="operator-token" type="password" autocomplete="off" spellcheck="false"> '
        '<button type="submit" id="operator-use">Use</button> '
        '<button type="button" id="operator-forget">Forget</button> '
        '<span id="operator-state" role="status"></span>'
        '<br><span class="note">The actions need the token in the file that '
        "[system] dashboardAdminTokenFile names; it is kept in this tab only.</span></form>\n"
    )


def document(title: str, current: str, fragment: str, operator: str = "") -> str:
    """A whole page: ``fragment`` (escaped HTML built by the server) under the header and
    the menu, ``current`` (a ``MENU`` name) marked; ``operator`` is ``operator_panel``'s
    text, shown on pages that have action buttons."""
    menu = "".join(
        f'<a href="/{name}" class="current" aria-current="page">{escape(text)}</a>'
        if name == current
        else f'<a href="/{name}">{escape(text)}</a>'
        for name, text in MENU
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f'<link rel="stylesheet" href="{STYLE_PATH}">'
        f"<title>{escape(title)}</title></head>"
        f"<body><header><h1>{escape(title)}</h1></header><nav>{menu}</nav>"
        f'<main id="main">{operator}{fragment}</main>'
        f'<script src="{SCRIPT_PATH}"></script></body></html>\n'
    )
