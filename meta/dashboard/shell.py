"""The ``/`` page: the original dashboard's ``#fragment`` shell, self-contained.

A menu of ``#fragment`` links; a small inline script loads ``/<fragment>`` (an HTML
fragment built and escaped by the server; any other answer, such as the plain-text 404 of
an unknown page, is shown as text) into the main pane when the fragment changes,
refreshes ``#logging`` every 1.5 s as the original does, and sends the action buttons'
POSTs with the ``X-MetaQ-Admin: 1`` header. Styles are inline too: nothing is fetched from
anywhere else. Pure; any thread.
"""

from __future__ import annotations

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
figure { margin: 0 0 1rem; }
figcaption { font-size: .9rem; color: #4a5568; }
svg.chart { width: 100%; max-width: 40rem; background: #fff; border: 1px solid #cbd5e0;
            font-size: 11px; }
button { padding: .3rem .8rem; }
#action-result { margin: .5rem 0; font-weight: bold; }
"""

SCRIPT = """
"use strict";
const pane = document.getElementById("main");
let refresh = null;
function current() { return (location.hash || "#dashboard").slice(1); }
function mark(fragment) {
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("current", a.getAttribute("href") === "#" + fragment.split("?")[0]);
  }
}
function show(text, css) {
  const box = document.createElement(css ? "div" : "pre");
  if (css) { box.className = css; box.setAttribute("role", "alert"); }
  box.textContent = text;
  pane.replaceChildren(box);
}
async function load() {
  const fragment = current();
  mark(fragment);
  if (refresh) { clearTimeout(refresh); refresh = null; }
  try {
    const response = await fetch("/" + fragment, {headers: {"Accept": "text/html"}});
    const body = await response.text();
    if ((response.headers.get("Content-Type") || "").startsWith("text/html")) {
      pane.innerHTML = body;
    } else {
      show(body, response.ok ? "" : "error");
    }
  } catch (error) {
    show("Cannot reach the broker: " + error, "error");
  }
  pane.dataset.loaded = fragment;
  if (fragment.split("?")[0] === "logging") { refresh = setTimeout(load, 1500); }
}
async function act(button) {
  const out = document.getElementById("action-result");
  const response = await fetch(button.dataset.action,
                               {method: "POST", headers: {"X-MetaQ-Admin": "1"}});
  const text = await response.text();
  if (out) { out.textContent = text; }
}
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-action]");
  if (button) { event.preventDefault(); act(button); }
});
window.addEventListener("hashchange", load);
load();
"""


def shell_page(title: str) -> str:
    """The whole ``/`` document."""
    menu = "".join(f'<a href="#{name}">{escape(text)}</a>' for name, text in MENU)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body><header><h1>{escape(title)}</h1></header><nav>{menu}</nav>"
        '<main id="main" aria-live="polite"></main>'
        f"<script>{SCRIPT}</script></body></html>\n"
    )
