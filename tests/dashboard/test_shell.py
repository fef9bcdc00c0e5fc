"""The pages' frame: its menu reaches every page of the URL table with plain links; the
page's script is a same-origin file that never turns fetched text into markup."""

from __future__ import annotations

import json
import re

from meta.dashboard.routes import FIXED
from meta.dashboard.shell import (
    MENU,
    SCRIPT,
    SCRIPT_PATH,
    STYLE_PATH,
    TOKEN_STORAGE_KEY,
    document,
    operator_panel,
)

NOT_PAGES = {"/", "/index.html", "/healthz", "/readyz", "/metrics", SCRIPT_PATH, STYLE_PATH}
"""Fixed paths that are not pages of the menu (the API's are left out by prefix)."""


def test_every_html_page_has_a_menu_entry():
    pages = {path[1:] for path in FIXED if path not in NOT_PAGES and not path.startswith("/api/")}
    assert pages == {fragment for fragment, _label in MENU}


def test_the_menu_links_each_page_by_its_path_and_marks_the_current_one():
    page = document("MetaQ admin", "topics", "<p>x</p>")
    assert '<a href="/cluster">Cluster</a>' in page
    assert '<a href="/topics" class="current" aria-current="page">Topics</a>' in page
    assert 'href="#' not in page


def test_a_page_loads_only_same_origin_script_and_style_and_has_no_inline_code():
    page = document("<t>", "dashboard", "<p>x</p>", operator_panel(True, ""))
    assert re.findall(r"<script[^>]*>", page) == [f'<script src="{SCRIPT_PATH}">']
    assert f'<link rel="stylesheet" href="{STYLE_PATH}">' in page
    assert "<style" not in page and "style=" not in page
    assert not re.search(r"\son[a-z]+=", page)  # no inline event handler
    assert "<title>&lt;t&gt;</title>" in page


def test_the_script_never_writes_markup_and_keeps_the_token_in_session_storage():
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in SCRIPT, sink
    assert "localStorage" not in SCRIPT
    assert f"const TOKEN = {json.dumps(TOKEN_STORAGE_KEY)};" in SCRIPT
    assert "sessionStorage.getItem(TOKEN)" in SCRIPT


def test_the_operator_panel_asks_for_the_token_or_says_how_to_turn_actions_on():
    asking = operator_panel(True, "how")
    assert '<input id="operator-token" type="password"' in asking
    off = operator_panel(False, "Set <key> in server.ini")
    assert "operator-token" not in off
    assert "Set &lt;key&gt; in server.ini" in off
