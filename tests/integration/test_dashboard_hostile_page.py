"""A hostile web page in the operator's browser cannot run the dashboard's actions; the
operator, with the token, can (real broker, real ZooKeeper, real headless Chromium).

Goal: the attacks a page of another origin can make through the operator's browser run no
action, while the operator's own clicks do, after a confirmation for a skip. Method: a
broker on 127.0.0.1 whose ``[system] dashboardAdminTokenFile`` names a token file, with 10
messages in ``test-0``, a group ``readers`` whose committed offset is 0 and a
``[topic=fresh]`` section written to its ``server.ini`` but not reloaded; a second HTTP
server on another port of 127.0.0.1 plays the other origin. Its page, once it runs in the
dashboard's origin, POSTs both actions with the admin header and the token the tab holds;
its top-level page POSTs them across origins. Chromium (over the DevTools pipe) holds the
operator's token in the dashboard tab's ``sessionStorage`` and goes to
``/#/127.0.0.1:<other port>/x`` and other ``#fragment`` tricks. Afterwards: the other
origin was never asked for anything, the page shows an error, ``fresh`` is not loaded, the
group's offset node is unchanged; then the operator's clicks do both actions.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import pytest

from meta.dashboard.shell import TOKEN_STORAGE_KEY
from meta.protocol.commands import Put, Stats
from meta.protocol.message import checksum
from tests.integration.broker_process import BrokerProcess
from tests.integration.chromium_cdp import Chromium
from tests.integration.test_dashboard import dashboard_port

TOKEN = "9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c"
GROUP = "readers"
SKIP = f"/topics/test/groups/{GROUP}/partitions/0/skip"
PAYLOAD = (
    "(async () => {"
    f" const token = sessionStorage.getItem('{TOKEN_STORAGE_KEY}') || '{TOKEN}';"
    " const headers = {'X-MetaQ-Admin': '1', 'Authorization': 'Bearer ' + token};"
    " const results = [];"
    f" for (const path of ['/reload-config', '{SKIP}']) {{"
    "  try { results.push((await fetch(path, {method: 'POST', headers})).status); }"
    "  catch (error) { results.push('blocked'); } }"
    " document.title = 'evil done ' + results.join(' ');"
    "})()"
)
FRAGMENT_HTML = f'<p id="evil">evil</p><img src="/no-such-image.png" onerror="{PAYLOAD}">'
"""What the other origin answers: markup whose handler runs the actions in the dashboard's
origin if the dashboard ever inserts it."""
SETTLED = (
    "document.title.startsWith('evil done') || document.title.startsWith('attack done')"
    " || Boolean(document.querySelector('main .error'))"
)


def attack_page(dashboard: int) -> str:
    """The other origin's own page: cross-origin POSTs, a simple one and one with headers."""
    base = f"http://127.0.0.1:{dashboard}"
    return (
        "<!DOCTYPE html><title>attack</title><script>(async () => { const results = [];"
        f" for (const path of ['/reload-config', '{SKIP}']) {{"
        "  for (const options of [{method: 'POST', mode: 'no-cors'},"
        "    {method: 'POST', headers: {'X-MetaQ-Admin': '1',"
        f"     'Authorization': 'Bearer {TOKEN}'}}}}]) {{"
        f"   try {{ results.push((await fetch('{base}' + path, options)).status); }}"
        "   catch (error) { results.push('blocked'); } } }"
        " document.title = 'attack done ' + results.join(' '); })();</script>"
    )


class OtherOrigin:
    """An HTTP server on another port of 127.0.0.1: ``/attack`` is its own page, any other
    path answers ``FRAGMENT_HTML`` to any origin; ``asked`` lists the paths requested."""

    def __init__(self, dashboard: int) -> None:
        self.asked: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                owner.asked.append(self.path)
                body = attack_page(dashboard) if self.path == "/attack" else FRAGMENT_HTML
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=30)


@pytest.fixture
def broker(tmp_path, zookeeper, zk_root, admin):
    token_file = tmp_path / "dashboard.token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    process = BrokerProcess(
        tmp_path / "broker",
        system={"dashboardAdminTokenFile": token_file},
        zk_connect=zookeeper.connect_string,
        zk={"zk.zkRoot": zk_root, "zk.zkSessionTimeoutMs": 4000},
    )
    process.start()
    try:
        with process.connect() as connection:
            for index in range(10):
                data = b"message %d" % index
                put = Put("test", 0, data, 0, index, checksum=checksum(data))
                assert connection.request(put).code == 200
        admin.create(offset_node(zk_root), b"-1-0", makepath=True)
        process.config_path.write_text(process.config_path.read_text() + "\n[topic=fresh]\n")
        yield process
    finally:
        process.stop()


@pytest.fixture
def other_origin(broker):
    server = OtherOrigin(dashboard_port(broker))
    yield server
    server.close()


@pytest.fixture
def chromium(tmp_path):
    with Chromium(tmp_path / "profile") as browser:
        yield browser


def offset_node(zk_root: str) -> str:
    return f"{zk_root}/consumers/{GROUP}/offsets/test/0-0"


def fresh_loaded(broker: BrokerProcess) -> bool:
    with broker.connect() as connection:
        return b"fresh" in connection.request(Stats("topics")).body


def test_another_origin_cannot_run_an_action_through_the_dashboard_page(
    broker, other_origin, chromium, admin, zk_root
):
    dashboard = f"http://127.0.0.1:{dashboard_port(broker)}"
    open_page(chromium, f"{dashboard}/config")
    # The operator entered the token earlier in this tab.
    chromium.evaluate(f"sessionStorage.setItem('{TOKEN_STORAGE_KEY}', '{TOKEN}')")
    other = f"127.0.0.1:{other_origin.port}"
    tricks = [
        f"/{other}/x",
        f"//{other}/x",
        f"http://{other}/x",
        f"%2F{other}/x",
        f"topics/{quote('//' + other + '/x', safe='')}",
        f"topics/test?group={quote('/../../' + other, safe='')}",
        f"stats/{quote('../..//' + other, safe='')}",
    ]
    for fragment in tricks:
        open_page(chromium, "about:blank")
        chromium.navigate(f"{dashboard}/#{fragment}")
        chromium.wait_until(f"location.href !== 'about:blank' && ({SETTLED})")
        title = chromium.evaluate("document.title")
        assert not title.startswith("evil done"), (fragment, title)
        assert chromium.evaluate("document.querySelector('main .error').textContent"), fragment
        assert other_origin.asked == [], fragment  # nothing was fetched from the other origin
    # The fragment changed in a page already open (a link or an edit of the address bar).
    open_page(chromium, f"{dashboard}/")
    chromium.evaluate(f"location.hash = '#/{other}/y'")
    chromium.wait_until(f"{SETTLED} || document.title.startsWith('evil done')")
    assert not chromium.evaluate("document.title").startswith("evil done")
    assert f"No page #/{other}/y" in chromium.evaluate("document.querySelector('main').textContent")
    assert other_origin.asked == []
    assert chromium.evaluate("document.getElementById('evil') === null")

    # The other origin's own page posts across origins (simple, and with the headers).
    chromium.navigate(f"http://{other}/attack")
    title = chromium.wait_until("document.title.startsWith('attack done') && document.title")
    assert "200" not in title, title

    assert not fresh_loaded(broker)
    assert admin.get(offset_node(zk_root))[0] == b"-1-0"
    # The same page, with the operator's clicks, does both (so the checks above can fail).
    operate(chromium, dashboard)
    assert fresh_loaded(broker)
    assert admin.get(offset_node(zk_root))[0] != b"-1-0"


def open_page(chromium: Chromium, url: str) -> None:
    """Go to ``url`` and wait until it has loaded, its script included."""
    chromium.navigate(url)
    chromium.wait_until(
        f"location.href === {json.dumps(url)} && document.readyState === 'complete'"
    )


def operate(chromium: Chromium, dashboard: str) -> None:
    """Reload the config, then skip ``readers`` on test-0, with the token in the field."""
    open_page(chromium, f"{dashboard}/config")
    chromium.evaluate(f"document.getElementById('operator-token').value = '{TOKEN}'")
    chromium.evaluate("document.getElementById('operator-use').click()")
    chromium.evaluate("document.querySelector('button[data-action]').click()")
    chromium.wait_until(
        "document.getElementById('action-result').textContent === 'Reload config successfully.'"
    )
    open_page(chromium, f"{dashboard}/topics/test?group={GROUP}")
    chromium.evaluate("document.querySelector('button[data-action]').click()")
    chromium.wait_until("document.getElementById('confirm-skip') !== null")
    chromium.evaluate("document.getElementById('confirm-skip').click()")
    chromium.wait_until("document.getElementById('action-result').textContent === 'success'")


def test_the_operator_confirms_a_skip_and_needs_the_token(broker, chromium, admin, zk_root):
    """The skip shows what it changes and waits for a confirmation; without the token, or
    with a wrong one, the page says why nothing ran."""
    dashboard = f"http://127.0.0.1:{dashboard_port(broker)}"
    open_page(chromium, f"{dashboard}/topics/test?group={GROUP}")
    end = chromium.evaluate(
        "document.querySelector('button[data-action]').closest('tr').cells[3].textContent"
    )
    assert int(end) > 0
    click_skip = "document.querySelector('button[data-action]').click()"
    chromium.evaluate(click_skip)
    confirm = chromium.wait_until("document.getElementById('confirm')?.textContent")
    assert (
        f"Skip the backlog of group {GROUP} on topic test, partition 0? Its committed offset "
        f"moves from 0 to the partition's end, {end}: its {end} pending bytes will not be "
        "consumed."
    ) in confirm
    chromium.evaluate("document.getElementById('confirm-cancel').click()")
    assert chromium.evaluate("document.getElementById('confirm') === null")
    assert chromium.evaluate("document.getElementById('action-result').textContent") == (
        "Skip cancelled."
    )
    chromium.evaluate(click_skip)
    chromium.wait_until("document.getElementById('confirm-skip') !== null")
    chromium.evaluate("document.getElementById('confirm-skip').click()")
    result = "document.getElementById('action-result').textContent"
    assert "Enter the operator token" in chromium.wait_until(result)
    chromium.evaluate("document.getElementById('operator-token').value = 'not-the-token-at-all'")
    chromium.evaluate("document.getElementById('operator-use').click()")
    chromium.evaluate(click_skip)
    chromium.wait_until("document.getElementById('confirm-skip') !== null")
    chromium.evaluate("document.getElementById('confirm-skip').click()")
    assert chromium.wait_until(f"{result}.startsWith('Unauthorized') && {result}")
    assert admin.get(offset_node(zk_root))[0] == b"-1-0"
    chromium.evaluate("document.getElementById('operator-forget').click()")
    assert "No token" in chromium.evaluate("document.getElementById('operator-state').textContent")
    operate(chromium, dashboard)
    assert admin.get(offset_node(zk_root))[0] == f"0-{end}".encode()
    problems = [m for m in chromium.messages if " verbose: " not in m and " 401 " not in m]
    assert problems == []  # no script error, no Content-Security-Policy violation
