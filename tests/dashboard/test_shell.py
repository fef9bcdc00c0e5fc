"""The ``/`` shell: its menu reaches every page of the URL table."""

from __future__ import annotations

from meta.dashboard.routes import FIXED
from meta.dashboard.shell import MENU, shell_page

NOT_PAGES = {"/", "/index.html", "/healthz", "/readyz", "/metrics"}
"""Fixed paths that are not HTML fragments of the shell (the API's are left out by prefix)."""


def test_every_html_page_has_a_menu_entry():
    pages = {path[1:] for path in FIXED if path not in NOT_PAGES and not path.startswith("/api/")}
    assert pages == {fragment for fragment, _label in MENU}


def test_the_menu_links_the_cluster_page():
    assert '<a href="#cluster">Cluster</a>' in shell_page("MetaQ admin")
