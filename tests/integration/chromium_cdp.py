"""A real headless Chromium driven over the DevTools protocol on a pipe (no extra package).

``Chromium`` starts Debian's ``chromium`` with ``--remote-debugging-pipe``: commands are
JSON texts ended by a NUL byte written to the browser's fd 3, answers and events come back
the same way on its fd 4. One page target is opened and attached (flat sessions); tests
navigate it, evaluate JavaScript in it (``evaluate``), wait for a condition in it
(``wait_until``), and read what it logged: console messages, uncaught exceptions and the
browser's own log entries (a Content-Security-Policy violation is one). Every read has a
deadline; ``close`` ends the browser process this helper started.

Test helper; one thread.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
COMMAND_TIMEOUT_S = 60.0
WAIT_S = 60.0


class Chromium:
    """One headless Chromium with one page; ``messages`` collects what the page logged.

    Args:
        profile: an empty directory for the browser's profile.
    """

    def __init__(self, profile: Path) -> None:
        assert CHROMIUM is not None, "chromium is missing: tools/setup-env.sh installs it"
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        command = (
            f"exec {CHROMIUM} --headless=new --no-sandbox --disable-gpu "
            f"--user-data-dir={profile} --remote-debugging-pipe --no-first-run "
            f"about:blank 3<&{to_browser_read} 4>&{from_browser_write}"
        )
        self._process = subprocess.Popen(
            ["bash", "-c", command],
            pass_fds=(to_browser_read, from_browser_write),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None
        self.messages: list[str] = []
        target = self.command("Target.createTarget", url="about:blank")["targetId"]
        attached = self.command("Target.attachToTarget", targetId=target, flatten=True)
        self._session = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.command(f"{domain}.enable")

    def command(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command (to the page once attached) and return its result.

        Raises:
            RuntimeError: the browser answered an error.
            TimeoutError: no answer within ``COMMAND_TIMEOUT_S``.
        """
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self._session is not None:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self._note(answer)

    def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` in the page (a promise is awaited).

        Raises:
            RuntimeError: the expression threw.
        """
        result = self.command(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str) -> None:
        self.command("Page.navigate", url=url)

    def wait_until(self, expression: str, timeout_s: float = WAIT_S) -> Any:
        """Evaluate ``expression`` until it is truthy (an error while the page changes counts
        as false); return its value.

        Raises:
            TimeoutError: it stayed falsy for ``timeout_s``; the text shows the page's body.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            time.sleep(0.05)
        body = self.evaluate("document.body ? document.body.innerText : ''")
        raise TimeoutError(
            f"{expression} stayed false for {timeout_s} s; page: {body[:2000]}; "
            f"logged: {self.messages[-20:]}"
        )

    def close(self) -> None:
        """End the browser (it stops when its pipe closes; killed if it lingers)."""
        os.close(self._to_browser)
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=30)
        finally:
            os.close(self._from_browser)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left_s = deadline - time.monotonic()
            if left_s <= 0 or not select.select([self._from_browser], [], [], left_s)[0]:
                raise TimeoutError("chromium did not answer over its DevTools pipe")
            chunk = os.read(self._from_browser, 65536)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        text, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(text)

    def _note(self, event: dict[str, Any]) -> None:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled":
            texts = [str(arg.get("value", arg.get("description", ""))) for arg in params["args"]]
            self.messages.append("console: " + " ".join(texts))
        elif method == "Runtime.exceptionThrown":
            self.messages.append("exception: " + json.dumps(params["exceptionDetails"])[:500])
        elif method == "Log.entryAdded":
            entry = params["entry"]
            self.messages.append(f"{entry['source']} {entry['level']}: {entry['text']}")
